"""Functions that tests run in child processes (see tfgpu.testing); each returns plain data."""

from __future__ import annotations

import json
import os
from typing import Any


def logical_device_count() -> int:
    import tensorflow as tf

    return len(tf.config.list_logical_devices("CPU"))


def fail_on_purpose() -> None:
    raise ValueError("this body fails on purpose")


def configure_fresh() -> dict[str, Any]:
    """configure() before TensorFlow initialized: every setting takes effect; twice is harmless."""
    import keras
    import tensorflow as tf

    import tfgpu
    from tfgpu import runtime

    settings = dict(
        logical_cpus=2,
        intra_op_threads=2,
        inter_op_threads=1,
        precision="bf16",
        seed=7,
        deterministic=True,
        xla=False,
        allocator="cuda_malloc_async",
    )
    first = tfgpu.configure(**settings)
    second = tfgpu.configure(**settings)
    before = runtime.devices_initialized()
    draw = float(tf.random.uniform(()))
    return {
        "same": first == second,
        "initialized_before_op": before,
        "devices": len(tf.config.list_logical_devices("CPU")),
        "intra": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter": tf.config.threading.get_inter_op_parallelism_threads(),
        "policy": keras.mixed_precision.dtype_policy().name,
        "allocator": os.environ.get("TF_GPU_ALLOCATOR"),
        "draw": draw,
    }


def configure_from_environment() -> dict[str, Any]:
    """TFGPU_* variables set what is not passed; an explicit argument wins."""
    import tensorflow as tf

    import tfgpu

    config = tfgpu.configure(inter_op_threads=3)
    return {
        "config": config.to_dict(),
        "devices": len(tf.config.list_logical_devices("CPU")),
        "inter": tf.config.threading.get_inter_op_parallelism_threads(),
    }


def doctor_then_configure() -> dict[str, Any]:
    """doctor never initializes TensorFlow in the caller, so configure still works after it."""
    import tensorflow as tf

    import tfgpu
    from tfgpu import runtime

    report = tfgpu.doctor.run()
    initialized = runtime.devices_initialized()
    tfgpu.configure(logical_cpus=2)
    return {
        "initialized_after_doctor": initialized,
        "devices": len(tf.config.list_logical_devices("CPU")),
        "headline": report.headline,
    }


def multi_worker_strategy() -> dict[str, Any]:
    """Under TF_CONFIG with 2 workers: configure(seed) first, then strategy() -> MWMS that works."""
    import tensorflow as tf

    import tfgpu
    from tfgpu import choices

    tfgpu.configure(seed=1)
    strategy = tfgpu.strategy()
    task = int(tf.distribute.cluster_resolver.TFConfigClusterResolver().task_id)

    @tf.function
    def total() -> Any:
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(float(task + 1)))

    summed = strategy.run(total)
    return {
        "is_mwms": isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
        "replicas": strategy.num_replicas_in_sync,
        "sum": float(strategy.experimental_local_results(summed)[0]),
        "choice": choices.as_dict()["strategy"],
    }


def parameter_server_strategy() -> dict[str, Any]:
    """Chief of a ps cluster gets ParameterServerStrategy and can run a step on a worker."""
    import tensorflow as tf

    import tfgpu

    strategy = tfgpu.strategy()  # ps and worker tasks serve here and never return
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        counter = tf.Variable(0.0)

    @tf.function
    def bump() -> Any:
        counter.assign_add(1.0)
        return counter.read_value()

    for _ in range(3):
        coordinator.schedule(bump)
    coordinator.join()
    return {
        "is_ps": isinstance(strategy, tf.distribute.ParameterServerStrategy),
        "counter": float(counter.numpy()),
        "variable_device": counter.device,
    }


