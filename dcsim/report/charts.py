"""Altair charts, built by pure functions from the tables in ``dcsim.report.tables``.

Each builder takes a DataFrame and returns an ``alt.Chart`` (tested on ``chart.to_dict()``); pages
only render them, with Streamlit's theme. Every chart has a title with its unit, tooltips with
the exact figure, and a description that screen readers announce.

On log scales bars would start at 0, which a log axis cannot draw: bars there get an explicit
baseline at 1 (``y2``/``x2`` datum) and points or lines need none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd

from dcsim.report import units

# Counts on axes read 1.2B, not 1.2G (d3's SI prefix for 10**9 is G).
COUNT_LABELS = "replace(format(datum.value, '~s'), 'G', 'B')"
BYTE_LABELS = "format(datum.value, '~s') + 'B'"
# Shares fall below 1 value on many shards: small numbers as decimals, never 500m (milli).
SHARE_LABELS = f"datum.value >= 1000 ? {COUNT_LABELS} : format(datum.value, '~g')"


def _as_layer(chart: alt.LayerChart | alt.FacetChart) -> alt.LayerChart:
    """A layered chart after ``.properties(...)``, typed as the ``LayerChart`` it is (Altair's
    annotations allow a ``FacetChart`` there)."""
    if not isinstance(chart, alt.LayerChart):
        raise TypeError(f"expected a layered chart, got {type(chart).__name__}")
    return chart


def decades(low: float, high: float) -> list[float]:
    """The powers of ten from just below ``low`` to just above ``high``: a log axis's ticks
    (Vega-Lite's own pick, thinned for overlap, shows odd labels like 70k next to 600k)."""
    first = math.floor(math.log10(low))
    last = math.ceil(math.log10(high))
    return [10.0**power for power in range(first, last + 1)]


def log_log(x: str, x_title: str, y: str, y_title: str, figures: Sequence[float]) -> dict[str, Any]:
    """The encodings of a log-log sweep: ``x`` (a count, log base 2) against ``y`` (values, log
    base 10, a tick each decade of ``figures`` and labelled as counts): ``encode(**log_log(...))``."""
    return {
        "x": alt.X(x, scale=alt.Scale(type="log", base=2), axis=alt.Axis(title=x_title)),
        "y": alt.Y(
            y,
            scale=alt.Scale(type="log"),
            axis=alt.Axis(title=y_title, labelExpr=SHARE_LABELS, values=decades(min(figures), max(figures))),
        ),
    }


def _count_axis(title: str) -> alt.Axis:
    return alt.Axis(title=title, labelExpr=COUNT_LABELS)


def params_by_layer(layers: pd.DataFrame, title: str = "Parameters per layer") -> alt.Chart:
    """Parameters per layer (or module), one horizontal bar each, in model order.

    ``layers`` has ``path``, ``num_params`` and ``percent_of_total`` (``tables.layers_frame``,
    ``breakdown.depth_frame``).
    """
    return _count_bars(
        layers,
        key="path",
        key_title="Layer",
        title=alt.Title(title, subtitle="Values per module (count)"),
        description="Bar chart of the number of parameters in each layer, in model order.",
    )


def params_by_group(groups: pd.DataFrame) -> alt.Chart:
    """Parameters by group (embeddings, blocks, norms, head), from ``breakdown.breakdown_frame``."""
    return _count_bars(
        groups,
        key="group",
        key_title="Group",
        title=alt.Title("Parameters by group", subtitle="Values (count)"),
        description="Bar chart of the parameters in each group: embeddings, blocks, norms and head.",
    )


def _count_bars(frame: pd.DataFrame, *, key: str, key_title: str, title: alt.Title, description: str) -> alt.Chart:
    """Horizontal bars of ``num_params`` per ``key`` in the frame's order, from zero, with the
    exact count and the share of the total in the tooltip."""
    data = frame.assign(params_text=frame["num_params"].map("{:,}".format))
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            y=alt.Y(f"{key}:N", sort=list(data[key]), title=key_title),
            x=alt.X("num_params:Q", axis=_count_axis("Parameters (values)"), scale=alt.Scale(zero=True)),
            tooltip=[
                alt.Tooltip(f"{key}:N", title=key_title),
                alt.Tooltip("params_text:N", title="Parameters"),
                alt.Tooltip("percent_of_total:Q", title="Share of total (%)", format=".2f"),
            ],
        )
        .properties(description=description)
    )


