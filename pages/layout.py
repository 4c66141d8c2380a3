"""Layout page: what each device of a real mesh holds, by JAX's own sharding rules, against the
ideal share."""

import json

import streamlit as st

from dcsim.quantities import payload, units
from dcsim.report import layout_charts
from dcsim.report.records import layout_record
from dcsim.sharding import shares
from dcsim.sharding.layout import REPLICAS_NOT_ON_DISK
from dcsim.sharding.meshes import MAX_RULES
from dcsim.ui import frame, layout, model, router, state, widgets

router.require_router()


config, report = model.heading("What each device holds on a real mesh")

st.subheader("Mesh and strategy")
mesh, strategy, mesh_col, strategy_col = layout.mesh_and_strategy(
    "layout", strategy_help="How each parameter array is split over the mesh. JAX decides what divides evenly."
)
with strategy_col:
    config, _ = widgets.apply(
        config, dtype=widgets.dtype_choice(config, page="layout")
    )  # the list holds only valid ones
with mesh_col:
    axes_col, devices_col = st.columns([2, 1])
    axes_col.dataframe(
        layout.mesh_frame(mesh),
        hide_index=True,
        column_config={"axis": "Axis", "size": st.column_config.TextColumn("Size")},
    )
    devices_col.metric("Devices", units.count(mesh.num_devices), help="The product of the axis sizes.")
    experts = layout.experts_caption(report, mesh)
    if experts:
        st.caption(frame.plain(experts))

rules = layout.rules_input(
    "layout",
    strategy,
    height=120,
    help="PATTERN is a glob on the array path (`*/kernel`, `Dense_*/bias`; `*` also crosses `/`). "
    "SPEC has one entry per dimension: `None`, a mesh axis, or axes joined by `+`, e.g. "
    "`*/kernel=None,model` or `*/kernel=data+model,None`. Unmatched arrays are replicated. "
    f"At most {MAX_RULES} rules.",
)

settings = {"mesh": mesh.text, "strategy": strategy}
if strategy == "custom":
    settings["rules"] = layout.rules_text(rules)
state.set_page_params(settings)
frame.page_link(
    "pages/memory.py",
    settings,
    label="Training memory on this mesh: params, grads and optimizer state by ZeRO stage",
    icon=":material/memory:",
)
frame.page_link(
    "pages/serving.py",
    settings,
    label="Serving on this mesh: weights and the KV cache per device",
    icon=":material/dns:",
)

outcome = layout.cached_layout(config, mesh, strategy, rules)
laid = outcome.layout
share = shares.ideal_share(report.total_params, mesh.num_devices)

st.subheader("Per device against the ideal share")
if outcome.error:
    st.error(frame.plain(f"This layout is impossible: {outcome.error}"), icon=":material/error:")
    layout.offer_mesh(st, "layout", config, mesh, layout.lays_out(config, strategy, rules))
columns = st.columns(4)
columns[0].metric("Total parameters", units.count(report.total_params))
columns[1].metric(
    "Ideal share (total / devices)",
    units.share_short(share.exact),
    help=f"Exactly {units.share(share.exact)} values: an average, not a layout.",
)
if laid is not None:
    columns[2].metric(
        "Values per device",
        units.count(laid.values_per_device),
        help="What every device of the mesh holds under this layout (JAX gives every device shards of the same "
        "shapes).",
    )
    columns[3].metric(
        f"Raw {config.dtype} per device",
        units.bytes_exact(payload.raw_bytes(laid.values_per_device, config.dtype)),
        help=f"Values per device x {payload.bytes_per_value(config.dtype)} bytes ({config.dtype}, the storage dtype "
        "chosen above); not a checkpoint size.",
    )
    columns = st.columns(4)
    columns[0].metric(
        "Gap to the ideal share",
        units.share_short(laid.gap),
        help=f"Values per device - ideal share = exactly {units.share(laid.gap)}.",
    )
    columns[1].metric(
        "Ratio to the ideal share",
        f"{units.share_short(laid.gap_ratio)}x" if laid.gap_ratio is not None else "n/a",
        help=f"Exactly {units.share(laid.gap_ratio) if laid.gap_ratio is not None else 'n/a'}; 1x is ideal.",
    )
    columns[2].metric(
        "Total stored values",
        units.count(laid.total_stored_values),
        help="Values per device x devices: everything the mesh holds in memory, replicas included.",
    )
    columns[3].metric(
        "Replication factor",
        f"{units.share_short(laid.replication_factor)}x" if laid.replication_factor is not None else "n/a",
        help="Stored values / total parameters: copies of each value across the mesh, on average; 1x = none.",
    )
    st.caption(f"**{REPLICAS_NOT_ON_DISK[0].upper()}{REPLICAS_NOT_ON_DISK[1:]}.**")
    if laid.num_replicated_fallbacks:
        st.warning(frame.plain(layout.fallback_warning(laid)), icon=":material/content_copy:")
