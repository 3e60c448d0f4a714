"""The ``tfgpu`` command: one module per subcommand, each thin over the library.

Each subcommand module has ``register(subparsers)`` and ``run(args) -> int``. Errors the user can
fix (:class:`tfgpu.errors.TfgpuError`) become one message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tfgpu.cli import _common

SUBCOMMANDS = (
    "doctor",
    "convert",
    "diagnose",
    "profile",
    "train",
    "tune",
    "predict",
    "launch",
    "data-service",
    "report",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfgpu",
        description="Keep every accelerator busy for TensorFlow work.",
    )
    from tfgpu import __version__

    parser.add_argument("--version", action="version", version=f"tfgpu {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log what tfgpu does, and let TensorFlow's own log lines through (TFGPU_VERBOSE=1 too)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"tfgpu.cli.{name.replace('-', '_')}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from tfgpu import env, quiet

    parser = build_parser()
    args = parser.parse_args(argv)
    args.verbose = args.verbose or env.verbose()
    if not args.verbose:
        quiet.install()
    _common.setup_logging(verbose=args.verbose)
    return _common.guarded(lambda: args.run(args), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
