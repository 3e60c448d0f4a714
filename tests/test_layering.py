"""tfgpu's layering, held by reading the imports (neither tfgpu nor TensorFlow is imported):

    base modules < runtime/distribute (doctor and launch beside them) < data < train
    < diagnose/predict/estimator < report/demo < cli, with ``tfgpu.testing`` used by tests only.

A module imports from its own layer or a lower one, never a higher one; two packages of one layer
(above the base) do not import each other unless ``SIBLINGS`` says why; library code names the
module that defines what it uses, never the package root's lazy public names (``tfgpu.strategy()``
from inside tfgpu hides a dependency from the reader and from this test; ``tfgpu.__version__`` is
the root's own constant and is fine). Every import counts: at module level and inside functions,
where tfgpu defers TensorFlow's. Use of private names across modules is not checked here.

A module that fits no layer fails ``test_every_module_has_a_layer``: place it in ``LAYERS``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from support.source import PACKAGE, ROOT, SRC, is_module, library_modules

# lowest first; each name is a top-level module or package of tfgpu
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # Imports nothing above itself: parsing, checking, probing without TensorFlow's devices, and
    # small helpers that any layer may use. Modules of the base import each other freely.
    (
        "base",
        frozenset(
            {
                "__version__",  # the package root's constant, which run records carry
                "callable_module",
                "choices",
                "cluster",
                "config",
                "env",
                "errors",
                "exposure",
                "files",
                "graphs",
                "letting_go",
                "host",
                "loader",
                "monitor",
                "nvml",
                "ports",
                "quiet",
                "selfcheck",
                "text",
                "usercode",
                "verdict",
                "versions",
                "workers",
            }
        ),
    ),
    # The process and its devices: apply settings, pick the strategy; doctor probes them
    # read-only (TensorFlow in a child process), launch starts processes with TF_CONFIG.
    ("runtime/distribute", frozenset({"runtime", "distribute", "doctor", "launch"})),
    ("data", frozenset({"data"})),
    ("train", frozenset({"train", "ray"})),  # ray: tfgpu.fit's glue to Ray Train
    ("diagnose/predict/estimator", frozenset({"diagnose", "predict", "estimator"})),
    ("report/demo", frozenset({"report", "demo"})),
    ("cli", frozenset({"cli"})),
    # Outside the library: the package root (lazy public names, for users) and tfgpu.testing
    # (for tests). They may use every layer; no layer may import them.
    ("outside", frozenset({"__init__", "testing"})),
)

# (importer, imported) packages of one layer that may import each other, and why
SIBLINGS = {
    ("ray", "train"): "tfgpu.ray hands Ray the checkpoints tfgpu.fit's loop writes (their files)",
    (
        "distribute",
        "runtime",
    ): "a cluster task set up at import applies the environment's device settings first",
    ("estimator", "predict"): "estimator's prediction on every GPU is predict's engine",
    ("demo", "report"): "the demo ends in a report of its own run",
}

# Leaks in files this change could not edit; their owners remove them, and then the entry here.
# (importer's path, what it imports); a new leak fails, and so does an entry that no longer occurs.
KNOWN_LEAKS: set[tuple[str, str]] = set()  # (module, import): leaks kept on purpose, each with why


@dataclass(frozen=True)
class Leak:
    path: str  # relative to src/, as "tfgpu/x.py"
    line: int
    target: str  # what it imports: a module, or tfgpu.NAME reached through the package root
    why: str

    @property
    def key(self) -> tuple[str, str]:
        return self.path, self.target

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.target} ({self.why})"


def root_exports() -> dict[str, str]:
    """The package root's lazy public names -> the module that defines each (from its _EXPORTS)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_EXPORTS":
            return {name: module for name, (module, _) in ast.literal_eval(node.value).items()}
    raise AssertionError("src/tfgpu/__init__.py has no _EXPORTS table")


