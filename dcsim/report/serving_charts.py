"""Charts of serving memory (the Serving page): one device's bytes, part by part, against its
budget, and the capacity curve (the most sequences at each context).

Positions are in GiB (2**30 bytes, said on the axis); every tooltip carries the exact figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import pandas as pd

from dcsim.quantities import units
from dcsim.report.chart_axes import chart_data

if TYPE_CHECKING:
    from dcsim.serving.curve import Point

GIB = 2**30
# The device bar's parts in stacking order, each with its colour (``charts.toml``).
PART_COLOURS: dict[str, str] = chart_data("serving_parts")


def device_frame(parts: dict[str, int]) -> pd.DataFrame:
    """One row a part of one device: ``part``, ``bytes`` (exact int), ``gib``, ``bytes_text``."""
    return pd.DataFrame(
        {
            "part": list(parts),
            "bytes": [int(value) for value in parts.values()],
            "gib": [value / GIB for value in parts.values()],
            "bytes_text": [units.bytes_exact(value) for value in parts.values()],
        }
    )


OVER_COLOUR = "#d1242f"  # red: what passes the device, as on the Memory page's charts


def device_bar(frame: pd.DataFrame, budget_bytes: int | None = None, usable_bytes: int | None = None) -> Any:
    """One horizontal bar, stacked weights / KV / other / reserve / free, in the parts' order; with a
    budget, the device's memory as a solid line and the usable bytes (the budget less the reserve) as a
    dashed one, and what passes the device drawn as overflow: a red band from the line to the bar's end."""
    bar = _stacked_bar(frame)
    # Fit the width only: fitting the height too (Streamlit's default) left the bar no room under its
    # axis and legend, and the page showed an axis alone.
    size = {"height": 36, "autosize": alt.AutoSizeParams(type="fit-x", contains="padding")}
    if budget_bytes is None:
        return bar.properties(**size)
    lines = pd.DataFrame(
        {
            "gib": [budget_bytes / GIB, (usable_bytes if usable_bytes is not None else budget_bytes) / GIB],
            "line": ["the device's memory", "usable (less the reserve)"],
            "bytes_text": [units.bytes_exact(budget_bytes), units.bytes_exact(usable_bytes or budget_bytes)],
            "dash": [0, 4],
        }
    )
    rules = (
        alt.Chart(lines)
        .mark_rule(color="#24292f", strokeWidth=2)
        .encode(
            x="gib:Q",
            strokeDash=alt.StrokeDash("dash:N", legend=None),
            tooltip=[alt.Tooltip("line:N", title="line"), alt.Tooltip("bytes_text:N", title="bytes")],
        )
    )
    layers: list[Any] = [bar, rules]
    total = int(frame.loc[~frame["part"].isin(["Reserve", "Free"]), "bytes"].sum())
    if total > budget_bytes:
        over = pd.DataFrame(
            {
                "start": [budget_bytes / GIB],
                "end": [total / GIB],
                "bytes_text": [units.bytes_exact(total - budget_bytes)],
            }
        )
        layers.append(
            alt.Chart(over)
            .mark_bar(color=OVER_COLOUR, opacity=0.45)
            .encode(
                x="start:Q",
                x2="end:Q",
                tooltip=[alt.Tooltip("bytes_text:N", title="over the device's memory by")],
            )
        )
    return alt.layer(*layers).properties(**size)


def _stacked_bar(frame: pd.DataFrame) -> alt.Chart:
    order = [part for part in PART_COLOURS if part in set(frame["part"])]
    return (
        alt.Chart(frame.assign(order=[order.index(part) for part in frame["part"]]))
        .mark_bar()
        .encode(
            x=alt.X("sum(gib):Q", title="GiB on the most-loaded device (1 GiB = 2^30 bytes)"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=order, range=[PART_COLOURS[part] for part in order]),
                legend=alt.Legend(title=None, orient="bottom"),
            ),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("part:N", title="part"), alt.Tooltip("bytes_text:N", title="bytes")],
        )
    )


def curve_frame(points: Sequence[Point]) -> pd.DataFrame:
    """The capacity curve's points, a column each of their fields (``context``,
    ``max_concurrency``, ``chosen``)."""
    return pd.DataFrame(points, columns=["context", "max_concurrency", "chosen"])


def capacity_curve(frame: pd.DataFrame) -> alt.LayerChart:
    """Max concurrency against the context on a log axis (points and a line, no bars: a log scale
    has no zero to start a bar from), the chosen context marked in red."""
    base = alt.Chart(frame).encode(
        x=alt.X(
            "context:Q",
            title="context (tokens a sequence, log scale)",
            scale=alt.Scale(type="log", base=2),
            axis=alt.Axis(values=[int(context) for context in frame["context"]], format=","),  # the points' own
        ),
        y=alt.Y("max_concurrency:Q", title="max sequences at once"),
        tooltip=[alt.Tooltip("context:Q", format=","), alt.Tooltip("max_concurrency:Q", format=",")],
    )
    chosen = base.transform_filter(alt.datum.chosen).mark_point(size=140, filled=True, color="#d1242f")
    return alt.LayerChart(layer=[base.mark_line(point=True), chosen]).properties(
        height=260, autosize=alt.AutoSizeParams(type="fit-x", contains="padding")
    )
