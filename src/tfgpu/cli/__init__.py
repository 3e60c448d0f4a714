"""The ``tfgpu`` command: one module per subcommand, each thin over the library.

Each subcommand module has ``register(subparsers)`` and ``run(args) -> int``. Errors the user can
fix (:class:`tfgpu.errors.TfgpuError`) become one message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from typing import ClassVar

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


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors name the closest command, flag or choice: a mistyped
    ``trian``, ``--epocs`` or ``--resise`` gets "did you mean ...?" (argparse alone prints only
    the usage). ``argv`` is kept so an unknown flag is matched against its own command's flags."""

    argv: ClassVar[list[str]] = []  # set by main() before parsing

    def error(self, message: str) -> None:  # type: ignore[override]
        super().error(message + _did_you_mean(self, message))


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        options = re.findall(r"'([^']*)'", choice.group(2))
        close = difflib.get_close_matches(choice.group(1), options, n=1)
        return f"; did you mean '{close[0]}'?" if close else ""
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    if not unknown:
        return ""
    flags = _flags_of(parser)
    hints = []
    for token in unknown.group(1).split():
        if token.startswith("-"):
            close = difflib.get_close_matches(token.split("=")[0], flags, n=1)
            if close:
                hints.append(f"'{close[0]}' for '{token}'")
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def _flags_of(parser: argparse.ArgumentParser) -> list[str]:
    """The flags of the command named in the parser's argv (the top level's when none)."""
    flags = list(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            named = [a for a in Parser.argv if a in action.choices]
            if named:
                flags += list(action.choices[named[0]]._option_string_actions)
    return flags


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tfgpu",
        description="Keep every accelerator busy for TensorFlow work.",
    )
    from tfgpu import __version__

    parser.add_argument("--version", action="version", version=f"tfgpu {__version__}")
    verbose = "log what tfgpu does, and let TensorFlow's own log lines through (TFGPU_VERBOSE=1 too)"
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"tfgpu.cli.{name.replace('-', '_')}")
        module.register(sub)
    # after the command too, where users put it when an error says "run with --verbose" (it was
    # refused there: "unrecognized arguments: --verbose; did you mean '--verbose'?")
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose)
    return parser


def main(argv: list[str] | None = None) -> int:
    from tfgpu import env, quiet

    parser = build_parser()
    Parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.verbose = args.verbose or env.verbose()
    if not args.verbose:
        quiet.install()
    _common.setup_logging(verbose=args.verbose)
    return _common.guarded(lambda: args.run(args), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
