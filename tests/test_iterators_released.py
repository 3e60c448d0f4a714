"""Each verb lets go of the tf.data iterators it opened when it returns, as Keras's verbs do.

The datasets tfgpu builds hold, in their functions, the object that built them: a cycle Python
frees only in a full garbage collection. Until then the open iterator, its prefetch threads and
buffers and the data's tensors stayed alive, and deleting an old tf.data iterator there stalled
the whole process with the GIL held for up to its autotuner's period (TensorFlow 2.21 misses the
wake-up at random: a gen-2 collection took 2 to 135 s on a busy 2-core machine; a parity file
spent 13.8 of its 84 s in them, 3.8 s after). So the checks here run with the collector off: what
a verb leaves alive, the collector would have had to free. The iterators a verb is done with are
dropped on tfgpu's own thread (``tfgpu.letting_go``: the same wait, off the user's thread), so a
count waits for that thread to drop what it was handed.
"""

from __future__ import annotations

import contextlib
import gc

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfgpu
from input_forms import CASES, FORMS, data, run, small_model
from support.replicas import local_strategy
from tfgpu import letting_go

CEILING_S = 300  # only a hang reaches it: an autotuner's sleep is 60 s at most


def open_iterators() -> int:
    """tf.data iterators alive in this process: a dataset's, a device's and a strategy's, once
    the iterators handed to ``tfgpu.letting_go`` are dropped."""
    assert letting_go.wait(CEILING_S), "the let-go thread did not drop what it was handed"
    from tensorflow.python.data.ops import iterator_ops, multi_device_iterator_ops
    from tensorflow.python.distribute import input_lib

    kinds = (
        iterator_ops.OwnedIterator,
        multi_device_iterator_ops.OwnedMultiDeviceIterator,
        input_lib.DistributedIterator,
    )
    return sum(isinstance(o, kinds) for o in gc.get_objects())


@contextlib.contextmanager
def collector_off():
    """The cyclic collector off inside (what is freed there is freed by its last reference)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.heavy
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(CASES), replicas=st.sampled_from([1, 2]))
def test_each_verb_leaves_no_iterator_open_whatever_the_input_form(case, replicas):
    form, verb = case
    x, y, w = data(23)
    with local_strategy(replicas).scope():
        model = small_model(FORMS[form][0])
    with collector_off():
        before = open_iterators()
        run(verb, form, model, x, y, w, 8, ours=True)
        assert open_iterators() == before, f"{verb} on {form} left iterators open"


def open_inputs() -> int:
    """tfgpu's inputs alive in this process (each holds its dataset and the data's tensors)."""
    from tfgpu.train.inputs import readers

    return sum(isinstance(o, readers.Input) for o in gc.get_objects())


@pytest.mark.heavy
def test_a_fit_frees_its_inputs_and_their_iterators_when_it_returns():
    """Arrays keep one iterator over the epochs (here a pass of 5 steps in epochs of 3), and the
    validation split one dataset for every epoch's pass: both inputs, their datasets and the
    iterator go when the fit returns, not at the next full collection."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 3)).astype("float32"), rng.normal(size=(50, 1)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with collector_off():
        before = open_iterators(), open_inputs()
        history = tfgpu.fit(
            model,
            x,
            y,
            batch_size=8,
            epochs=3,
            steps_per_epoch=3,
            validation_split=0.2,
            verbose=0,
            strategy=local_strategy(2),
        )
        assert (open_iterators(), open_inputs()) == before
    assert len(history.history["val_loss"]) == 3


