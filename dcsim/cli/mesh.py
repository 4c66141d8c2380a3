"""The mesh flags (``--mesh``, ``--strategy``, ``--rule``) of the commands that lay a model out
(``layout``, ``memory``, ``serve``, ``checkpoint``) and their reading. Kept out of ``common``:
they need JAX's sharding, and ``common`` is imported before a command's flags are even parsed."""

from __future__ import annotations

import argparse

from dcsim.cli.common import MESH_HELP
from dcsim.sharding import layout, meshes


def mesh_flags(
    command: argparse.ArgumentParser,
    name: str,
    *,
    metavar: str = "AXIS=SIZE[,...]",
    required: bool = False,
    default: str | None = None,
    **defaults: str,
) -> None:
    """``--mesh``, ``--strategy`` and ``--rule`` (what ``mesh_from_args`` reads), each with command
    ``name``'s own help (commands.json), its placeholders filled from ``defaults``."""
    text = MESH_HELP[name]
    command.add_argument(
        "--mesh", metavar=metavar, required=required, default=default, help=text.mesh.format(**defaults)
    )
    command.add_argument("--strategy", choices=layout.STRATEGIES, help=text.strategy.format(**defaults))
    command.add_argument(
        "--rule", metavar="PATTERN=SPEC", action="append", default=[], help=text.rule.format(**defaults)
    )


def strategy_from_args(args: argparse.Namespace, default: str) -> str:
    """--strategy, else custom when --rule gives rules, else the command's ``default``."""
    return args.strategy or ("custom" if args.rule else default)


def mesh_from_args(
    args: argparse.Namespace, default_strategy: str
) -> tuple[meshes.MeshSpec, str, tuple[meshes.Rule, ...]]:
    """The mesh, the strategy and the rules of --mesh, --strategy and --rule, each checked."""
    mesh = meshes.parse_mesh(args.mesh)
    rules = meshes.parse_rules(args.rule)
    return mesh, strategy_from_args(args, default_strategy), rules
