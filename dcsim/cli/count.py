"""``count`` (a model's parameters, ideal share and raw payload) and ``presets`` (the preset table).

Imported to parse either command, so its top holds only what parsing needs (pure Python): JAX
and Flax come with the count (``dcsim.model.count``), pandas with the tables a result shows (not
with ``--format json``), optax only with ``--optimizer``. ``presets``, ``--help`` and a bad flag
answer without any of them.
"""

from __future__ import annotations

import argparse
import io
import json
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dcsim.cli.common import (
    OPTIMIZER_CHOICES,
    UsageError,
    add_command,
    config_from_args,
    format_flag,
    format_from_args,
    frame_text,
    rows_text,
    weight_flags,
)
from dcsim.model import presets, schemas
from dcsim.model.config import ModelConfig
from dcsim.model.presets import resolved_hparams
from dcsim.quantities import units
from dcsim.sharding import shares

if TYPE_CHECKING:
    from dcsim.model import optimizer
    from dcsim.model.count import ParamReport


def render_count_table(config: ModelConfig, report: ParamReport, *, all_rows: bool = False) -> str:
    """The ``count`` result for people: the answer first (exact figures with separators and honest
    units), then the model and where its parameters are. A family's model shows its groups and
    top-level modules, a run of identical blocks as one row with its multiplicity (``all_rows``:
    every module a row; Llama 2 70B's 723 arrays are in ``--format csv`` and ``json``)."""
    from dcsim.model import breakdown
    from dcsim.quantities import payload
    from dcsim.report import tables

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
            f" ({breakdown.other_variables_text(report)}: not parameters, not in the total)"
        )
    lines += ["", *_model_lines(config, report), ""]
    if config.is_dense:
        layers = tables.layers_frame(report)
        layers["percent_of_total"] = layers["percent_of_total"].map(_percent)
        lines += [frame_text(layers), "", frame_text(tables.arrays_frame(report).drop(columns=["module", "kind"]))]
    else:
        modules = breakdown.depth_frame(report, 1) if all_rows else breakdown.repeated_frame(report)
        modules["percent_of_total"] = modules["percent_of_total"].map(_percent)
        lines += [
            frame_text(modules),
            "",
            *([] if all_rows or len(modules) == len(breakdown.depth_frame(report, 1)) else [_REPEATS]),
            f"({len(report.arrays):,} arrays: every one with --format csv or --format json)",
        ]
    lines += [
        "",
        f"Raw payload = values x bytes per value. It is not the checkpoint size: {payload.CHECKPOINT_DIFFERS}.",
    ]
    return "\n".join(lines) + "\n"


_REPEATS = (
    "(a run of blocks holding the same arrays is one row: times blocks, each holding `each` parameters; "
    "--all-rows shows every block)"
)


def _reading(value: Fraction) -> str:
    """`` (2.01 GiB)`` beside an exact byte figure past a KiB."""
    return f" ({units.binary_bytes(int(value))})" if value >= 1024 else ""


def _hparam_text(name: str, resolved: dict[str, Any]) -> str:
    """``name=value``; a head width of 0 (each head d_model / num_heads wide, as the modules build
    it) is shown as the width it comes to, so a file that says 64 reads 64."""
    value = resolved[name]
    if name == "head_dim" and value == 0 and resolved.get("num_heads"):
        return f"head_dim={resolved['d_model'] // resolved['num_heads']} (d_model / num_heads)"
    return f"{name}={presets.value_text(value)}"


def _percent(value: float) -> str:
    return f"{value:.2f}%"


def _model_lines(config: ModelConfig, report: ParamReport) -> list[str]:
    from dcsim.model import breakdown

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
    resolved = resolved_hparams(config)
    shown = schemas.applicable(family, resolved)  # what changes this model's count, as the page's form shows
    hparams = ", ".join(_hparam_text(name, resolved) for name in shown)
    groups = breakdown.breakdown_frame(report)
    groups["percent_of_total"] = groups["percent_of_total"].map(_percent)
    if config.origin is not None:
        named = [f"model: {config.origin.title} ({family}: {schemas.FAMILY_DESCRIPTIONS[family]})"]
    else:
        row = presets.get_preset(config.preset)
        changed = ", ".join(name for name, _ in config.overrides) or "none"
        named = [
            f"model: preset {row.name} ({row.title}; {family}: {schemas.FAMILY_DESCRIPTIONS[family]})",
            f"changed from the preset: {changed}",
        ]
    said = presets.provenance(config, report.total_params)
    return [
        *named,
        f"hyperparameters: {hparams}",
        *([said] if said else []),
        f"non-embedding parameters: {units.count(breakdown.non_embedding_params(config, report))}"
        " (total less token, position and token-type tables and an untied output projection, as Pythia reports)",
        *_active_lines(config, report),
        f"(batch size {config.batch_size:,} and seed {config.seed} change no count)",
        "",
        frame_text(groups),
    ]


def _active_lines(config: ModelConfig, report: ParamReport) -> list[str]:
    """For a Mixture-of-Experts model: what one token uses, and what that means."""
    from dcsim.model import breakdown

    active = breakdown.active_params(config, report)
    if active is None:
        return []
    return [
        f"active parameters per token: {units.count(active)} of {units.count(report.total_params)}",
        "  " + (breakdown.ACTIVE_DEFINITION),
    ]


