"""Checkpoint page: save the configured model with Orbax for real, measure it, restore it, and
show from that evidence how the checkpoint differs from the raw estimate; optionally from several
processes at once on JAX's distributed runtime, as several hosts save one checkpoint."""

import functools
import json

import streamlit as st

from dcsim.checkpoint import measurement, multiprocess, records
from dcsim.checkpoint.plan import verify
from dcsim.inputs import show
from dcsim.quantities import payload, units
from dcsim.report import checkpoint_charts
from dcsim.ui import cache, checkpoint, frame, model, router, state, widgets
from dcsim.ui import plan as plan_view

router.require_router()

# Pixels: the widest label ("Restored bit for bit" and its help icon, about 130) fits, and five fit a
# laptop's row (5 x 140 + gaps = 764 of 820 at 1280 wide), two a phone's (296 of 358 at 390 wide).
METRIC_WIDTH = 140
CACHE_WORDS = {
    "hit": "hit, the program was read back instead of compiled",
    "miss": "miss, the program was compiled (and kept for next time if that took a second or more)",
    "off": "off",
}
JUST_MEASURED = "dcsim.checkpoint.just_measured"
MESH_KEY = state.WIDGET_PREFIX + "checkpoint.mesh"
VALID_MESH = "dcsim.checkpoint.valid_mesh"
MESH_PROBLEM = "dcsim.checkpoint.mesh_problem"
JUST_SWEPT = "dcsim.checkpoint.just_swept"
STAGE_TEXT = {
    "connecting": "Joining JAX's distributed runtime (coordinator on 127.0.0.1)",
    "initialising": "Initialising the parameters for real (the child's seed)",
    "saving": "Saving with Orbax's StandardCheckpointer",
    "measuring": "Measuring the files on disk",
    "restoring": "Restoring onto the same shardings",
    "verifying": "Comparing every restored array bit for bit",
    "done": "Done",
}

config, _counted = model.heading("A real checkpoint, measured")
st.caption(
    "Saves the model's parameters with Orbax in a separate process, measures what it wrote, restores it "
    "and compares, so the difference from the raw estimate is shown from evidence."
)

# --- settings: seeded from the link (or this session's last visit), checked, then widgets -----------

# The storage dtype is the configuration's (``dtype`` in every page's link); these are the page's own.
DEFAULTS = {"mesh": checkpoint.DEFAULT_MESH, "strategy": "replicated", "processes": "1"}
for name, default in DEFAULTS.items():
    if state.WIDGET_PREFIX + f"checkpoint.{name}" in st.session_state:
        continue
    value = frame.setting_from_link(name, default, functools.partial(checkpoint.parse_setting, name))[1]
    state.seed_widget(f"checkpoint.{name}", value)
    if name == "mesh":
        st.session_state[VALID_MESH] = value


def check_mesh() -> None:
    """A typed mesh is used only when it parses; otherwise the last valid one stays, with the reason."""
    text = st.session_state[MESH_KEY]
    try:
        st.session_state[MESH_KEY] = st.session_state[VALID_MESH] = checkpoint.parse_setting("mesh", str(text or ""))
    except (TypeError, ValueError) as err:
        st.session_state[MESH_PROBLEM] = (
            f"Mesh {show(text)} was not used: {err}. Still using {st.session_state[VALID_MESH]}."
        )
        st.session_state[MESH_KEY] = st.session_state[VALID_MESH]


mesh_choices = [f"data={n}" for n in checkpoint.DEVICE_CHOICES]
chosen_mesh = st.session_state[MESH_KEY]
if chosen_mesh not in mesh_choices:
    mesh_choices.append(chosen_mesh)

dtype_col, mesh_col, strategy_col, processes_col = st.columns(4)
with dtype_col:
    config, _ = widgets.apply(config, dtype=widgets.dtype_choice(config, page="checkpoint"))
