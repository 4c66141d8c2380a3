"""Charts of a model's size: parameters per layer and per group (the Model page), the ideal share
across shard counts (the Shards page) and the raw payload per dtype and per layer (the Bytes page).

Built from the tables in ``dcsim.report.tables`` and ``dcsim.model.breakdown``; the axes they share
are in ``dcsim.report.chart_axes``.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from dcsim.quantities import payload, units
from dcsim.report.chart_axes import BYTE_LABELS, COUNT_LABELS, as_layer, chart_data, log_log


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
    return as_layer(
        alt.layer(base.mark_line(), base.mark_point(filled=True), marked).properties(
            title=alt.Title("Ideal share per shard", subtitle=f"Total / shards, log-log; red: {num_shards:,} shards"),
            description="Line chart of the ideal share per shard falling as the number of shards doubles.",
        )
    )


# Each raw payload chart's texts and fields (``charts.toml``).
_RAW_BYTES = chart_data(
    "raw_bytes", ("title", "subtitle", "category", "category_title", "value", "value_title", "description")
)


def _raw_bytes_bars(frame: pd.DataFrame, chart: str, **fill: Any) -> alt.Chart:
    """Horizontal bars of raw bytes, one per ``category`` in the frame's order, with the exact bytes
    (the frame's ``<value>_text``) in the tooltip; ``chart`` names its texts in ``charts.toml``,
    which title it as NOT the checkpoint size; ``fill`` fills their ``{...}`` fields."""
    texts = {key: text.format(**fill) for key, text in _RAW_BYTES[chart].items()}
    name, name_title = texts["category"], texts["category_title"]
    field, axis_title = texts["value"], texts["value_title"]
    return (
        alt.Chart(frame, title=alt.Title(texts["title"], subtitle=texts["subtitle"]))
        .mark_bar()
        .encode(
            y=alt.Y(f"{name}:N", sort=list(frame[name]), title=name_title),
            x=alt.X(f"{field}:Q", axis=alt.Axis(title=axis_title, labelExpr=BYTE_LABELS)),
            tooltip=[alt.Tooltip(f"{name}:N", title=name_title), alt.Tooltip(f"{field}_text:N", title=axis_title)],
        )
        .properties(description=texts["description"])
    )


def raw_bytes_by_dtype(payloads: pd.DataFrame) -> alt.Chart:
    """The raw payload in each dtype: values x bytes per value, NOT the checkpoint size.

    ``payloads`` has ``dtype`` and ``raw_bytes`` (``tables.payload_frame``) plus ``raw_bytes_text``.
    """
    return _raw_bytes_bars(payloads, "raw_bytes_by_dtype")


def raw_bytes_by_layer(layer_bytes: pd.DataFrame, dtype: str = "float32") -> alt.Chart:
    """Raw ``dtype`` bytes per layer, in model order (``tables.layer_bytes_frame``, which has a
    column a dtype of ``payload.RAW_DTYPES``): the title follows the dtype the page shows."""
    frame = layer_bytes.assign(**{f"{dtype}_text": layer_bytes[dtype].map(units.bytes_exact)})
    return _raw_bytes_bars(
        frame, "raw_bytes_by_layer", dtype=dtype, bytes=units.many(payload.bytes_per_value(dtype), "byte")
    )