def worker_pipeline_ids(dataset_dir: str, global_batch: int) -> list[int]:
    """One worker of a 2-worker MWMS cluster: the ids its replicas receive from tfgpu.data.pipeline."""
    import tensorflow as tf

    import tfgpu
    from tfgpu import data

    strategy = tfgpu.strategy()

    def make(ctx: Any) -> Any:
        return data.pipeline(
            dataset_dir,
            batch_size=ctx.get_per_replica_batch_size(global_batch),
            input_context=ctx,
            with_ids=True,
        )

    ids: list[int] = []
    for batch in strategy.distribute_datasets_from_function(make):
        for local in strategy.experimental_local_results(batch["id"]):
            ids.extend(int(i) for i in local.numpy())
    del tf
    return ids


def train_weights_on_workers(per_replica: int, steps: int) -> dict[str, Any]:
    """A worker of a 2-worker cluster: train the test task, return weights and exact eval."""
    import tfgpu
    from tasks import make_task

    trainer = tfgpu.Trainer(make_task(per_replica), monitor_gpus=False)
    trainer.fit(steps=steps)
    return {"weights": trainer.model.get_weights(), "eval": trainer.evaluate()}


def train_through_service(dataset: str, address: str) -> dict[str, Any]:
    """A worker of a 2-worker cluster: train on a dataset directory read locally, then through the
    tf.data service (exactly once, order fixed); both weights."""
    import dataclasses

    import tfgpu
    from tasks import make_task

    fixed = {"shuffle_files": False, "shuffle_buffer": 1}
    strategy = tfgpu.strategy()
    weights = {}
    for name, pipeline in (
        ("local", fixed),
        ("service", {**fixed, "service": address, "exactly_once": True}),
    ):
        task = dataclasses.replace(make_task(6), train_data=dataset, eval_data=None, pipeline=pipeline)
        trainer = tfgpu.Trainer(task, strategy=strategy, monitor_gpus=False)
        trainer.fit(epochs=1)
        weights[name] = trainer.model.get_weights()
    return weights


def parameter_server_training() -> dict[str, Any]:
    """Chief of 1 chief / 1 ps / 2 workers: train the test task; ps and workers serve."""
    import tfgpu
    from tasks import make_task

    strategy = tfgpu.strategy()
    result = tfgpu.Trainer(make_task(12), strategy=strategy, monitor_gpus=False, log_every=5).fit(steps=60)
    losses = [p["loss"] for p in result.timeline]  # one mean loss per 5 steps
    return {
        "first": losses[0],
        "last": losses[-1],
        "steps": result.steps,
        "points": [p["step"] for p in result.timeline],
    }


def predict_as_worker(model: str, data: str, out: str) -> dict[str, Any]:
    """One worker of a 2-worker cluster running tfgpu.predict on the same output directory."""
    from tfgpu.predict import PredictOptions, predict

    return predict(model, data, out, options=PredictOptions(batch_size=64, rows_per_shard=200)).to_dict()


def train_arrays_on_workers(per_replica: int, epochs: int) -> dict[str, Any]:
    """A worker of a 2-worker cluster: train on arrays in memory (each worker its slice of every
    global batch), return the weights."""
    import dataclasses

    import tfgpu
    from tasks import arrays, make_task

    x, y = arrays()
    task = dataclasses.replace(make_task(per_replica), train_data=(x, y), eval_data=(x, y))
    trainer = tfgpu.Trainer(task, monitor_gpus=False)
    trainer.fit(epochs=epochs)
    return {"weights": trainer.model.get_weights(), "examples": trainer.evaluate()["examples"]}


