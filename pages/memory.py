"""Memory page: the training state each device holds (parameters, gradients, master copy and
optimizer state) under a ZeRO stage on a real mesh, against a budget, with XLA's own figure beside
dcsim's on request."""

import dataclasses
from typing import Any

import streamlit as st

from dcsim.memory import training as trainings
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import MemoryReport
from dcsim.memory.step import ATTENTION_HELP, POLICY_HELP
from dcsim.memory.training import PARTS
from dcsim.model import optimizer, registry
from dcsim.model.config import ModelConfig
from dcsim.quantities import units
from dcsim.report import memory_charts
from dcsim.sharding.meshes import MAX_RULES
from dcsim.ui import frame, layout, memory, memory_view, model, router, speed, state, turns, widgets

router.require_router()

LAYOUT_HELP = {  # MemoryReport.part_layout's three answers
    "split": "Split over the mesh",
    "whole over data": "Split over the model-parallel axes only, whole over the data axes",
    "whole": "Whole on every device",
}

config, report, verdict_box = model.verdict_heading("Training memory per device")  # filled once the figures are drawn

# --- settings: the Layout page's mesh, strategy and rules, then the training setup -------------------

st.subheader("Mesh and strategy")
mesh, strategy, mesh_col, _ = layout.mesh_and_strategy(
    memory.PAGE,
    strategy_help="How each part's arrays are laid out over the mesh (the Layout page's strategies); parts the "
    "ZeRO stage does not split keep the strategy's split over `model`, `expert` and `stage` and are whole over "
    "the data axes (whole on every device under fsdp and replicated).",
)
mesh_col.metric("Devices", units.count(mesh.num_devices), help="The product of the mesh's axis sizes.")
rules = layout.rules_input(
    memory.PAGE,
    strategy,
    height=100,
    help="As on the Layout page: PATTERN is a glob on the parameter's path, SPEC one entry per dimension "
    f"(`None`, a mesh axis, or axes joined by `+`). Unmatched arrays are replicated. At most {MAX_RULES} rules.",
)

st.subheader("Training setup")
memory.seed_split()
stage_col, optimizer_col, budget_col = st.columns([2, 2, 1])
stage = state.held(stage_col.selectbox)(
    "ZeRO stage: which parts are split over the mesh",
    memory.STAGE_CHOICES,
    key=memory.STAGE_KEY,
    format_func=memory.stage_label,
    help="\n\n".join(trainings.STAGE_HELP.values())
    + "\n\nOr name the parts to split yourself. The stage decides which parts are split; the mesh, strategy and "
    "rules decide how.",
)
parts: list[str] = []
if stage == memory.FREE_PARTS:
    st.session_state.setdefault(memory.PARTS_KEY, sorted(trainings.STAGES[3], key=PARTS.index))
    parts = state.held(stage_col.multiselect)(
        "Parts split over the mesh (the others are whole over the data axes)",
        PARTS,
        key=memory.PARTS_KEY,
        format_func=memory.PART_TITLES.__getitem__,
    )
optimizer_name = state.held(optimizer_col.selectbox)(
    "Optimizer",
    optimizer.OPTIMIZER_NAMES,
    key=memory.seeded("optim", memory.DEFAULT_OPTIMIZER, trainings.check_optimizer),
    help="A real optax optimizer, initialised abstractly: its state's every array, shape and dtype.",
)
optimizer_col.caption(frame.plain(optimizer.OPTIMIZERS[optimizer_name][0].capitalize()))
budget_text = state.held(budget_col.text_input)(
    "Budget per device",
    key=memory.seeded("devmem", memory.DEFAULT_BUDGET, memory.parse_budget),
    max_chars=32,
    help="One device's memory, with its unit: 80GiB, 96 GB, 1.5 TiB (GiB = 2^30 bytes, GB = 10^9).",
)
st.button(
    f"Use the usual mixed-precision recipe: {trainings.RECIPE_TEXT}",
    key="memory.recipe",
    on_click=memory.use_recipe,
    icon=":material/tune:",
)
param_col, grad_col, master_col = st.columns(3)
param_dtype = state.held(param_col.selectbox)(
    "Parameters' dtype",
    trainings.DTYPES,
    key=memory.seeded("param", memory.DEFAULT_PARAM_DTYPE, memory.parse_param),
)
grad_dtype = state.held(grad_col.selectbox)(
    "Gradients' dtype",
    (memory.SAME_AS_PARAMS, *trainings.DTYPES),
    key=memory.seeded("grad", memory.DEFAULT_GRAD_DTYPE, memory.parse_grad),
    format_func=lambda name: f"same as the parameters ({param_dtype})" if name == memory.SAME_AS_PARAMS else name,
)
master_dtype = state.held(master_col.selectbox)(
    "Master copy",
    (memory.NO_MASTER, *trainings.DTYPES),
    key=memory.seeded("master", memory.DEFAULT_MASTER_DTYPE, memory.parse_master),
    format_func=lambda name: "none (no master copy)" if name == memory.NO_MASTER else f"{name} master copy",
    help="Mixed precision keeps a master copy of the parameters (usually float32) beside low-precision ones; "
    "the optimizer state is then initialised on it, in its dtype.",
)
budget_text, budget = memory.parsed("devmem", budget_text, memory.parse_budget, "Budget")

