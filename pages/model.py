"""Landing page: the configuration editor and the whole answer, without a click."""

import streamlit as st

from dcsim import breakdown, payload, presets, shares, tables, units
from dcsim.config import ModelConfig
from dcsim.ui import cache, frame, state, widgets

frame.require_router()

st.header("How big is this model, and what does it come to per shard?")
# The answer sits above the editor but is drawn once, after the widgets below have been read, from
# the configuration they make: drawing it before them as well (the session's previous
# configuration, then the new one) left figures of the first draw on screen whenever the two
# draws differed in shape, e.g. a Dense stack's bytes beside a preset's counts.
answer = st.container()


def show_answer(config: ModelConfig, error: str | None = None) -> None:
    """The whole answer at the top of the page, for ``config``; ``error`` says why the widgets'
    values were refused and ``config`` is the last valid configuration."""
    report = cache.count(config)
    share = shares.ideal_share(report.total_params, config.num_shards)
    raw_float32 = payload.raw_bytes(report.total_params, "float32")
    with answer:
        if error:
            st.error(frame.plain(f"{error}. Showing the last valid configuration."), icon=":material/error:")
        # A preset's four figures run to 15 digits: two rows of two keep every digit on one line.
        columns = [*st.columns(2), *st.columns(2)] if config.preset else st.columns(3)
        total_col, share_col, bytes_col = columns[0], columns[-2], columns[-1]
        total_col.metric(
            "Total parameters",
            units.count(report.total_params),
            help="Counted by initialising the real Flax modules abstractly (jax.eval_shape): exact, no memory spent.",
        )
        if config.preset:
            columns[1].metric(
                "Non-embedding parameters",
                units.count(breakdown.non_embedding_params(config, report)),
                help="The total less the token, position and token-type embedding tables and less an untied output "
                "projection over the vocabulary, as Pythia reports it (a tied output layer is the token table, "
                "subtracted once).",
            )
        share_col.metric(
            f"Ideal share per shard ({config.num_shards:,} shards)",
            units.share_short(share.exact),
            help=f"Exactly {units.share(share.exact)}: total / shards, an average, not a layout. "
            "No shard holds a fraction of a value.",
        )
        bytes_col.metric("Raw float32 payload", units.bytes_exact(raw_float32))
        bytes_col.caption("Raw float32 estimate (4 bytes a value), **not the checkpoint size**.")
        if config.preset:
            row = presets.PRESETS[config.preset]
            if config.overrides:
                changed = ", ".join(f"{name}={value}" for name, value in config.overrides)
                st.caption(frame.plain(f"{row.title} with {changed}; published {row.title}: {row.published_params:,}."))
            else:
                same = "matches" if report.total_params == row.published_params else "DIFFERS FROM"
                st.caption(f"{same} the published {row.published_params:,} ({frame.plain(row.source)}).")
        if report.other:
            st.caption(
                f"Other variables (BatchNorm statistics and the like; not parameters, not in the total): "
                f"{units.count(report.total_other_values)} values."
            )


st.subheader("Configuration")
config = state.config()
preset = widgets.model_choice(config)
left, right = st.columns(2)
with left:
    num_shards = widgets.number(
        "Number of checkpoint shards",
        "num_shards",
        config,
        help="The ideal share divides the total by this count: an average, not a layout.",
    )
    if preset is None:
        input_dim = widgets.number("Input dimension D", "input_dim", config, help="The width of each input example.")
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

error = None
changes: dict = {"num_shards": num_shards, "batch_size": batch_size, "seed": seed}
if preset is None:
    st.markdown("**Dense layers**, in order (add rows at the bottom; select rows to delete them)")
    edited = widgets.layers_editor(config)
    try:
        changes |= {
            "input_dim": input_dim,
            "layers": widgets.layers_from_frame(edited),
            "preset": None,
            "overrides": (),
        }
    except ValueError as err:
        error = str(err)
else:
    st.markdown(f"**{presets.PRESETS[preset].title}**: hyperparameters (change any; the count follows)")
    overrides, error = widgets.hparam_form(config, preset)
    changes |= {"preset": preset, "overrides": overrides}
if error is None:
    config, error = widgets.apply(config, **changes)
if st.button("Reset to the seed example", icon=":material/restart_alt:"):
    state.set_config(type(config)(), replace_widgets=True)
    st.rerun()

show_answer(config, error)
report = cache.count(config)

# Imported after the numbers above have gone to the browser: on a fresh server the first
# visitor's answer then does not wait for Altair to load.
from dcsim import charts  # noqa: E402

layers_table = tables.layers_frame(report)
if config.preset:
    st.subheader("Where the parameters are")
    groups = breakdown.breakdown_frame(report)
    table_col, chart_col = st.columns([3, 2])
    with table_col:
        widgets.share_table(groups, group="Group")
        st.caption(
            "Embeddings: token, position and token-type tables and an untied output projection; blocks: the "
            "repeated transformer or residual blocks; norms: final norms outside the blocks; head: classifier, "
            "pooler or output layer."
        )
    with chart_col:
        st.altair_chart(charts.params_by_group(groups), width="stretch")
    depth = st.radio("Roll up to depth", (1, 2, 3), horizontal=True, key=state.seed_widget("depth", 1))
    rolled = breakdown.depth_frame(report, depth)
    table_col, chart_col = st.columns([3, 2])
    with table_col:
        widgets.share_table(rolled, path="Module", group="Group")
    with chart_col:
        if len(rolled) <= 120:
            st.altair_chart(charts.params_by_layer(rolled, title="Parameters per module"), width="stretch")
        else:
            st.caption(f"{len(rolled):,} modules at this depth: too many bars to read; see the table.")
    if report.other:
        st.markdown("**Other variables** (not parameters, not in the total)")
        st.dataframe(widgets.text_counts(breakdown.other_frame(report), "num_values"), hide_index=True)
    layers_box = st.expander(f"Every layer that owns parameters ({len(layers_table):,})")
else:
    st.subheader("Parameters per layer")
    layers_box = st.container()

with layers_box:
    table_col, chart_col = st.columns([3, 2])
    with table_col:
        widgets.share_table(layers_table, path="Layer")
        widgets.download("Download per-layer table (CSV)", layers_table, "dcsim-layers.csv")
    with chart_col:
        if len(layers_table) <= 120:
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
