"""Compare page: named scenarios side by side, the budget question answered twice, one link."""

import pandas as pd
import streamlit as st

from dcsim.compare import MAX_COMPARISON_BYTES, MAX_NAME_CHARS, MAX_SCENARIOS, model_text, unique_name
from dcsim.compare.runs import TIME_TEXTS, has_time, time_frame, time_setup_text
from dcsim.compare.tables import budget_frame, comparison_frame, held_frame, sweep_frame
from dcsim.links.comparisons import MAX_LINK_CHARS
from dcsim.memory import activations, budget
from dcsim.model import optimizer
from dcsim.quant.formats import FORMATS
from dcsim.quantities import amounts, payload, units
from dcsim.report import compare_charts
from dcsim.serving import catalog
from dcsim.ui import compare, frame, router, state, weights, widgets

router.require_router()
WEIGHT_CHOICES = (weights.NONE, *FORMATS)
REMATS = tuple(activations.POLICIES)
ATTENTIONS = ("flash", "naive")  # the step's default first
STEP_HELP = (
    "Optional: a training step whose activations a training budget counts beside the state, traced from JAX's "
    "autodiff as on the Memory page (decoder-only families; `none` for the state alone)."
)


def step_inputs(step, key: str | None = None) -> dict[str, str]:
    """The step's four boxes (sequence, micro-batch, remat, attention), seeded from ``step``; their
    texts by ``compare.STEP_LABELS`` key. ``key``: the widgets' key prefix (none inside a form)."""
    keys = {name: None if key is None else f"{key}.{name}" for name in compare.STEP_LABELS}
    seq_col, mb_col, remat_col, attn_col = st.columns(4)
    return {
        "sequence": seq_col.text_input(
            "Sequence",
            value=compare.NO_SEQUENCE if step is None else str(step.sequence),
            max_chars=16,
            key=keys["sequence"],
            help=STEP_HELP,
        ),
        "micro_batch": mb_col.text_input(
            "Micro-batch",
            value="1" if step is None else str(step.micro_batch),
            max_chars=16,
            key=keys["micro_batch"],
            help="Sequences a data-parallel replica a step (default 1).",
        ),
        **{
            name: column.selectbox(
                compare.STEP_LABELS[name],
                choices,
                index=choices.index(choices[0] if step is None else getattr(step, name)),
                key=keys[name],
                help="; ".join(f"{choice}: {text}" for choice, text in helps.items()),
            )
            for name, column, choices, helps in (
                ("remat", remat_col, REMATS, activations.POLICY_HELP),
                ("attention", attn_col, ATTENTIONS, activations.ATTENTION_HELP),
            )
        },
    }


TIME_HELP = {  # the Memory page's time boxes, a scenario's run
    "devices_per_host": "Which of the scenario's devices share a host's scale-up links; the rest cross hosts.",
    "tokens": "The tokens the run trains on, e.g. 2e12: its steps, days and device-hours (none: the step alone).",
    "price_per_device_hour": "In any currency: the run's cost is its device-hours times this (none: no cost).",
    "micro_batches": "Gradient accumulation: a data-parallel replica's micro-batches a step.",
}
DEVICE_CHOICES = (compare.NO_DEVICE, *catalog.DEVICE_NAMES)