def share_sweep(sweep: pd.DataFrame, num_shards: int) -> alt.LayerChart:
    """The ideal share across shard counts on log-log axes, the chosen count marked.

    ``sweep`` has ``num_shards``, ``ideal_share`` (float, for position) and ``ideal_share_text``
    (exact, for the tooltip), as ``tables.share_sweep_frame`` builds it.
    """
    base = alt.Chart(sweep).encode(
        **log_log(
            "num_shards:Q",
            "Number of shards (log)",
            "ideal_share:Q",
            "Ideal share per shard (values, log)",
            [sweep["ideal_share"].min(), sweep["ideal_share"].max()],
        ),
        tooltip=[
            alt.Tooltip("num_shards:Q", title="Shards", format=","),
            alt.Tooltip("ideal_share_text:N", title="Ideal share (exact)"),
        ],
    )
    chosen = sweep[sweep["num_shards"] == num_shards]
    marked = (
        alt.Chart(chosen)
        .mark_point(size=160, filled=True, color="#d1242f")
        .encode(x="num_shards:Q", y="ideal_share:Q", tooltip=base.encoding.tooltip)
    )
    return _as_layer(
        alt.layer(base.mark_line(), base.mark_point(filled=True), marked).properties(
            title=alt.Title("Ideal share per shard", subtitle=f"Total / shards, log-log; red: {num_shards:,} shards"),
            description="Line chart of the ideal share per shard falling as the number of shards doubles.",
        )
    )


def raw_bytes_by_dtype(payloads: pd.DataFrame) -> alt.Chart:
    """The raw payload in each dtype: values x bytes per value, NOT the checkpoint size.

    ``payloads`` has ``dtype`` and ``raw_bytes`` (``tables.payload_frame``) plus ``raw_bytes_text``.
    """
    return (
        alt.Chart(
            payloads,
            title=alt.Title(
                "Raw payload by dtype (bytes)", subtitle="Values x bytes per value; not the checkpoint size"
            ),
        )
        .mark_bar()
        .encode(
            y=alt.Y("dtype:N", sort=list(payloads["dtype"]), title="Storage dtype"),
            x=alt.X("raw_bytes:Q", axis=alt.Axis(title="Raw payload (bytes)", labelExpr=BYTE_LABELS)),
            tooltip=[
                alt.Tooltip("dtype:N", title="Dtype"),
                alt.Tooltip("raw_bytes_text:N", title="Raw payload"),
            ],
        )
        .properties(description="Bar chart of the raw payload in bytes for each storage dtype; not a checkpoint size.")
    )


def raw_bytes_by_layer(layer_bytes: pd.DataFrame) -> alt.Chart:
    """Raw float32 bytes per layer, in model order (``tables.layer_bytes_frame``)."""
    return (
        alt.Chart(
            layer_bytes,
            title=alt.Title(
                "Raw float32 payload per layer (bytes)", subtitle="4 bytes a value; not the checkpoint size"
            ),
        )
        .mark_bar()
        .encode(
            y=alt.Y("path:N", sort=list(layer_bytes["path"]), title="Layer"),
            x=alt.X("float32:Q", axis=alt.Axis(title="Raw float32 payload (bytes)", labelExpr=BYTE_LABELS)),
            tooltip=[alt.Tooltip("path:N", title="Layer"), alt.Tooltip("float32_text:N", title="Raw float32")],
        )
        .properties(description="Bar chart of each layer's raw float32 payload in bytes; not a checkpoint size.")
    )


# The checkpoint page's bars: the two estimates, then what the disk holds.
CHECKPOINT_BARS = ("raw_float32_bytes", "raw_payload_bytes", "disk_bytes")