def fit_on_workers(directory: str) -> dict[str, Any]:
    """A worker of a MultiWorkerMirrored cluster (where Keras 3's own fit fails): tfgpu.fit on the
    user's compiled model, from arrays and from a tf.data.Dataset, with file-writing callbacks in a
    folder of this worker's own (only the chief's may get files)."""
    import json
    from pathlib import Path

    import keras
    import tensorflow as tf

    import tfgpu
    from fit_models import binary_data, binary_model

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    mine = Path(directory) / f"{task['type']}-{task['index']}"
    mine.mkdir(parents=True)
    x, y = binary_data()
    with strategy.scope():
        model = binary_model()
        from_dataset = binary_model()
    history = tfgpu.fit(
        model,
        x,
        y,
        batch_size=48,
        epochs=2,
        shuffle=False,
        validation_split=0.2,
        verbose=0,
        callbacks=[
            keras.callbacks.CSVLogger(str(mine / "log.csv")),
            keras.callbacks.ModelCheckpoint(str(mine / "m.keras")),
        ],
    )
    evaluated = tfgpu.evaluate(model, x, y, batch_size=50, return_dict=True)
    dataset = tf.data.Dataset.from_tensor_slices((x[:768], y[:768])).batch(48)
    tfgpu.fit(from_dataset, dataset, epochs=2, verbose=0)
    return {
        "weights": model.get_weights(),
        "dataset_weights": from_dataset.get_weights(),
        "history": history.history,
        "eval": evaluated,
        "files": sorted(p.name for p in mine.iterdir()),
    }


def fit_as_written_on_workers() -> dict[str, Any]:
    """A worker running a script as keras-io writes it: the data (a Dataset whose last batch is
    short, 101 rows of 24) and the model are built first, with no strategy, then ``tfgpu.fit``.
    TensorFlow has run ops before MultiWorkerMirroredStrategy is made."""
    import keras
    import tensorflow as tf

    import tfgpu
    from fit_models import binary_data, binary_model
    from tfgpu.train.pieces import model_cache

    x, y = binary_data(101)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(24)
    model = binary_model()  # module level in the script: outside any scope
    history = tfgpu.fit(model, dataset, epochs=2, verbose=0)
    trained_under = model_cache.moved_to(model)  # the model is one-device again after the fit
    return {
        "weights": model.get_weights(),
        "history": history.history,
        "multi_worker": isinstance(trained_under, tf.distribute.MultiWorkerMirroredStrategy),
        "replicas": trained_under.num_replicas_in_sync,
        "one_device_after": model.distribute_strategy is tf.distribute.get_strategy(),
        "keras": keras.__version__,
    }


def fit_with_parameter_servers() -> dict[str, Any]:
    """Chief of 1 chief / 1 ps / 2 workers: tfgpu.fit on a compiled model (Keras's fit has no
    ClusterCoordinator support); the counters Keras adds with a read then an assign must not
    lose the steps scheduled side by side."""
    import tensorflow as tf

    import tfgpu
    from fit_models import binary_model
    from tasks import global_batches

    strategy = tfgpu.strategy()
    with strategy.scope():
        model = binary_model(lr=0.01, metrics=["accuracy"])
    data = lambda ctx, per_replica: global_batches(ctx, per_replica).map(  # noqa: E731
        lambda a, b: (a, tf.cast(b > 0, tf.float32))
    )
    history = tfgpu.fit(
        model,
        data,
        epochs=3,
        steps_per_epoch=20,
        batch_size=24,
        verbose=0,
        log_every=20,
        steps_per_execution=2,
    )
    return {
        "history": history.history,
        "iterations": int(model.optimizer.iterations.numpy()),
        "loss_count": float(model._loss_tracker.count.numpy()),  # rows in the last epoch
        "epochs": history.epoch,
    }


