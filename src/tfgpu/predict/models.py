"""What tfgpu predict can run: a Keras ``.keras`` file, a TensorFlow 2 SavedModel signature, or a
TensorFlow 1 / Estimator-exported SavedModel whose signature takes serialized tf.Example strings."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgpu.errors import InputError


@dataclass
class InputSpec:
    name: str
    dtype: str
    shape: tuple[int | None, ...]  # without the batch dimension


@dataclass
class Predictor:
    """A callable over a batch: features dict (or serialized Examples) -> dict of outputs."""

    kind: str  # keras | saved_model | examples
    inputs: list[InputSpec]
    call: Any  # fn(dict[str, Tensor]) -> dict[str, Tensor]
    description: str

    @property
    def takes_examples(self) -> bool:
        return self.kind == "examples"


def _keras(path: Path) -> Predictor:
    return keras_predictor(load_keras_model(path), name=path.name)


def load_keras_model(path: Path) -> Any:
    """The Keras model in ``path`` (uncompiled); InputError when the file is not one."""
    import keras

    if path.suffix == ".keras" and not zipfile.is_zipfile(path):
        raise InputError(
            f"{path} is not a Keras model file: a .keras file is a zip archive, and this one is not",
            value=str(path),
            fix="pass a .keras file saved with model.save(...); a copy cut short in transfer is the usual cause",
        )
    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as exc:  # Keras raises many types for a bad file
        raise InputError(
            f"{path} is not a Keras model file Keras can load ({type(exc).__name__}: {str(exc)[:200]})",
            value=str(path),
            fix="pass a .keras file saved with model.save(...)",
        ) from None
    return model


def keras_predictor(model: Any, *, name: str) -> Predictor:
    """A Keras model as a Predictor: its inputs by name, its outputs as a dict."""
    names = [t.name.split(":")[0] for t in model.inputs]
    inputs = [
        InputSpec(n, t.dtype if isinstance(t.dtype, str) else t.dtype.name, tuple(t.shape[1:]))
        for n, t in zip(names, model.inputs, strict=True)
    ]
    output_names = list(
        getattr(model, "output_names", None) or [f"output_{i}" for i in range(len(model.outputs))]
    )

    def call(features: dict[str, Any]) -> dict[str, Any]:
        args = [features[i.name] for i in inputs]
        out = model(args[0] if len(args) == 1 else args, training=False)
        if isinstance(out, dict):
            return out
        if isinstance(out, (list, tuple)):
            return dict(zip(output_names, out, strict=True))
        return {output_names[0] if len(output_names) == 1 else "output": out}

    return Predictor("keras", inputs, call, f"Keras model {name}")


def _saved_model(path: Path, signature: str | None) -> Predictor:
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise InputError(
            f"{path} is not a SavedModel TensorFlow can load ({type(exc).__name__})",
            value=str(path),
            fix="pass a directory written by tf.saved_model.save or an Estimator export",
        ) from None
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    name = signature or "serving_default"
    if name not in signatures:
        raise InputError(
            f"SavedModel {path} has no signature {name!r}",
            value=name,
            fix=f"pass --signature with one of: {', '.join(sorted(signatures)) or '(none: the model has no signatures)'}",
        )
    function = signatures[name]
    specs = function.structured_input_signature[1]
    inputs = [InputSpec(k, v.dtype.name, tuple(v.shape[1:])) for k, v in sorted(specs.items())]
    takes_examples = len(inputs) == 1 and inputs[0].dtype == "string" and inputs[0].shape == ()

    def call(features: dict[str, Any]) -> dict[str, Any]:
        return dict(function(**{i.name: features[i.name] for i in inputs}))

    kind = "examples" if takes_examples else "saved_model"
    what = "serialized tf.Example strings" if takes_examples else ", ".join(i.name for i in inputs)
    call.loaded = loaded  # keep the object (and its variables) alive
    return Predictor(kind, inputs, call, f"SavedModel {path.name} signature {name!r} taking {what}")


def load_predictor(path: str, *, signature: str | None = None) -> Predictor:
    """Load MODEL for prediction; InputError when it is not a model or lacks the signature."""
    model_path = Path(path)
    if not model_path.exists():
        raise InputError(f"Model {path} does not exist", value=path, fix="check the path")
    if model_path.is_dir():
        if not (model_path / "saved_model.pb").exists() and not (model_path / "saved_model.pbtxt").exists():
            raise InputError(
                f"{path} is a directory but not a SavedModel (no saved_model.pb)",
                value=path,
                fix="pass a .keras file or a SavedModel directory",
            )
        return _saved_model(model_path, signature)
    if model_path.suffix in (".keras", ".h5"):
        if signature:
            raise InputError(
                "--signature applies to SavedModels, not Keras files",
                value=signature,
                fix="leave --signature out",
            )
        return _keras(model_path)
    raise InputError(
        f"{path} is not a model tfgpu can load",
        value=path,
        fix="pass a .keras file, a TensorFlow 2 SavedModel, or an Estimator-exported SavedModel directory",
    )
