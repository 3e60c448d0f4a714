"""A static call graph of ``tfgpu.train``, read from the source (issue 67's "static walk").

Each top-level function and method is a node; a nested function or lambda belongs to the
function it is written in. A call is resolved by what the source says, erring towards more
edges: ``name(...)`` to the function or class of that name imported or defined in the module;
``module.name(...)`` through an imported module; ``Class.name(...)`` / ``Class(...)`` to the
method or ``__init__``; any other ``obj.name(...)`` (``self.setup.variant(...)``) to every method
of that name in the package. A walk from ``keras_fit.fit`` then holds every function a fit may
run, and more: what it counts is an upper bound.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from support.source import PACKAGE, module_name


@dataclass
class Module:
    name: str
    tree: ast.Module
    functions: dict[str, ast.AST] = field(default_factory=dict)  # "fit", "Trainer.fit"
    classes: set[str] = field(default_factory=set)
    modules: dict[str, str] = field(default_factory=dict)  # alias -> module imported
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # alias -> (module, name)


Node = tuple[str, str]  # (module, "function" or "Class.method")


def _read(path: Path, known: set[str]) -> Module:
    tree = ast.parse(path.read_text())
    module = Module(module_name(path), tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            module.classes.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    module.functions[f"{node.name}.{item.name}"] = item
    for node in ast.walk(tree):  # imports inside functions too: tfgpu imports lazily
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tfgpu"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if dotted in known:
                    module.modules[alias.asname or alias.name] = dotted
                else:
                    module.names[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tfgpu") and alias.asname:
                    module.modules[alias.asname] = alias.name
    return module


class CallGraph:
    def __init__(self, package: str = "tfgpu.train") -> None:
        # "tfgpu" itself is the package's root (it resolved to src/tfgpu/tfgpu, and read nothing)
        root = PACKAGE if package == "tfgpu" else PACKAGE / package.removeprefix("tfgpu.").replace(".", "/")
        paths = sorted(root.rglob("*.py"))
        if not paths:
            raise ValueError(f"{package} names no module of the package (looked in {root})")
        known = {module_name(p) for p in PACKAGE.rglob("*.py")}
        self.modules = {m.name: m for m in (_read(p, known) for p in paths)}
        self.methods: dict[str, list[Node]] = {}
        for module in self.modules.values():
            for qualname in module.functions:
                if "." in qualname:
                    self.methods.setdefault(qualname.split(".")[1], []).append((module.name, qualname))

    def calls(self, node: Node) -> Iterator[tuple[ast.Call, list[Node]]]:
        """Each call written in ``node``'s body, with the nodes it may reach."""
        module = self.modules[node[0]]
        if node[1] not in module.functions:  # a name the module imports: its own module is walked
            yield from self._reexported(module, node[1])
            return
        for call in ast.walk(module.functions[node[1]]):
            if isinstance(call, ast.Call):
                yield call, self._targets(module, call.func)

    def _reexported(self, module: Module, name: str) -> Iterator[tuple[ast.Call, list[Node]]]:
        where, real = module.names[name]
        call = ast.Call(func=ast.Name(id=real), args=[], keywords=[], lineno=0)
        yield call, self._named(where, real)

    def _named(self, where: str, name: str) -> list[Node]:
        module = self.modules.get(where)
        if module is None:
            return []
        if name in module.classes:
            return [(where, f"{name}.__init__")] if f"{name}.__init__" in module.functions else []
        if name in module.names:  # imported there and used from there (placement's transfer)
            return [(where, name)]
        return [(where, name)] if name in module.functions else []

    def _targets(self, module: Module, func: ast.AST) -> list[Node]:
        if isinstance(func, ast.Name):
            if func.id in module.names:
                return self._named(*module.names[func.id])
            return self._named(module.name, func.id)
        if not isinstance(func, ast.Attribute):
            return []
        owner = func.value
        if isinstance(owner, ast.Name):
            if owner.id in module.modules:
                return self._named(module.modules[owner.id], func.attr)
            where, cls = module.names.get(owner.id, (module.name, owner.id))
            if where in self.modules and cls in self.modules[where].classes:
                method = f"{cls}.{func.attr}"
                return [(where, method)] if method in self.modules[where].functions else []
        return list(self.methods.get(func.attr, ()))

    def reachable(self, start: Node) -> set[Node]:
        seen, todo = {start}, [start]
        while todo:
            for _, targets in self.calls(todo.pop()):
                for target in targets:
                    if target not in seen:
                        seen.add(target)
                        todo.append(target)
        return seen
