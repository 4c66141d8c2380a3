"""Serving page: what one device holds to serve the model (the weights in their serving dtype,
the KV cache the model's own attention keeps, fixed state), against a budget, with the most
sequences and the longest context that fit, and XLA's compiled decoding step on request."""

import json
from typing import Any

import streamlit as st

from dcsim.model.cache import kv_dtype_label
from dcsim.quantities import units
from dcsim.quantities.amounts import parse_budget
from dcsim.report import serving_charts
from dcsim.requests import switch_word
from dcsim.requests.serving import SERVING
from dcsim.serving import catalog, curve, records
from dcsim.serving.engine import LEAVES_OUT, context_limit
from dcsim.serving.request import DEFAULT_STRATEGY, KV_DTYPE_NAMES, Serving, parse_reserve
from dcsim.ui import frame, layout, model, router, serving, speed, state, turns, weights

router.require_router()

config, report, verdict_box = model.verdict_heading("Serving memory per device")  # filled once the request is read

st.subheader("Mesh and serving setup")
mesh, strategy, _, _ = layout.mesh_and_strategy(
    serving.PAGE,
    strategy_label="Strategy (the weights' layout)",
    default_mesh="data=1",
    default_strategy=DEFAULT_STRATEGY,
    strategy_help="megatron: as Megatron-LM and vLLM lay a tensor-parallel model out (heads and MLP columns over "
    "`model`, norms on every rank). The KV cache is always laid out by vLLM's rule.",
)
rules = layout.rules_input(serving.PAGE, strategy)

fmt, weight_params = weights.format_inputs(serving.PAGE, "bfloat16", allow_none=False)
assert fmt is not None
kv_col, context_col, concurrency_col = st.columns(3)
kv_dtype = state.held(kv_col.selectbox)(
    "KV cache dtype",
    KV_DTYPE_NAMES[:-1],
    key=serving.seeded("kv"),
    format_func=kv_dtype_label,
    help="int8 keeps a float32 scale a token and KV head (counted a token); float8_e4m3fn (fp8) one scale a "
    "layer for keys and one for values (fixed).",
)
context_text = state.held(context_col.text_input)(
    "Context (tokens a sequence)",
    key=serving.seeded("context", serving.context_default(config)),
    max_chars=16,
)
concurrency_text = state.held(concurrency_col.text_input)(
    "Concurrency (sequences, whole mesh)", key=serving.seeded("concurrency"), max_chars=16
)
device_col, budget_col, reserve_col, windows_col = st.columns(4)
device = state.held(device_col.selectbox)(
    "Device",
    (serving.NO_DEVICE, *catalog.DEVICE_NAMES),
    key=serving.seeded("device"),
    format_func=serving.device_label,
    help="The vendor's stated memory and the bytes dcsim uses (their GB are GiB: docs/serving.md).",
)
budget_text = state.held(budget_col.text_input)(
    "Budget per device (used when Device is none)",
    key=serving.seeded("devmem"),
    max_chars=32,
    help="With its unit: 80GiB, 96GB (GiB = 2^30 bytes, GB = 10^9). Empty: no budget, figures only.",
)
reserve_text = state.held(reserve_col.text_input)(
    "Reserve (kept free)",
    key=serving.seeded("reserve"),
    max_chars=16,
    help="The fraction of each device kept free for what is not counted (activations, the decode workspace): "
    "0.1 is vLLM's gpu_memory_utilization 0.9.",
)
full_windows = (
    state.held(windows_col.selectbox)(
        "Sliding windows",
        ("false", "true"),
        key=serving.seeded("fullwin"),
        format_func=lambda text: "allocated in full" if text == "true" else "hold at most their window",
        help="In full: every layer's cache at the whole context, as engines without window-aware allocation do.",
    )
    == "true"
)
context = int(serving.parsed("context", context_text, "Context"))
concurrency = int(serving.parsed("concurrency", concurrency_text, "Concurrency"))
budget_text = serving.parsed("devmem", budget_text, "Budget")
reserve_text = serving.parsed("reserve", reserve_text, "Reserve")
source: int | None = None
source_label = serving.source_label(config)
if source_label is not None:
    source_text = state.held(st.text_input)(
        source_label,
        key=serving.seeded("source"),
        max_chars=16,
    )
    source_text = serving.parsed("source", source_text, "Source length")
    source = None if source_text == serving.AUTO else int(source_text)