def checkpoint_sizes(sizes: pd.DataFrame, dtype: str) -> alt.Chart:
    """A real checkpoint's bytes on disk beside the raw estimates it is compared with.

    ``sizes`` is ``dcsim.checkpoint.sizes_frame`` (``figure``, ``num_bytes``); ``dtype`` is the
    storage dtype the payload was saved in. Bars on a linear scale from zero, so lengths compare;
    tooltips carry the exact byte count.
    """
    names = {
        "raw_float32_bytes": "Raw float32 (estimate)",
        "raw_payload_bytes": f"Raw payload, {dtype} (estimate)",
        "disk_bytes": "On disk (measured)",
    }
    data = sizes[sizes["figure"].isin(CHECKPOINT_BARS)].copy()
    data["label"] = data["figure"].map(names)
    data["kind"] = ["measured" if figure == "disk_bytes" else "estimate" for figure in data["figure"]]
    data["num_bytes_text"] = data["num_bytes"].map(units.bytes_exact)
    data = data.set_index("figure").loc[list(CHECKPOINT_BARS)].reset_index()
    return (
        alt.Chart(
            data[["figure", "label", "kind", "num_bytes", "num_bytes_text"]],
            title=alt.Title("Checkpoint size against the raw estimate (bytes)", subtitle="Measured on disk by Orbax"),
        )
        .mark_bar()
        .encode(
            y=alt.Y("label:N", sort=list(data["label"]), title=None, axis=alt.Axis(labelLimit=0)),
            x=alt.X("num_bytes:Q", scale=alt.Scale(zero=True), axis=alt.Axis(title="Bytes", labelExpr=BYTE_LABELS)),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=["estimate", "measured"], range=["#9ca3af", "#1f77b4"]),
                legend=None,  # the labels say which bars are estimates
            ),
            tooltip=[
                alt.Tooltip("label:N", title="Figure"),
                alt.Tooltip("num_bytes_text:N", title="Bytes (exact)"),
            ],
        )
        .properties(
            description=(
                "Bar chart comparing the raw float32 estimate, the raw payload in the storage dtype and "
                "the bytes the checkpoint wrote to disk."
            )
        )
    )


def _log_baseline(low: float, high: float) -> tuple[float, list[float]]:
    """A log axis's ticks and the power of ten below ``low`` where bars start."""
    ticks = decades(low, high)
    if ticks[0] >= low:  # a bar starting exactly at its value would be invisible
        ticks.insert(0, ticks[0] / 10)
    return ticks[0], ticks


def layout_vs_ideal(strategies: pd.DataFrame, chosen: str) -> alt.LayerChart:
    """Values per device of each strategy on one mesh as bars, the ideal share as a rule.

    ``strategies`` has ``strategy``, ``values_per_device`` (missing where the strategy cannot lay
    the model out), ``values_text``, ``ideal_share`` and ``ideal_share_text``
    (``dcsim.ui.layout.strategy_frame``). Replicated layouts can hold thousands of times
    the ideal share, so the axis is logarithmic and every bar starts at an explicit baseline (a
    power of ten below the smallest figure), never at 0, which a log axis cannot draw.
    """
    placed = strategies.dropna(subset=["values_per_device"]).assign(
        values_per_device=lambda frame: frame["values_per_device"].astype(float),
        chosen=lambda frame: frame["strategy"] == chosen,
    )
    ideal = float(strategies["ideal_share"].iloc[0])
    figures = [ideal, *placed["values_per_device"]]
    baseline, ticks = _log_baseline(min(figures), max(figures))
    x_axis = alt.Axis(title="Values per device (log)", labelExpr=SHARE_LABELS, values=ticks)
    bars = (
        alt.Chart(placed)
        .mark_bar()
        .encode(
            y=alt.Y("strategy:N", sort=list(strategies["strategy"]), title="Strategy"),
            x=alt.X("values_per_device:Q", scale=alt.Scale(type="log", domain=[baseline, ticks[-1]]), axis=x_axis),
            x2=alt.X2(datum=baseline),
            color=alt.condition(alt.datum.chosen, alt.value("#d1242f"), alt.value("#4c78a8")),
            tooltip=[
                alt.Tooltip("strategy:N", title="Strategy"),
                alt.Tooltip("values_text:N", title="Values per device (exact)"),
                alt.Tooltip("ideal_share_text:N", title="Ideal share (exact)"),
            ],
        )
    )
    rule = (
        alt.Chart(strategies.head(1))
        .mark_rule(strokeDash=[6, 4], strokeWidth=2, color="#333333")
        .encode(
            x="ideal_share:Q",
            tooltip=[alt.Tooltip("ideal_share_text:N", title="Ideal share (exact): total / devices")],
        )
    )
    return _as_layer(
        alt.layer(bars, rule).properties(
            height=alt.Step(36),
            title=alt.Title(
                "Values per device by strategy (values, log)",
                subtitle=[f"This mesh; red: {chosen}", "Dashed: the ideal share (total / devices)"],
            ),
            description="Bar chart of the values each device holds under each layout strategy on this mesh, "
            "on a log axis, with a dashed line at the ideal share.",
        )
    )