def time_inputs(timing, key: str | None = None) -> dict[str, str]:
    """The run's device and boxes (devices a host, tokens, price, micro-batches), seeded from
    ``timing``; their texts by ``compare.TIME_LABELS`` key and ``device``. ``key``: the widgets' key
    prefix (none inside a form)."""
    keys = {name: None if key is None else f"{key}.{name}" for name in ("device", *compare.TIME_LABELS)}
    device_col, dph_col, tokens_col, price_col, mbs_col = st.columns([3, 1, 2, 2, 1])
    texts = {
        "device": device_col.selectbox(
            "Device (times the step)",
            DEVICE_CHOICES,
            index=DEVICE_CHOICES.index(compare.NO_DEVICE if timing is None else timing.device),
            key=keys["device"],
            help="A catalog accelerator, as on the Memory page: its peaks and bandwidths time the step "
            "(docs/time.md). None: the scenario is not timed.",
        )
    }
    defaults = {"devices_per_host": "8", "tokens": "none", "price_per_device_hour": "none", "micro_batches": "1"}
    for name, column in zip(compare.TIME_LABELS, (dph_col, tokens_col, price_col, mbs_col), strict=True):
        value = None if timing is None else getattr(timing, name)
        texts[name] = column.text_input(
            compare.TIME_LABELS[name],
            value=defaults[name] if value is None else (f"{value:g}" if isinstance(value, float) else str(value)),
            max_chars=24,
            key=keys[name],
            help=TIME_HELP[name],
        )
    return texts


st.header("Compare scenarios")
st.caption(
    "Each scenario is a named configuration with its own shard count and storage dtype. Add the model from the "
    "Model page, change its shards or dtype, duplicate it, and compare; one link carries the whole comparison."
)
current = compare.comparison()
for problem in compare.problems():
    st.warning(frame.plain(problem), icon=frame.LINK_ICON)
said = compare.message()
if said is not None:
    kind, text = said
    (st.success if kind == "success" else st.error)(frame.plain(text))
gen = compare.generation()

# --- scenarios -----------------------------------------------------------------------------------
st.subheader("Scenarios")
config = state.config()
full = len(current.scenarios) >= MAX_SCENARIOS
name_col, dtype_col, weights_col, add_col = st.columns([3, 1, 1, 2], vertical_alignment="bottom")
new_name = name_col.text_input(
    "Name of the new scenario",
    value=unique_name(model_text(config), current.names),
    max_chars=MAX_NAME_CHARS,
    key=f"compare.new_name.{gen}",
    help=f"1 to {MAX_NAME_CHARS} characters; names must differ.",
)
new_dtype = dtype_col.selectbox(
    "Dtype",
    payload.RAW_DTYPES,
    index=payload.RAW_DTYPES.index(config.dtype),
    key=f"compare.new_dtype.{gen}",
    help="The new scenario's storage dtype: the configuration's, unless you choose another.",
)
new_weights = weights_col.selectbox(
    "Weights format",
    WEIGHT_CHOICES,
    key=f"compare.new_weights.{gen}",
    help="Optional: a weight format whose exact bytes the table shows beside the raw payload (its default "
    "options; the Serving page sets group, bits and tile).",
)
with st.expander("Training step and run of the new scenario (optional)", icon=":material/timeline:"):
    step_inputs(None, key=f"compare.new_step.{gen}")
    time_inputs(None, key=f"compare.new_time.{gen}")
add_col.button(
    "Add the current configuration",
    icon=":material/add:",
    disabled=full,
    # Read the name when clicked: arguments bound here would be this run's, before the last keystrokes.
    on_click=lambda: compare.add(
        state.config(),
        compare.FormTexts(
            st.session_state[f"compare.new_name.{gen}"],
            st.session_state[f"compare.new_dtype.{gen}"],
            st.session_state[f"compare.new_weights.{gen}"],
            {name: st.session_state[f"compare.new_step.{gen}.{name}"] for name in compare.STEP_LABELS},
            {name: st.session_state[f"compare.new_time.{gen}.{name}"] for name in ("device", *compare.TIME_LABELS)},
        ),
    ),
    help="Adds the model now on the Model page, with its shard count (and the training step and run, if given), "
    "as a new scenario.",
)
st.caption(
    frame.plain(f"Current configuration: {frame.describe(config)} · {config.num_shards:,} shards")
    + (f" · the comparison is full ({MAX_SCENARIOS} scenarios)." if full else "")
)
frame.page_link("pages/model.py", label="Change the current configuration", icon=":material/calculate:")

