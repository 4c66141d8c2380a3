"""Landing page: the configuration editor and the whole answer, without a click."""

import streamlit as st

from dcsim.model import breakdown, presets
from dcsim.model.config import ModelConfig
from dcsim.quant.formats import WeightFormat
from dcsim.quantities import payload, units
from dcsim.report import tables
from dcsim.sharding import shares
from dcsim.ui import cache, frame, hub, model, questions, router, state, weights, widgets

router.require_router()

FIGURE_WIDTH = 250  # pixels: a 15-digit count on one line; three to a row beside the sidebar on a laptop

if questions.landing(state.config()):
    questions.render()
st.header("How big is this model, and what does it come to per shard?")


def figure(row, label: str, value: str, *, help: str, caption: str | None = None) -> None:
    """A metric of fixed width in the answer's wrapping row, with its caption under it."""
    with row.container(width=FIGURE_WIDTH, gap="small"):
        st.metric(label, value, help=help)
        if caption:
            st.caption(caption)


def show_answer(config: ModelConfig, error: str | None = None, fmt: WeightFormat | None = None) -> None:
    """The whole answer, for ``config``; ``error`` says why the form's values were refused, and
    then ``config`` is the last valid configuration. ``fmt``: a storage format to give the bytes
    per shard in too."""
    report = cache.count(config)
    share = shares.ideal_share(report.total_params, config.num_shards)
    per_shard = payload.bytes_per_shard(report.total_params, config.num_shards, config.dtype)
    value_bytes = payload.bytes_per_value(config.dtype)
    with st.container():
        if error:
            st.error(frame.plain(f"{error}. Showing the last valid configuration."), icon=":material/error:")
        row = st.container(horizontal=True, gap="medium")
        figure(
            row,
            "Total parameters",
            units.count(report.total_params),
            help="Counted by initialising the real Flax modules abstractly (jax.eval_shape): exact, no memory spent.",
        )
        if not config.is_dense:
            figure(
                row,
                "Non-embedding parameters",
                units.count(breakdown.non_embedding_params(config, report)),
                help="The total less the token, position and token-type embedding tables and less an untied output "
                "projection over the vocabulary, as Pythia reports it (a tied output layer is the token table, "
                "subtracted once).",
            )
        active = breakdown.active_params(config, report)
        if active is not None:
            hparams = presets.resolved_hparams(config)
            figure(
                row,
                "Active per token",
                units.count(active),
                help=breakdown.ACTIVE_DEFINITION,
                caption=f"What one token uses: {hparams['experts_per_token']:,} of the {hparams['num_experts']:,} "
                "routed experts in each MoE block, everything else in full. Every expert is stored: memory, "
                "shards and checkpoints hold the total.",
            )
        figure(
            row,
            f"Ideal share per shard ({config.num_shards:,} shards)",
            units.share_short(share.exact),
            help=f"Exactly {units.share(share.exact)}: total / shards, an average, not a layout. "
            "No shard holds a fraction of a value.",
        )
        table, refusal = (None, None) if fmt is None else weights.table(config, fmt)
        if table is None:  # one bytes-per-shard figure: the weights format's when one is chosen
            figure(
                row,
                f"Bytes per shard ({config.dtype})",
                units.bytes_share(per_shard),
                help=f"Exactly {units.share(per_shard)} bytes: total x {value_bytes} bytes / {config.num_shards:,} "
                "shards.",
                caption=f"An average ({value_bytes} bytes a value, total / shards), not a layout; "
                "**not the checkpoint size**.",
            )
        if fmt is not None:
            if table is None:
                st.error(frame.plain(f"Storage format {fmt.name}: {refusal}"), icon=":material/error:")
                weights.offer_options(
                    st, "model", config, fmt, lambda tried: weights.table(config, tried)[0] is not None
                )
            else:
                in_format = table.bytes_per_shard(config.num_shards)
                figure(
                    row,
                    f"Bytes per shard ({fmt.name})",
                    units.bytes_share(in_format),
                    help=f"Exactly {units.share(in_format)} bytes: the format's exact tensors, "
                    f"{units.bytes_exact(table.payload_bytes)} with their scales and what stays unquantized, "
                    f"/ {config.num_shards:,} shards; {float(table.bits_per_weight):.3f} bits a weight.",
                    caption=f"An average of {fmt.label}'s tensors (total / shards), not a layout; "
                    f"**not the file size** (the file adds its header). The weights format sets the bytes here; the "
                    f"storage dtype ({config.dtype}) those of the Shards, Bytes and Checkpoint pages.",
                )
        figure(
            row,
            "Raw float32 payload",
            units.bytes_exact(payload.raw_bytes(report.total_params, "float32")),
            help="Every parameter value at 4 bytes, in one place.",
            caption="Raw float32 estimate (4 bytes a value), **not the checkpoint size**.",
        )
        said = presets.provenance(config, report.total_params)
        if said:
            st.caption(frame.plain(said))
        if report.other:
            st.caption(
                f"Other variables ({breakdown.other_variables_text(report)}; not parameters, not in the total): "
                f"{units.count(report.total_other_values)} values."
            )


