"""The command line: ``python -m dcsim count ...`` for scripts and quick checks.

Every subcommand shares one set of model flags and one glossary of JSON keys (docs/cli.md).
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
from fractions import Fraction
from typing import Any, NoReturn

import pandas as pd

from dcsim import compare
from dcsim.checkpoint import measurement, multiprocess, prestart
from dcsim.model import breakdown, hf, optimizer, presets
from dcsim.model.config import DTYPES, ModelConfig, parse_int, parse_widths
from dcsim.model.count import ParamReport, count_params
from dcsim.model.presets import resolved_hparams
from dcsim.report import tables, units
from dcsim.sharding import budget, layout, payload, shares
from dcsim.sharding.payload import CHECKPOINT_DIFFERS

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


def _model_flags() -> _Parser:
    flags = _Parser(add_help=False)
    group = flags.add_argument_group("model (flags given override the --config file's fields)")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="configuration JSON as the dashboard downloads it, or a Hugging Face config.json ('-' reads stdin)",
    )
    group.add_argument("--input-dim", metavar="D", help="input dimension D (default 4)")
    group.add_argument("--features", metavar="F1,F2,...", help="widths of the Dense layers in order (default 4)")
    group.add_argument("--no-bias", action="store_true", help="no bias in any layer (per-layer bias: use --config)")
    group.add_argument("--batch", metavar="B", help="batch size B; it never changes a count (default 1)")
    group.add_argument(
        "--seed", metavar="S", help="PRNG seed, 0 to 4,294,967,295; changes values, not counts (default 0)"
    )
    group.add_argument("--shards", metavar="N", help="number of checkpoint shards for the ideal share (default 2)")
    group.add_argument(
        "--dtype",
        choices=DTYPES,
        help="storage dtype of the byte figures: bytes per shard, raw payload, a checkpoint's arrays (default float32)",
    )
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
    listing.set_defaults(run=_presets)
    _add_layout_parser(commands)
    _add_checkpoint_command(commands)
    _add_compare_command(commands)
    return parser


def _read_file(path: str, what: str, max_bytes: int) -> bytes:
    """The bytes of the ``what`` file at ``path`` ('-' reads stdin), one past ``max_bytes`` at most:
    enough for its reader to refuse a file that is too large without reading all of it."""
    try:
        if path == "-":
            return sys.stdin.buffer.read(max_bytes + 1)
        with open(path, "rb") as file:
            return file.read(max_bytes + 1)
    except OSError as err:
        raise UsageError(f"cannot read the {what} file {path!r}: {err.strerror or err}") from None


def _read_config(path: str) -> ModelConfig:
    data = _read_file(path, "configuration", hf.MAX_HF_CONFIG_BYTES)
    try:
        config, note = hf.read_config_file(data)
    except (TypeError, ValueError) as err:
        raise UsageError(f"configuration file {path!r}: {err}") from None
    if note is not None:
        print(f"dcsim: {note}", file=sys.stderr)
    return config


def config_from_args(args: argparse.Namespace) -> ModelConfig:
    """The configuration the model flags describe: the --config file's, then each given flag."""
    config = _read_config(args.config) if args.config else ModelConfig()
    changes: dict[str, Any] = {}
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
    if args.dtype is not None:
        changes["dtype"] = args.dtype
    return dataclasses.replace(config, layers=layers, **changes, **_preset_changes(args, config))


