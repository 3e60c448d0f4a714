"""tfgpu.fit as Ray Train's TensorFlow loop, on a local Ray cluster of 2 CPU workers.

Usage: ray_fit.py OUT

Three runs of ``TensorflowTrainer`` under one ``ray.init(num_cpus=2)``, each worker saving its
weights and history into OUT (tests/test_ray.py compares them with one device):

- ``arrays``: tfgpu.fit on arrays, as a Ray user calls it;
- ``shard``: tfgpu.fit on the worker's Ray Data shard (``get_dataset_shard("train").to_tf``);
- ``killed``: tfgpu.ray.ReportCheckpointCallback(save_freq=5) hands checkpoints to Ray; worker 1
  exits at step 12 of its first attempt, once Ray has registered the checkpoints of steps 5 and
  10; Ray restarts both (``FailureConfig(max_failures=1)``) and the run resumes from step 10. The driver loads the checkpoint Ray kept
  into a fresh model (``tfgpu.ray.load_weights``).

Each worker prints "worker RANK pid PID attempt N" first, so the test can tell whose lines are whose.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

ROWS, BATCH, EPOCHS, FEATURES = 512, 32, 2, 8
BLOCKS = 8  # the Ray Data set's blocks, of ROWS / BLOCKS rows each
KILL_AT = 12  # worker 1's step at which its first attempt dies, mid-epoch (16 steps an epoch)


def rows() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    y = (x @ rng.normal(size=(FEATURES, 1)) + 0.1 * rng.normal(size=(ROWS, 1))).astype("float32")
    return x, y


def model():
    import keras

    keras.utils.set_random_seed(1)
    made = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    made.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return made


def weights(made) -> list:
    return [w.tolist() for w in made.get_weights()]


def _save(out: str, name: str, rank: int, made, history) -> None:
    found = {"weights": weights(made), "history": history.history}
    found["iterations"] = int(made.optimizer.iterations.numpy())
    with open(os.path.join(out, f"{name}-{rank}.json"), "w") as handle:
        json.dump(found, handle)


def _hello(name: str, out: str) -> int:
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    marker = os.path.join(out, f"{name}-{rank}-attempts")
    attempt = len(Path(marker).read_text()) + 1 if os.path.exists(marker) else 1
    with open(marker, "a") as handle:
        handle.write("x")
    print(f"worker {rank} pid {os.getpid()} attempt {attempt} ({name})", flush=True)
    return rank


def on_arrays(config: dict) -> None:
    import ray.train

    import tfgpu

    rank = _hello("arrays", config["out"])
    x, y = rows()
    made = model()
    history = tfgpu.fit(made, x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False)
    _save(config["out"], "arrays", rank, made, history)
    ray.train.report({"loss": history.history["loss"][-1]})


def on_shard(config: dict) -> None:
    import ray.train

    import tfgpu

    rank = _hello("shard", config["out"])
    shard = ray.train.get_dataset_shard("train")
    made = model()
    history = tfgpu.fit(made, shard.to_tf("x", "y", batch_size=BATCH), epochs=EPOCHS)
    _save(config["out"], "shard", rank, made, history)
    ray.train.report({"loss": history.history["loss"][-1]})


def _registered(experiment: str, *, wanted: int, ceiling_s: float = 120.0) -> int:
    """How many checkpoints Ray's controller has registered for ``experiment``, waiting until
    ``wanted`` are (its snapshot file says so; a report is registered when the controller next
    polls the workers, and a worker that dies first takes its pending reports with it). The
    ceiling is reached only when Ray never registers them; the test then fails on the step."""
    import time

    path = Path(experiment, "checkpoint_manager_snapshot.json")
    deadline = time.monotonic() + ceiling_s
    count = 0
    while time.monotonic() < deadline:
        try:
            count = len(json.loads(path.read_text()).get("checkpoint_results", []))
        except (OSError, ValueError):
            count = 0
        if count >= wanted:
            break
        time.sleep(0.1)
    return count


def on_killed(config: dict) -> None:
    import keras

    rank = _hello("killed", config["out"])
    attempts = Path(config["out"], f"killed-{rank}-attempts").read_text()

    class Dies(keras.callbacks.Callback):  # the worker lost mid-epoch, as a node would be
        def __init__(self) -> None:
            super().__init__()
            self.step = 0

        def on_train_batch_end(self, batch, logs=None) -> None:
            self.step = int(self.model.optimizer.iterations.numpy())
            if rank == 1 and len(attempts) == 1 and self.step == KILL_AT:
                registered = _registered(config["storage"], wanted=2)
                print(f"worker 1 dies at step {self.step} ({registered} checkpoints kept)", flush=True)
                os._exit(1)

    made, history = fit_with_ray_checkpoints(Dies(), who=f"worker {rank}")
    _save(config["out"], "killed", rank, made, history)


def fit_with_ray_checkpoints(also, *, who: str):
    """tfgpu.fit of the arrays, with tfgpu.ray.ReportCheckpointCallback(save_freq=5) and
    ``also`` (the callback that ends this attempt); says where it resumes from. The model and
    its History."""
    import tfgpu
    import tfgpu.ray

    x, y = rows()
    made = model()
    report = tfgpu.ray.ReportCheckpointCallback(save_freq=5)
    print(f"{who} resumes from {report.resumed_from}", flush=True)
    history = tfgpu.fit(made, x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, callbacks=[report, also])
    return made, history


def main(out: str) -> None:
    import ray
    import ray.data
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    import tfgpu.ray

    ray.init(num_cpus=2, include_dashboard=False)
    # Ray Data's tasks need a CPU beside the two workers': each worker asks for half of one
    scaling = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})
    storage = os.path.join(out, "ray-storage")

    def run(loop, name: str, **kwargs):
        trainer = TensorflowTrainer(
            loop,
            train_loop_config={"out": out, "storage": os.path.join(storage, name)},
            scaling_config=scaling,
            run_config=RunConfig(storage_path=storage, name=name, **kwargs.pop("run", {})),
            **kwargs,
        )
        return trainer.fit()

    run(on_arrays, "arrays")
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    x, y = rows()
    table = ray.data.from_items([{"x": x[i], "y": y[i]} for i in range(ROWS)]).repartition(BLOCKS)
    run(on_shard, "shard", datasets={"train": table})
    result = run(on_killed, "killed", run={"failure_config": FailureConfig(max_failures=1)})
    fresh = model()
    tfgpu.ray.load_weights(fresh, result.checkpoint)
    kept = {"metrics": result.metrics, "checkpoint": result.checkpoint.path, "weights": weights(fresh)}
    with open(os.path.join(out, "killed-result.json"), "w") as handle:
        json.dump(kept, handle)
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
