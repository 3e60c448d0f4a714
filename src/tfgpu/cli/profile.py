"""``tfgpu profile``: capture a TensorFlow profiler trace of N steps, for TensorBoard / XProf."""

from __future__ import annotations

import argparse

from tfgpu.cli import _common


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile", help="capture a TensorFlow profiler trace of N steps (view with TensorBoard / XProf)"
    )
    p.add_argument("--dataset", required=True, help="FILE_OR_MODULE:FUNCTION returning the batched dataset")
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--model", help="FILE_OR_MODULE:FUNCTION returning a compiled Keras model")
    side.add_argument("--step-time", help="a simulated device busy this long per batch, e.g. 30ms")
    p.add_argument(
        "--steps", type=int, default=10, help="steps to trace (the profiler guide advises at most 10)"
    )
    p.add_argument("--log-dir", required=True, help="where the trace goes (tensorboard --logdir DIR)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tfgpu.cli.diagnose import load_dataset, load_model, parse_duration
    from tfgpu.loader import check_references

    check_references(args.dataset, args.model)  # said before TensorFlow's import
    step_time_s = None if args.model else parse_duration(args.step_time)
    import tensorflow as tf

    from tfgpu import runtime
    from tfgpu.diagnose.device import ModelDevice, SimulatedDevice

    runtime.configure()
    dataset = load_dataset(args.dataset)
    device = ModelDevice(load_model(args.model)) if args.model else SimulatedDevice(step_time_s)
    iterator = iter(dataset.repeat())
    for _ in range(3):  # warm-up outside the trace
        device.step(next(iterator))
    tf.profiler.experimental.start(args.log_dir)
    try:
        for step in range(args.steps):
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                device.step(next(iterator))
    finally:
        tf.profiler.experimental.stop()
    _common.out.print(
        f"traced {args.steps} steps into {args.log_dir}; view: tensorboard --logdir {args.log_dir} (pip install tensorboard xprof)"
    )
    return 0