training = memory.make_training(stage, parts, optimizer_name, param_dtype, grad_dtype, master_dtype)
frame.page_link(
    "pages/serving.py",
    {"mesh": mesh.text, "strategy": strategy} | ({"rules": layout.rules_text(rules)} if strategy == "custom" else {}),
    label="Serving on this mesh: weights and the KV cache per device",
    icon=":material/dns:",
)
memory.remember_split(training)
st.caption(frame.plain(f"Setup: {training.text}."))
tensor_note = trainings.tensor_parallel_note(strategy, training, mesh)
if tensor_note is not None:
    st.caption(frame.plain(tensor_note))
no_master = memory.master_note(training)
if no_master is not None:
    st.caption(frame.plain(no_master))

RERUN = frame.rerun_with_link(memory.STEP_FRAGMENT)


def step_section(config: ModelConfig) -> memory.StepSettings:
    """The training step's settings; each reruns the page's fragment and the link, not the page."""
    st.subheader("Training step: activations")
    st.caption(
        "With a sequence, the activations one step keeps for the backward pass are counted beside the state: the "
        "residuals JAX's autodiff saves, traced abstractly from the model's own forward under the remat policy. "
        "The micro-batch is per data-parallel replica; a `model` axis splits heads and widths as Megatron does."
    )
    seq_col, mb_col, remat_col, attn_col = st.columns([2, 2, 2, 2])
    sequence_text = state.held(seq_col.text_input)(
        "Sequence (tokens)",
        key=memory.seeded("seq", memory.NO_SEQUENCE, memory.parse_sequence),
        max_chars=16,
        on_change=RERUN,
        help="Tokens a sequence; none for the training state alone (no activations).",
    )
    micro_text = state.held(mb_col.text_input)(
        "Micro-batch per replica",
        key=memory.seeded("mb", memory.DEFAULT_MICRO_BATCH, memory.parse_micro_batch),
        max_chars=16,
        on_change=RERUN,
        help="Sequences a data-parallel replica runs a step (not the global batch): data and fsdp axes do not change "
        "it.",
    )
    remat = memory.choice(
        remat_col,
        "remat",
        "Remat policy",
        help="Applied to every block, as nn.remat(Block, policy=...) does.",
        on_change=RERUN,
    )
    attention = memory.choice(attn_col, "attn", "Attention", on_change=RERUN)
    dtype_col, sp_col, cf_col = st.columns([2, 2, 4])
    compute_dtype = memory.choice(
        dtype_col,
        "cdtype",
        "Compute dtype",
        help="The dtype the forward runs in: the residual stream is kept in it.",
        on_change=RERUN,
    )
    sequence_parallel = memory.choice(
        sp_col,
        "sp",
        "Sequence parallel",
        help="Megatron's sequence parallelism over the mesh's model axis: the residual stream and norms split too.",
        on_change=RERUN,
    )
    capacity_key = memory.seeded("cf", memory.DEFAULT_CAPACITY, memory.parse_capacity)
    if registry.family_of(config).trains_experts:
        capacity_text = state.held(cf_col.text_input)(
            "Expert capacity factor",
            key=capacity_key,
            max_chars=16,
            on_change=RERUN,
            help="none: dropless dispatch (each token's chosen experts only, as MaxText); a number: GShard's capacity "
            "(tokens past an expert's capacity dropped).",
        )
    else:  # kept for the link, unused: only a Mixture-of-Experts model routes tokens
        capacity_text = str(st.session_state.get(capacity_key, memory.DEFAULT_CAPACITY))
    return memory.StepSettings(
        sequence=memory.parsed("seq", sequence_text, memory.parse_sequence, "Sequence"),
        micro_batch=memory.parsed("mb", micro_text, memory.parse_micro_batch, "Micro-batch"),
        remat=remat,
        attention=attention,
        compute_dtype=compute_dtype,
        sequence_parallel=sequence_parallel,
        capacity=memory.parsed("cf", capacity_text, memory.parse_capacity, "Capacity factor"),
    )