def tfgpu_imports(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """Every (line, target) that ``module`` takes from tfgpu, at any depth of the code, once each.

    ``target`` is a module (``tfgpu.data.pipeline``; for ``from tfgpu.x import name`` the module
    ``tfgpu.x.name`` when it is one, else ``tfgpu.x``), ``tfgpu.__version__``, or ``tfgpu.NAME``
    for a public name taken from the package root (``from tfgpu import strategy``, or
    ``import tfgpu`` and then ``tfgpu.strategy``).
    """
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    roots: dict[str, set[str]] = {}  # a name bound to the package root -> submodules imported through it
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "tfgpu":
                    continue
                if alias.name != "tfgpu":
                    found.append((node.lineno, alias.name))
                if alias.asname is None or alias.name == "tfgpu":
                    submodules = roots.setdefault(alias.asname or "tfgpu", set())
                    submodules.update(alias.name.split(".")[1:2])
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*parts, *([node.module] if node.module else [])])
            if origin.split(".")[0] != "tfgpu":
                continue
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                found.append((node.lineno, full if is_module(full) or origin == "tfgpu" else origin))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id in roots and node.attr not in roots[node.value.id]:
            found.append((node.lineno, f"tfgpu.{node.attr}"))
    return sorted(set(found))


def unit(dotted: str) -> str:
    """The top-level module or package that ``dotted`` belongs to (``__init__`` for the root)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(name: str) -> int | None:
    return next((i for i, (_, names) in enumerate(LAYERS) if name in names), None)


def leaks() -> list[Leak]:
    exports = root_exports()
    out = []
    for module, path in library_modules():
        relative = path.relative_to(SRC).as_posix()
        importer = layer_of(unit(module))
        for line, target in tfgpu_imports(path.read_text(), module, is_package=path.name == "__init__.py"):
            name = target.split(".")[1]
            if target != "tfgpu.__version__" and not is_module(f"tfgpu.{name}"):
                out.append(
                    Leak(relative, line, target, f"through the package root: use {exports.get(name, '?')}")
                )
                continue
            imported = layer_of(unit(target))
            if importer is None or imported is None or unit(target) == unit(module):
                continue
            if imported > importer:
                out.append(
                    Leak(relative, line, target, f"layer {LAYERS[importer][0]} < {LAYERS[imported][0]}")
                )
            elif imported == importer and importer > 0 and (unit(module), unit(target)) not in SIBLINGS:
                out.append(
                    Leak(relative, line, target, f"siblings in layer {LAYERS[importer][0]}: not in SIBLINGS")
                )
    return out


def test_every_module_has_a_layer():
    unplaced = sorted(m for m, _ in library_modules() if layer_of(unit(m)) is None)
    assert not unplaced, f"modules in no layer (place them in LAYERS): {unplaced}"


def test_no_module_imports_a_higher_layer_a_sibling_or_the_package_root():
    new = sorted(str(leak) for leak in leaks() if leak.key not in KNOWN_LEAKS)
    assert not new, "layering leaks:\n" + "\n".join(new)


def test_every_known_leak_still_occurs():
    stale = KNOWN_LEAKS - {leak.key for leak in leaks()}
    assert not stale, f"fixed, so remove from KNOWN_LEAKS: {sorted(stale)}"


def test_tfgpu_testing_is_imported_by_tests_only():
    outside = [
        path
        for folder in ("src/tfgpu", "bench", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if PACKAGE / "testing" not in path.parents
    ]
    users = [
        f"{path.relative_to(ROOT).as_posix()}:{line} imports {target} (tests only)"
        for path in outside
        for line, target in tfgpu_imports(path.read_text(), "outside.script")
        if unit(target) == "testing"
    ]
    assert not users, "\n".join(users)


def test_the_reader_sees_every_form_of_import():
    """The forms the rules rest on, in a module of the train layer."""
    source = """
import tfgpu
import tfgpu.data.pipeline
from tfgpu import distribute, __version__, strategy
from tfgpu.data import manifest, Manifest

def later():
    from tfgpu.report.runs import save_run
    return tfgpu.strategy(), tfgpu.data.pipeline, tfgpu.__version__, tfgpu.fit