def render_optimizer_table(states: tuple[optimizer.OptimizerState, ...], total_params: int) -> str:
    """Optimizer state for people: values and raw bytes per optimizer, apart from the parameters."""
    from dcsim.model import optimizer

    lines = [f"{optimizer.STATE_NOTE}:"]
    for state in states:
        by_dtype = (
            " + ".join(f"{dtype} {units.bytes_exact(size)}" for dtype, size in state.raw_bytes_by_dtype.items())
            or "0 bytes"
        )
        per_param = state.num_values / total_params if total_params else 0.0
        lines.append(
            f"  {state.optimizer:<9} {units.count(state.num_values):>18} values ({per_param:.4g} per parameter)"
            f"  raw {by_dtype}  - {state.description}"
        )
    return "\n".join(lines) + "\n"


def render_weights(table: Any, num_shards: int) -> str:
    """A weight format's bytes for people: the payload, the share a shard, bits a weight, and
    each group's bytes, with what the format left unquantized."""
    from dcsim.model import breakdown
    from dcsim.quant.tables import group_bytes

    fmt = table.format
    share = table.bytes_per_shard(num_shards)
    lines = [
        f"weights in {fmt.label}: {units.bytes_exact(table.payload_bytes)} of tensor data"
        f"  ({float(table.bits_per_weight):.3f} bits a weight, from the exact bytes; the file adds its header)",
        f"  a shard's share      {units.share(share)} bytes{_reading(share)}"
        "  (total / shards: an average, not a layout)",
        f"  quantized            {units.count(table.quantized_params)} of {units.count(table.total_params)} parameters",
        "",
    ]
    rows = group_bytes(table, breakdown.group_of)
    columns: dict[str, list[Any]] = {
        "group": [row[0] for row in rows],
        "num_arrays": [row[1] for row in rows],
        "num_params": [row[2] for row in rows],
        f"bytes ({fmt.name})": [row[3] for row in rows],
    }
    lines += [rows_text(columns, {"num_arrays", "num_params", f"bytes ({fmt.name})"}), ""]
    lines += [f"Note: {note.rstrip('.')}." for note in table.notes]
    lines.append("(every array's tensors, shapes, dtypes and bytes: --format json, key weights_arrays)")
    return "\n".join(lines) + "\n"


def run_count(args: argparse.Namespace) -> str:
    if args.weights is not None and args.dtype is not None:
        raise UsageError(
            "give --weights or --dtype, not both: --dtype keeps its raw meaning (values x bytes, int8 is 1 byte a "
            "value and no scales), --weights is a storage format with its scales (int8 is qwix's, per channel)"
        )
    fmt = format_from_args(args)
    config = config_from_args(args)  # every flag checked before JAX is imported
    from dcsim.model.count import count_params

    report = count_params(config)
    table = None
    if fmt is not None:
        from dcsim.quant import layouts

        table = layouts.weight_table(config, report, fmt)
    states: tuple[optimizer.OptimizerState, ...] = ()
    if args.optimizer is not None:
        from dcsim.model import optimizer

        names = optimizer.OPTIMIZER_NAMES if args.optimizer == "all" else (args.optimizer,)
        states = optimizer.optimizer_states(config, names)
    if args.format == "json":
        from dcsim.report import records

        record = records.count_record(config, report)
        if states:
            record["optimizer_state"] = [optimizer.state_record(state, report.total_params) for state in states]
            record["optimizer_state_note"] = optimizer.STATE_NOTE
        if table is not None:
            from dcsim.quant.tables import weights_record

            record.update(weights_record(table, config.num_shards))
        return json.dumps(record, indent=2) + "\n"
    if args.format == "csv":
        from dcsim.report import tables

        buffer = io.StringIO()
        tables.arrays_frame(report).to_csv(buffer, index=False)
        return buffer.getvalue()
    text = render_count_table(config, report, all_rows=args.all_rows)
    if table is not None:
        text += "\n" + render_weights(table, config.num_shards)
    return text + ("\n" + render_optimizer_table(states, report.total_params) if states else "")


def run_presets(args: argparse.Namespace) -> str:
    rows = presets.reference_table()
    if args.format == "json":
        for row in rows:
            row["hparams"] = {
                name: list(value) if isinstance(value, tuple) else value
                for name, value in presets.PRESETS[row["name"]].hparams.items()
            }
        return json.dumps(rows, indent=2) + "\n"
    columns = {
        name: [row[name] for row in rows] for name in ("name", "family", "reference_params", "source_kind", "title")
    }
    return (
        rows_text(columns, {"reference_params"})
        + "\n\nEach reference count is reproduced exactly by `count --preset NAME`; sources: --format json.\n"
    )


def add_parser(commands: argparse._SubParsersAction) -> None:
    """``count`` and ``presets``."""
    count = add_command(commands, "count", run_count)
    format_flag(count, ("table", "json", "csv"))
    count.add_argument(
        "--all-rows",
        action="store_true",
        help="in the table, every top-level module a row (default: a run of identical blocks is one row with "
        "its multiplicity)",
    )
    weight_flags(count, None, write=False)
    count.add_argument(
        "--optimizer",
        choices=(*OPTIMIZER_CHOICES, "all"),
        help="add the state this optax optimizer allocates (apart from the parameters; json key optimizer_state)",
    )
    listing = add_command(commands, "presets", run_presets, model=False)
    format_flag(listing)