# The sweep's dashed series (``dcsim.ui.layout.sweep_frame``).
IDEAL_SERIES = "Ideal share"
# Ideal share dark grey (dashed), then one colour a strategy; red is kept for the marked layout.
_SERIES_COLOURS = ["#444444", "#4c78a8", "#f58518", "#54a24b", "#b279a2"]


def layout_sweep(
    sweep: pd.DataFrame, num_devices: int | None = None, values_per_device: int | None = None
) -> alt.LayerChart:
    """Values per device against the number of devices, one line per strategy and a dashed one
    for the ideal share, on log-log axes; the current layout marked when given.

    ``sweep`` has ``devices``, ``series``, ``values_per_device`` (float, for position) and
    ``values_text`` (exact, for the tooltip) (``dcsim.ui.layout.sweep_frame``).
    """
    data = sweep.assign(ideal=sweep["series"] == IDEAL_SERIES)
    series = dict.fromkeys(data["series"])
    figures = [*data["values_per_device"], *([] if values_per_device is None else [float(values_per_device)])]
    tooltip = [
        alt.Tooltip("series:N", title="Layout"),
        alt.Tooltip("devices:Q", title="Devices", format=","),
        alt.Tooltip("values_text:N", title="Values per device (exact)"),
    ]
    base = alt.Chart(data).encode(
        **log_log("devices:Q", "Number of devices (log)", "values_per_device:Q", "Values per device (log)", figures),
        color=alt.Color(
            "series:N",
            title="Layout",
            sort=list(series),
            scale=alt.Scale(domain=list(series), range=_SERIES_COLOURS[: len(series)]),
            legend=alt.Legend(orient="bottom", columns=2),
        ),
        strokeDash=alt.StrokeDash(
            "ideal:N", legend=None, scale=alt.Scale(domain=[False, True], range=[[1, 0], [6, 4]])
        ),
        tooltip=tooltip,
    )
    layers = [base.mark_line(), base.mark_point(filled=True, size=30)]
    # One short line each: Vega-Lite cuts a subtitle wider than the chart with an ellipsis.
    subtitle = ["Meshes data=N (tensor: model=N)", "Dashed: the ideal share"]
    if num_devices is not None and values_per_device is not None:
        current = pd.DataFrame(
            {
                "devices": [num_devices],
                "values_per_device": [float(values_per_device)],
                "values_text": [f"{values_per_device:,}"],
                "series": ["this layout"],
            }
        )
        layers.append(
            alt.Chart(current)
            .mark_point(size=180, filled=True, color="#d1242f", shape="diamond")
            .encode(x="devices:Q", y="values_per_device:Q", tooltip=tooltip)
        )
        subtitle[1] += "; red: this layout"
    return _as_layer(
        alt.layer(*layers).properties(
            height=260,
            # Fit the width only: fitting the height too (Streamlit's default) squeezed the plot under the
            # two-row legend until the title was cut off at the top.
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            title=alt.Title("Values per device by device count (log-log)", subtitle=subtitle),
            description="Line chart of the values each device holds under each strategy as the number of devices "
            "doubles from 1 to 4,096, beside the ideal share, on log-log axes.",
        )
    )


# --- Compare page -------------------------------------------------------------------------------

COMPARE_MEASURES = ("Total parameters", "Ideal share per shard")