"""
    found = {target for _, target in tfgpu_imports(source, "tfgpu.train.loop.training")}
    assert found == {
        "tfgpu.data.pipeline",
        "tfgpu.distribute",
        "tfgpu.__version__",
        "tfgpu.strategy",
        "tfgpu.data.manifest",
        "tfgpu.data",
        "tfgpu.report.runs",
        "tfgpu.fit",
    }


# -- inside tfgpu.train ------------------------------------------------------------------------------
# train/ is a third of the code: its rooms are sub-packages, layered lowest first (each
# sub-package's docstring says what lives there and what may import it). A module imports from its
# own room or a lower one; the verbs (``keras_fit``, ``keras_args``) and the package's public names
# sit at the top, in train/ itself. The Trainer is a setup, a loop over it and a tuning session,
# joined in ``run.trainer`` (issue 45).
TRAIN_ROOMS: tuple[str, ...] = (
    "pieces",  # what a run is asked and keeps, and the small pieces every part uses
    "inputs",  # the data: one door (adapters) and a reader per kind
    "step",  # the compiled step and its memory
    "model",  # the user's model made, built, placed or split, and proved
    "loop",  # the setup, the loops, evaluation, the windows and the result
    "tuning",  # tune=True: measure, choose, prove and keep
    "run",  # the Trainer and the batch that fits
    "",  # train/ itself: the verbs and the public names
)
TRAIN = PACKAGE / "train"


def train_unit(dotted: str) -> str:
    """``tfgpu.train.loop.training`` -> ``loop``, the room it lives in (``""``: train/ itself)."""
    rest = dotted.removeprefix("tfgpu.train").lstrip(".")
    room = rest.split(".")[0]
    return room if (TRAIN / room).is_dir() else ""


def train_layer_of(name: str) -> int | None:
    return TRAIN_ROOMS.index(name) if name in TRAIN_ROOMS else None


def train_modules() -> list[tuple[str, Path]]:
    return [(m, p) for m, p in library_modules() if m == "tfgpu.train" or m.startswith("tfgpu.train.")]


def test_every_train_room_is_a_layer_with_a_docstring_saying_who_may_import_it():
    rooms = sorted(p.name for p in TRAIN.iterdir() if (p / "__init__.py").exists())
    assert rooms == sorted(r for r in TRAIN_ROOMS if r), "place each sub-package of train/ in TRAIN_ROOMS"
    for room in rooms:
        doc = ast.get_docstring(ast.parse((TRAIN / room / "__init__.py").read_text())) or ""
        assert "import" in doc, f"train/{room}/__init__.py: say what lives there and what may import it"


def test_train_itself_holds_only_the_verbs_and_the_public_names():
    assert sorted(p.name for p in TRAIN.glob("*.py")) == ["__init__.py", "keras_args.py", "keras_fit.py"]


def test_the_train_rooms_are_read_from_the_folders():
    assert train_unit("tfgpu.train.loop.training") == "loop"
    assert train_unit("tfgpu.train.tuning.session") == "tuning"
    assert train_unit("tfgpu.train.keras_fit") == "" and train_unit("tfgpu.train") == ""
    assert train_layer_of("pieces") < train_layer_of("model") < train_layer_of("loop") < train_layer_of("")


def test_no_train_module_imports_a_higher_one():
    found = []
    for module, path in train_modules():
        importer = train_layer_of(train_unit(module))
        for line, target in tfgpu_imports(path.read_text(), module, is_package=path.name == "__init__.py"):
            if not target.startswith("tfgpu.train."):
                continue
            imported = train_layer_of(train_unit(target))
            if importer is not None and imported is not None and imported > importer:
                found.append(
                    f"{path.relative_to(SRC).as_posix()}:{line} imports {target} "
                    f"({TRAIN_ROOMS[importer] or 'train/'} < {TRAIN_ROOMS[imported] or 'train/'})"
                )
    assert not found, "train layering leaks:\n" + "\n".join(found)


def import_graph() -> dict[str, set[str]]:
    """Each library module -> the tfgpu modules it imports (at any depth of its code)."""
    return {
        module: {t for _, t in tfgpu_imports(path.read_text(), module, is_package=path.name == "__init__.py")}
        for module, path in library_modules()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert not cycles(import_graph())


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
