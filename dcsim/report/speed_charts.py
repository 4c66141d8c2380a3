"""Charts of time (the Memory page's step time, the Serving page's decode speed): estimates, each
drawn with its parts, from ``dcsim.speed``'s answers. Nothing here computes a time.

- ``step_time_frame`` / ``step_time_bars``: a training step four ways, a bar each: the roofline (100%
  of every peak, the physical limit), full overlap (the largest of compute, memory and
  communication), the point estimate (compute or memory, whichever is longer, plus the exposed
  communication, by ``dcsim.speed.training``'s rule) and no overlap (the three summed), each bar
  stacked by what it is made of; with pipeline stages, each bar ends with the schedule's bubble.
- ``speed_curve_frame`` / ``speed_curve_chart``: a replica's decode over its concurrency, each
  device's tokens a second against the inter-token latency, the chosen concurrency marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from dcsim.report.chart_axes import chart_data

if TYPE_CHECKING:
    from dcsim.speed.serving import CurvePoint
    from dcsim.speed.training import StepTime

# The bars' parts in stacking order, each with its colour (``charts.toml``).
TIME_COLOURS: dict[str, str] = chart_data("time_parts")
BARS = ("Roofline (100% of every peak)", "Full overlap", "Point estimate", "No overlap")
STEP_TITLE = "A training step four ways (estimate)"
CURVE_TITLE = "Throughput against latency over the concurrency (estimate)"
LINE, CHOSEN = "#4c78a8", "#d1242f"  # the curve, and the page's concurrency on it


def step_time_frame(time: StepTime) -> pd.DataFrame:
    """One row a part of each bar: ``bar``, ``part``, ``seconds``, ``order``, ``total`` (the bar's
    whole, seconds) and ``text`` (the part's seconds to three figures)."""
    compute, memory = time.compute_seconds, time.memory_seconds
    bound = ("Compute", compute) if compute >= memory else ("Memory (HBM)", memory)
    bubble = time.bubble_fraction  # each figure is its parts x (1 + bubble)
    bars: dict[str, list[tuple[str, float]]] = {
        BARS[0]: [("Roofline", time.roofline_seconds / (1 + bubble))],
        BARS[1]: [
            max(
                [("Compute", compute), ("Memory (HBM)", memory), ("Communication", time.comm_seconds)],
                key=lambda part: part[1],
            )
        ],
        BARS[2]: [bound, ("Exposed communication", time.exposed_comm_seconds)],
        BARS[3]: [("Compute", compute), ("Memory (HBM)", memory), ("Communication", time.comm_seconds)],
    }
    if bubble:
        for parts in bars.values():
            parts.append(("Pipeline bubble", bubble * sum(seconds for _, seconds in parts)))
    totals = {
        BARS[0]: time.roofline_seconds,
        BARS[1]: time.step_seconds_low,
        BARS[2]: time.step_seconds,
        BARS[3]: time.step_seconds_high,
    }
    order = list(TIME_COLOURS)
    rows = [
        {
            "bar": bar,
            "part": part,
            "seconds": seconds,
            "order": order.index(part),
            "total": totals[bar],
            "text": f"{seconds:.3g} s",
        }
        for bar, parts in bars.items()
        for part, seconds in parts
    ]
    return pd.DataFrame(rows, columns=["bar", "part", "seconds", "order", "total", "text"])


def step_time_bars(frame: pd.DataFrame) -> alt.LayerChart:
    """The four bars, each stacked by its parts in the parts' order, its whole written at its end."""
    parts = [part for part in TIME_COLOURS if part in set(frame["part"])]
    y = alt.Y("bar:N", title=None, sort=list(BARS), axis=alt.Axis(labelLimit=260))
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("sum(seconds):Q", title="seconds a step (estimate)"),
            y=y,
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=parts, range=[TIME_COLOURS[part] for part in parts]),
                legend=alt.Legend(title=None, orient="bottom"),
            ),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("bar:N", title="bar"), alt.Tooltip("part:N"), alt.Tooltip("text:N", title="seconds")],
        )
    )
    totals = frame.drop_duplicates("bar").assign(label=lambda rows: rows["total"].map(lambda s: f"{s:.3g} s"))
    labels = alt.Chart(totals).mark_text(align="left", dx=4).encode(x=alt.X("total:Q"), y=y, text=alt.Text("label:N"))
    return alt.LayerChart(layer=[bars, labels]).properties(
        title=alt.TitleParams(STEP_TITLE, anchor="start"),
        height=170,
        autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
    )


def speed_curve_frame(points: Sequence[CurvePoint], chosen: int | None = None) -> pd.DataFrame:
    """The curve's points: ``concurrency``, ``latency_ms`` (the inter-token latency),
    ``per_sequence``, ``per_device`` (tokens a second) and ``chosen`` (the page's concurrency)."""
    return pd.DataFrame(
        {
            "concurrency": [point.concurrency for point in points],
            "latency_ms": [1000 * point.inter_token_latency_seconds for point in points],
            "per_sequence": [point.tokens_per_second_per_sequence for point in points],
            "per_device": [point.tokens_per_second_per_device for point in points],
            "chosen": [point.concurrency == chosen for point in points],
        },
        columns=["concurrency", "latency_ms", "per_sequence", "per_device", "chosen"],
    )


def speed_curve_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Each device's tokens a second against the inter-token latency, a point a concurrency (points
    and a line in the concurrency's order, no bars), the chosen concurrency in red."""
    base = alt.Chart(frame).encode(
        x=alt.X("latency_ms:Q", title="inter-token latency (ms, estimate)", scale=alt.Scale(zero=False)),
        y=alt.Y("per_device:Q", title="output tokens/s a device (estimate)"),
        order=alt.Order("concurrency:Q"),
        tooltip=[
            alt.Tooltip("concurrency:Q", format=",", title="sequences at once"),
            alt.Tooltip("latency_ms:Q", format=".3g", title="ms a token"),
            alt.Tooltip("per_sequence:Q", format=",.1f", title="tokens/s a sequence"),
            alt.Tooltip("per_device:Q", format=",.0f", title="tokens/s a device"),
        ],
    )
    chosen = base.transform_filter(alt.datum.chosen).mark_point(size=140, filled=True, opacity=1, color=CHOSEN)
    line = base.mark_line(point=alt.OverlayMarkDef(color=LINE), color=LINE)
    return alt.LayerChart(layer=[line, chosen]).properties(
        title=alt.TitleParams(CURVE_TITLE, anchor="start"),
        height=260,
        autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
    )
