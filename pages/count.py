"""Landing page: a Dense stack's exact parameter count, ideal share per shard and raw payload."""

import streamlit as st

from dcsim import payload, shares, tables, units
from dcsim.config import FIELD_LIMITS, ModelConfig, parse_widths
from dcsim.ui import cache

st.header("How big is this model, and what does it come to per shard?")
st.caption(
    "Counts come from initialising the real Flax `nn.Dense` modules abstractly (`jax.eval_shape`): "
    "exact integers, no memory spent on values."
)

left, right = st.columns(2)
with left:
    input_dim = st.number_input(
        "Input dimension D", min_value=1, max_value=FIELD_LIMITS["input_dim"][1], value=4, step=1
    )
    widths = st.text_input("Dense layer widths, in order (comma-separated)", value="4")
    use_bias = st.checkbox("Bias in every layer", value=True)
with right:
    num_shards = st.number_input(
        "Number of checkpoint shards", min_value=1, max_value=FIELD_LIMITS["num_shards"][1], value=2, step=1
    )
    batch_size = st.number_input(
        "Batch size B (never changes a count)", min_value=1, max_value=FIELD_LIMITS["batch_size"][1], value=1, step=1
    )
    seed = st.number_input(
        "Seed (changes values, not counts)", min_value=0, max_value=FIELD_LIMITS["seed"][1], value=0, step=1
    )

try:
    config = ModelConfig(
        input_dim=input_dim,
        layers=parse_widths(widths, "layer widths", use_bias=use_bias),
        batch_size=batch_size,
        seed=seed,
        num_shards=num_shards,
    )
except (TypeError, ValueError) as err:
    st.error(str(err))
    st.stop()

report = cache.count(config)
share = shares.ideal_share(report.total_params, config.num_shards)
raw_float32 = payload.raw_bytes(report.total_params, "float32")

total_col, share_col, bytes_col = st.columns(3)
total_col.metric("Total parameters", units.count(report.total_params))
share_col.metric(
    f"Ideal share per shard ({config.num_shards:,} shards)",
    units.share(share.exact),
    help="total / shards: an average, not a layout. No shard holds a fraction of a value.",
)
bytes_col.metric("Raw float32 payload", units.bytes_exact(raw_float32))
bytes_col.caption("Raw float32 estimate (4 bytes a value), **not the checkpoint size**.")

st.subheader("Parameters per layer")
st.dataframe(
    tables.layers_frame(report),
    hide_index=True,
    column_config={
        "path": "Layer",
        "num_arrays": "Arrays",
        "num_params": "Parameters",
        "percent_of_total": st.column_config.NumberColumn("Share of total", format="%.2f%%"),
    },
)
st.subheader("Parameter arrays")
st.dataframe(
    tables.arrays_frame(report),
    hide_index=True,
    column_config={
        "path": "Array",
        "module": "Layer",
        "kind": "Kind",
        "shape": "Shape",
        "dtype": "Dtype",
        "num_params": "Parameters",
    },
)