mesh_text = state.held(mesh_col.selectbox)(
    "Virtual devices (mesh)",
    mesh_choices,
    key=MESH_KEY,
    accept_new_options=True,
    on_change=check_mesh,
    help=(
        "Virtual CPU devices in the child process, as AXIS=SIZE[,AXIS=SIZE...]: pick one or type a mesh "
        f"such as data=2,model=2 (at most {measurement.MAX_DEVICES} devices)."
    ),
)
strategy = state.held(strategy_col.selectbox)(
    "Sharding strategy",
    checkpoint.STRATEGIES,
    key=state.WIDGET_PREFIX + "checkpoint.strategy",
    help="replicated: every device holds every array whole. fsdp: each array is split along one dimension "
    "over all the devices, where it divides (else replicated).",
)
processes = state.held(processes_col.selectbox)(
    "Processes (simulated hosts)",
    checkpoint.PROCESS_CHOICES,
    key=state.WIDGET_PREFIX + "checkpoint.processes",
    help="1: one child process holds every device. 2 or 4: that many processes save at once on JAX's "
    "distributed runtime (coordinator on 127.0.0.1), each holding its share of the mesh's devices, as "
    "hosts of a cluster do. The mesh's device count must be a multiple of it.",
)

mesh_problem = st.session_state.pop(MESH_PROBLEM, None)
if mesh_problem:
    st.error(frame.plain(mesh_problem), icon=":material/error:")

settings = None
try:
    settings = checkpoint.Settings.parse(config.dtype, str(mesh_text or ""), strategy, str(processes))
except (TypeError, ValueError) as err:
    st.error(frame.plain(f"These settings cannot be used: {err}."), icon=":material/error:")
    state.set_page_params({"strategy": strategy, "processes": str(processes)})
else:
    state.set_page_params(settings.params())

# --- the plan: what would be measured, and whether the ceiling allows it -----------------------------

report = cache.count(config)
st.subheader("Before anything runs")
params_col, payload_col = st.columns(2)
params_col.metric("Total parameters", units.count(report.total_params))
payload_col.metric(
    f"Raw payload ({config.dtype})",
    units.bytes_exact(payload.raw_bytes(report.total_params, config.dtype)),
    help=f"Values x {payload.bytes_per_value(config.dtype)} bytes a {config.dtype} value: the arrays' bare contents.",
)
if config.dtype != "float32":
    payload_col.caption(f"In float32: {units.bytes_exact(payload.raw_bytes(report.total_params, 'float32'))}.")

plan, refusal = None, None
if settings is not None:
    try:
        plan = checkpoint.plan(config, settings)
    except (TypeError, ValueError) as err:
        refusal = str(err)
if refusal:
    st.error(frame.plain(f"This model cannot be measured here: {refusal}."), icon=":material/block:")
    st.caption(
        "The ceiling keeps this server's measurement under about 1 GB of memory. Whoever runs this server can "
        f"raise it with the environment variable `{measurement.MAX_PARAMS_ENV}` (see docs/checkpoint.md "
        "in the repository). The count and the raw payload above need no measurement, nor do the bytes each "
        "device holds, on the Layout page:"
    )
    frame.page_link("pages/layout.py", label="What each device holds: the Layout page", icon=":material/grid_on:")
elif plan is not None and settings is not None:
    single_plan = plan.checkpoint if isinstance(plan, multiprocess.MultiprocessPlan) else plan
    held = (
        ""
        if single_plan.stored_values == report.total_params
        else f" ({units.count(single_plan.stored_values)} held by the devices together, replicas included)"
    )
    group_text = (
        f", {plan.num_processes} processes of {units.many(plan.devices_per_process, 'device')} each"
        if isinstance(plan, multiprocess.MultiprocessPlan)
        else ""
    )
    st.success(
        frame.plain(
            f"Within this server's ceiling of {units.count(single_plan.max_params)} values{held}: "
            f"ready to measure on {units.many(settings.mesh.num_devices, 'virtual device')} ({settings.mesh.text}, "
            f"{settings.strategy}{group_text})."
        ),
        icon=":material/check_circle:",
    )

# --- the measurement: a child process, one at a time per server --------------------------------------

kept = checkpoint.cached_report(config, settings) if plan is not None and settings is not None else None
lock = checkpoint.measurement_lock()
if plan is not None and lock.busy:
    st.info(
        "Another measurement is running on this server right now (one at a time keeps memory bounded). "
        "A click waits a moment for it; if it is still running you will be asked to try again.",
        icon=":material/hourglass_top:",
    )
