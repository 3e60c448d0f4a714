"""A Keras model's layers as tfgpu reads them (what remat recomputes, what ``tfgpu.memory`` weighs)."""

from __future__ import annotations

from typing import Any


def leaf_layers(model: Any) -> list[Any]:
    """The layers of ``model`` that hold no layers themselves, in the model's order: the ones
    that compute."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if not list(layer._flatten_layers(include_self=False))
    ]