def _preset_changes(args: argparse.Namespace, config: ModelConfig) -> dict[str, Any]:
    """``preset``, ``origin`` and ``overrides`` from --preset and --set, over the --config file's
    (a preset, or a Hugging Face file's model, which --set edits under its own name)."""
    preset, origin, overrides = config.preset, config.origin, dict(config.overrides)
    if args.preset is not None:
        presets.get_preset(args.preset)
        if args.preset != preset:  # another model's overrides may not even name its hyperparameters
            overrides = {}
        preset, origin = args.preset, None
    family = presets.get_preset(preset).family if preset is not None else origin.family if origin else None
    for item in args.set:
        if family is None:
            raise UsageError("`--set` changes a preset's hyperparameters; choose a preset with --preset NAME")
        name, equals, text = item.partition("=")
        if not equals:
            raise UsageError(f"`--set` takes KEY=VALUE, e.g. num_layers=6, got {item!r}")
        spec = presets.hparam(family, name.strip(), preset or family)
        overrides[spec.name] = spec.parse(text)
    if origin is not None and args.set:
        origin = dataclasses.replace(origin, edited=True)
    if family is not None:
        dense = [flag for flag in ("input_dim", "features", "no_bias") if getattr(args, flag) not in (None, False)]
        if dense:
            flags = ", ".join("--" + flag.replace("_", "-") for flag in dense)
            whose = f"preset {preset!r}" if preset else presets.model_title(config)
            raise UsageError(f"{flags}: only for the Dense stack; {whose} sets its own shapes (change them with --set)")
    return {"preset": preset, "origin": origin, "overrides": overrides}


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
    """The ``count`` result for people: the answer first (exact figures with separators and honest
    units), then the model and where its parameters are. A family's model shows its groups and
    top-level modules (Llama 2 70B's 723 arrays are in ``--format csv`` and ``json``)."""
    share = shares.ideal_share(report.total_params, config.num_shards)
    per_shard = payload.bytes_per_shard(report.total_params, config.num_shards, config.dtype)
    float32, *other_dtypes = payload.raw_payloads(report.total_params)
    lines = [
        f"total parameters       {units.count(report.total_params)}",
        f"shards                 {units.count(config.num_shards)}",
        f"ideal share per shard  {units.share(share.exact)}  (total / shards: an average, not a layout)",
        f"bytes per shard        {units.share(per_shard)} bytes in {config.dtype}"
        f"{_reading(per_shard)}  (an average, NOT the checkpoint size)",
        f"raw float32 payload    {units.bytes_exact(float32.num_bytes)}  <- raw estimate, NOT the checkpoint size",
        "other raw payloads     "
        + " · ".join(f"{row.dtype} {units.bytes_exact(row.num_bytes)}" for row in other_dtypes),
    ]
    if report.other:
        lines.append(
            f"other variables        {units.count(report.total_other_values)}"
            " (e.g. BatchNorm statistics: not parameters, not in the total)"
        )
    lines += ["", *_model_lines(config, report), ""]
    if config.is_dense:
        layers = tables.layers_frame(report)
        layers["percent_of_total"] = layers["percent_of_total"].map(_percent)
        lines += [_frame_text(layers), "", _frame_text(tables.arrays_frame(report).drop(columns=["module", "kind"]))]
    else:
        modules = breakdown.depth_frame(report, 1)
        modules["percent_of_total"] = modules["percent_of_total"].map(_percent)
        lines += [
            _frame_text(modules),
            "",
            f"({len(report.arrays):,} arrays: every one with --format csv or --format json)",
        ]
    lines += ["", f"Raw payload = values x bytes per value. It is not the checkpoint size: {CHECKPOINT_DIFFERS}."]
    return "\n".join(lines) + "\n"


def _reading(value: Fraction) -> str:
    """`` (2.01 GiB)`` beside an exact byte figure past a KiB."""
    return f" ({units.binary_bytes(int(value))})" if value >= 1024 else ""


def _percent(value: float) -> str:
    return f"{value:.2f}%"