def verify_section(config: ModelConfig, setup: memory.Setup, held: MemoryReport) -> None:
    """The "Verify with XLA" button and this session's answer for the setup: XLA's compiled figure
    beside dcsim's, or why the check is not offered (past its bound) or failed."""
    from dcsim.memory import verify  # loaded when a layout is shown: it starts child processes

    st.subheader("Check with XLA")
    try:
        verify.check_verifiable(held)
        refusal = None
    except (TypeError, ValueError) as err:
        refusal = str(err)
    st.caption(
        "Compiles a program that makes every array of this state with its sharding, on as many virtual CPU "
        "devices as the mesh has, in a separate process, and reads XLA's own memory analysis of one device: "
        "nothing is allocated. Takes seconds; the answer is kept for this setup while the page is open."
    )
    pressed = st.button(
        "Verify with XLA", key="memory.verify", disabled=refusal is not None, icon=":material/fact_check:"
    )
    if refusal is not None:
        st.info(frame.plain(f"XLA's check is not offered for this setup: {refusal}."), icon=":material/block:")
        return
    key = memory.verify_key(config, setup)
    if pressed:
        with turns.waiting(f"Compiling the state on {units.count(held.num_devices)} virtual devices…"):
            try:
                answer: Any = verify.verify(held)
            except (TypeError, ValueError, verify.VerifyFailed) as err:
                answer = str(err)
        memory.remember_verified(key, answer)
    answer = memory.verified(key)
    if isinstance(answer, str):
        st.error(frame.plain(f"XLA's check failed: {answer}"), icon=":material/error:")
    elif answer is not None:
        xla_col, dcsim_col, match_col = st.columns(3)
        xla_col.metric(
            "XLA: output bytes per device",
            units.bytes_exact(answer.output_bytes_per_device),
            help="`memory_analysis().output_size_in_bytes` of the compiled program, on one device.",
        )
        dcsim_col.metric(
            "Expected by dcsim",
            units.bytes_exact(answer.expected_bytes_per_device),
            help=f"dcsim's total per device ({units.bytes_exact(held.total_bytes_per_device)}) plus the output "
            f"tuple's table XLA counts too: {verify.TUPLE_ENTRY_BYTES} bytes (a pointer) per returned array, "
            f"{units.bytes_exact(verify.tuple_table_bytes(held.num_arrays))} here.",
        )
        match_col.metric("Match", "yes, to the byte" if answer.matches else "no")
        agree = "They agree exactly." if answer.matches else "They differ: dcsim's layout is not what XLA compiled."
        st.caption(
            f"{units.count(answer.num_arrays)} arrays compiled in {answer.seconds:.1f} s. XLA's figure is the state "
            f"per device plus its output tuple's table ({verify.TUPLE_ENTRY_BYTES} bytes a returned array, "
            f"{units.count(verify.tuple_table_bytes(held.num_arrays))} bytes here). {agree}"
        )


def show_verdict(config: ModelConfig, setup: memory.Setup, refused: str | None) -> None:
    """The answer for the page's mesh, first on the page: fits or not, by how much, and the remedies
    that fit, each computed (``dcsim.memory.remedies``); no verdict when the step was refused."""
    if refused is not None:
        verdict_box.warning(
            frame.plain(
                f"No verdict for {setup.mesh.text}: the step cannot be counted ({refused}), and without its "
                "activations nothing can be said against the budget."
            ),
            icon=":material/block:",
        )
        return
    verdict = memory.cached_verdict(config, setup)
    if isinstance(verdict, str):
        verdict_box.error(frame.plain(f"No verdict for {setup.mesh.text}: {verdict}"), icon=":material/error:")
    else:
        model.show_verdict(verdict_box, verdict.text, verdict.fits)