if not current.scenarios:
    st.info("No scenarios yet: add the current configuration, or open a comparison file below.")
else:
    numbers = list(range(1, len(current.scenarios) + 1))

    def label(number: int) -> str:
        return f"{number}. {current.scenarios[number - 1].name}"

    pick_col, base_col = st.columns(2)
    chosen = pick_col.selectbox("Scenario to change", numbers, format_func=label, key=f"compare.pick.{gen}")
    base_col.selectbox(
        "Baseline (differences are against it)",
        numbers,
        index=current.baseline - 1,
        format_func=label,
        key=f"compare.baseline.{gen}",
        on_change=lambda: compare.set_baseline(st.session_state[f"compare.baseline.{gen}"]),
    )
    index = chosen - 1
    scenario = current.scenarios[index]
    with st.form(f"compare.edit.{gen}.{index}", border=True):
        name_col, dtype_col, weights_col, shards_col = st.columns([3, 1, 1, 1])
        name = name_col.text_input("Name", value=scenario.name, max_chars=MAX_NAME_CHARS)
        dtype = dtype_col.selectbox("Dtype", payload.RAW_DTYPES, index=payload.RAW_DTYPES.index(scenario.dtype))
        chosen_weights = weights_col.selectbox(
            "Weights format", WEIGHT_CHOICES, index=WEIGHT_CHOICES.index(scenario.weights or weights.NONE)
        )
        shards = shards_col.number_input("Shards", min_value=1, max_value=2**20, value=scenario.num_shards, step=1)
        step_texts = step_inputs(scenario.step)
        time_texts = time_inputs(scenario.time)
        st.caption(frame.plain(f"Model: {model_text(scenario.config)}"))
        saved = st.form_submit_button("Save (rename, dtype, format, shards, step, run)", icon=":material/save:")
    if saved:
        compare.edit(index, compare.FormTexts(name, dtype, chosen_weights, step_texts, time_texts), shards)
        st.rerun()
    dup_col, remove_col, _ = st.columns([1, 1, 2])
    dup_col.button(
        "Duplicate", icon=":material/content_copy:", disabled=full, on_click=compare.duplicate, args=(index,), key="dup"
    )
    remove_col.button("Remove", icon=":material/delete:", on_click=compare.remove, args=(index,), key="remove")

    # --- side by side ----------------------------------------------------------------------------
    st.subheader("Side by side")
    reports = compare.reports(current)
    table = comparison_frame(current, reports)
    shown = widgets.text_counts(
        table,
        "num_shards",
        "total_params",
        "raw_bytes",
        *(f"raw_{dtype}_bytes" for dtype in payload.RAW_DTYPES),
        "params_vs_baseline",
        "raw_bytes_vs_baseline",
    ).assign(
        is_baseline=table["is_baseline"].map({True: "baseline", False: ""}),
        weights_bytes=[f"{value:,}" if value is not pd.NA else "" for value in table["weights_bytes"]],
    )
    st.dataframe(
        shown,
        hide_index=True,
        # The differences before the per-dtype bytes, so they show without scrolling sideways.
        column_order=[
            "number",
            "name",
            "is_baseline",
            "model",
            "num_shards",
            "dtype",
            "total_params",
            "ideal_share_text",
            "raw_bytes",
            "weights",
            "weights_bytes",
            *(["step"] if "step" in table else []),
            "params_vs_baseline",
            "params_ratio_text",
            "raw_bytes_vs_baseline",
            "raw_bytes_ratio_text",
            "ideal_share_vs_baseline_text",
            *(f"raw_{dtype}_bytes" for dtype in payload.RAW_DTYPES),
        ],
        column_config={
            "number": st.column_config.NumberColumn("#", format="%d"),
            "name": st.column_config.TextColumn("Scenario"),
            "is_baseline": st.column_config.TextColumn("Baseline"),
            "model": st.column_config.TextColumn("Model"),
            "num_shards": st.column_config.TextColumn("Shards"),
            "dtype": st.column_config.TextColumn("Dtype"),
            "total_params": st.column_config.TextColumn("Total parameters"),
            "ideal_share_text": st.column_config.TextColumn("Ideal share per shard", help="total / shards, exactly"),
            "raw_bytes": st.column_config.TextColumn(
                "Raw bytes (its dtype)", help="values x bytes per value; not the checkpoint size"
            ),
            "weights": st.column_config.TextColumn("Weights format"),
            "step": st.column_config.TextColumn("Training step", help="counted by a training budget below"),
            "weights_bytes": st.column_config.TextColumn(
                "Bytes in the format", help="the format's exact tensors, scales included; the file adds its header"
            ),
            **{f"raw_{dtype}_bytes": st.column_config.TextColumn(f"Raw {dtype} bytes") for dtype in payload.RAW_DTYPES},
            "params_vs_baseline": st.column_config.TextColumn("Parameters − baseline"),
            "params_ratio_text": st.column_config.TextColumn("Parameters / baseline"),
            "raw_bytes_vs_baseline": st.column_config.TextColumn("Raw bytes − baseline"),
            "raw_bytes_ratio_text": st.column_config.TextColumn("Raw bytes / baseline"),
            "ideal_share_vs_baseline_text": st.column_config.TextColumn("Ideal share − baseline's"),
        },
    )
    for name, refusal in zip(table["name"], table["weights_refusal"], strict=True):
        if refusal:
            st.warning(frame.plain(f"{name}: no bytes in its weight format: {refusal}."), icon=":material/warning:")
    st.caption(
        "Raw bytes are values x bytes per value in each scenario's dtype: a raw estimate, not the checkpoint size. "
        "An ideal share is an average (total / shards), not a layout."
    )
    left, right = st.columns(2)
    left.altair_chart(compare_charts.compare_bars(table), width="stretch")
    right.altair_chart(compare_charts.compare_sweep(sweep_frame(current, reports), table), width="stretch")

    # --- time and money ---------------------------------------------------------------------------
    st.subheader("Runs by time and money (estimates)")
    if not has_time(current):
        st.caption(
            "No scenario has a device: give one a device (and a training step) in its edit form above to compare "
            "runs by step time, days, device-hours and cost."
        )
    else:
        times = time_frame(current, compare.times(current))
        st.dataframe(
            times,
            hide_index=True,
            column_order=["name", "run", *TIME_TEXTS],
            column_config={
                "name": st.column_config.TextColumn("Scenario"),
                "run": st.column_config.TextColumn("Run (device, devices a host, tokens, price)"),
                "fits_text": st.column_config.TextColumn(
                    "Fits its device", help="The state and the step's activations a device, against its memory"
                ),
                "step_text": st.column_config.TextColumn(
                    "Step (estimate; band)", help="Point estimate (full overlap to no overlap)"
                ),
                "tokens_per_second_text": st.column_config.TextColumn(
                    "Tokens/s (estimate)", help="All replicas together"
                ),
                "days_text": st.column_config.TextColumn(
                    "Run's days (estimate; band)", help="Steps x the step's seconds / 86,400; the band at its ends"
                ),
                "device_hours_text": st.column_config.TextColumn(
                    "Device-hours (estimate; band)", help="The run's seconds x the devices / 3,600"
                ),
                "cost_text": st.column_config.TextColumn("Cost (estimate; band)", help="Device-hours x the price"),
            },
        )
        if times["days"].notna().any():
            st.altair_chart(compare_charts.run_days(times), width="stretch")
        leaves_out = sorted({note for note in times["note"] if note.startswith("Estimate")})
        st.caption(
            frame.plain(
                f"Every figure is an estimate (docs/time.md). {time_setup_text(current.budget)} " + " ".join(leaves_out)
            )
        )

    csv_col, json_col = st.columns(2)
    widgets.download("Download the table (CSV)", table, "dcsim-comparison.csv", where=csv_col)
    widgets.download("Download the comparison (JSON)", current.to_json(), "dcsim-comparison.json", where=json_col)

