"""Charts of training memory per device (the Memory page): what one device holds, part by part,
under each ZeRO stage against a budget, and the total per device as the mesh grows.

Built from ``dcsim.ui.memory_view.stage_frame`` and from the budget search's answer
(``sweep_frame``). Positions are in GiB (2**30 bytes, said on the axis) so the axis reads in the
unit people budget in; every tooltip carries the exact byte count.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import altair as alt
import pandas as pd

from dcsim.quantities import units
from dcsim.report.chart_axes import as_layer, chart_data, decades, one_two_five
from dcsim.report.memory_tables import PART_TITLES as PART_TITLES
from dcsim.sharding.meshes import MeshSpec

if TYPE_CHECKING:  # the report layer draws what the memory layer answers; it never calls it
    from dcsim.memory.search import Fit

GIB = 2**30
# One colour a part, the same in every chart (``charts.toml``); red is kept for the budget and the
# chosen setup.
PART_COLOURS: dict[str, str] = chart_data("memory_parts")
BUDGET_COLOUR = "#d1242f"
# GiB as people read them: 0.5, 16, 1.2k (never 500m); the axis title says GiB.
GIB_LABELS = "datum.value >= 1000 ? format(datum.value, '.3~s') : format(datum.value, '~g')"
# The sweep's series (``dcsim.ui.memory.sweep_frame``).
REAL_SERIES = "Real layout"
IDEAL_SERIES = "Ideal share"


def stage_bars(stages: pd.DataFrame, budget_bytes: int, budget_text: str) -> alt.LayerChart:
    """One horizontal bar a setup (each ZeRO stage, and the parts named freely when chosen), stacked
    by part, against a dashed budget line; the chosen setup's label marked with an arrow.

    ``stages`` has ``setup`` (the bar's label), ``part``, ``part_title``, ``gib`` (position),
    ``bytes_text`` (exact), ``total_gib``, ``total_text`` and ``chosen``
    (``dcsim.ui.memory_view.stage_frame``). The axis is linear, so bars compare as bytes do.
    """
    order = list(dict.fromkeys(stages["setup"]))
    parts = [part for part in PART_COLOURS if part in set(stages["part"])]
    budget = budget_bytes / GIB
    right = max([budget, *stages["total_gib"]]) * 1.22  # room for the totals written after the bars
    y = alt.Y("setup:N", sort=order, title=None, axis=alt.Axis(labelLimit=260, labelFontWeight="bold"))
    bars = (
        alt.Chart(stages)
        .mark_bar()
        .encode(
            y=y,
            x=alt.X(
                "sum(gib):Q",
                title="GiB per device (1 GiB = 2^30 bytes)",
                scale=alt.Scale(domain=[0, right], nice=False),
                axis=alt.Axis(labelExpr=GIB_LABELS, tickCount=8),
            ),
            color=alt.Color(
                "part_title:N",
                title="Part",
                sort=[PART_TITLES[part] for part in parts],
                scale=alt.Scale(
                    domain=[PART_TITLES[part] for part in parts], range=[PART_COLOURS[part] for part in parts]
                ),
                legend=alt.Legend(orient="top", labelLimit=200),
            ),
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("setup:N", title="Setup"),
                alt.Tooltip("part_title:N", title="Part"),
                alt.Tooltip("bytes_text:N", title="Bytes per device (exact)"),
                alt.Tooltip("total_text:N", title="Total per device (exact)"),
            ],
        )
    )
    totals = stages.drop_duplicates("setup")
    labels = (
        alt.Chart(totals)
        .mark_text(align="left", dx=4, fontSize=12)
        .encode(y=y, x=alt.X("total_gib:Q"), text=alt.Text("total_short:N"), tooltip=[alt.Tooltip("total_text:N")])
    )
    rule_data = pd.DataFrame({"gib": [budget], "label": [f"Budget {budget_text}"]})
    rule = (
        alt.Chart(rule_data)
        .mark_rule(strokeDash=[6, 4], strokeWidth=2, color=BUDGET_COLOUR)
        .encode(x="gib:Q", tooltip=[alt.Tooltip("label:N", title="Budget per device")])
    )
    chosen = totals[totals["chosen"]]["setup"].tolist()
    subtitle = [f"Stacked by part; red dashes: the budget, {budget_text} a device"]
    if chosen:
        subtitle.append(f"Chosen: {chosen[0]}")
    return as_layer(
        alt.layer(bars, labels, rule).properties(
            height=alt.Step(34),
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            title=alt.Title("What one device holds, by ZeRO stage", subtitle=subtitle),
            description="Horizontal bar chart: the bytes one device holds under each ZeRO stage, stacked by part "
            "(parameters, gradients, master copy, optimizer state), with a dashed line at the budget per device.",
        )
    )


def sweep_frame(answer: Fit, mesh: MeshSpec) -> pd.DataFrame:
    """Per device on every mesh searched: devices, mesh, series (real layout or ideal share), gib,
    bytes_text (exact) and current (the page's mesh), for ``device_sweep``."""
    records = []
    for candidate in answer.candidates:
        devices = candidate.mesh.num_devices
        common = {"devices": devices, "mesh": candidate.mesh.text, "current": candidate.mesh == mesh}
        ideal = Fraction(answer.total_bytes, devices)
        records.append(
            {
                **common,
                "series": IDEAL_SERIES,
                "gib": float(ideal / GIB),
                "bytes_text": units.bytes_share(ideal),
            }
        )
        if candidate.total_bytes_per_device is not None:
            held = candidate.total_bytes_per_device
            records.append(
                {
                    **common,
                    "series": REAL_SERIES,
                    "gib": held / GIB,
                    "bytes_text": units.bytes_exact(held),
                }
            )
    return pd.DataFrame(records, columns=["devices", "mesh", "current", "series", "gib", "bytes_text"])


MAX_LOG_TICKS = 8  # a tiny model against an 80 GiB budget spans 13 decades: label every other one or so


def sparse_decades(low: float, high: float) -> list[float]:
    """``decades(low, high)``, thinned to at most ``MAX_LOG_TICKS`` evenly spaced powers of ten."""
    ticks = decades(low, high)
    step = -(-len(ticks) // MAX_LOG_TICKS)
    return ticks[::step]


def device_sweep(sweep: pd.DataFrame, budget_bytes: int, budget_text: str, num_devices: int) -> alt.LayerChart:
    """The most-loaded device's total and the ideal share against the device count (log-log), with
    the budget as a dashed line and the current mesh marked.

    ``sweep`` has ``devices``, ``mesh``, ``series``, ``gib`` (position), ``bytes_text`` (exact)
    and ``current`` (``sweep_frame``); meshes the layout refuses have no real point.
    """
    budget = budget_bytes / GIB
    figures = [budget, *sweep["gib"]]
    series = [REAL_SERIES, IDEAL_SERIES]
    tooltip = [
        alt.Tooltip("series:N", title="Series"),
        alt.Tooltip("mesh:N", title="Mesh"),
        alt.Tooltip("devices:Q", title="Devices", format=","),
        alt.Tooltip("bytes_text:N", title="Bytes per device (exact)"),
    ]
    x = alt.X(
        "devices:Q",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(title="Devices (log)", labelExpr="format(datum.value, ',')"),
    )
    y = alt.Y(
        "gib:Q",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(title="GiB per device (log)", labelExpr=GIB_LABELS, values=decades(min(figures), max(figures))),
    )
    base = alt.Chart(sweep).encode(
        x=x,
        y=y,
        color=alt.Color(
            "series:N",
            title=None,
            sort=series,
            scale=alt.Scale(domain=series, range=["#4c78a8", "#444444"]),
            legend=alt.Legend(orient="top"),
        ),
        strokeDash=alt.StrokeDash(
            "series:N", legend=None, sort=series, scale=alt.Scale(domain=series, range=[[1, 0], [6, 4]])
        ),
        tooltip=tooltip,
    )
    layers = [base.mark_line(), base.mark_point(filled=True, size=30)]
    rule = (
        alt.Chart(pd.DataFrame({"gib": [budget], "label": [f"Budget {budget_text}"]}))
        .mark_rule(strokeDash=[6, 4], strokeWidth=2, color=BUDGET_COLOUR)
        .encode(y="gib:Q", tooltip=[alt.Tooltip("label:N", title="Budget per device")])
    )
    layers.append(rule)
    current = sweep[sweep["current"] & (sweep["series"] == REAL_SERIES)]
    if len(current):
        layers.append(
            alt.Chart(current)
            .mark_point(size=180, filled=True, color=BUDGET_COLOUR, shape="diamond")
            .encode(x="devices:Q", y="gib:Q", tooltip=tooltip)
        )
    return as_layer(
        alt.layer(*layers).properties(
            height=280,
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            title=alt.Title(
                "Per device as the mesh grows (log-log)",
                subtitle=[
                    f"Red dashes: the budget, {budget_text}",
                    f"Red diamond: this mesh ({units.many(num_devices, 'device')})",
                ],
            ),
            description="Line chart of the bytes the most-loaded device holds as the mesh's first axis doubles, "
            "beside the ideal share (total state / devices), on log-log axes, with a dashed line at the budget.",
        )
    )


def policy_lines(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` (``sequence``, ``policy``, ``bytes``) with the policies that keep the same bytes at
    every sequence joined into one line (``dots = dots-no-batch = minimal``): one mark a policy that
    can be told apart, never a line hidden under another."""
    series: dict[tuple[tuple[int, int], ...], list[str]] = {}
    for policy in dict.fromkeys(points["policy"]):
        rows = points[points["policy"] == policy]
        key = tuple(sorted(zip(rows["sequence"], rows["bytes"], strict=True)))
        series.setdefault(key, []).append(policy)
    names = {policy: " = ".join(group) for group in series.values() for policy in group}
    first = {group[0] for group in series.values()}
    kept = points[points["policy"].isin(first)]
    return kept.assign(policy=kept["policy"].map(names))


def activations_by_sequence(points: pd.DataFrame, state_bytes: int = 0, budget_bytes: int | None = None) -> Any:
    """What a device holds (the state and the step's activations) against the sequence length, one
    line a remat policy that can be told apart, against the budget.

    ``points`` has ``sequence``, ``policy`` and ``bytes`` (the activations, exact)
    (``dcsim.ui.memory.sequence_frame``); ``state_bytes`` (the same at every sequence) is added. Both
    axes are logarithmic: activations linear in the sequence rise with slope 1, naive attention's
    quadratic term bends upward. Ticks: the sequences traced, and 1-2-5 GiB steps."""
    lines = policy_lines(points)
    totals = [state_bytes + int(size) for size in lines["bytes"]]
    frame = lines.assign(
        gib=[total / GIB for total in totals], total_text=[units.bytes_exact(total) for total in totals]
    )
    figures = [*frame["gib"], *([] if budget_bytes is None else [budget_bytes / GIB])]
    curves = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "sequence:Q",
                title="Sequence (tokens, log scale)",
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted({int(s) for s in frame["sequence"]}), format=","),
            ),
            y=alt.Y(
                "gib:Q",
                title="State + activations per device, GiB (2^30 bytes, log scale)",
                scale=alt.Scale(type="log"),
                axis=alt.Axis(labelExpr=GIB_LABELS, values=one_two_five(min(figures), max(figures))),
            ),
            color=alt.Color("policy:N", title="Remat policy", legend=alt.Legend(orient="top", labelLimit=0)),
            tooltip=[
                alt.Tooltip("policy:N", title="Remat"),
                alt.Tooltip("sequence:Q", title="Sequence", format=","),
                alt.Tooltip("total_text:N", title="State + activations per device (exact)"),
            ],
        )
    )
    if budget_bytes is None:
        return curves
    budget = pd.DataFrame({"gib": [budget_bytes / GIB], "text": [f"budget {units.binary_bytes(budget_bytes)}"]})
    rule = alt.Chart(budget).mark_rule(color=BUDGET_COLOUR, strokeDash=[6, 3]).encode(y="gib:Q", tooltip="text:N")
    # The line named on the plot, not only in its tooltip: beside a red policy line it reads as the budget.
    label = (
        alt.Chart(budget)
        .mark_text(align="left", baseline="bottom", dx=4, dy=-3, color=BUDGET_COLOUR)
        .encode(y="gib:Q", x=alt.value(0), text="text:N")
    )
    return alt.layer(curves, rule, label)