def ps_tutorial_in_process(kind: str) -> dict[str, Any]:
    """TensorFlow's parameter-server tutorial as written: in-process servers (2 workers, 1 ps), a
    SimpleClusterResolver, no TF_CONFIG; the model compiled in the strategy's scope, then
    ``tfgpu.fit`` where the tutorial calls ``model.fit``. ``kind``: how the data is given
    ("function": a dataset function; "arrays"; "dataset": a tf.data.Dataset)."""
    import socket

    import keras
    import numpy as np
    import tensorflow as tf

    import tfgpu

    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(s.getsockname()[1])
    spec = tf.train.ClusterSpec(
        {"worker": [f"localhost:{p}" for p in ports[:2]], "ps": [f"localhost:{ports[2]}"]}
    )
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = 3  # the tutorial's setting for few cores
    for i in range(2):
        tf.distribute.Server(spec, job_name="worker", task_index=i, config=config, protocol="grpc")
    tf.distribute.Server(spec, job_name="ps", task_index=0, protocol="grpc")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ np.arange(8, dtype="float32") / 8)[:, None]
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(
            optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"], steps_per_execution=4
        )

    def dataset_fn(input_context, per_replica):  # the tutorial's: each worker its own shuffled copy
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat()
        return ds.batch(per_replica).prefetch(2)

    data = {
        "function": (dataset_fn, None),
        "arrays": (x, y),
        "dataset": (tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), None),
    }[kind]
    batch = None if kind == "dataset" else 32
    history = tfgpu.fit(model, *data, batch_size=batch, epochs=3, steps_per_epoch=20, verbose=0)
    loss_tracker = next(m for m in model.metrics if m.name == "loss")
    counted = float(loss_tracker.count.numpy())  # the last epoch's examples: every update kept
    iterations = int(model.optimizer.iterations.numpy())
    validated = tfgpu.fit(
        model,
        *data,
        batch_size=batch,
        epochs=1,
        steps_per_epoch=5,
        validation_data=(x[:100], y[:100]),
        verbose=0,
    )
    return {
        "validated": validated.history,
        "history": history.history,
        "weights": model.get_weights(),
        "eval": tfgpu.evaluate(model, x, y, batch_size=32, verbose=0, return_dict=True),
        "predicted": tfgpu.predict(model, x, batch_size=32, verbose=0),
        "loss": history.history["loss"],
        "iterations": iterations,
        "loss_count": counted,
        "steps": history.train_result.steps,
    }


def multi_worker_tutorial(directory: str) -> dict[str, Any]:
    """TensorFlow's multi-worker tutorial's pattern on one worker of a 2-worker cluster: the model
    built and compiled in the strategy's scope, ``fit`` called inside the scope too, with a
    ModelCheckpoint (every worker must take part in saving: the variables are distributed); then
    predict in memory, every worker the whole result, as Keras's predict gives it."""
    import keras
    import tensorflow as tf

    import tfgpu
    from fit_models import binary_data, binary_model, grad_norm_model

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    x, y = binary_data()
    dataset = tf.data.Dataset.from_tensor_slices((x[:768], y[:768])).batch(48)
    with strategy.scope():
        model = binary_model()
        history = tfgpu.fit(
            model,
            dataset,
            epochs=2,
            verbose=0,
            callbacks=[keras.callbacks.ModelCheckpoint(os.path.join(directory, "ckpt-{epoch}.keras"))],
        )
        stepped = grad_norm_model()  # a train_step with logs of its own: the same on every worker
    own_logs = tfgpu.fit(stepped, dataset, epochs=2, verbose=0).history
    return {
        "own_logs": own_logs,
        "task": f"{task['type']}:{task['index']}",
        "history": history.history,
        "weights": model.get_weights(),
        "predicted": tfgpu.predict(model, x, batch_size=64, verbose=0),
        "files": sorted(os.listdir(directory)),
    }