def answer_section(config: ModelConfig, setup: memory.Setup) -> None:
    """What each device holds under ``setup``, the stage and mesh sweeps, XLA's check and the tables."""
    mesh, training, budget, budget_text, step = setup.mesh, setup.training, setup.budget, setup.budget_text, setup.step
    outcome = memory.cached_memory(config, setup)
    held = outcome.memory
    traced: Any = None
    if step is not None:
        traced = memory.cached_activations(config, step, training.param_dtype, mesh)
        if isinstance(traced, str):
            st.error(frame.plain(f"The step's activations cannot be traced: {traced}"), icon=":material/error:")
            traced = None
    refused = None
    if step is not None and traced is None:
        refused = memory.cached_activations(config, step, training.param_dtype, mesh)
        memory.offer_sequence_limit(config, step)
    activations_bytes = memory.activation_bytes_of(held, traced)
    layout.offer_mesh(st, memory.PAGE, config, mesh, memory.trains_on(config, setup), rerun=st.rerun)

    st.subheader("What each device holds")
    if held is None:
        verdict_box.warning(
            frame.plain(f"No verdict for {mesh.text}: the layout is impossible (below), so nothing can be counted."),
            icon=":material/block:",
        )
        st.error(frame.plain(f"This layout is impossible: {outcome.error}"), icon=":material/error:")
        st.caption(
            "Fix the mesh, the strategy or the rules (the Layout page shows which arrays cannot be placed), or pick "
            "ZeRO-0 with a strategy the mesh allows."
        )
    else:
        if held.pipeline is None:
            st.caption(
                "Under JAX's even splits every device holds shards of the same shapes, so the most-loaded device "
                "holds exactly what every other one does: the figures below are each device's."
            )
        else:
            st.caption(
                f"Pipeline stages: each stage's devices hold its own blocks' arrays and, with a step, its "
                f"micro-batches in flight (1F1B). The figures below are a device of {held.pipeline.text}, the stage "
                "whose devices hold the most; every device of a stage holds the same."
            )
        footprint = TrainingReport.of(held, activations_bytes, budget)
        show_verdict(config, setup, refused)
        total_col, ideal_col, fits_col = st.columns(3)
        total_col.metric(
            "Total per device" if traced is None else "State + activations per device",
            units.bytes_exact(footprint.total_bytes),
            help="Every array's bytes on one device, summed: what the most-loaded (every) device holds"
            + (
                "."
                if traced is None
                else f"; the state {units.bytes_exact(footprint.state_bytes)}, the step's "
                f"activations {units.bytes_exact(footprint.activations_bytes or 0)}."
            ),
        )
        ideal_col.metric(
            "Ideal share (total state / devices)",
            units.bytes_share(held.ideal_bytes_per_device),
            help=f"The whole state once ({units.bytes_exact(held.total_bytes)}) over {units.count(held.num_devices)} "
            f"devices, exactly {units.share(held.ideal_bytes_per_device)} bytes: an average, not a layout.",
        )
        if refused is None:
            fits_text, fits_help = memory_view.budget_delta(footprint)
            fits_col.metric(f"Against the budget ({budget_text})", fits_text, help=fits_help)
            fits_col.caption(footprint.leaves_out_text)
        else:
            fits_col.metric(
                f"Against the budget ({budget_text})",
                "No verdict",
                help="The step was refused, so its activations cannot be counted: see the sentence above.",
            )
        if traced is not None:
            act_col, loss_col, formula_col = st.columns(3)
            act_col.metric(
                "Activations per device",
                units.bytes_exact(activations_bytes or 0),
                help=(
                    f"The residuals of {len(traced.blocks):,} blocks, outside them and the loss, traced from JAX's "
                    if held is None or held.pipeline is None
                    else f"{held.pipeline.text}: its own blocks' residuals for each micro-batch in flight (1F1B), "
                    "and on the last stage those outside the blocks and the loss's, traced from JAX's "
                )
                + f"autodiff in {traced.seconds:.1f} s.",
            )
            loss_col.metric(
                "Of which the loss",
                units.bytes_exact(traced.loss_bytes),
                help="The logits cast to float32 for the cross-entropy, as the usual recipe does.",
            )
            formula = traced.korthikanti_bytes
            formula_col.metric(
                "Korthikanti et al.'s formula",
                "no counterpart" if formula is None else units.bytes_exact(formula),
                help="Reducing Activation Recomputation in Large Transformer Models (2022), for the same s, b, h, a, "
                "L.",
            )
            st.caption(frame.plain(traced.formula_note))
            costed = memory.cached_activations(config, traced.step, training.param_dtype, mesh, with_recompute=True)
            if not isinstance(costed, str) and costed.recompute_fraction is not None:
                st.caption(
                    frame.plain(
                        f"Remat {costed.step.remat} recomputes {100 * costed.recompute_fraction:.1f}% more of a "
                        "block's forward and backward FLOPs (counted from the traced step) to keep that little."
                    )
                )
            if traced.routed:
                st.caption(frame.plain(f"Routed experts: {traced.step.dispatch_text}."))
        for column, (part, held_bytes) in zip(st.columns(len(footprint.parts)), footprint.parts, strict=True):
            column.metric(
                f"{memory.PART_TITLES[part]} per device",
                units.bytes_exact(held_bytes),
                help=f"{LAYOUT_HELP[held.part_layout(part)]}; "
                f"{units.bytes_exact(held.part_total_bytes(part))} once, all devices together.",
            )
        st.markdown(frame.plain(memory_view.largest_text(held)))
        if traced is None:
            st.caption(f"**{memory.CAVEAT}**")
        else:
            st.caption(
                "**Training state and one step's activations (the residuals the backward pass reads). No XLA "
                "temporaries of the backward, no buffers or framework overhead.**"
            )

        if traced is not None and step is not None:
            box = widgets.opened(
                "State + activations against sequence length, every remat policy, against the budget",
                "memory.sequence_open",
            )
            if box is not None:
                with box:
                    points = memory.sequence_frame(config, step, training.param_dtype, mesh)
                    st.altair_chart(
                        memory_charts.activations_by_sequence(points, footprint.state_bytes, budget), width="stretch"
                    )
                    st.caption(
                        f"Each point is this device's state ({units.bytes_exact(footprint.state_bytes)}, the same at "
                        "every sequence) and the step's activations, traced as the figure above is (a quarter to "
                        f"twice this sequence); the dashed line is the budget ({budget_text}). Policies that keep "
                        "the same bytes share one line. Flash attention grows linearly; naive attention's s x s "
                        "probabilities bend the none and dots lines upward."
                    )

        st.subheader("By ZeRO stage")
        stages = memory_view.stage_frame(config, setup, activations_bytes)
        st.altair_chart(memory_charts.stage_bars(stages, budget, budget_text), width="stretch")
        st.caption(
            "Each bar is one device under that ZeRO stage, with this mesh, strategy, optimizer and dtypes; the arrow "
            "marks the chosen setup."
        )

        st.subheader("Against the budget as the mesh grows")
        answer = memory.cached_fit(config, setup)
        if refused is not None:
            st.info(frame.plain(f"No search: the step is refused on every mesh ({refused})."))
        elif isinstance(answer, str):
            st.error(frame.plain(f"The sweep over device counts failed: {answer}"), icon=":material/error:")
        else:
            sweep_col, answer_col = st.columns([3, 2])
            sweep = memory_charts.sweep_frame(answer, mesh)
            sweep_col.altair_chart(
                memory_charts.device_sweep(sweep, budget, budget_text, mesh.num_devices), width="stretch"
            )
            with answer_col:
                st.markdown(
                    "\n".join(
                        f"- {line}"
                        for line in memory_view.fit_sentences(
                            answer, frame.plain(budget_text), memory.cached_verdict(config, setup)
                        )
                    )
                )
                refused = memory_view.refused_meshes(answer)
                if refused:
                    st.caption(frame.plain("Meshes the layout refuses (no point drawn): " + " ".join(refused)))
                st.caption(
                    "The mesh's first axis takes every power of two (and its own size), the other axes stay as given: "
                    "the model-parallel group you chose stays, data parallelism grows."
                )
            box = widgets.opened(f"Every mesh searched ({len(answer.candidates)})", "memory.candidates_open")
            if box is not None:
                with box:
                    frame.text_table(
                        memory_view.candidates_frame(answer),
                        {
                            "mesh": "Mesh",
                            "devices": "Devices",
                            "per_device": "Per device (real layout)",
                            "ideal_share": "Ideal share",
                            "fits": f"Fits {budget_text}",
                        },
                    )


