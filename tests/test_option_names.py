"""``tfgpu.fit``'s keywords, ``tfgpu train``'s flags and ``TrainOptions``' names kept in step.

Every training option reaches users two ways: a keyword of ``tfgpu.fit`` (beside Keras's own) and a
flag of ``tfgpu train``. An option added to ``TrainOptions`` without either, a flag renamed on one
side, or a ``fit`` keyword that no option takes fails here, unless the tables below say why.
"""

from __future__ import annotations

import argparse
import inspect

import keras

import tfgpu
from tfgpu.cli import build_parser
from tfgpu.train.pieces.options import TrainOptions

# options tfgpu.fit does not take, and why
NOT_IN_FIT = {
    "monitor_gpus": "fit samples the GPUs whenever NVML sees one; Trainer(monitor_gpus=False) is for the batch-size search",
    "tuning_file": "fit keeps and reuses its own tuning (tune=True); a file is tfgpu train --config's",
}
# fit's keywords, beyond Keras's Model.fit, that are not TrainOptions, and why
FIT_ONLY = {
    "strategy": "where the model trains: the Trainer takes it apart from its options",
    "seed": "the arrays' shuffle order: a Task field",
}
# tfgpu train's flag destinations named otherwise than the option they set
FLAG_FOR = {"xla": "jit_compile", "tune_budget": "tune_budget_s", "config": "tuning_file"}
# options tfgpu train has no flag for, and why
NOT_IN_TRAIN = {
    "checkpoint_epochs": "tfgpu train checkpoints every --checkpoint-every steps and at the end",
    "monitor_gpus": "tfgpu train always samples the GPUs it trains on",
}
# tfgpu train's flags that are not options: the run's length, the data, the output
TRAIN_ONLY = {
    "batch_size",
    "epochs",
    "steps",
    "precision",
    "data_service",
    "data_service_timeout",
    "json",
    "verbose",
    "help",
}


def _train_flags() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest for a in action.choices["train"]._actions if a.option_strings}


def test_every_option_is_a_fit_keyword_or_says_why_not() -> None:
    fit = set(inspect.signature(tfgpu.fit).parameters)
    keras_fit = set(inspect.signature(keras.Model.fit).parameters) - {"self"} | {"model"}  # fit's self
    options = TrainOptions.names()
    assert options - fit == set(NOT_IN_FIT), "options missing from tfgpu.fit (or a stale NOT_IN_FIT entry)"
    assert fit - keras_fit - options == set(FIT_ONLY), "tfgpu.fit keywords that no option takes"


def test_every_option_is_a_tfgpu_train_flag_or_says_why_not() -> None:
    flags = {FLAG_FOR.get(dest, dest) for dest in _train_flags()}
    options = TrainOptions.names()
    assert options - flags == set(NOT_IN_TRAIN), "options missing from tfgpu train (or a stale entry)"
    assert flags - options == TRAIN_ONLY, "tfgpu train flags that are neither options nor listed"


def test_a_flag_named_otherwise_sets_its_option() -> None:
    assert set(FLAG_FOR) <= _train_flags()
    assert set(FLAG_FOR.values()) <= TrainOptions.names()
