"""Bytes page: the raw payload of the parameters, per dtype and per layer, never called the
checkpoint size."""

import streamlit as st

from dcsim.inputs import show
from dcsim.memory import training as trainings
from dcsim.model import breakdown, optimizer
from dcsim.quantities import payload, units
from dcsim.report import model_charts, tables
from dcsim.ui import cache, frame, model, router, state, widgets

router.require_router()

NOT_CHECKPOINT = "Raw estimate: values x bytes per value. **Not the checkpoint size.**"

config, _counted = model.heading("Raw payload bytes")
dtype_col, _ = st.columns(2)
with dtype_col:
    dtype = widgets.dtype_choice(config, page="bytes")
config, error = widgets.apply(config, dtype=dtype)
if error:
    st.error(frame.plain(f"{error}. Showing the last valid configuration."), icon=":material/error:")
report = cache.count(config)
raw = payload.raw_bytes(report.total_params, config.dtype)
raw_float32 = payload.raw_bytes(report.total_params, "float32")

total_col, bytes_col, decimal_col = st.columns(3)
total_col.metric("Total parameters", units.count(report.total_params))
bytes_col.metric(
    f"Raw {config.dtype} payload",
    units.bytes_exact(raw),
    help=f"{payload.bytes_per_value(config.dtype)} bytes a value, binary units (MiB).",
)
decimal_col.metric(f"Raw {config.dtype} payload, decimal units", units.decimal_bytes(raw), help="1 MB = 10^6 bytes.")
if config.dtype != "float32":
    st.caption(f"Raw float32 payload (4 bytes a value, Flax's default dtype): {units.bytes_exact(raw_float32)}.")
st.caption(
    f"Raw {config.dtype} estimate ({payload.bytes_per_value(config.dtype)} bytes a value), **not the checkpoint "
    f"size**: {payload.CHECKPOINT_DIFFERS}."
)

st.subheader("By storage dtype")
dtypes = tables.payload_frame(report.total_params)
dtypes["raw_bytes_text"] = dtypes["raw_bytes"].map(units.bytes_exact)
dtypes["exact"] = dtypes["raw_bytes"].map(units.count)
dtypes["binary"] = dtypes["raw_bytes"].map(units.binary_bytes)
dtypes["decimal"] = dtypes["raw_bytes"].map(units.decimal_bytes)
table_col, chart_col = st.columns([3, 2])
with table_col:
    st.dataframe(
        dtypes.drop(columns=["raw_bytes", "raw_bytes_text"]),
        hide_index=True,
        column_config={
            "dtype": "Dtype",
            "bytes_per_value": "Bytes a value",
            "exact": st.column_config.TextColumn("Raw payload (bytes)"),
            "binary": st.column_config.TextColumn("Binary units"),
            "decimal": st.column_config.TextColumn("Decimal units"),
        },
    )
    st.caption(NOT_CHECKPOINT)
with chart_col:
    st.altair_chart(model_charts.raw_bytes_by_dtype(dtypes), width="stretch")

if config.preset:
    st.subheader("By module")
    st.caption("Rolled up to the model's top-level modules (embeddings, each block, norms, head).")
    layer_bytes = tables.bytes_frame(breakdown.depth_frame(report, 1))
else:
    st.subheader("By layer")
    layer_bytes = tables.layer_bytes_frame(report)
table_col, chart_col = st.columns([3, 2])
with table_col:
    st.dataframe(
        widgets.text_counts(layer_bytes.drop(columns=["float32_text"]), *payload.RAW_DTYPES),
        hide_index=True,
        column_config={
            "path": "Layer",
            **{dtype: st.column_config.TextColumn(f"Raw {dtype} (bytes)") for dtype in payload.RAW_DTYPES},
        },
    )
    st.caption(NOT_CHECKPOINT)
    widgets.download("Download bytes per layer (CSV)", layer_bytes.drop(columns=["float32_text"]), "dcsim-bytes.csv")
with chart_col:
    if len(layer_bytes) <= 120:
        st.altair_chart(model_charts.raw_bytes_by_layer(layer_bytes, config.dtype), width="stretch")

