"""Time on the Memory and Serving pages: a training step's time and a serving replica's decode
speed, estimates from ``dcsim.speed`` (docs/time.md), drawn below each page's memory answer.

The settings are the command line's, under the link keys declared in ``dcsim.requests.timing``
(``dph``, ``tokens``, ``price``, ``mbs``, ``sched``, ``vstages``, ``prompt``) and the Serving page's
``device``:

- Memory page: ``device`` (a catalog name, or ``none``, the default, which keeps an old link's
  meaning: the typed budget ``devmem``). With a device its memory is the budget, as
  ``memory --device`` does, and the budget box is not read; ``device``, ``dph``, ``tokens``,
  ``price`` and the step's micro-batches and pipeline schedule (``mbs``, ``sched``, ``vstages``)
  are written only with a device.
- Serving page: ``prompt`` and ``dph``, with the page's own ``device``.

Each is checked when a link arrives (``frame.setting_from_link``): a bad value is named in a
warning and replaced by its default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from dcsim.memory.report import TrainingReport
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.report import speed_charts
from dcsim.requests.serving import SERVING
from dcsim.requests.timing import TIMING, default_prompt
from dcsim.serving import catalog
from dcsim.serving.engine import ServingReport
from dcsim.speed import STEP, unfit_clause
from dcsim.ui import frame, memory, state

MEMORY_PAGE = "memory"
SERVING_PAGE = "serving"
NO_DEVICE = "none"
NO_FIGURE = "none"  # tokens and price: no run priced
SCHEDULE_KEYS = ("mbs", "sched", "vstages")  # a step's micro-batches and pipeline schedule


def _seeded(page: str, name: str, default: str | None = None) -> str:
    field = SERVING[name] if name == "device" else TIMING[name]
    return frame.seeded_setting(
        page, name, field.default if default is None else default, field.read, limit=field.limit
    )


def _held(page: str, name: str, default: str | None = None) -> str:
    """The setting's text as its box holds it (seeded from the link first), or its last valid text
    while the box holds an edit its declaration refuses (the box says so, and shows that value).
    ``default``: a default that depends on the model or the context, as the box is given it."""
    text = str(st.session_state[_seeded(page, name, default)])
    try:
        return TIMING[name].read(text)
    except (TypeError, ValueError):
        return frame.last_valid_setting(page, name, TIMING[name].default if default is None else default)


def _parsed(page: str, name: str, text: str, what: str) -> str:
    return frame.parsed_setting(page, name, text, TIMING[name].read, what)


# The time boxes: link key (``dcsim.requests.timing``) -> label, what an error calls it, most characters.
TIME_BOXES = {
    "dph": ("Devices a host", "Devices a host", 8),
    "tokens": ("Run's tokens (none: no run)", "Run's tokens", 24),
    "price": ("Price a device-hour (none: no cost)", "Price", 24),
    "prompt": ("Prompt (tokens, for the first token's time)", "Prompt", 16),
    "mbs": ("Micro-batches a step", "Micro-batches a step", 8),
    "vstages": ("Virtual stages (interleaved)", "Virtual stages", 8),
}
RUN_HELP = {  # the Memory page's boxes, a run's
    "dph": "Which mesh axes run inside a host (scale-up links) and which cross hosts (scale-out).",
    "tokens": "The tokens the run trains on, e.g. 2e12: its steps, days and device-hours.",
    "price": "In any currency: the run's cost is its device-hours times this.",
    "mbs": "Gradient accumulation: a data-parallel replica's micro-batches a step (the global batch is the "
    "replicas x the micro-batch x these). With a `stage` axis in the mesh, the pipeline's, at least the stages.",
    "vstages": "The interleaved schedule's model chunks a device (2 or more); 1 with 1f1b.",
}
SERVING_DPH_HELP = "Whether the tensor-parallel all-reduces run inside a host (scale-up links) or across hosts."


def _time_box(
    page: str, column: Any, name: str, help: str | None = None, on_change: Any = None, default: str | None = None
) -> str:
    """The time box ``name`` drawn in ``column``, seeded from the link, and its text as the link
    writes it (on a refused edit, the error and the last valid text). ``default``: as ``_held``'s."""
    label, what, max_chars = TIME_BOXES[name]
    text = state.held(column.text_input)(
        label, key=_seeded(page, name, default), max_chars=max_chars, on_change=on_change, help=help
    )
    return _parsed(page, name, text, what)


def sentence(clause: str) -> str:
    """A lower-case clause of the engine's as a sentence of a page's caption."""
    return f"{clause[:1].upper()}{clause[1:]}."


