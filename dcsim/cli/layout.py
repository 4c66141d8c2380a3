"""``layout``: what each device of a mesh holds, by JAX's sharding rules."""

from __future__ import annotations

import argparse
import json

from dcsim.cli.common import add_command, config_from_args, format_flag, frame_text, refuse_unused
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.model.count import count_params
from dcsim.quantities import payload, units
from dcsim.report import records, tables
from dcsim.sharding import layout


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = add_command(commands, "layout", run)
    mesh_flags(command, "layout", metavar="AXIS=SIZE[,AXIS=SIZE...]", required=True)
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
        f"mesh: {layout_report.mesh.text} ({units.many(layout_report.num_devices, 'device')}), "
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
        lines.append(f"replicated by necessity        {units.many(fallbacks, 'array')} (see the notes)")
    experts = layout.experts_note(layout_report.mesh, layout_report.num_expert_arrays)
    lines += ["", *([f"Experts: {experts}"] if experts else []), f"Note: {layout.REPLICAS_NOT_ON_DISK}."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> str:
    refuse_unused(args, "layout", ("shards",), "the mesh sets the number of devices (--mesh)")
    mesh, strategy, rules = mesh_from_args(args, "replicated")
    config = config_from_args(args)
    result = layout.compute_layout(count_params(config), mesh, strategy, rules)
    if args.format == "json":
        return json.dumps(records.layout_record(result), indent=2) + "\n"
    return render_layout_table(result, config.dtype)
