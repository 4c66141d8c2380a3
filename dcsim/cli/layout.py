"""``layout``: what each device of a mesh holds, by JAX's sharding rules."""

from __future__ import annotations

import argparse
import json

from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag, frame_text
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.model.count import count_params
from dcsim.report import records, tables, units
from dcsim.sharding import layout, payload

DESCRIPTION = (
    "Lay every parameter array out on a device mesh with JAX's own sharding rules "
    "(AbstractMesh, PartitionSpec, NamedSharding.shard_shape) and compare what each device holds "
    "with the ideal share (total / devices). The mesh sets the number of devices; --shards does not apply."
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = add_command(commands, "layout", run, DESCRIPTION)
    mesh_flags(
        command,
        metavar="AXIS=SIZE[,AXIS=SIZE...]",
        required=True,
        mesh_help="named mesh axes, e.g. data=4,model=2; an axis named `expert` (e.g. data=2,expert=8) splits the "
        "stacked experts of Mixture-of-Experts blocks and is one more data axis for every other array",
        strategy_help="replicated (default), fsdp (one dimension over all axes), tensor (last dimension over "
        "`model`), megatron (Megatron-LM/vLLM tensor parallelism over `model`: heads, MLP columns and rows, the "
        "vocabulary padded to a multiple of 64, KV heads copied when fewer than the ranks), or custom (implied by "
        "--rule); with an `expert` axis, the built-in ones also split each expert array's experts (dimension 0) "
        "over it",
        rule_help="custom rule, repeatable, first match wins: glob on the array path = one entry per dimension, "
        "None, an axis or axes joined by + (e.g. '*/kernel=None,model'); unmatched arrays are replicated",
    )
    format_flag(command)


LABEL_WIDTH = 30  # the totals' labels, then one space: their figures start in one column


def render_layout_table(layout_report: layout.LayoutReport, dtype: str = "float32") -> str:
    """The ``layout`` result for people: the per-array table, then per-device totals against the
    ideal, with the raw bytes a device holds in ``dtype`` beside float32's."""
    frame = tables.layout_frame(layout_report).drop(columns=["dtype", "stored_values", "replicated_fallback"])
    share = layout_report.ideal_share
    ratio = layout_report.gap_ratio
    per_device = layout_report.values_per_device
    rules = "".join(f"\n  rule {rule.text}" for rule in layout_report.rules)
    lines = [
        f"mesh: {layout_report.mesh.text} ({units.count(layout_report.num_devices)} devices), "
        f"strategy: {layout_report.strategy}{rules}",
        "",
        frame_text(frame),
        "",
        f"total parameters               {units.count(layout_report.total_params)}",
        f"devices                        {units.count(layout_report.num_devices)}",
        f"ideal share per device         {units.share(share.exact)}  (total / devices: an average, not a layout)",
        f"values per device              {units.count(layout_report.values_per_device)}",
        f"gap to the ideal share         {units.share(layout_report.gap)}"
        + ("" if ratio is None else f"  ({float(ratio):,.4g}x the ideal share)"),
        f"raw float32 bytes per device   {units.bytes_exact(layout_report.raw_float32_bytes_per_device)}",
        *(
            # Padded to the column of the other labels: "bfloat16" is one letter longer than "float32".
            [
                f"{f'raw {dtype} bytes per device':<{LABEL_WIDTH}} "
                f"{units.bytes_exact(payload.raw_bytes(per_device, dtype))}"
            ]
            if dtype != "float32"
            else []
        ),
        f"total stored across the mesh   {units.count(layout_report.total_stored_values)}"
        "  (values per device x devices)",
    ]
    fallbacks = layout_report.num_replicated_fallbacks
    if fallbacks:
        lines.append(f"replicated by necessity        {fallbacks:,} array{'s' * (fallbacks != 1)} (see the notes)")
    experts = layout.experts_note(layout_report.mesh, layout_report.num_expert_arrays)
    lines += ["", *([f"Experts: {experts}"] if experts else []), f"Note: {layout.REPLICAS_NOT_ON_DISK}."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> str:
    if args.shards is not None:
        raise UsageError("--shards does not apply to layout: the mesh sets the number of devices (--mesh)")
    mesh, strategy, rules = mesh_from_args(args, "replicated")
    config = config_from_args(args)
    result = layout.compute_layout(count_params(config), mesh, strategy, rules)
    if args.format == "json":
        return json.dumps(records.layout_record(result), indent=2) + "\n"
    return render_layout_table(result, config.dtype)