def compare_bars(table: pd.DataFrame) -> alt.Chart:
    """Each scenario's total and its ideal share per shard as grouped bars, in table order.

    ``table`` is ``dcsim.compare.comparison_frame``. The two figures differ by the shard count
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
    baseline, ticks = _log_baseline(min(figures), max(figures))
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

    ``sweep`` is ``dcsim.compare.sweep_frame``; ``table`` (``comparison_frame``) gives the order
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
    return _as_layer(
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

    ``held`` is ``dcsim.compare.held_frame``: the counts worth showing (powers of two, three times a
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
    return _as_layer(
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


# --- checkpoints across processes: figures against the number of processes -----------------------


def save_time_by_processes(sweep: pd.DataFrame) -> alt.LayerChart:
    """The group's save and restore wall time against the number of processes.

    ``sweep`` is ``dcsim.checkpoint.multiprocess.sweep_frame`` (``num_processes``, ``save_seconds``,
    ``restore_seconds``). The processes are categories on the x axis (1, 2, 4 are not a scale a
    reader should interpolate along); seconds from zero, so a flat line reads as no speed-up.
    """
    names = {"save_seconds": "Save", "restore_seconds": "Restore"}
    data = sweep.melt(
        id_vars=["num_processes"], value_vars=list(names), var_name="figure", value_name="seconds"
    ).assign(
        figure=lambda frame: frame["figure"].map(names),
        seconds_text=lambda frame: frame["seconds"].map("{:.3f} s".format),
    )
    base = alt.Chart(data).encode(
        x=alt.X("num_processes:O", title="Processes", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("seconds:Q", title="Wall time of the group (s)", scale=alt.Scale(zero=True)),
        color=alt.Color(
            "figure:N",
            title=None,
            sort=list(names.values()),
            scale=alt.Scale(domain=list(names.values()), range=["#1f77b4", "#9ca3af"]),
            legend=alt.Legend(orient="bottom"),
        ),
        tooltip=[
            alt.Tooltip("num_processes:O", title="Processes"),
            alt.Tooltip("figure:N", title="Figure"),
            alt.Tooltip("seconds_text:N", title="Wall time"),
        ],
    )
    return _as_layer(
        alt.layer(base.mark_line(), base.mark_point(filled=True, size=60)).properties(
            title=alt.Title(
                "Save time against processes (s)", subtitle="From the first process starting to the last finishing"
            ),
            description="Line chart of the group's save and restore wall time in seconds for each number of processes.",
        )
    )


def _per_process_bars(
    frame: pd.DataFrame, *, field: str, title: alt.Title, axis_title: str, description: str
) -> alt.Chart:
    """One bar per process, grouped by the run's number of processes, from zero, exact in tooltips."""
    data = frame.assign(
        process_name=frame["process"].map("Process {}".format),
        value_text=frame[field].map(units.bytes_exact),
    )
    names = [f"Process {n}" for n in sorted(frame["process"].unique())]
    return (
        alt.Chart(data[["num_processes", "process", "process_name", field, "value_text"]], title=title)
        .mark_bar()
        .encode(
            x=alt.X("num_processes:O", title="Processes", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("process_name:N", sort=names),
            y=alt.Y(f"{field}:Q", scale=alt.Scale(zero=True), axis=alt.Axis(title=axis_title, labelExpr=BYTE_LABELS)),
            color=alt.Color(
                "process_name:N",
                title=None,
                sort=names,
                scale=alt.Scale(scheme="tableau10"),
                legend=alt.Legend(orient="bottom", columns=2),
            ),
            tooltip=[
                alt.Tooltip("num_processes:O", title="Processes"),
                alt.Tooltip("process_name:N", title="Process"),
                alt.Tooltip("value_text:N", title=axis_title),
            ],
        )
        .properties(description=description)
    )


def bytes_per_process(per_process: pd.DataFrame) -> alt.Chart:
    """Bytes each process wrote, grouped by the number of processes
    (``dcsim.checkpoint.multiprocess.sweep_processes_frame``)."""
    return _per_process_bars(
        per_process,
        field="num_bytes",
        title=alt.Title("Bytes written per process", subtitle="Files each process wrote (bytes)"),
        axis_title="Bytes written",
        description="Grouped bar chart of the bytes each process wrote, for each number of processes.",
    )


def memory_per_process(per_process: pd.DataFrame) -> alt.Chart:
    """Each process's peak resident memory, grouped by the number of processes."""
    return _per_process_bars(
        per_process,
        field="peak_rss_bytes",
        title=alt.Title("Peak memory per process", subtitle="Resident memory, VmHWM (bytes)"),
        axis_title="Peak memory",
        description="Grouped bar chart of each process's peak resident memory, for each number of processes.",
    )
