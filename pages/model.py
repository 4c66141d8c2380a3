"""Landing page: the configuration editor and the whole answer, without a click."""

import streamlit as st

from dcsim import payload, shares, tables, units
from dcsim.ui import cache, frame, state, widgets

frame.require_router()

st.header("How big is this model, and what does it come to per shard?")
answer = st.container()

st.subheader("Configuration")
config = state.config()
left, right = st.columns(2)
with left:
    input_dim = widgets.number("Input dimension D", "input_dim", config, help="The width of each input example.")
    num_shards = widgets.number(
        "Number of checkpoint shards",
        "num_shards",
        config,
        help="The ideal share divides the total by this count: an average, not a layout.",
    )
with right:
    batch_size = widgets.number(
        "Batch size B",
        "batch_size",
        config,
        help="Every example shares the same kernels and biases: the batch size never changes a count.",
    )
    seed = widgets.number(
        "Seed",
        "seed",
        config,
        help="The PRNG seed of the initialisation (0 to 4,294,967,295): it changes values, never their number.",
    )
    st.caption("Batch size and seed change no count: they are kept so a link reproduces the exact run.")

st.markdown("**Dense layers**, in order (add rows at the bottom; select rows to delete them)")
edited = widgets.layers_editor(config)

error = None
try:
    layers = widgets.layers_from_frame(edited)
except ValueError as err:
    layers, error = config.layers, str(err)
if error is None:
    config, error = widgets.apply(
        config, input_dim=input_dim, num_shards=num_shards, batch_size=batch_size, seed=seed, layers=layers
    )
if st.button("Reset to the seed example", icon=":material/restart_alt:"):
    state.set_config(type(config)(), replace_widgets=True)
    st.rerun()

report = cache.count(config)
share = shares.ideal_share(report.total_params, config.num_shards)
raw_float32 = payload.raw_bytes(report.total_params, "float32")

with answer:
    if error:
        st.error(frame.plain(f"{error}. Showing the last valid configuration."), icon=":material/error:")
    total_col, share_col, bytes_col = st.columns(3)
    total_col.metric(
        "Total parameters",
        units.count(report.total_params),
        help="Counted by initialising the real Flax modules abstractly (jax.eval_shape): exact, no memory spent.",
    )
    share_col.metric(
        f"Ideal share per shard ({config.num_shards:,} shards)",
        units.share_short(share.exact),
        help=f"Exactly {units.share(share.exact)}: total / shards, an average, not a layout. "
        "No shard holds a fraction of a value.",
    )
    bytes_col.metric("Raw float32 payload", units.bytes_exact(raw_float32))
    bytes_col.caption("Raw float32 estimate (4 bytes a value), **not the checkpoint size**.")
    if report.other:
        st.caption(
            f"Other variables (not parameters, not in the total): {units.count(report.total_other_values)} values."
        )

st.subheader("Parameters per layer")
layers_table = tables.layers_frame(report)
table_col, chart_col = st.columns([3, 2])
with table_col:
    st.dataframe(
        widgets.text_counts(layers_table, "num_params"),
        hide_index=True,
        column_config={
            "path": "Layer",
            "num_arrays": "Arrays",
            "num_params": st.column_config.TextColumn("Parameters"),
            "percent_of_total": st.column_config.NumberColumn("Share of total", format="%.2f%%"),
        },
    )
    st.download_button(
        "Download per-layer table (CSV)",
        data=layers_table.to_csv(index=False),
        file_name="dcsim-layers.csv",
        mime="text/csv",
        icon=":material/download:",
        on_click="ignore",
    )
with chart_col:
    # Imported here, after the numbers above have gone to the browser: on a fresh server the
    # first visitor's answer then does not wait for Altair to load.
    from dcsim import charts

    st.altair_chart(charts.params_by_layer(layers_table), width="stretch")

with st.expander("Every parameter array"):
    st.dataframe(
        widgets.text_counts(tables.arrays_frame(report), "num_params"),
        hide_index=True,
        column_config={
            "path": "Array",
            "module": "Layer",
            "kind": "Kind",
            "shape": "Shape",
            "dtype": "Dtype",
            "num_params": st.column_config.TextColumn("Parameters"),
        },
    )