def figure(value: float) -> str:
    """An estimate to four significant figures, with thousands separators (27,880, not 2.788e+04)."""
    rounded = float(f"{value:.4g}")
    return f"{rounded:,.0f}" if abs(rounded) >= 1000 else f"{rounded:g}"


def device_label(name: str) -> str:
    if name == NO_DEVICE:
        return "none: the budget typed above, no time"
    row = catalog.ACCELERATORS[name]
    return f"{row.title} ({row.stated} = {row.bytes:,} bytes)"


# --- the Memory page -----------------------------------------------------------------------------


def memory_device() -> str:
    """The Memory page's device as its picker holds it (seeded from the link, ``none`` by default),
    read before the answer, whose budget it sets; the picker is drawn below the answer."""
    return str(st.session_state[_seeded(MEMORY_PAGE, "device", NO_DEVICE)])


def memory_budget(device: str, budget: int, budget_text: str) -> tuple[int, str]:
    """The budget the answer uses: the device's memory (``memory --device``), or the typed one."""
    if device == NO_DEVICE:
        return budget, budget_text
    row = catalog.ACCELERATORS[device]
    return row.bytes, f"{row.stated}, {device}"


def memory_params(device: str) -> dict[str, str]:
    """The Memory page's time settings as its link writes them: ``device``, and with one the run's."""
    if device == NO_DEVICE:
        return {}  # an old link, rewritten as it always was
    names = ("dph", "tokens", "price", *SCHEDULE_KEYS)
    return {"device": device} | TIMING.encode({name: _held(MEMORY_PAGE, name) for name in names})


def device_setup(setup: memory.Setup) -> tuple[memory.Setup, dict[str, str]]:
    """The Memory page's setup with the picked device's memory as its budget (the typed one without a
    device), and the page's link: the setup's keys and the time's."""
    device = memory_device()
    budget, budget_text = memory_budget(device, setup.budget, setup.budget_text)
    return dataclasses.replace(setup, budget=budget, budget_text=budget_text), setup.params() | memory_params(device)


def memory_time_section(config: ModelConfig, report: ParamReport, setup: memory.Setup, on_change: Any) -> None:
    """The step's time on the picked device, below the Memory page's answer (the page's fragment:
    ``on_change`` reruns it and the link)."""
    held = memory.cached_memory(config, setup).memory
    traced = None
    if setup.step is not None and held is not None:
        traced = memory.cached_activations(
            config, setup.step, setup.training.param_dtype, setup.mesh, with_recompute=True
        )
    training_time_section(config, report, held, None if isinstance(traced, str) else traced, setup.step, on_change)


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The time's settings of the Memory page: devices a host, a run's tokens and price (None: none),
    and the step's micro-batches and pipeline schedule (as the link writes them)."""

    devices_per_host: int
    tokens: int | None
    price: float | None
    micro_batches: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1


def run_settings(on_change: Any) -> RunSettings:
    """The device picker and the run's boxes (devices a host, tokens, price), each in the link."""
    device_col, dph_col, tokens_col, price_col = st.columns([3, 1, 2, 2])
    state.held(device_col.selectbox)(
        "Device (its speeds time the step; its memory is the budget)",
        (NO_DEVICE, *catalog.DEVICE_NAMES),
        key=_seeded(MEMORY_PAGE, "device", NO_DEVICE),
        format_func=device_label,
        on_change=on_change,
        help="A catalog accelerator, as `memory --device`: its memory replaces the budget box, its peaks and "
        "bandwidths (each with its source, docs/time.md) give the step's time.",
    )
    dph, tokens, price = (
        _time_box(MEMORY_PAGE, column, name, RUN_HELP[name], on_change)
        for column, name in ((dph_col, "dph"), (tokens_col, "tokens"), (price_col, "price"))
    )
    mbs_col, sched_col, vstages_col = st.columns(3)
    mbs = _time_box(MEMORY_PAGE, mbs_col, "mbs", RUN_HELP["mbs"], on_change)
    schedule = state.held(sched_col.selectbox)(
        "Pipeline schedule",
        TIMING["sched"].choices or (),
        key=_seeded(MEMORY_PAGE, "sched"),
        on_change=on_change,
        help="With a `stage` axis: 1f1b, or interleaved with virtual stages; the bubble is (stages - 1) / "
        "(virtual stages x micro-batches) of the ideal time (Narayanan et al. 2021).",
    )
    vstages = _time_box(MEMORY_PAGE, vstages_col, "vstages", RUN_HELP["vstages"], on_change)
    return RunSettings(
        devices_per_host=int(dph),
        tokens=None if tokens == NO_FIGURE else int(tokens),
        price=None if price == NO_FIGURE else float(price),
        micro_batches=int(mbs),
        schedule=str(schedule),
        virtual_stages=int(vstages),
    )