clicked = st.button(
    "Measure again" if kept else "Save, measure and restore",
    type="secondary" if kept else "primary",
    icon=":material/save:",
    disabled=plan is None,
    help=(
        f"Runs in a child process with a time limit of {checkpoint.TIMEOUT_SECONDS:g} s"
        if settings is None or settings.processes == 1
        else f"Runs in {settings.processes} processes at once with a time limit of {checkpoint.TIMEOUT_SECONDS:g} s "
        "for the group; if any one fails or hangs, all are ended"
    )
    + f" (counted once started: importing JAX has {checkpoint.TIMEOUT_SECONDS:g} s of its own)"
    + "; the temporary checkpoint is deleted afterwards.",
)
if clicked and plan is not None and settings is not None:
    chosen = settings  # the lambdas below see it narrowed
    group_size = chosen.processes
    label = "Measuring in a child process…" if group_size == 1 else f"Measuring in {group_size} processes at once…"
    with st.status(label, expanded=True) as status:
        bar = st.progress(
            0.0,
            text="Starting a child process (it imports JAX, Flax and Orbax first)"
            if group_size == 1
            else f"Starting {group_size} processes (each imports JAX, Flax and Orbax first)",
        )

        def show_stage(stage: str) -> None:
            done = measurement.STAGES.index(stage) if stage in measurement.STAGES else 0
            bar.progress(done / (len(measurement.STAGES) - 1), text=STAGE_TEXT.get(stage, stage))
            status.update(label=f"{STAGE_TEXT.get(stage, stage)}…")

        group_stages: dict[int, str] = {}

        def show_group_stage(process_id: int, stage: str) -> None:
            group_stages[process_id] = stage
            done, where = checkpoint.group_progress(group_stages, group_size)
            bar.progress(done, text=where)
            status.update(label=f"{STAGE_TEXT.get(min(group_stages.values(), key=multiprocess.STAGES.index))}…")

        measured = checkpoint.run_in_status(
            status,
            "measurement",
            lambda: (
                checkpoint.measure(config, chosen, on_progress=show_stage)
                if group_size == 1
                else checkpoint.measure_group(config, chosen, on_progress=show_group_stage)
            ),
        )
        if measured is not None:
            kept = measured
            st.session_state[JUST_MEASURED] = kept.measured_at
            # Done: a rerun raised inside the box would mark it as failed while the page redraws.
            status.update(label="Measured", state="complete")
    if measured is not None:
        st.rerun()  # so the button and the caption describe the kept report
elif kept and st.session_state.pop(JUST_MEASURED, None) == kept.measured_at:
    st.caption(
        f"Measured just now, at {kept.measured_at} UTC. The report is kept for this configuration and these "
        "settings: a revisit shows it without measuring again."
    )
elif kept:
    st.caption(
        f"Showing the measurement kept from {kept.measured_at} UTC for this configuration and these settings "
        "(cached: nothing was run now). Press “Measure again” for a fresh one."
    )

# --- the results ---------------------------------------------------------------------------------------

