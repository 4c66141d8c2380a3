"""The command line: ``python -m dcsim count ...`` for scripts and quick checks.

Every subcommand shares one set of model flags and one glossary of JSON keys (see the README).
Bad input prints one line on stderr and exits 2; nothing here prints a traceback at a person.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import pandas as pd

from dcsim import breakdown, optimizer, payload, presets, shares, tables, units
from dcsim.config import MAX_CONFIG_BYTES, ModelConfig, parse_int, parse_widths
from dcsim.count import ParamReport, count_params
from dcsim.payload import CHECKPOINT_DIFFERS
from dcsim.presets import resolved_hparams

EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PROG = "python -m dcsim"


class UsageError(Exception):
    """A mistake in what the person typed; its message is shown as it is."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (its default prints the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _model_flags() -> argparse.ArgumentParser:
    flags = _Parser(add_help=False)
    group = flags.add_argument_group("model (flags given override the --config file's fields)")
    group.add_argument(
        "--config", metavar="FILE", help="configuration JSON, as the dashboard downloads it ('-' reads stdin)"
    )
    group.add_argument("--input-dim", metavar="D", help="input dimension D (default 4)")
    group.add_argument("--features", metavar="F1,F2,...", help="widths of the Dense layers in order (default 4)")
    group.add_argument("--no-bias", action="store_true", help="no bias in any layer (per-layer bias: use --config)")
    group.add_argument("--batch", metavar="B", help="batch size B; it never changes a count (default 1)")
    group.add_argument(
        "--seed", metavar="S", help="PRNG seed, 0 to 4,294,967,295; changes values, not counts (default 0)"
    )
    group.add_argument("--shards", metavar="N", help="number of checkpoint shards for the ideal share (default 2)")
    # Presets: an architecture from `python -m dcsim presets`, its hyperparameters changed with --set.
    group.add_argument("--preset", metavar="NAME", help="an architecture preset instead of the Dense stack")
    group.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="change one of the preset's hyperparameters, e.g. --set num_layers=6 (repeatable)",
    )
    return flags


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Count a Flax model's parameters exactly and divide them over checkpoint shards.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    count = commands.add_parser(
        "count",
        parents=[_model_flags()],
        help="count parameters, the ideal share per shard and the raw payload",
        description="Count a model's parameters (a Dense stack or an architecture preset) by abstractly "
        "initialising its Flax modules.",
    )
    count.add_argument(
        "--format", choices=("table", "json", "csv"), default="table", help="output format (default table)"
    )
    count.add_argument(
        "--optimizer",
        choices=(*optimizer.OPTIMIZER_NAMES, "all"),
        help="add the state this optax optimizer allocates (apart from the parameters; json key optimizer_state)",
    )
    listing = commands.add_parser(
        "presets",
        help="list the architecture presets and their published parameter counts",
        description="List the architecture presets: name, family, published parameter count and its source.",
    )
    listing.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    return parser


def _read_config(path: str) -> ModelConfig:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise UsageError(f"cannot read the configuration file {path!r}: {err.strerror or err}") from None
    try:
        return ModelConfig.from_json(data)
    except (TypeError, ValueError) as err:
        raise UsageError(f"configuration file {path!r}: {err}") from None


def config_from_args(args: argparse.Namespace) -> ModelConfig:
    """The configuration the model flags describe: the --config file's, then each given flag."""
    config = _read_config(args.config) if args.config else ModelConfig()
    changes: dict[str, object] = {}
    for flag, field in (
        ("input_dim", "input_dim"),
        ("batch", "batch_size"),
        ("seed", "seed"),
        ("shards", "num_shards"),
    ):
        text = getattr(args, flag)
        if text is not None:
            changes[field] = parse_int(text, field, "--" + flag.replace("_", "-"))
    layers = config.layers
    if args.features is not None:
        layers = parse_widths(args.features, "--features")
    if args.no_bias:
        layers = tuple(dataclasses.replace(layer, use_bias=False) for layer in layers)
    return dataclasses.replace(config, layers=layers, **changes, **_preset_changes(args, config))


