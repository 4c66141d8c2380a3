"""The command line: ``python -m dcsim count ...`` for scripts and quick checks.

A module a command, each with its parser, its run and its rendering (``count`` and ``presets``,
``layout``, ``memory``, ``checkpoint``, ``compare``); ``common`` holds what they share. Every subcommand
shares one set of model flags and one glossary of JSON keys (docs/cli.md). Bad input prints one
line on stderr and exits 2; nothing here prints a traceback at a person.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dcsim.checkpoint import measurement
from dcsim.cli import checkpoint as checkpoint_command
from dcsim.cli import compare as compare_command
from dcsim.cli import count as count_command
from dcsim.cli import layout as layout_command
from dcsim.cli import memory as memory_command
from dcsim.cli import serve as serve_command
from dcsim.cli.common import PROG, Parser, UsageError, one_line

EXIT_INTERNAL = 1


EXIT_USAGE = 2


EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Count a Flax model's parameters exactly and divide them over checkpoint shards.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    count_command.add_parsers(commands)
    layout_command.add_parser(commands)
    memory_command.add_parser(commands)
    serve_command.add_parser(commands)
    checkpoint_command.add_parser(commands)
    compare_command.add_parser(commands)
    return parser


def _verify_failures() -> tuple[type[Exception], ...]:
    """``memory --verify``'s failure, if its module was loaded: it loads XLA's check only for
    ``--verify``, so an error raised before it cannot be one. Evaluated when an error is caught."""
    verify = sys.modules.get("dcsim.memory.verify")
    failed = getattr(verify, "VerifyFailed", None)
    return (failed,) if isinstance(failed, type) and issubclass(failed, Exception) else ()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0 done, 2 bad input, 1 a bug in dcsim)."""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help has printed its text; in process, return instead of exiting
            return done.code if isinstance(done.code, int) else EXIT_USAGE
        if args.command is None:
            raise UsageError(
                f"choose a command: count, presets, layout, memory, serve, checkpoint, compare (see `{PROG} --help`)"
            )
        output = args.run(args)
    except _verify_failures() as err:  # before ValueError: XLA could not check, the input was fine
        print(f"dcsim: verify failed: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INTERNAL
    except (UsageError, TypeError, ValueError) as err:
        print(f"dcsim: error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except measurement.CheckpointFailed as err:
        print(f"dcsim: checkpoint failed: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:  # a bug: one line for the person, the traceback on request
        if os.environ.get("DCSIM_DEBUG"):
            raise
        print(
            f"dcsim: internal error: {type(err).__name__}: {one_line(str(err))} (set DCSIM_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head` closed the pipe; the reader has what it wanted
        sys.stderr.close()
    return 0