def rows_each_worker_reads(shuffled: bool) -> list[list[int]]:
    """The rows a worker of a 2-worker cluster takes in its first global batches of a dataset
    of 8-row global batches, through tfgpu's own input path (``inputs.input_of``)."""
    import tensorflow as tf

    import tfgpu
    from tfgpu.train.inputs import adapters
    from tfgpu.train.inputs import readers as inputs

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rows = tf.data.Dataset.range(64)
    dataset = (rows.shuffle(64, seed=0) if shuffled else rows).repeat().batch(8)
    task = tfgpu.Task(model=lambda: None, train_data=dataset, batch_size=1, steps_per_epoch=4)
    source = inputs.input_of(
        adapters.of(dataset, role="x"),
        task=task,
        training=True,
        global_batch=8,
        strategy=strategy,
        direct=False,
    )
    iterator, _ = source.iterator(0)
    seen = []
    for _ in range(4):
        batch = next(iterator)
        seen.append([int(v) for part in strategy.experimental_local_results(batch) for v in part.numpy()])
    return seen


def keras_fits_the_multi_worker_tutorial() -> list[Any]:
    """Keras's own fit of the multi-worker tutorial's model on one device, at the global batch
    of two workers: the reference, in a fresh process (the test process's global seed, set by
    other tests, would change the tutorial's seeded shuffle)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "examples" / "tutorials" / "multi_worker.py"
    spec = importlib.util.spec_from_file_location("tutorial_multi_worker", path)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    dataset = tutorial.mnist_dataset(128)  # before the model, as the tutorial: the model's
    model = tutorial.build_and_compile_cnn_model()  # set_random_seed changes a seeded shuffle's order
    history = model.fit(dataset, epochs=3, steps_per_epoch=10, verbose=0)
    return [model.get_weights(), history.history]


def accumulate_on_workers(optimizer: str) -> dict[str, Any]:
    """A worker of a MultiWorkerMirrored cluster: tfgpu.fit on a model whose optimizer accumulates
    gradients (Keras's own fit fails on several devices)."""
    import tensorflow as tf

    import tfgpu
    from fit_models import accumulating_model, linear_data

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = linear_data(192)
    with strategy.scope():
        built = accumulating_model(optimizer)
    history = tfgpu.fit(built, x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    return {
        "weights": built.get_weights(),
        "history": history.history,
        "iterations": int(built.optimizer.iterations.numpy()),
    }


def accumulate_with_parameter_servers(optimizer: str) -> dict[str, Any]:
    """In-process servers (1 worker, 1 ps) as the parameter-server tutorial makes them: tfgpu.fit
    on a model whose optimizer accumulates gradients. One worker runs the steps in order, so the
    weights are those of Keras's fit on one device."""
    import socket

    import tensorflow as tf

    import tfgpu
    from fit_models import accumulating_model, linear_data

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(s.getsockname()[1])
    spec = tf.train.ClusterSpec({"worker": [f"localhost:{ports[0]}"], "ps": [f"localhost:{ports[1]}"]})
    tf.distribute.Server(spec, job_name="worker", task_index=0, protocol="grpc")
    tf.distribute.Server(spec, job_name="ps", task_index=0, protocol="grpc")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    x, y = linear_data(192)
    with strategy.scope():
        built = accumulating_model(optimizer)
    history = tfgpu.fit(built, x, y, batch_size=24, epochs=2, shuffle=False, verbose=0, steps_per_execution=4)
    return {
        "weights": built.get_weights(),
        "history": history.history,
        "iterations": int(built.optimizer.iterations.numpy()),
    }


def predict_and_evaluate_from_no_scope() -> dict[str, Any]:
    """On this process's logical CPUs, a model made outside any scope (as most code makes it):
    ``tfgpu.predict`` and ``tfgpu.evaluate`` before and after a ``tfgpu.fit`` of it, each with the
    replicas of the strategy it ran under, beside Keras's own figures for a twin on one device."""
    import keras
    import numpy as np

    import tfgpu
    from tfgpu.train.pieces import model_cache

    def owner(model: Any) -> Any:  # the strategy tfgpu ran it under (it is one-device again after)
        return model_cache.moved_to(model)

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(100, 6)).astype("float32"), rng.integers(0, 3, 100)

    def made() -> Any:
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        return model

    model, twin = made(), made()
    out: dict[str, Any] = {}
    for when in ("before", "after"):
        if when == "after":
            tfgpu.fit(model, x, y, batch_size=20, epochs=2, shuffle=False, verbose=0)
            twin.fit(x, y, batch_size=20, epochs=2, shuffle=False, verbose=0)
        out[f"predict_{when}"] = tfgpu.predict(model, x, batch_size=16, verbose=0).tolist()
        out[f"predict_{when}_replicas"] = int(owner(model).num_replicas_in_sync) if owner(model) else 1
        out[f"evaluate_{when}"] = tfgpu.evaluate(model, x, y, batch_size=16, verbose=0)
        out[f"evaluate_{when}_replicas"] = int(owner(model).num_replicas_in_sync) if owner(model) else 1
        out[f"keras_predict_{when}"] = twin.predict(x, batch_size=16, verbose=0).tolist()
        out[f"keras_evaluate_{when}"] = twin.evaluate(x, y, batch_size=16, verbose=0)
    return out


def fits_under_op_determinism(how: str) -> dict[str, Any]:
    """Issue 74: under op determinism (``how``: "recipe", a reproducibility recipe's
    ``set_random_seed`` and ``enable_op_determinism``; "configure", ``TFGPU_DETERMINISTIC=1``
    read by ``tfgpu.configure``), two runs of the same fit, evaluate and predict on one device and
    on this process's 2 logical CPUs: each run's figures, for the test to compare bit for bit."""
    import importlib.util
    from pathlib import Path

    import keras
    import tensorflow as tf
    from tensorflow.python.framework import config

    import tfgpu

    path = Path(__file__).parent / "scripts" / "deterministic_fit.py"  # its data and model
    spec = importlib.util.spec_from_file_location("deterministic_fit", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    if how == "recipe":
        keras.utils.set_random_seed(7)
        tf.config.experimental.enable_op_determinism()
    x, y = recipe.data()

    def run(strategy: Any) -> dict[str, Any]:
        keras.utils.set_random_seed(7)
        with strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope():
            model = recipe.model()
        history = tfgpu.fit(model, x, y, batch_size=24, epochs=2, verbose=0, validation_split=0.25)
        return {
            "replicas": int(history.train_result.replicas),
            "weights": model.get_weights(),
            "history": history.history,
            "verdict": history.train_result.sentence(),
            "evaluate": tfgpu.evaluate(model, x, y, batch_size=16, verbose=0),
            "predict": tfgpu.predict(model, x, batch_size=16, verbose=0),
        }

    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    return {
        "determinism": bool(config.is_op_determinism_enabled()),
        "one": [run(one), run(one)],
        "two": [run(None), run(None)],
    }


def parameter_server_stopped(directory: str, signal_epoch: int) -> dict[str, Any]:
    """Chief of 1 chief / 1 ps / 2 workers: train 60 steps (10 an epoch) with a checkpoint_dir;
    with ``signal_epoch`` >= 0 the chief sends itself SIGTERM at that epoch's end (the
    coordinator decides the stop between its windows). Returns where it stopped or ended and
    the optimizer's iterations."""
    import os
    import signal

    import keras

    import tfgpu
    from tasks import make_task
    from tfgpu.errors import StoppedOnRequest

    class At(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if epoch == signal_epoch:
                os.kill(os.getpid(), signal.SIGTERM)

    trainer = tfgpu.Trainer(
        make_task(12, steps_per_epoch=10, callbacks=[At()]),
        strategy=tfgpu.strategy(),
        monitor_gpus=False,
        log_every=5,
        checkpoint_dir=directory,
        checkpoint_every=1000,
    )
    try:
        result = trainer.fit(steps=60)
    except StoppedOnRequest as stopped:
        return {"stopped": stopped.step, "iterations": int(trainer.model.optimizer.iterations.numpy())}
    return {"steps": result.steps, "iterations": int(trainer.model.optimizer.iterations.numpy())}
