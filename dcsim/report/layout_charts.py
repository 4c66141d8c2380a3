"""Charts of per-device layouts (the Layout page): each strategy's values per device on one mesh
against the ideal share, and values per device across device counts.

Built from ``dcsim.ui.layout``'s frames (``strategy_frame``, ``sweep_frame``); the axes they share
are in ``dcsim.report.chart_axes``.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from dcsim.report.chart_axes import SHARE_LABELS, as_layer, log_baseline, log_log


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
    baseline, ticks = log_baseline(min(figures), max(figures))
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
    return as_layer(
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
    return as_layer(
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