params: dict[str, Any] = {"mesh": mesh.text, "strategy": strategy}
params |= SERVING.encode(
    {**weight_params, "kv": kv_dtype, "context": str(context), "concurrency": str(concurrency), "device": device}
    | {"devmem": budget_text, "reserve": reserve_text, "fullwin": switch_word(SERVING["fullwin"].parse, full_windows)}
)
if strategy == "custom":
    params["rules"] = layout.rules_text(rules)
if source_label is not None:
    params["source"] = serving.AUTO if source is None else str(source)
state.set_page_params(params | speed.serving_params(device, context))

request: Serving | None = None
try:
    request = Serving(
        mesh=mesh,
        strategy=strategy,
        rules=rules,
        weights=fmt,
        kv_dtype=kv_dtype,
        context=context,
        concurrency=concurrency,
        source_length=source,
        budget_bytes=parse_budget(budget_text) if device == serving.NO_DEVICE and budget_text else None,
        device=None if device == serving.NO_DEVICE else device,
        reserve=parse_reserve(reserve_text),
        full_windows=full_windows,
    )
    served, found, refusal = serving.answer(config, request)
except (TypeError, ValueError) as err:
    served, found, refusal = None, None, str(err)

if served is None:
    verdict_box.error(
        frame.plain(f"No verdict for {mesh.text}: this setup cannot be served as asked: {refusal}"),
        icon=":material/block:",
    )
    try:
        limit = context_limit(config)
    except (TypeError, ValueError):  # a model that is not served has no context to offer
        limit = None
    if limit is not None and context > limit:
        context_key = serving.seeded("context", serving.context_default(config))

        def use_limit() -> None:
            st.session_state[context_key] = str(limit)

        verdict_box.button(
            f"Use {units.many(limit, 'token')}, this model's positions",
            on_click=use_limit,
            icon=":material/straighten:",
            help=f"A context of {units.many(context, 'token')} is past the model's {units.count(limit)} positions.",
        )
    if request is not None:
        layout.offer_mesh(verdict_box, serving.PAGE, config, mesh, serving.serves_on(config, request))
        weights.offer_options(verdict_box, serving.PAGE, config, fmt, serving.serves_with(config, request))
    frame.stop_page()
assert request is not None  # a report is made only from a request

answer_first = serving.verdict(config, request)
if answer_first is None:
    verdict_box.info(
        frame.plain(f"{mesh.text}: no budget, so no verdict; give a device or a budget per device below."),
        icon=":material/info:",
    )
elif isinstance(answer_first, str):
    verdict_box.warning(frame.plain(f"No verdict for {mesh.text}: {answer_first}"), icon=":material/block:")
else:
    model.show_verdict(verdict_box, answer_first.text, answer_first.serves)

# --- the answer for one device ---------------------------------------------------------------------

st.subheader("The most-loaded device")
frame.metric_row(
    (
        "Weights",
        units.bytes_exact(served.weights_bytes_per_device),
        f"Every weight once: {units.bytes_exact(served.weights_bytes)} in {fmt.label}.",
    ),
    (
        "KV cache",
        units.bytes_exact(served.kv_bytes_per_device),
        f"{units.many(request.sequences_per_replica, 'sequence')} of this device's replica at {context:,} tokens; "
        f"{served.kv_bytes_per_token:,} bytes a token for the whole model.",
    ),
    ("Other (step index, buffers)", units.bytes_exact(served.other_bytes_per_device)),
    ("Total", units.bytes_exact(served.total_bytes_per_device)),
)
if served.usable_bytes is None:
    st.info(frame.plain(f"No budget: every figure is given, no verdict. ({LEAVES_OUT}.)"), icon=":material/info:")
else:
    free = served.free_bytes_per_device or 0
    verdict = "Fits" if served.fits else "Does not fit"
    line = (
        f"{verdict}: {units.bytes_exact(served.total_bytes_per_device)} of {units.bytes_exact(served.usable_bytes)} "
        f"usable ({units.bytes_exact(served.budget_bytes or 0)} less the reserve {reserve_text}); "
        f"{'free' if free >= 0 else 'over by'} {units.bytes_exact(abs(free))}; {LEAVES_OUT}"
        + (
            "; sliding windows honoured"
            if any(layer.kind == "sliding" for layer in served.layers) and not full_windows
            else ""
        )
        + "."
    )
    (st.success if served.fits else st.error)(frame.plain(line))
    if served.has_cache and served.max_concurrency is not None and served.max_context is not None:
        conc_col, ctx_col, tokens_col = st.columns(3)
        conc_col.metric(
            "Max concurrency at the context",
            units.many(served.max_concurrency, "sequence"),
            help=f"An exact floor over the whole mesh; {served.max_concurrency_in_blocks:,} in vLLM's 16-token blocks.",
        )
        ctx_col.metric(
            "Max context at the concurrency",
            units.many(served.max_context, "token"),
            help=f"Limited by {served.max_context_limited_by}"
            + (f" (the model's {served.max_positions:,} positions)" if served.max_positions else ""),
        )
        ctx_col.caption(frame.plain(f"limited by {served.max_context_limited_by}"))
        tokens_col.metric(
            "KV tokens a replica", f"{served.kv_tokens_per_replica:,}", help='vLLM\'s "GPU KV cache size: N tokens".'
        )
