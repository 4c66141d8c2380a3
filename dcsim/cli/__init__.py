"""The command line: ``python -m dcsim count ...`` for scripts and quick checks.

A module a command, each with its parser, its run and its rendering (``count`` and ``presets``,
``layout``, ``memory``, ``serve``, ``checkpoint``, ``compare``); ``common`` holds what they share and
``mesh`` the mesh flags of those that lay a model out. Each command's module, its `--help` line, its
description and its mesh flags' help are data, in ``commands.json``. Every subcommand shares one
set of model flags and one glossary of JSON keys (docs/cli.md). Bad input prints one line on
stderr and exits 2; nothing here prints a traceback at a person.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from dcsim.cli.common import COMMANDS, PROG, Parser, UsageError, one_line

EXIT_INTERNAL = 1


EXIT_USAGE = 2


EXIT_INTERRUPTED = 130


def _chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not a flag (None: none, or not a command)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the full flags of the command ``argv`` names (every command's, for None)
    and a one-line entry for each other one: only the named command's module is imported."""
    parser = Parser(
        prog=PROG,
        description="Count a Flax model's parameters exactly and divide them over checkpoint shards.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    chosen = None if argv is None else _chosen(argv)
    wanted = (
        {COMMANDS[chosen][0]} if chosen else set() if argv is not None else {module for module, _ in COMMANDS.values()}
    )
    added: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if module in wanted:
            if module not in added:
                importlib.import_module(module).add_parser(commands)
                added.add(module)
        else:
            commands.add_parser(name, help=help_text)
    return parser


def _loaded_error(module: str, name: str) -> tuple[type[Exception], ...]:
    """The exception class ``module.name`` if that module was loaded, else none: an error raised
    before the module was imported cannot be one. Evaluated when an error is caught."""
    failed = getattr(sys.modules.get(module), name, None)
    return (failed,) if isinstance(failed, type) and issubclass(failed, Exception) else ()


def _verify_failures() -> tuple[type[Exception], ...]:
    """``memory --verify``'s failure: it loads XLA's check only for ``--verify``."""
    return _loaded_error("dcsim.memory.verify", "VerifyFailed")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0 done, 2 bad input, 1 a bug in dcsim)."""
    try:
        try:
            words = sys.argv[1:] if argv is None else argv
            args = build_parser(words).parse_args(words)
        except SystemExit as done:  # --help has printed its text; in process, return instead of exiting
            return done.code if isinstance(done.code, int) else EXIT_USAGE
        if args.command is None:
            raise UsageError(
                "choose a command: count, presets, layout, memory, serve, checkpoint, checkpoint-plan, compare "
                f"(see `{PROG} --help`)"
            )
        output = args.run(args)
    except _verify_failures() as err:  # before ValueError: XLA could not check, the input was fine
        print(f"dcsim: verify failed: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INTERNAL
    except (UsageError, TypeError, ValueError) as err:
        print(f"dcsim: error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except _loaded_error("dcsim.checkpoint.measurement", "CheckpointFailed") as err:
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