def _step_time(config: ModelConfig, report: ParamReport, held: Any, traced: Any, device: str, run: RunSettings) -> Any:
    """The engine's ``StepTime``, or its refusal as text."""
    from dcsim.speed import estimate
    from dcsim.speed.pipeline import Pipeline

    try:
        schedule = Pipeline(micro_batches=run.micro_batches, schedule=run.schedule, virtual_stages=run.virtual_stages)
        return estimate.training_time(
            config,
            report,
            held,
            traced,
            catalog.get_accelerator(device),
            devices_per_host=run.devices_per_host,
            tokens=run.tokens,
            price=None if run.tokens is None else run.price,
            schedule=schedule,
        )
    except (TypeError, ValueError) as err:
        return str(err)


def training_time_section(
    config: ModelConfig, report: ParamReport, held: Any, traced: Any, step: Any, on_change: Any
) -> None:
    """The step's time under the answer: the device and the run's settings, then (with a sequence and
    a device) the point estimate, its band, the roofline, MFU, tokens/s, the run, the bars."""

    st.subheader("Step time (an estimate)")
    device = memory_device()
    run = run_settings(on_change)
    if device == NO_DEVICE:
        st.caption("Pick a device to time the step: its speeds give the time, its memory the budget.")
        return
    row = catalog.ACCELERATORS[device]
    st.caption(
        frame.plain(
            f"The budget above is the {row.title}'s memory, {row.stated} = {row.bytes:,} bytes, as memory --device "
            "takes it; the Budget box is read with no device."
        )
    )
    if step is None or traced is None or held is None:
        st.caption(f"Give a sequence to time a step on the {catalog.ACCELERATORS[device].title}.")
        return
    if run.price is not None and run.tokens is None:
        st.caption("A price prices a run: give its tokens too.")
    time = _step_time(config, report, held, traced, device, run)
    if isinstance(time, str):
        st.error(frame.plain(f"The step cannot be timed: {time}"), icon=":material/error:")
        return
    frame.estimate_row(
        time.leaves_out,
        (
            "Step (estimate)",
            f"{time.step_seconds:.3g} s",
            "Compute or memory, whichever is longer, plus the exposed communication.",
        ),
        (
            "Band: full to no overlap",
            f"{time.step_seconds_low:.3g}–{time.step_seconds_high:.3g} s",
            "The largest of compute, memory and communication, to their sum.",
        ),
        ("Roofline", f"{time.roofline_seconds:.3g} s", "Every peak at 100%, no latency: the physical limit."),
        ("MFU (estimate)", f"{100 * time.mfu:.1f}%", "The model's FLOPs a device over the step, over the peak."),
        ("Tokens/s (estimate)", f"{time.tokens_per_second:,.0f}", "All replicas together."),
        exact=("Roofline",),
    )
    footprint = TrainingReport.of(held, memory.activation_bytes_of(held, traced), row.bytes)  # the answer's own
    over = "" if footprint.over_bytes is None else f" {sentence(unfit_clause(row.title, footprint.over_bytes, STEP))}"
    st.caption(frame.plain(f"Every figure is an estimate; leaves out {', '.join(time.leaves_out)}.{over}"))
    if time.run is not None:
        cells = [
            ("Run's days (estimate)", figure(time.run.seconds / 86400), f"{time.run.steps:,} steps."),
            ("Device-hours (estimate)", figure(time.run.device_hours), ""),
        ]
        if time.run.cost is not None:
            cells.append(
                ("Cost (estimate)", figure(time.run.cost), f"At {time.run.price_per_device_hour:g} a device-hour.")
            )
        frame.estimate_row(time.leaves_out, *cells)
    st.altair_chart(speed_charts.step_time_bars(speed_charts.step_time_frame(time)), width="stretch")
    st.caption(
        frame.plain(
            f"Compute {time.compute_seconds:.3g} s ({time.flops.hardware:,} FLOPs a device at matmul efficiency "
            f"{time.matmul_efficiency:g}), memory {time.memory_seconds:.3g} s ({time.hbm_bytes:,} bytes through HBM), "
            f"communication {time.comm_seconds:.3g} s, of which {time.exposed_comm_seconds:.3g} s exposed: "
            "tensor-parallel collectives wait, data-parallel and FSDP ones hide behind the backward's compute. "
            + (f"Pipeline: {time.pipeline_text}. " if time.pipeline_text else "")
            + "Sources and rules: docs/time.md."
        )
    )


# --- the Serving page ----------------------------------------------------------------------------