for note in served.notes:
    st.caption(frame.plain(note + "."))

st.altair_chart(
    serving_charts.device_bar(
        serving_charts.device_frame(serving.device_parts(served)), served.budget_bytes, served.usable_bytes
    ),
    width="stretch",
)
points = curve.capacity_curve(served)
if points and not any(point.max_concurrency for point in points):
    fixed = served.weights_bytes_per_device + served.other_bytes_per_device
    st.info(
        frame.plain(
            f"No capacity curve: the weights and fixed state alone ({units.bytes_exact(fixed)}) pass the usable "
            f"{units.bytes_exact(served.usable_bytes or 0)} a device, so no context serves even one sequence on "
            f"this mesh. The sentence at the top names what would."
        ),
        icon=":material/info:",
    )
elif points:
    st.altair_chart(serving_charts.capacity_curve(serving_charts.curve_frame(points)), width="stretch")
    st.caption("Max sequences at once against the context, the chosen context in red: an exact floor at each point.")

speed.serving_section(config, report, served, device)  # the decode speed (dcsim.ui.speed)

st.subheader(f"The weights in {fmt.name}")
weights.show_table(served.table, served.weights_on_device_by_path)
weights.write_button(served.table, "serving.write")

if served.layers:
    st.subheader("What each layer caches")
    st.dataframe(serving.layers_frame(served), hide_index=True, width="stretch")
if found is not None:
    st.subheader("The smallest mesh that serves the target")
    answer_mesh = found.answer
    st.write(
        frame.plain(
            f"{answer_mesh.mesh.text} ({units.many(answer_mesh.num_devices, 'device')}) serves "
            f"{units.many(concurrency, 'sequence')} at {units.many(context, 'token')}."
            if answer_mesh
            else "None of the meshes tried serves the target."
        )
    )
    st.dataframe(serving.tried_frame(found), hide_index=True, width="stretch")

st.download_button(
    "Download the serving report (JSON)",
    json.dumps(records.serving_record(served, found), indent=2),
    file_name="serving.json",
    mime="application/json",
    icon=":material/download:",
)

st.subheader("Check with XLA")
from dcsim.serving import verify  # noqa: E402  (loaded when a report is shown: it starts child processes)

try:
    verify.check_verifiable(served)
    not_offered = None if served.has_cache else "this model has no decoder cache"
except (TypeError, ValueError) as err:
    not_offered = str(err)
st.caption(
    "Compiles one decoding step with the weights and the cache sharded, on as many virtual CPU devices as "
    "the mesh has, in a separate process, and reads XLA's memory analysis of one device."
)
if st.button("Verify with XLA", key="serving.verify", disabled=not_offered is not None, icon=":material/fact_check:"):
    with turns.waiting(f"Compiling a decoding step on {units.many(mesh.num_devices, 'virtual device')}…"):
        try:
            checked: Any = verify.verify(served)
        except (TypeError, ValueError, verify.VerifyFailed) as err:
            checked = str(err)
    if isinstance(checked, str):
        st.error(frame.plain(f"XLA's check failed: {checked}"), icon=":material/error:")
    else:
        frame.metric_row(
            ("XLA: argument bytes per device", units.bytes_exact(checked.argument_bytes_per_device)),
            (
                "Expected by dcsim",
                units.bytes_exact(checked.expected_bytes_per_device),
                f"Total a device plus the step's {checked.token_bytes_per_device} bytes of token ids.",
            ),
            (
                "XLA temporaries (CPU compile)",
                units.bytes_exact(checked.temp_bytes_per_device),
                "The decode workspace of a CPU compile; GPU and TPU assign buffers differently.",
            ),
        )
        st.caption("They agree exactly." if checked.matches else "They differ.")
elif not_offered is not None:
    st.info(frame.plain(f"XLA's check is not offered for this setup: {not_offered}."), icon=":material/block:")