if kept:
    result = kept.report
    st.subheader("What the checkpoint wrote")
    # The sizes run long (3,891,587 bytes (3.71 MiB)): columns as wide as the page allows, one line
    # each, stacked on a phone. The short figures share a wrapping row of fixed width below them.
    for column, (label, value, explanation) in zip(
        st.columns([2, 2, 1]),
        [
            ("On disk", units.bytes_exact(result.disk_bytes), "Every file the checkpoint wrote, metadata included."),
            ("Largest file", units.bytes_exact(result.largest_file_bytes), "The largest single file."),
            ("Files", units.count(result.num_files), "Files the checkpoint wrote, metadata included."),
        ],
        strict=True,
    ):
        column.metric(label, value, help=explanation)
    figures = st.container(horizontal=True)
    for label, value, explanation in [
        (
            "Restored bit for bit",
            "Yes" if result.restore_verified else "No",
            "Restore verified: every restored array equals the saved one bit for bit, on the same sharding.",
        ),
        ("Save", f"{result.save_seconds:.2f} s", "From the call to save until the checkpoint was committed."),
        ("Restore", f"{result.restore_seconds:.2f} s", "From the call to restore until every array was ready."),
        (
            "Initialisation",
            f"{result.init_seconds:.2f} s",
            "The concrete initialisation of the parameters, compiling its program included. XLA's "
            f"compilation cache: {CACHE_WORDS.get(result.compilation_cache, result.compilation_cache)}.",
        ),
        ("Devices", units.count(result.num_devices), f"Virtual CPU devices: mesh {result.mesh}, {result.strategy}."),
    ]:
        figures.metric(label, value, help=explanation, width=METRIC_WIDTH)
    if not result.restore_verified:
        st.error("The restored arrays differ from the saved ones.", icon=":material/error:")
    peaked = (
        "The child process peaked"
        if kept.group is None
        else f"Of the {kept.group.num_processes} processes, the highest peaked"
    )
    st.caption(
        f"{peaked} at {units.binary_bytes(result.peak_rss_bytes)} of memory, "
        f"{units.binary_bytes(result.peak_growth_bytes)} over its idle baseline. "
        f"JAX {result.jax_version}, orbax-checkpoint {result.orbax_version}."
    )

    sizes = records.sizes_frame(result)
    frame.text_table(
        sizes, {"figure": "Figure", "num_bytes": "Bytes", "what": "What it is"}, {"num_bytes": units.bytes_exact}
    )
    st.altair_chart(checkpoint_charts.checkpoint_sizes(sizes, result.dtype), width="stretch")

    st.subheader("Why they differ")
    st.markdown("\n".join(f"- {frame.plain(line)}" for line in records.explain(result)))

    st.subheader("Files")
    groups = records.file_groups_frame(result)
    frame.text_table(
        groups,
        {"kind": "Kind", "num_files": "Files", "num_bytes": "Bytes"},
        {"num_files": units.count, "num_bytes": units.bytes_exact},
    )
    files = records.files_frame(result)
    with st.expander(f"Every file ({result.num_files:,})"):
        frame.text_table(
            files,
            {"path": "Path inside the checkpoint", "kind": "Kind", "num_bytes": "Bytes"},
            {"num_bytes": units.count},
        )

    sizes_csv, files_csv, record_json = st.columns(3)
    widgets.download("Sizes (CSV)", sizes, "dcsim-checkpoint-sizes.csv", where=sizes_csv)
    widgets.download("Files (CSV)", files, "dcsim-checkpoint-files.csv", where=files_csv)
    widgets.download(
        "Whole measurement (JSON)",
        json.dumps(records.checkpoint_record(result), indent=2),
        "dcsim-checkpoint.json",
        where=record_json,
    )

# --- across processes: the group's own figures, then the sweep -----------------------------------------


def table(frame_to_show) -> None:
    frame.text_table(frame_to_show, *checkpoint.shown_columns(frame_to_show))


if kept and kept.group is not None:
    group = kept.group
    st.subheader(f"Across {group.num_processes} processes")
    st.caption(
        f"{group.num_processes} processes of {units.many(group.devices_per_process, 'virtual device')} each, joined by "
        "JAX's distributed runtime on 127.0.0.1; the times above are the group's wall time, from the first "
        "process starting to the last finishing."
    )
    table(records.processes_frame(group))
    table(records.file_places_frame(group))
    lines = [*records.explain_processes(group), records.MULTIHOST_NOTE]
    st.markdown("\n".join(f"- {frame.plain(line)}" for line in lines))
    widgets.download(
        "Group measurement (JSON)",
        json.dumps(records.multiprocess_record(group), indent=2),
        "dcsim-checkpoint-processes.json",
    )

st.subheader("Save from 1, 2 and 4 processes")
st.caption(
    "The same checkpoint saved by 1, 2 and 4 processes at once, each holding its share of the mesh's devices, "
    "as hosts of a cluster do: how save time, bytes per process and memory per process change with the "
    "number of processes."
)
sweep_problem = checkpoint.sweep_problem(settings) if settings is not None else None
kept_sweep = checkpoint.cached_sweep(config, settings) if settings is not None and plan is not None else None
if sweep_problem:
    st.info(frame.plain(sweep_problem), icon=":material/info:")
