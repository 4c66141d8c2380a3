"""What every chart in ``dcsim.report`` shares: axis label expressions, log-scale ticks and bar
baselines, the check that a layered chart is one, and the data the charts draw (``chart_data``).

The chart builders (``model_charts``, ``layout_charts``, ``compare_charts`` and
``checkpoint_charts``) are pure functions from the tables in ``dcsim.report.tables`` and the pages'
frames; each takes a DataFrame and returns an ``alt.Chart`` (tested on ``chart.to_dict()``), and
pages only render them, with Streamlit's theme. Every chart has a title with its unit, tooltips
with the exact figure, and a description that screen readers announce.

On log scales bars would start at 0, which a log axis cannot draw: bars there get an explicit
baseline at a power of ten below the smallest figure (``y2``/``x2`` datum, ``log_baseline``) and
points or lines need none (``log_log``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import altair as alt

from dcsim import shipped

# Counts on axes read 1.2 bn, 10 M, 20 k: not 1.2G (d3's SI prefix for 10**9), and not 1.2B, which beside
# the byte axes (10GB) reads as bytes.
COUNT_LABELS = (
    "replace(replace(replace(replace(format(datum.value, '~s'), 'T', ' tn'), 'G', ' bn'), 'M', ' M'), 'k', ' k')"
)
BYTE_LABELS = "format(datum.value, '~s') + 'B'"
# Shares fall below 1 value on many shards: small numbers as decimals, never 500m (milli).
SHARE_LABELS = f"datum.value >= 1000 ? {COUNT_LABELS} : format(datum.value, '~g')"


def as_layer(chart: alt.LayerChart | alt.FacetChart) -> alt.LayerChart:
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


def one_two_five(low: float, high: float) -> list[float]:
    """Ticks a reader expects on a log axis: 1, 2, 5, 10, 20, 50 ... from the last at or below
    ``low`` to the first at or above ``high`` (Vega-Lite's own pick read 1, 5, 9, 40, 80)."""
    ticks = []
    for power in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        ticks += [mantissa * 10.0**power for mantissa in (1, 2, 5)]
    below = [tick for tick in ticks if tick <= low]
    above = [tick for tick in ticks if tick >= high]
    first, last = (below[-1] if below else ticks[0]), (above[0] if above else ticks[-1])
    return [tick for tick in ticks if first <= tick <= last]


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


def log_baseline(low: float, high: float) -> tuple[float, list[float]]:
    """A log axis's ticks and the power of ten below ``low`` where bars start."""
    ticks = decades(low, high)
    if ticks[0] >= low:  # a bar starting exactly at its value would be invisible
        ticks.insert(0, ticks[0] / 10)
    return ticks[0], ticks


_CHART_TABLES: dict[str, Any] = shipped.load(__file__, "charts.toml")


def chart_data(table: str, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """A table of ``charts.toml``: part colours, or (with ``keys``) one row of texts a chart, each
    row holding exactly ``keys``, the builder's, so a renamed or missing text fails on import."""
    rows: dict[str, Any] = dict(_CHART_TABLES[table])
    if keys is not None:
        for name, row in rows.items():
            if sorted(row) != sorted(keys):
                raise ValueError(f"charts.toml [{table}.{name}] must hold {', '.join(keys)}, got {', '.join(row)}")
    return rows
