"""tfgpu.fit under Ray Train's elastic worker group: the group shrinks or grows mid-run.

Usage: ray_elastic.py OUT shrink|grow

A local Ray cluster of one-CPU nodes (``ray.cluster_utils.Cluster``), each worker asking for one
CPU, and ``ScalingConfig(num_workers=(1, 2))``; tfgpu.ray.ReportCheckpointCallback(save_freq=5)
hands checkpoints to Ray. One run per process, each on a cluster of its own (tests/test_ray.py
compares them with one device):

- ``shrink``: two nodes, so two workers. At step 12 of the first attempt, once Ray has registered
  the checkpoints of steps 5 and 10, rank 0 writes a marker and the driver removes the second
  node, as a machine is lost: its worker dies, Ray finds room for one worker only and restarts
  the group with 1, which resumes from Ray's latest checkpoint.
- ``grow``: one node, so one worker. At step 12 likewise, the driver adds a node: Ray's resize
  monitor (every second here) restarts the group with 2, resumed from the latest checkpoint.

The worker that waits for the driver waits for an event it can see (its group stopped), with a
ceiling only a hang reaches. Each worker prints "worker RANK of SIZE pid PID (RUN)" first, and
adds "RANK/SIZE" to OUT/RUN-groups.
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ray_fit import _registered, fit_with_ray_checkpoints, weights

CHANGE_AT = 12  # the step (of 32) at which the cluster changes: mid-epoch, past two checkpoints
CEILING_S = 300.0  # only a hang reaches it


def _hello(out: str, name: str, rank: int, size: int) -> None:
    with open(Path(out, f"{name}-groups"), "a") as handle:  # one line per worker started
        handle.write(f"{rank}/{size}\n")
    print(f"worker {rank} of {size} pid {os.getpid()} ({name})", flush=True)


def on_worker(config: dict) -> None:
    import keras
    import ray.train

    context = ray.train.get_context()
    rank, size, name, out = context.get_world_rank(), context.get_world_size(), config["name"], config["out"]
    _hello(out, name, rank, size)
    first = size == config["first_size"] and not Path(out, f"{name}-changed").exists()

    class Changes(keras.callbacks.Callback):  # the cluster changes under the run, mid-epoch
        def on_train_batch_end(self, batch, logs=None) -> None:
            step = int(self.model.optimizer.iterations.numpy())
            if not (first and step == CHANGE_AT):
                return
            if rank == 0:
                registered = _registered(config["storage"], wanted=2)
                print(f"the cluster changes at step {step} ({registered} checkpoints kept)", flush=True)
                Path(out, f"{name}-change").write_text(str(step))
            deadline = time.monotonic() + CEILING_S
            while time.monotonic() < deadline:  # Ray stops this group: its worker ends here
                time.sleep(0.2)
            os._exit(3)

    made, history = fit_with_ray_checkpoints(Changes(), who=f"worker {rank} of {size}")
    found = {"weights": weights(made), "history": history.history, "size": size}
    found["iterations"] = int(made.optimizer.iterations.numpy())
    with open(os.path.join(out, f"{name}-{rank}.json"), "w") as handle:
        json.dump(found, handle)


def _in_background(run) -> threading.Thread:
    """``run()`` (Ray's trainer.fit) in a thread: Ray adds and removes nodes from the main one."""
    failed: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as error:  # the main thread raises it
            failed.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.failed = failed
    thread.start()
    return thread


def _when_marked(path: Path, thread: threading.Thread) -> bool:
    """Wait for the worker's marker (True) or the run's end (False), whichever comes first."""
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline and thread.is_alive() and not path.exists():
        time.sleep(0.1)
    if not path.exists():
        return False
    Path(str(path) + "d").write_text("")  # "<name>-changed": later groups train on
    return True


def main(out: str, mode: str) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    # Ray's view of the nodes lags by up to 20 s (its autoscaling coordinator's tick): a group of
    # 2 started just after a node is lost waits for a CPU that is gone, until this timeout (60 s)
    os.environ["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = "25"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    ray.init(address=cluster.address, include_dashboard=False)
    storage = os.path.join(out, "ray-storage")

    def run(name: str, first_size: int):
        scaling = ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=1.0)
        trainer = TensorflowTrainer(
            on_worker,
            train_loop_config={
                "out": out,
                "name": name,
                "first_size": first_size,
                "storage": os.path.join(storage, name),
            },
            scaling_config=scaling,
            run_config=RunConfig(
                storage_path=storage, name=name, failure_config=FailureConfig(max_failures=2)
            ),
        )
        return trainer.fit()

    name = mode
    if mode == "shrink":
        second = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    thread = _in_background(lambda: run(name, first_size=2 if mode == "shrink" else 1))
    if _when_marked(Path(out, f"{name}-change"), thread):
        if mode == "shrink":
            cluster.remove_node(second)
        else:
            cluster.add_node(num_cpus=1)
    thread.join(CEILING_S)
    ray.shutdown()
    cluster.shutdown()
    if thread.failed:
        raise thread.failed[0]


if __name__ == "__main__":
    main(*sys.argv[1:])