def state_sections(config: ModelConfig, setup: memory.Setup) -> None:
    """XLA's check and the state's tables: the same for every step, so outside the page's fragment
    (a new sequence does not send a state's ~2,900 arrays to the browser again)."""
    held = memory.cached_memory(config, setup).memory
    if held is None:  # the fragment above says why
        return
    verify_section(config, setup, held)

    st.subheader("By part")
    frame.text_table(
        memory_view.parts_frame(held).drop(columns="part"),
        {
            "title": "Part",
            "bytes_per_device": "Per device",
            "percent_of_device": st.column_config.NumberColumn(
                "Share", format="%.2f%%", help="Of what one device holds"
            ),
            "split": st.column_config.TextColumn(
                "Split?", help="Split over the mesh, whole over the data axes only, or whole on every device"
            ),
            "dtype": "Dtype",
            "num_arrays": "Arrays",
            "total_bytes": st.column_config.TextColumn("Once", help="The part once, all devices together"),
        },
        formats={"num_arrays": units.count, "bytes_per_device": units.bytes_exact, "total_bytes": units.bytes_exact},
    )

    st.subheader("Every array of the state")
    arrays = memory_view.arrays_frame(held)
    filters = ("all", *setup.training.parts)
    if st.session_state.get(memory.PART_FILTER) not in filters:  # master gone with its copy, or a first visit
        st.session_state[memory.PART_FILTER] = "all"
    shown_part = state.held(st.selectbox)(
        "Show the arrays of",
        filters,
        key=memory.PART_FILTER,
        format_func=memory_view.part_filter_label,
    )
    rows = arrays if shown_part == "all" else arrays[arrays["part"] == shown_part]
    st.dataframe(
        rows.assign(bytes_per_device=rows["bytes_per_device"].map(units.bytes_exact)),
        hide_index=True,
        # What a device holds first, where it shows without scrolling sideways.
        column_order=["path", "part", "bytes_per_device", "shard_shape", "partition_spec", "shape", "dtype", "note"],
        column_config={
            "path": "Array",
            "part": "Part",
            "shape": "Shape",
            "dtype": "Dtype",
            "partition_spec": st.column_config.TextColumn("Partition spec", help="JAX's PartitionSpec; P() = whole"),
            "shard_shape": st.column_config.TextColumn("Shard shape", help="What each device holds of the array"),
            "bytes_per_device": st.column_config.TextColumn("Bytes per device"),
            "note": st.column_config.TextColumn("Why", width="large"),
        },
    )
    st.caption(f"{units.count(len(rows))} of {units.count(len(arrays))} arrays shown.")
    widgets.download("Download every array (CSV)", arrays, "dcsim-memory.csv")


