"""What tfgpu keeps of a user's model between calls, in one place: its compiled functions and its
copies (in another strategy's scope, split over devices), each tied to the model's compiled state.

Keras keeps ``train_function`` on the model and drops it in ``compile()``
(``keras/src/trainers/trainer.py``); tfgpu's functions and copies are kept here, on the model as
Keras keeps its own, so they go when the model goes (a registry keyed weakly by the model kept
every model alive: its functions hold it), and are dropped or brought up to date when the
compiled state changes: a re-compile (a new optimizer, loss or metrics), a ``trainable`` flag
changed (the transfer-learning guide's second phase), a remat mode set for a run. Before this
module, four registries across ``model``, ``split``, ``execution`` and the Trainer each kept part
of it, and ``model``, ``execution`` and ``remat`` imported each other in a cycle to reach them.
The marks tfgpu leaves on a model (re-homed; the data structures its loss was checked against;
the strategies its step was proved on) are fields here too, not entries among its functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Entry:
    state: tuple[Any, ...]  # the compiled state the functions were made for
    functions: dict[Any, Any] = field(default_factory=dict)
    copies: dict[Any, list[Any]] = field(default_factory=dict)  # key -> [copy, state it follows]
    # the data structures whose labels the compiled loss was checked against (``building.build``)
    checked: set[str] = field(default_factory=set)
    # the strategy tfgpu moved the model into (it may move it again; ``sent_home`` keeps it)
    moved_to: Any = None
    proved: list[Any] = field(default_factory=list)  # the strategies ``train.model.proof`` compared on


ATTRIBUTE = "_tfgpu_cache"  # on the model itself, as Keras keeps train_function there


def compiled_state(model: Any) -> tuple[Any, ...]:
    """What a compiled step of ``model`` was traced against: the compiled optimizer, loss and
    metrics, the remat modes, and the variables it trains.

    Keras drops its ``train_function`` on ``compile()``; a trace kept past it trains the old
    variable list with the old optimizer (the transfer-learning guide's second phase: the base's
    weights did not move, max change 0.0, while Keras trained them) and updates the old metrics.
    Objects, not ids: an id can be reused once the old object is freed.
    """
    return (
        getattr(model, "optimizer", None),
        getattr(model, "_compile_loss", None),
        getattr(model, "_compile_metrics", None),
        remat_modes(model),
        *model.trainable_variables,
    )


def remat_modes(model: Any) -> tuple[Any, ...]:
    """The layers' remat modes (Keras's ``_remat_mode``, set by ``keras.RematScope`` or by
    ``remat.for_run``): a compiled step traced with other modes is another step."""
    return tuple(getattr(layer, "_remat_mode", None) for layer in model._flatten_layers(include_self=True))


def uses_remat(model: Any) -> bool:
    """Whether any layer of ``model`` (or the model) was built for remat."""
    return any(remat_modes(model))


def same_state(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same objects (the remat signature, made anew each time, compared by value)."""
    return len(a) == len(b) and all(
        x is y or (isinstance(x, tuple) and x == y) for x, y in zip(a, b, strict=True)
    )


def _entry(model: Any) -> _Entry:
    """``model``'s entry, its functions dropped when the compiled state changed since they were made."""
    state = compiled_state(model)
    entry = _kept(model)
    if entry is None:
        entry = _Entry(state)
        object.__setattr__(model, ATTRIBUTE, entry)  # past Keras's attribute tracking
    elif not same_state(entry.state, state):  # a new loss checks the labels again
        entry.state, entry.functions, entry.checked, entry.proved = state, {}, set(), []
    return entry


def _kept(model: Any) -> _Entry | None:
    return vars(model).get(ATTRIBUTE)


def function(model: Any, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The compiled function ``key`` of ``model``, made once per compiled state (as Keras keeps
    ``train_function`` until the next ``compile()``).

    A new ``tf.function`` traces again: seconds per ``fit`` call on a GPU. The functions take the
    iterator as an argument, so a new dataset of the same structure reuses the trace. ``key``
    holds the strategy (the object: a freed one's id can be reused) and the options the function
    closes over.
    """
    functions = _entry(model).functions
    if key not in functions:
        functions[key] = make()
    return functions[key]


def checked(model: Any, spec: str) -> bool:
    """Whether the compiled loss was checked against data of structure ``spec`` (``building.build``:
    the check traces the model, tens of ms, so once per model, compiled state and structure)."""
    return spec in _entry(model).checked


def mark_checked(model: Any, spec: str) -> None:
    _entry(model).checked.add(spec)


def rehomed(model: Any) -> bool:
    """True when tfgpu moved ``model`` into a strategy (``rehoming.rehome``): it may move it again."""
    return moved_to(model) is not None


def moved_to(model: Any) -> Any:
    """The strategy tfgpu last moved ``model`` into, or None: the one its next call places it in
    when its user passes none (a new strategy each call would move and trace it again)."""
    entry = _kept(model)
    return None if entry is None else entry.moved_to


def mark_rehomed(model: Any, strategy: Any) -> None:
    _entry(model).moved_to = strategy


def functions(model: Any) -> dict[Any, Any]:
    """``model``'s compiled functions of its current compiled state, by key (for inspection)."""
    return _entry(model).functions


def forget(model: Any) -> None:
    """Drop every compiled function of ``model``: its variables were replaced (``rehoming.rehome``),
    and a function traced before would go on updating the old ones (an evaluation after a
    re-home read metrics its step no longer updated: 0.76 where Keras said 0.81)."""
    entry = _kept(model)
    if entry is not None:
        entry.functions, entry.proved = {}, []


def copy(
    model: Any,
    key: Any,
    make: Callable[[], Any],
    *,
    follow: Callable[[Any], None] | None = None,
) -> tuple[Any, bool]:
    """(``model``'s copy ``key``, whether it was made just now): made by ``make()`` once and kept,
    so its optimizer state and traced functions last from one call to the next, as on the model
    itself under Keras. When the model's compiled state changed since, ``follow(copy)`` brings it
    up to date, or without ``follow`` it is made again. A ``make`` that raises keeps nothing."""
    copies = _entry(model).copies
    state = compiled_state(model)
    kept = copies.get(key)
    if kept is not None and same_state(kept[1], state):
        return kept[0], False
    if kept is not None and follow is not None:
        follow(kept[0])
        kept[1] = state
        return kept[0], False
    copies.pop(key, None)
    made = make()
    copies[key] = [made, state]
    return made, True


def copies(model: Any) -> dict[Any, Any]:
    """``model``'s copies by key (for inspection)."""
    entry = _kept(model)
    return {} if entry is None else {k: v[0] for k, v in entry.copies.items()}


def proved(model: Any, strategy: Any) -> bool:
    """Whether ``train.model.proof`` compared ``model``'s step on ``strategy``'s replicas with one
    device's in its compiled state and variables (once per model, compiled state and strategy)."""
    return any(s is strategy for s in _entry(model).proved)


def mark_proved(model: Any, strategy: Any) -> None:
    _entry(model).proved.append(strategy)
