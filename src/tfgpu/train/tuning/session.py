"""A tuning session over a run's ``Setup``: it measures the candidate configurations (or reads a
kept or saved choice), and returns what was chosen and the configuration to train in. The caller
(``tfgpu.Trainer``) then trains with it: on the same setup, or on the setup ``setup_for`` made for
another global batch, one device or a mixed precision. The session keeps its trial setups and
model copies only while it lives."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

from tfgpu import choices
from tfgpu.train.loop.setup import Setup
from tfgpu.train.model import placement
from tfgpu.train.pieces import tuned as result
from tfgpu.train.pieces.options import Config, TrainOptions, TuneOptions
from tfgpu.train.pieces.tuned import Tuning
from tfgpu.train.step import execution
from tfgpu.train.tuning.tuner import DoesNotFit, Tuner, boxed, first_line

log = logging.getLogger(__name__)

SetupKey = tuple[int, int, str | None]  # (global batch, replicas, mixed policy)


@contextlib.contextmanager
def _out_of_memory_said() -> Iterator[None]:
    """TensorFlow's out of device memory as the tuner's ``DoesNotFit``."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.ResourceExhaustedError as exc:
        raise DoesNotFit(first_line(exc)) from None


class Session:
    """Tuning of the run that ``setup`` and ``options`` describe (``options.tune``: what to tune;
    the default knobs when it is unset, as ``Trainer.tune()`` asks)."""

    def __init__(self, setup: Setup, *, options: TrainOptions) -> None:
        self.setup, self.options = setup, options
        self.tune = options.tune or TuneOptions()
        self._copies: dict[tuple[int, str | None], tuple[Any, Any]] = {}
        self._setups: dict[SetupKey, Setup] = {}
        self.examples_per_step: float | None = None  # the last measurement's (``rate``)

    @property
    def untuned(self) -> Config:
        """The run's configuration as asked for, before any tuning."""
        return Config(self.options.execution_steps, False, self.options.jit_compile)

    # -- measured, kept or saved ---------------------------------------------------------------
    def measure(self, *, epochs: int | None, steps: int | None) -> tuple[Tuning, Config]:
        """The kept choice for this run when there is one, else the measured one (kept for the
        next run); and the configuration to train in. Several workers are not tuned."""
        if self.setup.several_workers():
            note = "under several workers each would choose from its own timings"
            choices.record("tuning", "none", note)
            return Tuning(seconds=0.0, choices={}, gains={}, notes=[note]), self.untuned
        parts = self.key_parts(self.tune.keyed)
        key = result.key_of(parts)
        path = result.kept_path(
            checkpoint_dir=self.options.checkpoint_dir, log_dir=self.options.log_dir, key=key
        )
        found, why = result.load(path, parts) if self.tune.keep else (None, "")
        if found is None:
            found, worth_keeping = self._measured(epochs=epochs, steps=steps, why=why)
            found = dataclasses.replace(found, key=key, parts=parts)
            # a run too short to tune decides nothing for a longer one with the same key
            if self.tune.keep and self.setup.is_chief and worth_keeping:
                result.save(path, parts, found)
        log.info("%s", found.line())
        return found, result.config_of(found, self.untuned)

    def _measured(self, *, epochs: int | None, steps: int | None, why: str) -> tuple[Tuning, bool]:
        """The tuning measured now, and whether it is worth keeping (False: too short to tune)."""
        source = self.setup.train
        per_epoch = source.steps_per_epoch or source.known_length()
        policy, precision_refused = self.setup.precision_for()
        refused = {
            "jit_compile": self.setup.xla_refused(),
            "precision": precision_refused,
            "batch_size": self.setup.batch_refused(),
        }
        tuner = Tuner(
            self,
            model=self.setup.model,
            options=self.tune,
            default=self.untuned,
            batch=self.setup.global_batch,
            run_steps=steps if steps is not None else (epochs or 1) * per_epoch if per_epoch else None,
            fixed_steps=self.options.steps_per_execution is not None,
            refused={k: why for k, why in refused.items() if why},
            policy=policy,
            replicas=self.setup.replicas,
        )
        started = time.perf_counter()
        with execution.restored(self.setup.model):
            _, chosen, gains = tuner.run()
        notes = ([why] if why else []) + tuner.notes
        found = Tuning(
            time.perf_counter() - started, chosen, gains, tuner.trials, notes, xla_compile_s=tuner.compile_s
        )
        return found, tuner.too_short is None

    # -- the tuner's measurements (``tuner.Measures``), on the setup each configuration trains in --
    def rate(self, config: Config, steps: int) -> tuple[float, float]:
        """(examples/s, the last call's loss) of ``steps`` steps of ``config``: its compiled
        step (its setup's model and strategy, XLA as it asks), as the loop runs it, from a fresh
        iterator of its input. Out of device memory: ``DoesNotFit``."""
        execute, fresh, held = self._execution(config)
        with _out_of_memory_said():
            found, loss, self.examples_per_step = execution.rate(
                execute, fresh, per_call=config.steps_per_execution, steps=steps, max_steps=held
            )
        return found, loss

    def first_call_s(self, config: Config, *, box_s: float) -> float:
        """Seconds ``config``'s first call takes past a steady call, its tracing not counted
        (``tuner.Measures``: XLA's compile, and the graph's optimizations). Traced here, then
        the first call is made in a thread given ``box_s`` (``CompileTimeout`` past it: a
        compile that never ends, as XLA's on a GPU without its PTX compiler, is left behind),
        then a steady call timed alone."""
        execute, fresh, _ = self._execution(config)
        iterator, k = fresh(), config.steps_per_execution  # deleted here, as in execution.rate
        execution.traced(execute, iterator, per_call=k)
        with _out_of_memory_said():
            first, _, _ = boxed(lambda: execution.timed(execute, iterator, steps=k, per_call=k), box_s)
            steady, _, _ = execution.timed(execute, iterator, steps=k, per_call=k)
        return max(0.0, first - steady)

    def _execution(self, config: Config) -> tuple[Any, Any, int | None]:
        """``config``'s compiled execution, a maker of fresh iterators of its input, and the
        steps one pass of it holds. The run's own loop shape where no measurement can run past
        the data (``execution.rate`` stops a call short of one pass): the run's compiled
        execution, one trace for both."""
        setup = self.setup_for(config)
        held = self.max_steps(config)
        known = setup.train.counted and held is not None and held >= 2 * config.steps_per_execution
        execute = execution.compiled(setup.model, setup.strategy, jit_compile=config.jit_compile, known=known)
        options = result.input_options() if config.input else None
        return execute, lambda: setup.train.trial_iterator(options), held

    def model(self, config: Config) -> Any:
        """The model ``config`` trains, holding the run's weights and optimizer state now (a copy
        takes them, ``placement.transfer``): the tuner's agreement check, and the model the
        Trainer switches to."""
        setup = self.setup_for(config)
        if setup.model is not self.setup.model:
            placement.transfer(self.setup.model, setup.model, strategy=setup.strategy)
        return setup.model

    def saved(self, saved: Tuning) -> tuple[Tuning, Config]:
        """A saved tuning's choice (``tfgpu train --config``, read by ``result.read``), less what
        this run cannot train with; what differs from the run it was measured on is said (it is
        used all the same: the user asked for it)."""
        found = dataclasses.replace(saved, notes=[])  # its own notes were its measurement's
        changed = result.differences(found.parts, self.key_parts(tuple(found.choices)))
        if changed:
            found.notes.append(f"measured for another run: {', '.join(changed)} differ")
        return found, self._usable(result.config_of(found, self.untuned), notes=found.notes)

    def _usable(self, config: Config, *, notes: list[str]) -> Config:
        """``config`` less what this run cannot train with: each dropped choice said in ``notes``."""
        if config.batch == self.setup.global_batch:
            config = dataclasses.replace(config, batch=None)
        refused = {
            "jit_compile": config.jit_compile and self.setup.xla_refused(),
            "precision": config.precision and self.setup.precision_for()[1],
            "batch": config.batch and self.setup.batch_refused(),
        }
        if self.setup.several_workers():
            why = "under several workers only steps, input and XLA are"
            refused.update(
                precision=config.precision and why, batch=config.batch and why, devices=config.devices and why
            )
        untuned = self.untuned
        named = {"jit_compile": "XLA", "precision": config.precision, "batch": f"batch {config.batch}"}
        for field, why in refused.items():
            if why:
                notes.append(f"{named.get(field, 'one device')} not used: {why}")
                config = dataclasses.replace(config, **{field: getattr(untuned, field)})
        return config

    def key_parts(self, knobs: tuple[str, ...]) -> dict[str, str]:
        """What a tuning of this run depends on (``result.key_parts``)."""
        from tfgpu import distribute

        devices, _ = distribute.replica_devices(self.setup.strategy)
        return result.key_parts(
            model=self.setup.model,
            spec=self.setup.train.spec(),
            strategy=self.setup.strategy,
            devices=devices,
            knobs=knobs,
            batch=self.setup.global_batch,
        )

    # -- the setups of configurations ----------------------------------------------------------
    def setup_key(self, config: Config) -> SetupKey:
        """What ``config`` trains in that needs a setup of its own: (global batch, replicas, policy)."""
        return (
            config.batch or self.setup.global_batch,
            config.devices or self.setup.replicas,
            config.precision,
        )

    def needs_own_setup(self, config: Config) -> bool:
        return self.setup_key(config) != self.setup_key(self.untuned)

    def setup_for(self, config: Config) -> Setup:
        """The setup ``config`` runs in: the run's own, or (made once while the session lives) one
        for another global batch, on one device, or on a copy of the model in mixed precision."""
        key = self.setup_key(config)
        if not self.needs_own_setup(config):
            return self.setup
        if key not in self._setups:
            batch, devices, policy = key
            model, strategy = self._copy(devices, policy)
            self._setups[key] = self.setup.variant(model=model, strategy=strategy, batch=batch)
        return self._setups[key]

    def _copy(self, devices: int, policy: str | None) -> tuple[Any, Any]:
        if (devices, policy) not in self._copies:
            self._copies[devices, policy] = self.setup.copy_for(devices=devices, policy=policy)
        return self._copies[devices, policy]

    def max_steps(self, config: Config) -> int | None:
        """The steps one pass over the data gives in ``config``'s batch (0: not one batch)."""
        from tfgpu.errors import ConfigError

        _, devices, policy = self.setup_key(config)
        self._copy(devices, policy)  # not a copy Keras can make: its ConfigError, for the tuner
        try:
            source = self.setup_for(config).train
        except ConfigError:  # fewer rows than one batch of it
            return 0
        return source.steps_per_epoch or source.known_length()