@pytest.mark.heavy
def test_a_trainer_fit_twice_trains_as_one_fit_of_both_epochs_on_arrays():
    """Released between calls, the arrays' input is built again where the run stands (a pure
    function of the epoch): two calls of one epoch each give one call of two epochs' weights,
    with a steps_per_epoch that a pass ends early (40 rows in batches of 8, 3 an epoch: 3, 2, 3, 2)."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 3)).astype("float32"), rng.normal(size=(40, 1)).astype("float32")

    def trainer():
        keras.utils.set_random_seed(0)
        strategy = local_strategy(2)
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
        task = tfgpu.Task(
            model=lambda: model, train_data=(x, y), batch_size=4, steps_per_epoch=3, shuffle=False
        )
        return tfgpu.Trainer(task, strategy=strategy)

    once = trainer()
    once.fit(epochs=4)
    twice = trainer()
    for _ in range(2):
        twice.fit(epochs=twice.loop.counters.epoch + 2)
    for a, b in zip(once.model.get_weights(), twice.model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _deleted_on(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads on which each iterator a tfgpu Input opens is deleted."""
    import threading
    import weakref

    from tfgpu.train.inputs import readers

    threads: list[str] = []
    opened = readers.Input.iterator

    def watched(self, epoch, step=0):
        iterator, skip = opened(self, epoch, step)
        weakref.finalize(iterator, lambda: threads.append(threading.current_thread().name))
        return iterator, skip

    monkeypatch.setattr(readers.Input, "iterator", watched)
    return threads


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
def test_each_epoch_s_and_evaluation_s_iterator_is_deleted_off_the_user_s_thread(monkeypatch, replicas):
    """Deleting a tf.data iterator waits on its autotuner, which TensorFlow 2.21 wakes late at
    random (1.3-1.4 s in 3 of 8 deletions of an iterator read for 2.6 s here): tfgpu drops each
    epoch's iterator, each validation's and evaluate's on its own thread, and the next epoch
    starts at once. A dataset is iterated anew each epoch, as Keras's fit does."""
    import tensorflow as tf

    deleted = _deleted_on(monkeypatch)
    x, y, _ = data(64)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).prefetch(tf.data.AUTOTUNE)
    with local_strategy(replicas).scope():
        model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    tfgpu.fit(model, dataset, epochs=3, validation_data=dataset.take(2), verbose=0)
    tfgpu.evaluate(model, dataset, verbose=0)
    assert letting_go.wait(CEILING_S)
    assert deleted == ["tfgpu-let-go"] * 7  # 3 epochs, 3 validations, 1 evaluate


def test_the_let_go_thread_drops_what_it_is_handed_while_the_caller_goes_on():
    """An object whose deletion blocks (as an iterator's join on a late autotuner) blocks the
    let-go thread only: ``let_go`` returns at once, empties the caller's list, and the object
    is deleted there once its deletion may go on."""
    import threading

    may_finish, deleting = threading.Event(), threading.Event()
    seen: list[str] = []

    class SlowToDelete:
        def __del__(self):
            deleting.set()
            seen.append(threading.current_thread().name)
            may_finish.wait(CEILING_S)

    held = [SlowToDelete(), None]
    letting_go.let_go(held)
    assert held == []
    assert deleting.wait(CEILING_S) and seen == ["tfgpu-let-go"]
    assert not letting_go.wait(0.05)  # still deleting; the caller is here, not waiting
    may_finish.set()
    assert letting_go.wait(CEILING_S)


@pytest.mark.process
def test_a_process_ends_after_the_drops_it_handed_over_not_inside_one():
    """Python's finalization ends a daemon thread inside TensorFlow's C++ with a forced unwind (a
    ``tfgpu train`` died with "FATAL: exception not rethrown", an XLA script with SIGSEGV, in the
    full suite): a process that ends with a drop under way waits for it, and exits 0."""
    import subprocess
    import sys

    child = (
        "import time\n"
        "from tfgpu import letting_go\n"
        "class Slow:\n"
        "    def __del__(self):\n"
        "        time.sleep(1.0)\n"
        "        print('dropped', flush=True)\n"
        "letting_go.let_go([Slow()])\n"
        "print('exiting', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=CEILING_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["exiting", "dropped"], done.stdout + done.stderr