# --- import --------------------------------------------------------------------------------------
with st.expander("Open a comparison file", icon=":material/upload_file:"):
    uploaded = st.file_uploader(
        "Comparison JSON",
        type="json",
        max_upload_size=1,
        key=f"compare.upload.{gen}",
        help=f"A file saved with “Download the comparison” (at most {MAX_COMPARISON_BYTES // 1024} KiB); "
        "it replaces the scenarios on this page.",
    )
    st.caption(f"At most {MAX_COMPARISON_BYTES // 1024} KiB: the box's 1MB is only the upload's own cap.")
    if uploaded is not None and st.session_state.get(compare.IMPORT_DONE) != uploaded.file_id:
        st.session_state[compare.IMPORT_DONE] = uploaded.file_id
        compare.import_json(uploaded.getvalue())
        st.rerun()

# --- budget --------------------------------------------------------------------------------------
st.subheader("How many shards and devices for a budget?")
spec = current.budget
training_options = [None, *optimizer.OPTIMIZER_NAMES]
with st.form(f"compare.budget.{gen}"):
    amount_col, unit_col, training_col, strategy_col = st.columns([2, 1, 3, 1])
    amount_text = amount_col.text_input(
        "Budget per shard and per device",
        value=compare.amount_input_text(spec),
        max_chars=amounts.MAX_AMOUNT_CHARS,
        help="Bytes: 80 GiB (2^30), 80 GB (10^9), 1.5 TiB, 85899345920. Values: 7B, 500M, 12,000, 7e9.",
    )
    unit = unit_col.radio("Unit", budget.BUDGET_UNITS, index=budget.BUDGET_UNITS.index(spec.unit))
    training = training_col.selectbox(
        "What must fit",
        training_options,
        index=training_options.index(spec.training),
        format_func=lambda name: (
            "Parameters only"
            if name is None
            else f"ZeRO-3 training state: parameters + gradients + {name} optimizer state (optax)"
        ),
        help="The training state is the Memory page's and `dcsim memory --zero 3`'s: every part split by the "
        "strategy, in the scenario's dtype, no master copy. The Memory page sets the stage, dtypes and mesh freely.",
    )
    strategy = strategy_col.selectbox(
        "Layout strategy", budget.BUDGET_STRATEGIES, index=budget.BUDGET_STRATEGIES.index(spec.strategy)
    )
    asked = st.form_submit_button("Answer", icon=":material/calculate:")