def _decode_speed(
    config: ModelConfig,
    report: ParamReport,
    served: ServingReport,
    accelerator: catalog.Accelerator,
    prompt: str,
    dph: str,
) -> tuple[Any, Any] | None:
    """The decode speed and the throughput curve at ``prompt`` tokens, or None once the refusal is
    shown: a prompt the context cannot take (with the longest it can, offered), or a device without
    the speeds."""
    from dcsim.speed import serving as speeds

    try:
        request = speeds.SpeedRequest(
            report=served,
            config=config,
            params=report,
            device=accelerator,
            prompt=int(prompt),
            devices_per_host=int(dph),
        )
        return speeds.decode_speed(request), speeds.speed_curve(request)
    except speeds.PromptTooLong as err:  # the engine's rule: the first token comes after the prompt, in the context
        st.error(frame.plain(f"Prompt: {err}."), icon=":material/block:")
        if err.longest >= 1:  # a context of one token takes no prompt at all
            frame.offer(
                st,
                f"Use {units.many(err.longest, 'token')}, the longest prompt this context takes",
                {frame.setting_key(SERVING_PAGE, "prompt"): str(err.longest)},
                help="The prompt and the tokens generated after it share the context.",
            )
    except ValueError as err:
        st.info(frame.plain(f"No decode speed on the {accelerator.title}: {err}."), icon=":material/block:")
    return None


def serving_section(config: ModelConfig, report: ParamReport, served: ServingReport, device: str) -> None:
    """The decode speed under the Serving page's answer: the step, tokens/s a sequence and a
    device, the inter-token latency, the first token after ``prompt`` tokens, and the throughput
    against latency over the concurrency. Without a device, or one without speeds, one line says so."""
    st.subheader("Decode speed (an estimate)")
    prompt_col, dph_col = st.columns(2)
    prompt = _time_box(SERVING_PAGE, prompt_col, "prompt", default=str(default_prompt(served.serving.context)))
    dph = _time_box(SERVING_PAGE, dph_col, "dph", SERVING_DPH_HELP)
    if device == NO_DEVICE:
        st.caption("Pick a device above for the decode speed: a typed budget has no speeds.")
        return
    from dcsim.speed import serving as speeds

    timed = _decode_speed(config, report, served, catalog.get_accelerator(device), prompt, dph)
    if timed is None:
        return
    speed, curve = timed
    frame.estimate_row(
        speeds.LEAVES_OUT,
        (
            "Decode step (estimate)",
            f"{1000 * speed.decode_step_seconds:.3g} ms",
            f"Memory {1000 * speed.memory_seconds:.3g} ms or compute {1000 * speed.compute_seconds:.3g} ms, "
            f"whichever is longer, plus the all-reduces {1000 * speed.comm_seconds:.3g} ms.",
        ),
        ("Inter-token latency (estimate)", f"{1000 * speed.decode_step_seconds:.3g} ms", "One decode step."),
        ("Tokens/s a sequence (estimate)", f"{speed.tokens_per_second_per_sequence:,.1f}", ""),
        ("Tokens/s a device (estimate)", f"{speed.tokens_per_second_per_device:,.0f}", ""),
        (
            "First token (estimate)",
            f"{1000 * speed.time_to_first_token_seconds:.3g} ms",
            f"Prefill of {speed.prompt:,} tokens, compute-bound; chunked prefill is not modelled.",
        ),
    )
    st.caption(
        frame.plain(
            f"Estimates, matmuls in {speed.matmul_dtype}, {speed.bytes_read_per_device:,} bytes read a device a "
            f"step; leaves out {', '.join(speeds.LEAVES_OUT)} (docs/time.md)."
            + (f" {sentence(speed.unfit(speed.device.title))}" if speed.over_bytes is not None else "")
        )
    )
    if curve:
        frame_ = speed_charts.speed_curve_frame(curve, served.serving.concurrency)
        st.altair_chart(speed_charts.speed_curve_chart(frame_), width="stretch")
        st.caption(
            "Throughput against latency (estimates): a point a concurrency, doubling from one sequence a replica up "
            "to the most the budget holds at the context; the chosen concurrency in red."
        )


def serving_params(device: str, context: int) -> dict[str, str]:
    """The Serving page's time settings as its link writes them (with a device). The prompt's
    default follows the ``context``: 128 tokens, or the context less one where that is shorter,
    so an untouched prompt is never refused (``frame.seeded_setting``); a typed one stays."""
    if device == NO_DEVICE:
        return {}
    prompt = _held(SERVING_PAGE, "prompt", str(default_prompt(context)))
    return TIMING.encode({"prompt": prompt, "dph": _held(SERVING_PAGE, "dph")})