# The form's widgets apply their changes in callbacks, before the run (``dcsim.ui.model``), so the
# configuration is already theirs here: the answer is drawn first and once, from it.
config = state.config()
# The three ways to pick a model stand above the answer: a preset (or the opened model), a Hub id,
# and a config.json through the sidebar's "Open a configuration file".
choice = model.model_choice(config)
hub.hub_box()
st.caption("Or open a config.json (or a dcsim configuration file) from the file box at the top of the sidebar.")
answer_box = st.container()  # filled below, once the storage format's widgets have been read
st.subheader("Configuration")
model.form(config, choice)
fmt = None
if not config.is_dense:
    fmt, weight_params = weights.format_inputs("model", weights.NONE, allow_none=True)
    state.set_page_params(weight_params)
with answer_box:
    show_answer(config, model.edit_error(), fmt)
if model.edited():  # widget state changed without a callback (AppTest): draw again from it
    st.rerun()
report = cache.count(config)

# Imported after the numbers above have gone to the browser: on a fresh server the first
# visitor's answer then does not wait for Altair to load.
from dcsim.report import model_charts  # noqa: E402

st.subheader("Where the parameters are")
layers_table = tables.layers_frame(report)
groups = None if config.is_dense else breakdown.breakdown_frame(report)
if groups is not None and (box := widgets.opened(f"By group: {', '.join(groups['group'])}", "model.groups_open")):
    with box:
        table_col, chart_col = st.columns([3, 2])
        with table_col:
            widgets.share_table(groups, group="Group")
            st.caption(
                "Embeddings: token, position and token-type tables and an untied output projection; blocks: the "
                "repeated transformer or residual blocks; norms: final norms outside the blocks; head: classifier, "
                "pooler or output layer. A vision-language model's vision tower, projector and language model are "
                "a group each."
            )
        with chart_col:
            st.altair_chart(model_charts.params_by_group(groups), width="stretch")
        if report.other:
            st.markdown("**Other variables** (not parameters, not in the total)")
            st.dataframe(widgets.text_counts(breakdown.other_frame(report), "num_values"), hide_index=True)
if not config.is_dense and (box := widgets.opened("By module, rolled up to a depth", "model.depth_open")):
    with box:
        depth = state.held(st.radio)("Roll up to depth", (1, 2, 3), horizontal=True, key=state.seed_widget("depth", 1))
        rolled = breakdown.depth_frame(report, depth)
        table_col, chart_col = st.columns([3, 2])
        with table_col:
            widgets.share_table(rolled, path="Module", group="Group")
        with chart_col:
            if len(rolled) <= 120:
                st.altair_chart(model_charts.params_by_layer(rolled, title="Parameters per module"), width="stretch")
            else:
                st.caption(f"{len(rolled):,} modules at this depth: too many bars to read; see the table.")
quantized = weights.table(config, fmt)[0] if fmt is not None else None
if quantized is not None and (box := widgets.opened(f"The weights in {quantized.format.name}", "model.weights_open")):
    with box:
        weights.show_table(quantized, in_expander=False)
        weights.write_button(quantized, "model.write")
layers_label = "Every layer that owns parameters" if not config.is_dense else "Parameters per layer"
if box := widgets.opened(f"{layers_label} ({len(layers_table):,})", "model.layers_open"):
    with box:
        table_col, chart_col = st.columns([3, 2])
        with table_col:
            widgets.share_table(layers_table, path="Layer")
            widgets.download("Download per-layer table (CSV)", layers_table, "dcsim-layers.csv")
        with chart_col:
            if len(layers_table) <= 120:
                st.altair_chart(model_charts.params_by_layer(layers_table), width="stretch")
if box := widgets.opened(f"Every parameter array ({len(report.arrays):,})", "model.arrays_open"):
    with box:
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
