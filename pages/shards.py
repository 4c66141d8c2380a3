"""Shards page: the ideal share, exactly, and how it falls as the shard count doubles."""

import streamlit as st

from dcsim.quantities import payload, units
from dcsim.report import model_charts, tables
from dcsim.sharding import shares
from dcsim.ui import cache, frame, model, router, widgets

router.require_router()

config, _counted = model.heading("Ideal share per shard")
shards_col, dtype_col = st.columns(2)
with shards_col:
    num_shards = widgets.number(
        "Number of checkpoint shards",
        "num_shards",
        config,
        page="shards",
        help="The same setting as on the Model page; a change here changes the configuration.",
    )
with dtype_col:
    dtype = widgets.dtype_choice(config, page="shards")
config, error = widgets.apply(config, num_shards=num_shards, dtype=dtype)
if error:
    st.error(frame.plain(f"{error}. Showing the last valid configuration."), icon=":material/error:")

report = cache.count(config)
share = shares.ideal_share(report.total_params, config.num_shards)
per_shard = payload.bytes_per_shard(report.total_params, config.num_shards, config.dtype)

total_col, share_col, bytes_col = st.columns(3)
total_col.metric("Total parameters", units.count(report.total_params))
share_col.metric(
    f"Ideal share per shard ({config.num_shards:,} shards)",
    units.share_short(share.exact),
    help=f"Exactly {units.share(share.exact)} values: total / shards.",
)
bytes_col.metric(
    f"Bytes per shard ({config.dtype})",
    units.bytes_share(per_shard),
    help=f"Exactly {units.share(per_shard)} bytes: total x {payload.bytes_per_value(config.dtype)} bytes / shards.",
)
bytes_col.caption("An average, not a layout; **not the checkpoint size**.")
if not share.is_whole:
    st.caption(
        f"{units.count(report.total_params)} values do not divide evenly over {config.num_shards:,} shards: "
        f"the exact share is {share.fraction}, and the fullest shard of the most even split of a flat vector "
        f"would hold {units.count(share.values_at_most)} values."
    )

st.subheader("Across shard counts")
sweep = tables.share_sweep_frame(report.total_params, config.num_shards, dtype=config.dtype)
chart_col, table_col = st.columns([3, 2])
with chart_col:
    st.altair_chart(model_charts.share_sweep(sweep, config.num_shards), width="stretch")
with table_col:
    st.dataframe(
        widgets.text_counts(
            sweep.drop(columns=["ideal_share", "ideal_share_fraction", "dtype"]), "num_shards", "values_at_most"
        ),
        hide_index=True,
        column_config={
            "num_shards": st.column_config.TextColumn("Shards"),
            "ideal_share_text": st.column_config.TextColumn("Ideal share (exact)", help="total / shards"),
            "values_at_most": st.column_config.TextColumn(
                "Fullest shard (values)", help="The share rounded up: no shard holds a fraction of a value."
            ),
            "bytes_per_shard_text": st.column_config.TextColumn(
                f"Bytes per shard ({config.dtype})", help="The ideal share's raw bytes: an average, not a layout."
            ),
        },
    )
    widgets.download("Download the sweep (CSV)", sweep, "dcsim-shards.csv")

st.subheader("Why an average is not a layout")
st.markdown(
    """
The ideal share is **total / shards**: what each shard would hold if the values could be poured
evenly into them. Real checkpoints are not poured; they are cut from arrays.

- **Arrays split along their axes, not as one flat list.** A 4 x 4 kernel over 3 devices cannot be
  cut evenly along either axis, so a real layout either leaves it whole on every device or refuses.
- **Some arrays are replicated.** Biases and norms are often kept whole on every device: each device
  then holds more than the average, and the sum over devices exceeds the total.
- **Files are not shards.** A checkpoint writes each replicated array once, and its file layout
  follows the storage format, not one file per device.

So the share answers "how much on average?", never "what does device 3 hold?".
"""
)
frame.page_link(
    "pages/layout.py", label="See what each device really holds on the Layout page", icon=":material/view_module:"
)