# --- the step and the answer: a fragment, so that a new sequence reruns them and not the settings above
# (nor the state's tables below, which no step changes)


@st.fragment(key=memory.STEP_FRAGMENT)
def step_and_answer(config: ModelConfig, settings: memory.Setup) -> None:
    """The step's settings and every figure. A step setting reruns only this (and the link): the
    settings above it (``settings``, with no step) are drawn by the whole page's run and passed in
    as that run left them."""
    step_settings = step_section(config)
    step = step_settings.step(registry.family_of(config).trains_experts)
    st.caption(
        frame.plain(
            f"Remat {step_settings.remat}: {POLICY_HELP[step_settings.remat]}. Attention {step_settings.attention}: "
            f"{ATTENTION_HELP[step_settings.attention]}."
        )
    )
    setup = dataclasses.replace(settings, step_settings=step_settings, step=step)
    timed, params = speed.device_setup(setup)  # a device's memory is the budget (memory --device)
    state.set_page_params(params)
    answer_section(config, timed)
    speed.memory_time_section(config, report, timed, RERUN)  # the step's time on that device


settings = memory.Setup(
    mesh=mesh, strategy=strategy, rules=rules, training=training, budget=budget, budget_text=budget_text
)
step_and_answer(config, settings)
state_sections(config, settings)

st.subheader("How to read this page")
st.markdown(
    """
- **Parts**: the parameters, one gradient per parameter, an optional master copy (mixed precision), and
  the optimizer state optax really makes (Adam: two moments and a step count; Adafactor: factored moments).
- **ZeRO stages** say which parts are split over the mesh: 0 none, 1 the optimizer state and master copy,
  2 the gradients too, 3 every part (PyTorch's FULL_SHARD). A split part follows its parameter's layout
  under the strategy; a part that is not split keeps the strategy's split over `model`, `expert` and
  `stage` and is whole over the data axes (as Megatron-LM and DeepSpeed compose them).
- **Ideal share** is the whole state over the devices: what each would hold if bytes could be poured
  evenly. The real layout is above it wherever an array cannot be split evenly, or a part is not split.
"""
)
