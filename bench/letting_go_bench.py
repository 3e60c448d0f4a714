"""What deleting a finished epoch's tf.data iterator costs the next epoch (tfgpu.letting_go).

TensorFlow 2.21's iterator deletion joins its autotuner thread, which misses the wake-up at random
and sleeps out its period (about the time the iterator has been read, up to 60 s). Each round
reads one pass of a distributed dataset (2 logical CPUs, a parallel map, prefetch) at a steady
pace, as a training epoch does, then lets the iterator go two ways, alternating: deleted on the
main thread (what Keras's fit and tfgpu did), and handed to ``tfgpu.letting_go``. The figure is how
long the main thread waits before it can start the next epoch. Run it beside load (``--load``
starts two busy processes): the late wake-up shows more often on busy cores.

Run: .venv/bin/python bench/letting_go_bench.py [--rounds 8] [--step-ms 20] [--load]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "letting_go_bench.json"


def distributed_pass() -> tuple[object, object]:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x = tf.random.normal((4096, 8))
    dataset = (
        tf.data.Dataset.from_tensor_slices(x)
        .map(lambda row: row * 2, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(32)
        .prefetch(tf.data.AUTOTUNE)
    )
    return strategy, strategy.experimental_distribute_dataset(dataset)


def one_round(dataset: object, *, step_s: float, background: bool) -> float:
    """Seconds the main thread waits to let go of a pass's iterator."""
    from tfgpu import letting_go

    held = [iter(dataset)]
    for _ in held[0]:
        time.sleep(step_s)  # the device's step
    started = time.perf_counter()
    if background:
        letting_go.let_go(held)
    else:
        held.clear()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--load", action="store_true", help="two busy processes beside it")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 if args.load else 0)
    ]
    try:
        _, dataset = distributed_pass()
        waits: dict[str, list[float]] = {"main thread": [], "tfgpu.letting_go": []}
        for _ in range(args.rounds):
            waits["main thread"].append(one_round(dataset, step_s=args.step_ms / 1000, background=False))
            waits["tfgpu.letting_go"].append(one_round(dataset, step_s=args.step_ms / 1000, background=True))
    finally:
        for hog in hogs:
            hog.kill()
    from tfgpu import letting_go

    letting_go.wait(120)
    print(
        f"a pass of 128 steps of {args.step_ms:g} ms, {args.rounds} rounds{', beside two busy processes' if args.load else ''}"
    )
    print(f"{'deleted on':<18} {'median s':>9} {'max s':>7} {'waits over 0.1 s':>17}")
    for name, seconds in waits.items():
        long = sum(s > 0.1 for s in seconds)
        print(
            f"{name:<18} {statistics.median(seconds):>9.3f} {max(seconds):>7.3f} {long:>10} of {len(seconds)}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), "waits_s": waits}, indent=1))


if __name__ == "__main__":
    main()