if asked:
    compare.set_budget(amount_text, unit, training, strategy)
    st.rerun()

st.caption(
    frame.plain(
        f"Budget: {spec.amount_text} per shard and per device ({spec.holds}). Bytes count each value in its "
        "scenario's dtype."
    )
)
if current.scenarios:
    answers = compare.answers(current)
    answer_frame = budget_frame(current, answers)
    mesh_axis = spec.mesh_axis
    st.dataframe(
        answer_frame.assign(
            need=answer_frame["need"].map(units.count),
            ideal_shards=answer_frame["ideal_shards"].map(units.count),
            devices=[
                f"None up to {budget.MAX_SEARCH_DEVICES:,}"
                if a.devices is None
                else f"{a.devices:,} ({mesh_axis}={a.devices})"
                for a in answers
            ],
            per_device=["" if a.per_device is None else units.count(a.per_device) for a in answers],
            activations=["" if a.shown_activations is None else units.count(a.shown_activations) for a in answers],
            larger_that_fit=[
                "" if pd.isna(devices) else f"{fit:,} of {searched:,}"
                for devices, fit, searched in zip(
                    answer_frame["devices"],
                    answer_frame["larger_that_fit"],
                    answer_frame["larger_searched"],
                    strict=True,
                )
            ],
        ),
        hide_index=True,
        column_order=[
            "name",
            "need",
            "ideal_shards",
            "devices",
            "per_device",
            *(["activations"] if any(a.counts_activations for a in answers) else []),
            "larger_that_fit",
            "ideal_share_text",
        ],
        column_config={
            "name": st.column_config.TextColumn("Scenario"),
            "need": st.column_config.TextColumn(f"Must fit in all ({spec.unit})"),
            "ideal_shards": st.column_config.TextColumn(
                "Ideal share (an average): shards", help="The smallest N with total / N ≤ budget: ceil(total / budget)"
            ),
            "ideal_share_text": st.column_config.TextColumn("Ideal share there (exact)"),
            "devices": st.column_config.TextColumn(
                "Real layout (JAX's sharding rules): devices",
                help=f"The smallest N from 1 to {budget.MAX_SEARCH_DEVICES:,} on a mesh {mesh_axis}=N whose every "
                f"device holds at most the budget under {spec.strategy}",
            ),
            "per_device": st.column_config.TextColumn(f"Each device there ({spec.unit})"),
            "activations": st.column_config.TextColumn(
                "Of it, the step's activations (bytes)",
                help="The residuals JAX's autodiff keeps for the backward pass, per data-parallel replica, as the "
                "Memory page and `dcsim memory --sequence` trace them; the ideal share divides the state alone",
            ),
            "larger_that_fit": st.column_config.TextColumn(
                "Larger N that fit too", help="Of the larger device counts searched, how many also fit: see below"
            ),
        },
    )

    def counted(answer: budget.Answer, counts: str) -> str:
        """What the verdict counts, on its line: the step's activations where they count, then what it leaves out."""
        step = answer.shown_activations
        said = ([] if step is None else [f"Of it, the step's activations: {units.bytes_exact(step)} a device."]) + (
            [counts] if counts else []
        )
        return f" *{frame.plain(' '.join(said))}*" if said else ""

    st.markdown(
        "\n".join(
            f"- **{frame.plain(name)}**: {frame.plain(text)}{counted(answer, counts)}"
            for name, text, answer, counts in zip(
                answer_frame["name"], answer_frame["summary"], answers, answer_frame["counts"], strict=True
            )
        )
    )
    st.caption(
        f"**Ideal share (an average)** divides the total evenly, as if values could be poured into shards. "
        f"**Real layout (JAX's sharding rules)** lays every array out with `{spec.strategy}` on a mesh "
        f"`{mesh_axis}=N` and takes what each device really holds. The real answer is not monotone: an array that "
        f"splits evenly over 4 devices may be replicated on 3 or on 5, so every N from 1 to "
        f"{budget.MAX_SEARCH_DEVICES:,} is searched. The chart shows the counts a team buys (powers of two and three "
        "times a power of two) and each scenario's answer and ideal count."
        + (" Optimizer step counts (scalars) are kept whole on every device." if spec.training else "")
    )
    st.altair_chart(compare_charts.budget_sweep(held_frame(current, answers), spec.amount, spec.unit), width="stretch")

# --- the link ------------------------------------------------------------------------------------
st.subheader("Link to this comparison")
query, fits = compare.publish(current)
if fits:
    st.code(f"{(st.context.url or '').split('?', 1)[0]}?{query}", language=None, wrap_lines=True)
    st.caption("Copy the link (button at its top right): it reopens these scenarios, the baseline and the budget.")
else:
    st.warning(
        f"This comparison is too large for a link: its query string would be {len(query):,} characters, over the "
        f"{MAX_LINK_CHARS:,} that stay safe through common proxies (they cut links at 4–8 KB). "
        "Download the comparison as JSON instead and share the file; “Open a comparison file” above reopens it. "
        "The address bar and the sidebar's link still carry the configuration and the budget, not the scenarios.",
        icon=":material/link_off:",
    )
    widgets.download("Download the comparison (JSON) to share", current.to_json(), "dcsim-comparison.json")