st.subheader("Optimizer state a training checkpoint may hold")
st.caption(
    "Initialised for real with optax on the abstract parameters (jax.eval_shape): exact counts, no memory spent. "
    "Held beside the parameters, **not part of the parameter total**; raw bytes, not the checkpoint size."
)
chosen_text, problem = state.page_setting("opt", "adamw")
if problem:
    st.warning(frame.plain(problem))
listed = chosen_text.split(",")
seed_names = list(dict.fromkeys(name for name in listed if name in optimizer.OPTIMIZER_NAMES))
ignored = [show(name) for name in listed if name not in optimizer.OPTIMIZER_NAMES]
if len(listed) > len(seed_names) + len(ignored):
    ignored.append("repeated names")
if ignored:
    more = f" and {len(ignored) - 5:,} more" if len(ignored) > 5 else ""
    st.warning(
        frame.plain(
            f"Link: `opt`: ignoring {', '.join(ignored[:5])}{more} (known: {', '.join(optimizer.OPTIMIZER_NAMES)}); "
            f"using {', '.join(seed_names or ['adamw'])}."
        )
    )
chosen = state.held(st.multiselect)(
    "Optimizers",
    optimizer.OPTIMIZER_NAMES,
    key=state.seed_widget("opt", seed_names or ["adamw"]),
    format_func=lambda name: optimizer.OPTIMIZERS[name][0],
)
state.set_page_params({"opt": ",".join(chosen)} if chosen else {})
if chosen:
    states = [cache.optimizer_state(config, name) for name in chosen]
    states_table = optimizer.states_frame(states, report.total_params)
    optimizer_table = states_table.assign(
        per_parameter=[
            units.share_short(per) + (f" + {units.many(scalars, 'scalar')}" if scalars else "")
            for per, scalars in zip(states_table["values_per_param"], states_table["num_scalars"], strict=True)
        ],
        raw_bytes=states_table["raw_bytes"].map(units.bytes_exact),
        with_float32_params=states_table["raw_bytes_with_float32_params"].map(units.bytes_exact),
        with_recipe=[
            units.bytes_exact(trainings.recipe_checkpoint_bytes(report.total_params, int(state_bytes)))
            for state_bytes in states_table["raw_bytes"]
        ],
    ).drop(columns=["values_per_param", "num_scalars", "raw_bytes_with_float32_params"])
    st.dataframe(
        widgets.text_counts(optimizer_table, "num_values"),
        hide_index=True,
        column_config={
            "optimizer": "Optimizer",
            "num_values": st.column_config.TextColumn("State values"),
            "per_parameter": st.column_config.TextColumn(
                "Per parameter value", help="State values per parameter value, plus scalars such as a step count"
            ),
            "raw_bytes": st.column_config.TextColumn("Raw state bytes"),
            "with_float32_params": st.column_config.TextColumn("With the float32 parameters"),
            "with_recipe": st.column_config.TextColumn(
                "With the usual mixed-precision recipe",
                help=f"The Memory page's recipe ({trainings.RECIPE_TEXT}): bfloat16 parameters, their float32 "
                "master copy and this state.",
            ),
        },
    )
    st.caption(NOT_CHECKPOINT)

st.subheader("What a real checkpoint adds or removes")
st.markdown(
    """
- **Metadata** (adds): the tree structure, each array's shape, dtype and sharding, and the storage
  format's own index (Orbax's OCDBT manifest and per-process folders).
- **Optimizer state** (adds): a training checkpoint often keeps the optimizer's state too; Adam
  keeps two more values for every parameter, tripling the payload.
- **Compression** (removes): Orbax's default storage compresses chunks (zstd); freshly initialised
  random values compress little, trained or zero-filled ones may compress more.
- **Storage dtype** (either way): saving in bfloat16 halves the float32 figure; float64 doubles it.
- **Replicas** (neither): an array held whole on every device is written once, not once per device.
"""
)
frame.page_link("pages/checkpoint.py", label="Measure a real Orbax checkpoint of this model", icon=":material/save:")