else:
    columns[2].metric("Values per device", "n/a", help="This layout is impossible: see the message above.")
    st.caption(
        "Fix the mesh, the strategy or the model; the table below flags every array that cannot be placed, "
        "and the chart shows which strategies can lay this model out on this mesh."
    )

st.subheader("Across strategies and device counts")
strategies = layout.strategy_frame(config, mesh, rules, strategy)
left, right = st.columns(2)
with left:
    st.altair_chart(layout_charts.layout_vs_ideal(strategies, strategy), width="stretch")
    refused = strategies[strategies["status"] != "ok"]
    for name, why in zip(refused["strategy"], refused["status"], strict=True):
        st.caption(frame.plain(f"The {name} strategy cannot lay this model out on this mesh: {why}"))
with right:
    sweep = layout.cached_sweep(config)
    st.altair_chart(
        layout_charts.layout_sweep(sweep, mesh.num_devices, laid.values_per_device if laid else None), width="stretch"
    )
    st.caption(
        "Replicated stays flat: every device holds everything. fsdp follows the ideal share until arrays stop "
        "dividing evenly; tensor stops where the last dimension no longer divides (missing points)."
    )

st.subheader("Every parameter array")
table = layout.array_table(report, outcome)
st.dataframe(
    layout.table_text(table),
    hide_index=True,
    # Status and its reason first, where they show without scrolling sideways on a phone.
    column_order=[
        "path",
        "status",
        "note",
        *(name for name in table.columns if name not in ("path", "status", "note")),
    ],
    column_config={
        "path": "Array",
        "shape": "Shape",
        "partition_spec": st.column_config.TextColumn("Partition spec", help="JAX's PartitionSpec; P() = whole"),
        "shard_shape": st.column_config.TextColumn("Shard shape", help="What each device holds of the array"),
        "values_per_shard": st.column_config.TextColumn("Values per shard"),
        "replication_factor": st.column_config.TextColumn(
            "Replication", help="Copies of each value across the mesh; 1 = not replicated"
        ),
        "stored_values": st.column_config.TextColumn("Stored (all devices)"),
        # Sized for its longest value: the grid sizes a column by its first rows, which cut a later
        # "✖ not laid out" to "not la…".
        "status": st.column_config.TextColumn("Status", width=layout.STATUS_COLUMN_WIDTH),
        "note": st.column_config.TextColumn("Why", width="large", help="Every flagged reason is written out below"),
    },
)
reasons = layout.flagged_reasons(table)
if len(reasons):
    lines = [f"- {frame.plain(layout.reason_text(reason, len(table)))}" for reason in reasons.itertuples()]
    if len(lines) > layout.MAX_REASONS_SHOWN:
        more = len(lines) - layout.MAX_REASONS_SHOWN
        lines = [*lines[: layout.MAX_REASONS_SHOWN], f"- {more:,} more reasons: see the Why column or the CSV below."]
    st.markdown("**Why arrays are flagged**\n" + "\n".join(lines))
st.caption(
    f"Status “{layout.FALLBACK}”: the strategy found no way to split the array (fsdp: no dimension divides evenly by "
    f"the number of devices; custom: no rule matched), so every device holds it whole. “{layout.IMPOSSIBLE}”: "
    "JAX refuses the split the strategy or a rule asks for; the Why column says which dimension and axis."
)
download_col, json_col = st.columns(2)
widgets.download("Download the per-array table (CSV)", table, "dcsim-layout.csv", where=download_col)
if laid is not None:
    widgets.download(
        "Download the layout (JSON)",
        json.dumps(layout_record(laid), indent=2),
        "dcsim-layout.json",
        where=json_col,
    )

st.subheader("How to read a layout")
st.markdown(
    """
- **Ideal share** is total / devices: what each device would hold if values could be poured evenly.
  **Values per device** is what JAX's sharding really puts on each one.
- **replicated**: every device holds everything, so values per device is the total.
- **fsdp**: each array is cut along one dimension into as many equal parts as there are devices; an array
  with no such dimension stays whole everywhere (flagged).
- **tensor**: the last dimension of each array is cut over the `model` axis and copied over every other axis.
- **megatron**: Megatron-LM's tensor parallelism as vLLM lays weights out on its tensor ranks (the `model`
  axis): query, key and value projections split by heads, gate and up by columns, attention output and MLP
  down by their inputs, the vocabulary by rows (padded to a multiple of 64, as vLLM pads it); with fewer KV
  heads than ranks each rank holds one, copied; norms, the router and position tables stay whole.
- **expert** (a mesh axis, e.g. `data=2,expert=8`): the stacked experts of each Mixture-of-Experts block
  (arrays under a module named `experts`, dimension 0 = num_experts) are cut over it by every built-in
  strategy, the rest as the strategy says; every other array treats it as one more data axis.
- **custom**: rules such as `*/kernel=None,model`: the pattern picks arrays by path, the spec says which
  mesh axes cut each dimension.
- A gap above 0 means replicas: the mesh stores more values than the model has.
"""
)
