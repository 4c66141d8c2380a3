"""Charts of scenarios side by side (the Compare page): totals and ideal shares as grouped bars,
the ideal share across shard counts, and the fullest device against a budget.

Built from ``dcsim.compare``'s frames; the axes they share are in ``dcsim.report.chart_axes``.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from dcsim.quantities import units
from dcsim.report.chart_axes import BYTE_LABELS, SHARE_LABELS, as_layer, decades, log_baseline, log_log

COMPARE_MEASURES = ("Total parameters", "Ideal share per shard")


def compare_bars(table: pd.DataFrame) -> alt.Chart:
    """Each scenario's total and its ideal share per shard as grouped bars, in table order.

    ``table`` is ``dcsim.compare.tables.comparison_frame``. The two figures differ by the shard count
    (up to a million), so the axis is logarithmic and every bar starts at an explicit baseline (a
    power of ten below the smallest figure), never at 0, which a log axis cannot draw.
    """
    data = pd.DataFrame(
        {
            "number": [*table["number"], *table["number"]],
            "scenario": [*table["name"], *table["name"]],
            "measure": [COMPARE_MEASURES[0]] * len(table) + [COMPARE_MEASURES[1]] * len(table),
            "values": [*(float(value) for value in table["total_params"]), *table["ideal_share"]],
            "exact": [*table["total_params"].map(units.count), *table["ideal_share_text"]],
            "shards": [*table["num_shards"].map(units.count), *table["num_shards"].map(units.count)],
        }
    )
    figures = list(data["values"]) or [1.0]
    baseline, ticks = log_baseline(min(figures), max(figures))
    return (
        alt.Chart(
            data,
            title=alt.Title("Total and ideal share per shard (values, log)", subtitle="One group per scenario"),
        )
        .mark_bar()
        .encode(
            x=alt.X(
                "scenario:N", sort=list(table["name"]), title="Scenario", axis=alt.Axis(labelAngle=0, labelLimit=160)
            ),
            xOffset=alt.XOffset("measure:N", sort=list(COMPARE_MEASURES)),
            y=alt.Y(
                "values:Q",
                scale=alt.Scale(type="log", domain=[baseline, ticks[-1]]),
                axis=alt.Axis(title="Values (log)", labelExpr=SHARE_LABELS, values=ticks),
            ),
            y2=alt.Y2(datum=baseline),
            color=alt.Color(
                "measure:N",
                title=None,
                sort=list(COMPARE_MEASURES),
                scale=alt.Scale(domain=list(COMPARE_MEASURES), range=["#4c78a8", "#f58518"]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                alt.Tooltip("scenario:N", title="Scenario"),
                alt.Tooltip("measure:N", title="Figure"),
                alt.Tooltip("exact:N", title="Values (exact)"),
                alt.Tooltip("shards:N", title="Shards"),
            ],
        )
        .properties(
            height=300,
            description="Grouped bar chart of each scenario's total parameters and ideal share per shard, "
            "on a logarithmic axis.",
        )
    )


def compare_sweep(sweep: pd.DataFrame, table: pd.DataFrame) -> alt.LayerChart:
    """The ideal share of every scenario across shard counts, one line each, log-log; each
    scenario's own shard count marked.

    ``sweep`` is ``dcsim.compare.tables.sweep_frame``; ``table`` (``comparison_frame``) gives the order
    and the marked points.
    """
    order = list(table["name"])
    figures = list(sweep["ideal_share"]) or [1.0]
    tooltip = [
        alt.Tooltip("name:N", title="Scenario"),
        alt.Tooltip("num_shards:Q", title="Shards", format=","),
        alt.Tooltip("ideal_share_text:N", title="Ideal share (exact)"),
    ]
    base = alt.Chart(sweep).encode(
        **log_log(
            "num_shards:Q", "Number of shards (log)", "ideal_share:Q", "Ideal share per shard (values, log)", figures
        ),
        color=alt.Color("name:N", title="Scenario", sort=order, legend=alt.Legend(orient="bottom", columns=2)),
        tooltip=tooltip,
    )
    own = table[["name", "num_shards", "ideal_share", "ideal_share_text"]]
    marked = (
        alt.Chart(own)
        .mark_point(size=150, filled=True, shape="diamond")
        .encode(
            x="num_shards:Q",
            y="ideal_share:Q",
            color=alt.Color("name:N", sort=order, legend=None),
            tooltip=tooltip,
        )
    )
    return as_layer(
        alt.layer(base.mark_line(), marked).properties(
            height=300,
            # Fit the width only: fitting the height too squeezed the plot under a two-row legend.
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            title=alt.Title(
                "Ideal share per shard across shard counts",
                subtitle="Total / shards, log-log; diamond: each scenario's own",
            ),
            description="Line chart of each scenario's ideal share per shard as the number of shards doubles from 1 "
            "to 4,096, one line per scenario, on log-log axes.",
        )
    )


def budget_sweep(held: pd.DataFrame, budget: float, unit: str) -> alt.LayerChart:
    """What the fullest device holds under the real layout at the device counts a team would buy,
    one colour a scenario, with the budget as a dashed rule.

    ``held`` is ``dcsim.compare.tables.held_frame``: the counts worth showing (powers of two, three times a
    power of two, each answer and ideal share's count), not all 4,096 searched, whose counts that
    nobody buys drew a forest of spikes. A line joins the powers of two (the trend); every count is
    a point, a circle where it fits the budget and a cross where it does not, the answer larger.
    Counts where the layout is impossible have no point; the page says so in words.
    """
    placed = held.dropna(subset=["held"])
    figures = [*placed["held"], float(budget)]
    order = list(dict.fromkeys(held["name"]))
    tooltip = [
        alt.Tooltip("name:N", title="Scenario"),
        alt.Tooltip("mesh:N", title="Mesh"),
        alt.Tooltip("held_text:N", title=f"Fullest device ({unit}, exact)"),
        alt.Tooltip("verdict:N", title="Against the budget"),
        alt.Tooltip("note:N", title="Shown as"),
    ]
    most = int(held["devices"].max()) if len(held) else 1
    x = alt.X(
        "devices:Q",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(
            title="Devices N (mesh of N, log)",
            values=[2**power for power in range(most.bit_length())],
            format=",",
            labelOverlap="greedy",
        ),
    )
    y = alt.Y(
        "held:Q",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(
            title=f"Fullest device ({unit}, log)",
            labelExpr=BYTE_LABELS if unit == "bytes" else SHARE_LABELS,
            values=decades(min(figures), max(figures)),
        ),
    )
    color = alt.Color("name:N", title="Scenario", sort=order, legend=alt.Legend(orient="bottom", columns=2))
    trend = (
        alt.Chart(placed[placed["on_trend"]])
        .mark_line(strokeWidth=1.5, opacity=0.6)
        .encode(x=x, y=y, color=color, tooltip=tooltip)
    )
    points = (
        alt.Chart(placed)
        .mark_point(filled=True, opacity=1)
        .encode(
            x=x,
            y=y,
            color=color,
            shape=alt.Shape(
                "verdict:N",
                title=None,
                scale=alt.Scale(domain=["Fits the budget", "Over the budget"], range=["circle", "cross"]),
                legend=None,  # said in the subtitle: a second legend beside the scenarios ran off a phone
            ),
            size=alt.condition(alt.datum.is_answer, alt.value(180), alt.value(50)),
            tooltip=tooltip,
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"budget": [float(budget)], "text": [f"{int(budget):,} {unit}"]}))
        .mark_rule(strokeDash=[6, 4], strokeWidth=2, color="#d1242f")
        .encode(y="budget:Q", tooltip=[alt.Tooltip("text:N", title="Budget per device")])
    )
    return as_layer(
        alt.layer(trend, points, rule).properties(
            height=300,
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            title=alt.Title(
                "Fullest device against the budget (log-log)",
                subtitle=[
                    "Counts a team buys: 1, 2, 3, 4, 6, 8, 12, 16, 24 …",
                    "Dot: fits; cross: over the budget; large: the fewest that fit",
                    "Red dashed: the budget",
                ],
            ),
            description="What the fullest device holds under JAX's real layout at the device counts a team would buy "
            "(powers of two and three times a power of two) and at each scenario's answer, one colour a scenario, "
            "circles where it fits the budget and crosses where it does not, with the budget as a dashed line.",
        )
    )


def run_days(times: pd.DataFrame) -> alt.LayerChart:
    """Each timed scenario's run in days (estimates): a point at the estimate and a bar over its band,
    from full overlap to none, one row a scenario in table order.

    ``times`` is ``dcsim.compare.runs.time_frame``; scenarios without days (no device, step or tokens) are
    left out of the chart, and the table beside it says why. Days are linear from 0: a band is read as
    a length.
    """
    timed = times[times["days"].notna()]
    data = pd.DataFrame(
        {
            "scenario": list(timed["name"]),
            "days": [float(value) for value in timed["days"]],
            "days_low": [float(value) for value in timed["days_low"]],
            "days_high": [float(value) for value in timed["days_high"]],
            "days_text": list(timed["days_text"]),
            "cost_text": list(timed["cost_text"]),
        }
    )
    base = alt.Chart(
        data,
        title=alt.Title(
            "Run's days (estimates)", subtitle="Point: the estimate; bar: full overlap to no overlap of the step"
        ),
    )
    y = alt.Y("scenario:N", sort=list(timed["name"]), title="Scenario", axis=alt.Axis(labelLimit=160))
    tooltip = [
        alt.Tooltip("scenario:N", title="Scenario"),
        alt.Tooltip("days_text:N", title="Days (band)"),
        alt.Tooltip("cost_text:N", title="Cost (band)"),
    ]
    band = base.mark_bar(height=10, opacity=0.35, color="#4c78a8").encode(
        x=alt.X("days_low:Q", title="Days (estimate)", scale=alt.Scale(zero=True)),
        x2=alt.X2("days_high:Q"),
        y=y,
        tooltip=tooltip,
    )
    point = base.mark_point(filled=True, size=80, color="#e45756").encode(x="days:Q", y=y, tooltip=tooltip)
    return as_layer(alt.layer(band, point))
