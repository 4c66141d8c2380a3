"""Charts of a checkpoint plan (``dcsim.checkpoint.plan``): the bytes each host writes, with the
hosts that write nothing drawn, the save time from 1 to N hosts with the point where it flattens,
and the expected goodput against the interval with Daly's marked. Pure builders over the plan's
frames; every time is labelled an estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from dcsim.quantities import units
from dcsim.report.chart_axes import BYTE_LABELS, as_layer

if TYPE_CHECKING:
    from dcsim.checkpoint.plan.plan import CheckpointPlan

WRITES = "writes"
IDLE = "writes nothing"


def hosts_frame(plan: CheckpointPlan) -> pd.DataFrame:
    """A row a host: its bytes written (exact, and as text), its files and whether it writes."""
    return pd.DataFrame(
        {
            "host": range(len(plan.host_bytes)),
            "bytes_written": list(plan.host_bytes),
            "bytes_text": [units.bytes_exact(size) for size in plan.host_bytes],
            "files": list(plan.files),
            "status": [WRITES if size else IDLE for size in plan.host_bytes],
        }
    )


def host_bytes(plan: CheckpointPlan) -> alt.LayerChart:
    """Bars of each host's bytes from zero, and a tick at zero for each host that writes nothing, so
    a host without a bar is seen, not missed."""
    data = hosts_frame(plan)
    title = alt.Title(
        f"Bytes each host writes ({plan.policy})",
        subtitle=f"{plan.save.writing_hosts:,} of {len(data):,} hosts write; ticks mark the hosts that write nothing",
    )
    base = alt.Chart(data)
    tooltip = [
        alt.Tooltip("host:O", title="Host"),
        alt.Tooltip("bytes_text:N", title="Bytes (exact)"),
        alt.Tooltip("files:Q", title="Files (at least)"),
        alt.Tooltip("status:N", title="Status"),
    ]
    color = alt.Color("status:N", scale=alt.Scale(domain=[WRITES, IDLE], range=["#1f77b4", "#d62728"]), title=None)
    bars = base.mark_bar().encode(
        x=alt.X("host:O", title="Host", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("bytes_written:Q", scale=alt.Scale(zero=True), axis=alt.Axis(title="Bytes", labelExpr=BYTE_LABELS)),
        color=color,
        tooltip=tooltip,
    )
    ticks = (
        base.transform_filter(alt.datum.status == IDLE)
        .mark_tick(thickness=3, orient="horizontal")
        .encode(x="host:O", y="bytes_written:Q", color=color, tooltip=tooltip)
    )
    return as_layer(alt.layer(bars, ticks)).properties(
        title=title,
        description="Bar chart of the bytes each host writes; hosts that write nothing are marked by a tick at zero.",
    )


def curve_frame(plan: CheckpointPlan) -> pd.DataFrame:
    flat = plan.flat.hosts
    return pd.DataFrame(
        {
            "hosts": [point.hosts for point in plan.curve],
            "seconds": [point.seconds for point in plan.curve],
            "writing_hosts": [point.writing_hosts for point in plan.curve],
            "limit": [point.limit for point in plan.curve],
            "flat": [point.hosts == flat for point in plan.curve],
        }
    )


def speedup(plan: CheckpointPlan) -> alt.LayerChart:
    """The save time (an estimate) for the same layout on 1 to N hosts, from zero, the point where
    it flattens drawn larger and named in the subtitle."""
    data = curve_frame(plan)
    title = alt.Title(
        "Save time against hosts (estimate)",
        subtitle=f"Flattens at {units.many(plan.flat.hosts, 'host')}: {plan.curve[-1].limit}",
    )
    base = alt.Chart(data).encode(
        x=alt.X("hosts:O", title="Hosts"),
        y=alt.Y("seconds:Q", scale=alt.Scale(zero=True), title="Save time, s (estimate)"),
        tooltip=[
            alt.Tooltip("hosts:O", title="Hosts"),
            alt.Tooltip("seconds:Q", title="Seconds (estimate)", format=".3g"),
            alt.Tooltip("writing_hosts:Q", title="Hosts that write"),
            alt.Tooltip("limit:N", title="Limited by"),
        ],
    )
    line = base.mark_line(point=True)
    flat = base.transform_filter(alt.datum.flat).mark_point(size=200, filled=True, color="#d62728")
    return as_layer(alt.layer(line, flat)).properties(
        title=title, description="Line chart of the estimated save time for 1 to N hosts."
    )


def goodput_frame(plan: CheckpointPlan) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "interval_seconds": [tau for tau, _ in plan.interval.curve],
            "goodput": [value for _, value in plan.interval.curve],
        }
    )


def goodput(plan: CheckpointPlan) -> alt.LayerChart:
    """Daly's expected goodput against the interval (log scale), his optimum as a rule."""
    data = goodput_frame(plan)
    title = alt.Title(
        "Expected goodput against the interval (estimate)",
        subtitle=f"Daly's interval {plan.daly_text}: goodput {plan.interval.goodput_at_optimum:.4%}",
    )
    line = (
        alt.Chart(data)
        .mark_line()
        .encode(
            x=alt.X("interval_seconds:Q", scale=alt.Scale(type="log"), title="Interval between saves, s"),
            y=alt.Y("goodput:Q", title="Goodput (useful fraction of wall time)", axis=alt.Axis(format="%")),
            tooltip=[
                alt.Tooltip("interval_seconds:Q", title="Interval, s", format=".3g"),
                alt.Tooltip("goodput:Q", title="Goodput", format=".4%"),
            ],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"interval_seconds": [plan.interval.daly]}))
        .mark_rule(color="#d62728", strokeDash=[4, 4])
        .encode(x="interval_seconds:Q")
    )
    return as_layer(alt.layer(line, rule)).properties(
        title=title, description="Line chart of expected goodput against the save interval."
    )