def _preset_changes(args: argparse.Namespace, config: ModelConfig) -> dict[str, object]:
    """``preset`` and ``overrides`` from --preset and --set, over the --config file's."""
    preset, overrides = config.preset, dict(config.overrides)
    if args.preset is not None:
        presets.get_preset(args.preset)
        if args.preset != preset:  # another preset's overrides may not even name its hyperparameters
            overrides = {}
        preset = args.preset
    if args.set and preset is None:
        raise UsageError("`--set` changes a preset's hyperparameters; choose a preset with --preset NAME")
    for item in args.set:
        name, equals, text = item.partition("=")
        if not equals:
            raise UsageError(f"`--set` takes KEY=VALUE, e.g. num_layers=6, got {item!r}")
        spec = presets.hparam(presets.get_preset(preset).family, name.strip(), preset)
        overrides[spec.name] = spec.parse(text)
    if preset is not None:
        dense = [flag for flag in ("input_dim", "features", "no_bias") if getattr(args, flag) not in (None, False)]
        if dense:
            flags = ", ".join("--" + flag.replace("_", "-") for flag in dense)
            raise UsageError(
                f"{flags}: only for the Dense stack; preset {preset!r} sets its own shapes (change them with --set)"
            )
    return {"preset": preset, "overrides": overrides}


def _frame_text(frame: pd.DataFrame) -> str:
    """A frame as aligned text: counts with separators, right-aligned; text left-aligned."""
    columns = []
    for name in frame.columns:
        is_count = frame[name].dtype == "int64"
        cells = [units.count(value) if is_count else str(value) for value in frame[name]]
        width = max(len(name), *(len(cell) for cell in cells))
        align = str.rjust if is_count or name.startswith("percent") else str.ljust
        columns.append([align(cell, width) for cell in [name, *cells]])
    return "\n".join("  ".join(row).rstrip() for row in zip(*columns, strict=True))


def render_count_table(config: ModelConfig, report: ParamReport) -> str:
    """The ``count`` result for people: exact figures with separators and honest units."""
    share = shares.ideal_share(report.total_params, config.num_shards)
    layers = tables.layers_frame(report)
    layers["percent_of_total"] = layers["percent_of_total"].map(_percent)
    float32, *other_dtypes = payload.raw_payloads(report.total_params)
    lines = [
        *_model_lines(config, report),
        "",
        _frame_text(layers),
        "",
        _frame_text(tables.arrays_frame(report).drop(columns=["module", "kind"])),
        "",
        f"total parameters       {units.count(report.total_params)}",
    ]
    if report.other:
        lines.append(
            f"other variables        {units.count(report.total_other_values)}"
            " (e.g. BatchNorm statistics: not parameters, not in the total)"
        )
    lines += [
        f"shards                 {units.count(config.num_shards)}",
        f"ideal share per shard  {units.share(share.exact)}  (total / shards: an average, not a layout)",
        f"raw float32 payload    {units.bytes_exact(float32.num_bytes)}  <- raw estimate, NOT the checkpoint size",
        "other raw payloads     "
        + " · ".join(f"{row.dtype} {units.bytes_exact(row.num_bytes)}" for row in other_dtypes),
        "",
        f"Raw payload = values x bytes per value. It is not the checkpoint size: {CHECKPOINT_DIFFERS}.",
    ]
    return "\n".join(lines) + "\n"


def _percent(value: float) -> str:
    return f"{value:.2f}%"


