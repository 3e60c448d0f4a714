"""``tune=True``: measure, choose, prove and keep the fastest configuration of a run.

Before the first epoch the Trainer times candidate configurations on the real model, strategy and
data, through its own compiled execution (``train.step.execution``: the measurement diagnose uses too),
and trains with the fastest. The knobs, in the order that usually matters:

- ``steps_per_execution``: the rungs 1, 4, 16, 64, 256, 1024 above the run's default (one call
  per log window; no more than half an epoch), upwards until a rung gains less than 3% over the one
  below (the gain said is the product of the rungs');
- ``input``: tf.data's own optimizations that change no result: sequential maps made parallel
  (deterministic order kept), batching in parallel, autotuned buffers, a prefetch injected;
- ``jit_compile``: XLA, kept only when faster *and* the loss over the same batches from the same
  state agrees with the step without it (relative 1e-3); a model XLA cannot compile keeps the
  step as it is, with the first line of XLA's error;
- ``precision`` (only when asked: ``tune="all"`` or named): mixed bf16 (fp16 on GPUs before
  Ampere) on GPUs with Tensor Cores, on a copy of the model made in that policy; kept only when
  faster *and* the loss after the same steps from the same weights tracks float32's (relative
  5%); elsewhere not tried, and said why;
- ``batch_size`` (only with ``batch_size="auto"``): the global batch doubled while a doubling
  fits in memory and gains at least 5%; the learning rate stays the user's, the change is said
  loudly;
- ``devices``: all the strategy's replicas against one device with the same global batch (a
  model too small to gain from several GPUs runs faster on one); measured and said by
  ``tune=True``, switched only when allowed (``tune="all"`` or named).

Each choice is made from paired, interleaved rounds (A B, B A, A B: these machines drift and are
bimodal) by a sequential test on their log-ratios (``verdict``): taken when the lower confidence
bound clears 1.0x and the median gains at least 3%, dropped once the upper bound falls below 3%,
else more rounds while the budget allows (then "not decided", said, the baseline kept); the whole choice is then timed against the
default (the ``together`` trial, the run's before and after) and kept only when it wins there
too. Trials run from fresh iterators over the same data and are wrapped in ``execution.restored``:
the user's callbacks, History, checkpoints and metrics never see them, and the model trains from
exactly the state an untuned run starts from; the result-preserving knobs (steps per call and
input; XLA up to its checked tolerance) leave the weights those of the untuned run.

The choice is kept: in ``checkpoint_dir`` (else ``log_dir``) as ``tfgpu-tuning.json``, else in
tfgpu's cache (``TFGPU_CACHE_DIR``) under a key of the model's structure, the data's signature,
the strategy, the devices, the versions and the knobs; a run with the same key reuses it without
measuring, a changed key re-tunes and says what changed.

Several workers (MultiWorkerMirrored,
ParameterServer) are not tuned: every worker would have to make the same choice from its own
timings; the run says so and trains as configured.

Imports the rooms below it (``pieces``, ``step``, ``model``, ``loop``: a tuning's variants are
setups); the Trainer (``run``) imports it.
"""

from __future__ import annotations

# The parts, by concern: what is asked and one configuration are the options tree's
# (``train.pieces.options``), ``tuner`` (measuring and choosing), ``pieces.tuned`` (what was
# found, rendered, and kept for the next run: the Trainer reads it before it builds) and
# ``session`` (a tuning over a run's setup, imported from there: it needs the loop's room).
from tfgpu.train.pieces.options import ALL_KNOBS, DEFAULT_KNOBS, KNOBS, POLICIES, Config, TuneOptions
from tfgpu.train.pieces.tuned import (
    FILE,
    ROUNDS,
    TRIAL_COLUMNS,
    Trial,
    Tuning,
    config_of,
    differences,
    input_options,
    kept_path,
    key_of,
    key_parts,
    load,
    read,
    save,
    short,
    trial_row,
)
from tfgpu.train.tuning.tuner import (
    LOSS_RTOL,
    MAX_ROUNDS,
    MIN_BATCH_GAIN,
    MIN_GAIN,
    MIN_ROUNDS,
    PRECISION_RTOL,
    STEPS,
    XLA_BOX_SHARE,
    CompileTimeout,
    DoesNotFit,
    Measures,
    Tuner,
    boxed,
    budget,
    decide,
    verdict,
)

__all__ = [
    "ALL_KNOBS",
    "DEFAULT_KNOBS",
    "FILE",
    "KNOBS",
    "LOSS_RTOL",
    "MAX_ROUNDS",
    "MIN_BATCH_GAIN",
    "MIN_GAIN",
    "MIN_ROUNDS",
    "POLICIES",
    "PRECISION_RTOL",
    "ROUNDS",
    "STEPS",
    "TRIAL_COLUMNS",
    "XLA_BOX_SHARE",
    "CompileTimeout",
    "Config",
    "DoesNotFit",
    "Measures",
    "Trial",
    "TuneOptions",
    "Tuner",
    "Tuning",
    "boxed",
    "budget",
    "config_of",
    "decide",
    "differences",
    "input_options",
    "kept_path",
    "key_of",
    "key_parts",
    "load",
    "read",
    "save",
    "short",
    "trial_row",
    "verdict",
]