def _model_lines(config: ModelConfig, report: ParamReport) -> list[str]:
    if config.is_dense:
        widths = " -> ".join(
            f"Dense({layer.features:,}{'' if layer.use_bias else ', no bias'})" for layer in config.layers
        )
        return [
            f"model: input dimension {config.input_dim:,} -> {widths}",
            f"(batch size {config.batch_size:,} and seed {config.seed} change no count)",
        ]
    family = config.family
    assert family is not None
    hparams = ", ".join(f"{name}={presets.value_text(value)}" for name, value in resolved_hparams(config).items())
    groups = breakdown.breakdown_frame(report)
    groups["percent_of_total"] = groups["percent_of_total"].map(_percent)
    if config.origin is not None:
        named = [f"model: {config.origin.title} ({family}: {presets.FAMILY_DESCRIPTIONS[family]})"]
    else:
        row = presets.get_preset(config.preset)
        changed = ", ".join(name for name, _ in config.overrides) or "none"
        named = [
            f"model: preset {row.name} ({row.title}; {family}: {presets.FAMILY_DESCRIPTIONS[family]})",
            f"changed from the preset: {changed}",
        ]
    said = presets.provenance(config, report.total_params)
    return [
        *named,
        f"hyperparameters: {hparams}",
        *([said] if said else []),
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


# --- layout: what each device of a mesh holds, by JAX's sharding rules ---------------------------


def _add_layout_parser(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "layout",
        parents=[_model_flags()],
        help="lay the parameters out on a device mesh with JAX's sharding rules",
        description=(
            "Lay every parameter array out on a device mesh with JAX's own sharding rules "
            "(AbstractMesh, PartitionSpec, NamedSharding.shard_shape) and compare what each device holds "
            "with the ideal share (total / devices). The mesh sets the number of devices; --shards does not apply."
        ),
    )
    command.add_argument(
        "--mesh", metavar="AXIS=SIZE[,AXIS=SIZE...]", required=True, help="named mesh axes, e.g. data=4,model=2"
    )
    command.add_argument(
        "--strategy",
        choices=layout.STRATEGIES,
        help="replicated (default), fsdp (one dimension over all axes), tensor (last dimension over `model`), "
        "or custom (implied by --rule)",
    )
    command.add_argument(
        "--rule",
        metavar="PATTERN=SPEC",
        action="append",
        default=[],
        help="custom rule, repeatable, first match wins: glob on the array path = one entry per dimension, "
        "None, an axis or axes joined by + (e.g. '*/kernel=None,model'); unmatched arrays are replicated",
    )
    command.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    command.set_defaults(run=_layout)


def render_layout_table(layout_report: layout.LayoutReport, dtype: str = "float32") -> str:
    """The ``layout`` result for people: the per-array table, then per-device totals against the
    ideal, with the raw bytes a device holds in ``dtype`` beside float32's."""
    frame = layout.layout_frame(layout_report).drop(columns=["dtype", "stored_values", "replicated_fallback"])
    share = layout_report.ideal_share
    ratio = layout_report.gap_ratio
    per_device = layout_report.values_per_device
    rules = "".join(f"\n  rule {rule.text}" for rule in layout_report.rules)
    lines = [
        f"mesh: {layout_report.mesh.text} ({units.count(layout_report.num_devices)} devices), "
        f"strategy: {layout_report.strategy}{rules}",
        "",
        _frame_text(frame),
        "",
        f"total parameters               {units.count(layout_report.total_params)}",
        f"devices                        {units.count(layout_report.num_devices)}",
        f"ideal share per device         {units.share(share.exact)}  (total / devices: an average, not a layout)",
        f"values per device              {units.count(layout_report.values_per_device)}",
        f"gap to the ideal share         {units.share(layout_report.gap)}"
        + ("" if ratio is None else f"  ({float(ratio):,.4g}x the ideal share)"),
        f"raw float32 bytes per device   {units.bytes_exact(layout_report.raw_float32_bytes_per_device)}",
        *(
            [f"raw {dtype} bytes per device {units.bytes_exact(payload.raw_bytes(per_device, dtype))}"]
            if dtype != "float32"
            else []
        ),
        f"total stored across the mesh   {units.count(layout_report.total_stored_values)}"
        "  (values per device x devices)",
    ]
    fallbacks = layout_report.num_replicated_fallbacks
    if fallbacks:
        lines.append(f"replicated by necessity        {fallbacks:,} array{'s' * (fallbacks != 1)} (see the notes)")
    lines += ["", f"Note: {layout.REPLICAS_NOT_ON_DISK}."]
    return "\n".join(lines) + "\n"


def _layout(args: argparse.Namespace) -> str:
    if args.shards is not None:
        raise UsageError("--shards does not apply to layout: the mesh sets the number of devices (--mesh)")
    strategy = args.strategy or ("custom" if args.rule else "replicated")
    mesh = layout.parse_mesh(args.mesh)
    rules = layout.parse_rules(args.rule)
    config = config_from_args(args)
    result = layout.compute_layout(count_params(config), mesh, strategy, rules)
    if args.format == "json":
        return json.dumps(layout.layout_record(result), indent=2) + "\n"
    return render_layout_table(result, config.dtype)


# --- checkpoint: a real Orbax save, measured and restored in a child process -----------------------


def _add_checkpoint_command(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "checkpoint",
        parents=[_model_flags()],
        help="save the model with Orbax in a temporary folder, measure the files, restore and compare",
        description="Initialise the model for real, save it with Orbax (OCDBT) into a temporary folder that is "
        "always removed, measure the files, restore them and compare bit for bit; in a child process with a "
        "time limit.",
    )
    command.add_argument("--mesh", metavar="AXIS=SIZE[,...]", help="mesh of virtual CPU devices (default one)")
    command.add_argument(
        "--strategy", choices=layout.STRATEGIES, help="sharding strategy, as for layout (default replicated)"
    )
    command.add_argument(
        "--rule", action="append", default=[], metavar="PATTERN=SPEC", help="custom rule as for layout, repeatable"
    )
    command.add_argument(
        "--max-params",
        metavar="N",
        help=f"ceiling on the values all devices hold, replicas included (default {measurement.DEFAULT_MAX_PARAMS:,}, "
        f"or ${measurement.MAX_PARAMS_ENV})",
    )
    command.add_argument(
        "--timeout",
        metavar="SECONDS",
        default=measurement.DEFAULT_TIMEOUT_SECONDS,
        help=f"time limit (default {measurement.DEFAULT_TIMEOUT_SECONDS:g})",
    )
    command.add_argument(
        "--processes",
        metavar="P",
        help=f"save from P processes at once on JAX's distributed runtime over loopback, 1 to "
        f"{multiprocess.MAX_PROCESSES}; each holds N/P of the mesh's N devices",
    )
    command.add_argument(
        "--processes-sweep",
        metavar="P1,P2,...",
        help="the same measurement for each process count, side by side, e.g. 1,2,4 (the mesh's device count "
        "must be a multiple of each)",
    )
    command.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    command.set_defaults(run=_checkpoint)


def render_checkpoint_table(report: measurement.CheckpointReport) -> str:
    """The ``checkpoint`` result for people: sizes beside the raw estimates, files, timings, why."""
    sizes = measurement.sizes_frame(report)
    sizes.insert(2, "size", [units.binary_bytes(n) for n in sizes["num_bytes"]])
    lines = [
        f"checkpoint of {units.count(report.total_params)} parameters as {report.dtype}, mesh {report.mesh} "
        f"({report.num_devices} device(s)), strategy {report.strategy}, Orbax {report.orbax_version}",
        "",
        _frame_text(sizes),
        "",
        _frame_text(measurement.file_groups_frame(report)),
        "",
        f"init {report.init_seconds:.3f} s (XLA compilation cache: {report.compilation_cache}) · "
        f"save {report.save_seconds:.3f} s · restore {report.restore_seconds:.3f} s",
        f"restore verified bit for bit: {'yes' if report.restore_verified else 'NO'}",
        f"child peak memory {units.binary_bytes(report.peak_rss_bytes)} "
        f"(idle baseline {units.binary_bytes(report.baseline_rss_bytes)})",
        "",
        *measurement.explain(report),
    ]
    return "\n".join(lines) + "\n"


def _measurement_options(args: argparse.Namespace, dtype: str) -> measurement.MeasurementOptions:
    """The checkpoint flags as one ``MeasurementOptions``, the flags' own values checked here so a
    refusal names the flag (``--max-params``, ``--timeout``)."""
    return measurement.MeasurementOptions(
        dtype=dtype,
        mesh=args.mesh,
        strategy=args.strategy or ("custom" if args.rule else "replicated"),
        rules=layout.parse_rules(args.rule),
        max_params=None if args.max_params is None else measurement.parse_max_params(args.max_params, "--max-params"),
        timeout_seconds=measurement.check_timeout(args.timeout, "--timeout"),
    )


def _checkpoint(args: argparse.Namespace) -> str:
    if args.processes is not None or args.processes_sweep is not None:
        return _checkpoint_processes(args)
    config = config_from_args(args)
    waiting = prestart.pending()
    if waiting is not None:  # the child traces the init while this process counts and lays it out
        waiting.preview(config.to_dict(), config.dtype)
    report = measurement.measure_checkpoint(config, _measurement_options(args, config.dtype), prestarted=waiting)
    if args.format == "json":
        return json.dumps(measurement.checkpoint_record(report), indent=2) + "\n"
    return render_checkpoint_table(report)


def one_line(text: str) -> str:
    """``text`` with every unprintable character escaped as Python writes it (``\\n``, ``\\x1b``):
    an error is one line, and a typed value can neither break it nor send a terminal escape."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


# --- compare: scenarios side by side and the budget question -------------------------------------


def _add_compare_command(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "compare",
        help="compare the scenarios of a comparison JSON file side by side, with the budget question",
        description="Print a comparison (as the dashboard's Compare page downloads it) side by side: totals, "
        "ideal shares, raw bytes and differences against the baseline, then the budget question answered "
        "twice: by the ideal share (an average) and by the real layout (JAX's sharding rules).",
    )
    command.add_argument("file", metavar="FILE", help="comparison JSON ('-' reads stdin)")
    command.add_argument(
        "--format", choices=("table", "json", "csv"), default="table", help="output format (default table)"
    )
    command.set_defaults(run=_compare)


def _read_comparison(path: str) -> compare.Comparison:
    data = _read_file(path, "comparison", compare.MAX_COMPARISON_BYTES)
    try:
        return compare.Comparison.from_json(data)
    except (TypeError, ValueError) as err:
        raise UsageError(f"comparison file {path!r}: {err}") from None


_COMPARE_COLUMNS = {
    "number": "#",
    "name": "scenario",
    "model": "model",
    "num_shards": "shards",
    "dtype": "dtype",
    "total_params": "total_params",
    "ideal_share_text": "ideal_share",
    "raw_bytes": "raw_bytes",
    "params_vs_baseline": "params_vs_baseline",
    "params_ratio_text": "params_ratio",
    "raw_bytes_vs_baseline": "raw_bytes_vs_baseline",
}


def render_compare_table(comparison: compare.Comparison, table: pd.DataFrame, answers: list[budget.Answer]) -> str:
    """The comparison for people: the side-by-side table, then both answers to the budget question."""
    if not comparison.scenarios:
        return "the comparison holds no scenarios\n"
    shown = table[list(_COMPARE_COLUMNS)].rename(columns=_COMPARE_COLUMNS)
    shown["scenario"] = [
        f"{name} (baseline)" if base else name for name, base in zip(table["name"], table["is_baseline"], strict=True)
    ]
    spec = comparison.budget
    lines = [
        _frame_text(shown),
        "",
        "raw_bytes: values x bytes per value in the scenario's dtype; a raw estimate, NOT the checkpoint size.",
        "",
        f"budget per shard and per device: {spec.amount_text} ({spec.holds})",
    ]
    for scenario, found in zip(comparison.scenarios, answers, strict=True):
        lines += [
            f"  {scenario.name}: needs {units.count(found.need)} {spec.unit} in all",
            f"    ideal share (an average): {_plural(found.ideal_shards, 'shard')}",
            f"    real layout (JAX's sharding rules, {spec.strategy}): {budget.summary(found, spec)}",
        ]
    lines.append(
        f"The real layout is not monotone in N (an array that splits on 4 devices may be replicated on 3), "
        f"so every N from 1 to {budget.MAX_SEARCH_DEVICES:,} was searched."
    )
    return "\n".join(lines) + "\n"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'s' * (count != 1)}"


def _compare(args: argparse.Namespace) -> str:
    comparison = _read_comparison(args.file)
    reports = [count_params(scenario.config) for scenario in comparison.scenarios]
    if args.format == "csv":
        buffer = io.StringIO()
        compare.comparison_frame(comparison, reports).to_csv(buffer, index=False)
        return buffer.getvalue()
    answers = [
        budget.answer(budget.demand(report, scenario.dtype, comparison.budget.training), comparison.budget)
        for report, scenario in zip(reports, comparison.scenarios, strict=True)
    ]
    if args.format == "json":
        return json.dumps(compare.comparison_record(comparison, reports, answers), indent=2, ensure_ascii=False) + "\n"
    return render_compare_table(comparison, compare.comparison_frame(comparison, reports), answers)


# --- checkpoint --processes: the same measurement from several processes on JAX's distributed runtime --


def _checkpoint_processes(args: argparse.Namespace) -> str:
    if args.processes is not None and args.processes_sweep is not None:
        raise UsageError("--processes and --processes-sweep: choose one")
    if args.processes_sweep is not None:
        counts = multiprocess.parse_processes_list(args.processes_sweep, "--processes-sweep")
    else:
        counts = (multiprocess.check_processes(args.processes, "--processes"),)
    config = config_from_args(args)
    plans = multiprocess.plan_sweep(config, _measurement_options(args, config.dtype), processes=counts)
    reports = multiprocess.run_sweep(plans)
    if args.format == "json":
        if args.processes_sweep is None:
            return json.dumps(multiprocess.multiprocess_record(reports[0]), indent=2) + "\n"
        return json.dumps({"sweep": [multiprocess.multiprocess_record(r) for r in reports]}, indent=2) + "\n"
    if args.processes_sweep is None:
        return render_processes_table(reports[0])
    return render_sweep_table(reports)


def _seconds_columns(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(**{name: frame[name].map("{:.3f}".format) for name in frame.columns if "seconds" in name})


def render_processes_table(report: multiprocess.MultiprocessReport) -> str:
    """``checkpoint --processes P`` for people: the group's totals, each process, files by place, why."""
    totals = report.checkpoint
    processes = _seconds_columns(multiprocess.processes_frame(report))
    processes["peak_rss"] = [units.binary_bytes(n) for n in processes["peak_rss_bytes"]]
    processes["restore_verified"] = processes["restore_verified"].map({True: "yes", False: "NO"})
    lines = [
        f"checkpoint of {units.count(totals.total_params)} parameters as {totals.dtype}, mesh {totals.mesh}, "
        f"{report.num_processes} processes x {report.devices_per_process} device(s), strategy {totals.strategy}, "
        f"Orbax {totals.orbax_version}",
        "",
        f"raw payload        {units.bytes_exact(totals.raw_payload_bytes)}",
        f"on disk            {units.bytes_exact(totals.disk_bytes)} in {units.count(totals.num_files)} files",
        f"save (group wall)  {totals.save_seconds:.3f} s · restore {totals.restore_seconds:.3f} s",
        f"restore verified bit for bit on every process: {'yes' if totals.restore_verified else 'NO'}",
        f"peak memory        {units.binary_bytes(max(p.peak_rss_bytes for p in report.processes))} per process at "
        f"most, {units.binary_bytes(report.total_peak_rss_bytes)} together",
        f"machine            {report.cpu_count} CPU core(s), load average {report.load_average:.2f}",
        "",
        _frame_text(processes),
        "",
        _frame_text(multiprocess.file_places_frame(report)),
        "",
        *multiprocess.explain_processes(report),
        *measurement.explain(totals),
        "",
        multiprocess.MULTIHOST_NOTE,
    ]
    return "\n".join(lines) + "\n"


def render_sweep_table(reports: Sequence[multiprocess.MultiprocessReport]) -> str:
    """``checkpoint --processes-sweep`` for people: one row per process count, then each run's processes."""
    first = reports[0].checkpoint
    sweep = _seconds_columns(multiprocess.sweep_frame(reports))
    sweep["restore_verified"] = sweep["restore_verified"].map({True: "yes", False: "NO"})
    lines = [
        f"checkpoint of {units.count(first.total_params)} parameters as {first.dtype}, mesh {first.mesh}, "
        f"strategy {first.strategy}, Orbax {first.orbax_version}; "
        f"{reports[-1].cpu_count} CPU core(s), load average {reports[-1].load_average:.2f}",
        "",
        _frame_text(sweep),
        "",
        _frame_text(_seconds_columns(multiprocess.sweep_processes_frame(reports))),
        "",
        multiprocess.MULTIHOST_NOTE,
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0 done, 2 bad input, 1 a bug in dcsim)."""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help has printed its text; in process, return instead of exiting
            return done.code if isinstance(done.code, int) else EXIT_USAGE
        if args.command is None:
            raise UsageError(f"choose a command: count, presets, layout, checkpoint, compare (see `{PROG} --help`)")
        output = getattr(args, "run", _count)(args)
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