def _model_lines(config: ModelConfig, report: ParamReport) -> list[str]:
    if config.preset is None:
        widths = " -> ".join(
            f"Dense({layer.features:,}{'' if layer.use_bias else ', no bias'})" for layer in config.layers
        )
        return [
            f"model: input dimension {config.input_dim:,} -> {widths}",
            f"(batch size {config.batch_size:,} and seed {config.seed} change no count)",
        ]
    row = presets.get_preset(config.preset)
    hparams = ", ".join(
        f"{name}={','.join(map(str, value)) if isinstance(value, tuple) else value}"
        for name, value in resolved_hparams(config).items()
    )
    changed = ", ".join(f"{name}" for name, _ in config.overrides) or "none"
    groups = breakdown.breakdown_frame(report)
    groups["percent_of_total"] = groups["percent_of_total"].map(_percent)
    return [
        f"model: preset {row.name} ({row.title}; {row.family}: {presets.FAMILY_DESCRIPTIONS[row.family]})",
        f"hyperparameters: {hparams}",
        f"changed from the preset: {changed}",
        f"published count of the preset: {units.count(row.published_params)} ({row.source})",
        f"non-embedding parameters: {units.count(breakdown.non_embedding_params(config, report))}"
        " (total less token, position and token-type tables and an untied output projection, as Pythia reports)",
        f"(batch size {config.batch_size:,} and seed {config.seed} change no count)",
        "",
        _frame_text(groups),
    ]


def render_optimizer_table(states: tuple[optimizer.OptimizerState, ...], total_params: int) -> str:
    """Optimizer state for people: values and raw bytes per optimizer, apart from the parameters."""
    lines = [f"{optimizer.STATE_NOTE}:"]
    for state in states:
        by_dtype = " + ".join(f"{dtype} {units.bytes_exact(size)}" for dtype, size in state.raw_bytes_by_dtype.items())
        per_param = state.num_values / total_params if total_params else 0.0
        lines.append(
            f"  {state.optimizer:<9} {units.count(state.num_values):>18} values ({per_param:.4g} per parameter)"
            f"  raw {by_dtype}  - {state.description}"
        )
    return "\n".join(lines) + "\n"


def _count(args: argparse.Namespace) -> str:
    config = config_from_args(args)
    report = count_params(config)
    states: tuple[optimizer.OptimizerState, ...] = ()
    if args.optimizer is not None:
        names = optimizer.OPTIMIZER_NAMES if args.optimizer == "all" else (args.optimizer,)
        states = optimizer.optimizer_states(config, names)
    if args.format == "json":
        record = tables.count_record(config, report)
        if states:
            record["optimizer_state"] = [optimizer.state_record(state, report.total_params) for state in states]
            record["optimizer_state_note"] = optimizer.STATE_NOTE
        return json.dumps(record, indent=2) + "\n"
    if args.format == "csv":
        buffer = io.StringIO()
        tables.arrays_frame(report).to_csv(buffer, index=False)
        return buffer.getvalue()
    text = render_count_table(config, report)
    return text + ("\n" + render_optimizer_table(states, report.total_params) if states else "")


def _presets(args: argparse.Namespace) -> str:
    rows = presets.published_table()
    if args.format == "json":
        for row in rows:
            row["hparams"] = {
                name: list(value) if isinstance(value, tuple) else value
                for name, value in presets.PRESETS[row["name"]].hparams.items()
            }
        return json.dumps(rows, indent=2) + "\n"
    frame = pd.DataFrame(
        {
            "name": [row["name"] for row in rows],
            "family": [row["family"] for row in rows],
            "published_params": pd.array([row["published_params"] for row in rows], dtype="int64"),
            "title": [row["title"] for row in rows],
        }
    )
    return (
        _frame_text(frame) + "\n\nEach count is reproduced exactly by `count --preset NAME`; sources: --format json.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0 done, 2 bad input, 1 a bug in dcsim)."""
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: count, presets (see `{PROG} --help`)")
        output = _presets(args) if args.command == "presets" else _count(args)
    except (UsageError, TypeError, ValueError) as err:
        print(f"dcsim: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:  # a bug: one line for the person, the traceback on request
        if os.environ.get("DCSIM_DEBUG"):
            raise
        print(
            f"dcsim: internal error: {type(err).__name__}: {err} (set DCSIM_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head` closed the pipe; the reader has what it wanted
        sys.stderr.close()
    return 0