sweep_clicked = st.button(
    "Sweep again" if kept_sweep else "Sweep 1, 2 and 4 processes",
    icon=":material/stacked_line_chart:",
    disabled=plan is None or sweep_problem is not None,
    help="Three measurements one after the other, each a group of processes with a time limit of "
    f"{checkpoint.TIMEOUT_SECONDS:g} s once started (importing JAX has {checkpoint.TIMEOUT_SECONDS:g} s of its own); "
    "the temporary checkpoints are deleted afterwards.",
)
if sweep_clicked and plan is not None and settings is not None:
    chosen = settings  # the lambda below sees it narrowed
    with st.status("Sweeping…", expanded=True) as status:
        bar = st.progress(0.0, text=f"Starting {units.many(checkpoint.SWEEP_PROCESSES[0], 'process', 'processes')}")
        sweep_stages: dict[tuple[int, int], str] = {}

        def show_sweep_stage(num_processes: int, process_id: int, stage: str) -> None:
            sweep_stages[(num_processes, process_id)] = stage
            done, where = checkpoint.sweep_progress(sweep_stages, num_processes)
            bar.progress(done, text=where)
            status.update(label=f"Sweeping: {units.many(num_processes, 'process', 'processes')}…")

        swept = checkpoint.run_in_status(
            status, "sweep", lambda: checkpoint.measure_sweep(config, chosen, on_progress=show_sweep_stage)
        )
        if swept is not None:
            kept_sweep = swept
            st.session_state[JUST_SWEPT] = kept_sweep.measured_at
            status.update(label="Swept", state="complete")  # as above: never a red box on success
    if swept is not None:
        st.rerun()
elif kept_sweep and st.session_state.pop(JUST_SWEPT, None) == kept_sweep.measured_at:
    st.caption(f"Swept just now, at {kept_sweep.measured_at} UTC.")
elif kept_sweep:
    st.caption(
        f"Showing the sweep kept from {kept_sweep.measured_at} UTC for this configuration, dtype, mesh and strategy "
        "(cached: nothing was run now)."
    )

if kept_sweep:
    reports = kept_sweep.reports
    sweep = records.sweep_frame(reports)
    st.dataframe(checkpoint.sweep_side_by_side(sweep), hide_index=True)
    per_process = records.sweep_processes_frame(reports)
    st.altair_chart(checkpoint_charts.save_time_by_processes(sweep), width="stretch")
    bytes_col, memory_col = st.columns(2)
    bytes_col.altair_chart(checkpoint_charts.bytes_per_process(per_process), width="stretch")
    memory_col.altair_chart(checkpoint_charts.memory_per_process(per_process), width="stretch")
    with st.expander("Every process of every run"):
        table(per_process)
    last = reports[-1]
    machine = (
        f"This machine: {units.many(last.cpu_count, 'CPU core')}, load average {last.load_average:.2f} at the end."
    )
    st.markdown(f"- {frame.plain(records.MULTIHOST_NOTE)}\n- {frame.plain(machine)}")
    st.markdown("**Predicted from this disk (estimate)**")
    st.caption(
        frame.plain(
            "The plan's storage model (the one the plan at cluster scale below uses) given the bytes each process "
            f"wrote and this disk as measured right after the sweep: {verify.describe_disk(kept_sweep.probe)}. "
            "The range runs from the fastest try to the slowest."
        )
    )
    st.dataframe(checkpoint.sweep_times_frame(kept_sweep.times()), hide_index=True)
    st.markdown(f"- {frame.plain('Not modelled: ' + verify.sweep_leaves_out(reports))}")
    widgets.download("Sweep (JSON)", json.dumps(kept_sweep.record(), indent=2), "dcsim-checkpoint-sweep.json")

# --- the plan at cluster scale: nothing runs, every setting in the link ------------------------------

st.divider()
plan_view.render(config)
