"""The Checkpoint page's server-side pieces: the one measurement lock, the plan and the results.

A measurement starts a child process (or a group of them, one per simulated host) that
initialises the model for real, so a server runs one at a time, a group or a sweep of groups
counting as one: ``measurement_lock`` is the process-wide ``MeasurementLock`` every session shares
(``st.cache_resource``). Finished reports are kept per configuration and settings in a bounded
``st.cache_data``, so a rerun, a revisit or another session asking the same thing sees the same
report without measuring again; only a click measures.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import pandas as pd
import streamlit as st

from dcsim.checkpoint import disk, measurement, multiprocess, records
from dcsim.checkpoint.disk import DiskProbe
from dcsim.checkpoint.measurement import (
    CheckpointBusy,
    CheckpointFailed,
    CheckpointPlan,
    CheckpointTimeout,
    MeasurementOptions,
)
from dcsim.checkpoint.multiprocess import MultiprocessPlan
from dcsim.checkpoint.plan import verify
from dcsim.checkpoint.plan.verify import SweepTime
from dcsim.checkpoint.results import CheckpointReport, MultiprocessReport
from dcsim.inputs import show
from dcsim.model.config import ModelConfig
from dcsim.quantities import units
from dcsim.sharding.meshes import MeshSpec, parse_mesh
from dcsim.ui import frame, turns

# The strategies that need no rules and no particular axis names.
STRATEGIES = ("replicated", "fsdp")
DEVICE_CHOICES = (1, 2, 4, 8)
DEFAULT_MESH = "data=1"
# Processes on the page: 1 is the single child; 2 and 4 are groups on JAX's distributed runtime.
PROCESS_CHOICES = (1, 2, 4)
SWEEP_PROCESSES = multiprocess.SWEEP_PROCESSES
MAX_CACHED_SWEEPS = 8
MAX_CACHED_REPORTS = 32
MAX_CACHED_PLANS = 128
# A second request waits this long for the running measurement, then is told to come back.
WAIT_SECONDS = 2.0
# The operator's DCSIM_CHECKPOINT_TIMEOUT_SECONDS, read once when the server imports this.
TIMEOUT_SECONDS = measurement.default_timeout_seconds()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """What the page measures with: the configuration's storage dtype, the mesh, strategy and processes."""

    dtype: str
    mesh: MeshSpec
    strategy: str
    processes: int = 1

    @classmethod
    def parse(cls, dtype: str, mesh: str, strategy: str, processes: str) -> Settings:
        """The page's settings from its widgets' or a link's text, each checked by ``parse_setting``."""
        return cls(
            dtype=dtype,
            mesh=parse_mesh(str(parse_setting("mesh", mesh))),
            strategy=str(parse_setting("strategy", strategy)),
            processes=int(parse_setting("processes", processes)),
        )

    def params(self) -> dict[str, str]:
        """The page's own settings as URL parameters (the dtype is the configuration's ``dtype``)."""
        return {
            "mesh": self.mesh.text,
            "strategy": self.strategy,
            "processes": str(self.processes),
        }

    def __post_init__(self) -> None:
        multiprocess.check_divides(self.mesh, self.processes)


def parse_setting(name: str, text: str) -> str | int:
    """A page setting from a link or a widget, checked; raises ``ValueError`` naming the rule."""
    if name == "processes":
        count = multiprocess.check_processes(text, "processes")
        if count not in PROCESS_CHOICES:
            raise ValueError(
                f"`processes` must be one of {', '.join(map(str, PROCESS_CHOICES))} on this page, got {text!r}"
            )
        return count
    if name == "strategy":
        if text not in STRATEGIES:
            raise ValueError(f"`strategy` must be one of {', '.join(STRATEGIES)} on this page, got {show(text)}")
        return text
    if name == "mesh":
        mesh = parse_mesh(text)
        if mesh.num_devices > measurement.MAX_DEVICES:
            raise ValueError(
                f"a checkpoint measurement runs on at most {measurement.MAX_DEVICES} virtual devices, "
                f"got {mesh.num_devices:,} ({mesh.text})"
            )
        return mesh.text
    raise ValueError(f"unknown setting {name!r}")


@st.cache_resource
def measurement_lock() -> measurement.MeasurementLock:
    """The lock every session of this server measures under."""
    return measurement.MeasurementLock()


def _key(config: ModelConfig, settings: Settings) -> str:
    return json.dumps({"config": config.to_dict(), "dtype": settings.dtype, **settings.params()}, sort_keys=True)


@st.cache_data(max_entries=MAX_CACHED_PLANS, show_spinner=False)
def _plan(key: str) -> CheckpointPlan | MultiprocessPlan:
    request = json.loads(key)
    options = MeasurementOptions(
        dtype=request["dtype"],  # the configuration's
        mesh=request["mesh"],
        strategy=request["strategy"],
        timeout_seconds=TIMEOUT_SECONDS,
    )
    config = ModelConfig.from_dict(request["config"])
    processes = int(request.get("processes", "1"))
    if processes == 1:
        return measurement.plan_checkpoint(config, options)
    return multiprocess.plan_multiprocess(config, options, processes=processes)


def plan(config: ModelConfig, settings: Settings) -> CheckpointPlan | MultiprocessPlan:
    """The plan with the server's ceiling, cached: ``plan_checkpoint`` for one process, else
    ``plan_multiprocess``; raises their ``ValueError`` refusals."""
    return _plan(_key(config, settings))


def sweep_problem(settings: Settings) -> str | None:
    """Why the sweep cannot run on these settings, or None: every P must divide the mesh."""
    count = settings.mesh.num_devices
    if all(count % processes == 0 for processes in SWEEP_PROCESSES):
        return None
    sizes = ", ".join(map(str, SWEEP_PROCESSES))
    return (
        f"A sweep over {sizes} processes needs a mesh whose device count each of them divides (such as data=4 "
        f"or data=8); mesh {settings.mesh.text} has {count:,}."
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kept:
    """A finished measurement and when it finished (UTC, ``HH:MM:SS``)."""

    report: CheckpointReport
    measured_at: str
    group: MultiprocessReport | None = None


class _NotMeasured(LookupError):
    """No report is kept for this key (exceptions are never cached, so a miss stays a miss)."""


Measured = TypeVar("Measured")


def _stored(key: str, measured: Measured | None) -> Measured:
    """The body of a store (``_reports``, ``_sweeps``): an ``st.cache_data`` function whose second
    argument is not part of the key, so that called without it the store only looks up, and called
    with it on a miss it keeps what was just measured."""
    if measured is None:
        raise _NotMeasured(key)
    return measured


def _kept(store: Callable[[str], Measured], key: str) -> Measured | None:
    """What ``store`` keeps under ``key``, or None if nothing was measured for it."""
    try:
        return store(key)
    except _NotMeasured:
        return None


@st.cache_data(max_entries=MAX_CACHED_REPORTS, show_spinner=False)
def _reports(key: str, _report: Kept | None = None) -> Kept:
    return _stored(key, _report)


def cached_report(config: ModelConfig, settings: Settings) -> Kept | None:
    """The report kept for this configuration and settings, if one was measured."""
    return _kept(_reports, _key(config, settings))


def measure(config: ModelConfig, settings: Settings, *, on_progress: Callable[[str], None] | None = None) -> Kept:
    """Measure in a child process under the server's lock, then keep the report.

    Raises ``CheckpointBusy`` if another measurement holds the lock past ``WAIT_SECONDS``,
    ``CheckpointFailed``/``CheckpointTimeout`` if the child fails, ``ValueError`` for a refusal.
    """
    key = _key(config, settings)
    planned = _plan(key)
    if isinstance(planned, MultiprocessPlan):
        raise TypeError("these settings start a group of processes: use measure_group")
    with measurement_lock().hold(wait_seconds=WAIT_SECONDS):
        report = measurement.run_checkpoint(
            dataclasses.replace(planned, timeout_seconds=TIMEOUT_SECONDS), on_progress=on_progress
        )
    _reports.clear(key)  # "measure again" replaces the kept report
    return _reports(key, Kept(report=report, measured_at=_now()))


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")


def _timed(planned: MultiprocessPlan) -> MultiprocessPlan:
    return dataclasses.replace(
        planned, checkpoint=dataclasses.replace(planned.checkpoint, timeout_seconds=TIMEOUT_SECONDS)
    )


def measure_group(
    config: ModelConfig, settings: Settings, *, on_progress: Callable[[int, str], None] | None = None
) -> Kept:
    """Measure with ``settings.processes`` processes at once under the server's lock, then keep it.

    ``on_progress(process_id, stage)``; raises as ``measure`` does.
    """
    key = _key(config, settings)
    planned = _plan(key)
    if not isinstance(planned, MultiprocessPlan):
        raise TypeError("these settings measure in one process: use measure")
    with measurement_lock().hold(wait_seconds=WAIT_SECONDS):
        group = multiprocess.run_multiprocess(_timed(planned), on_progress=on_progress)
    _reports.clear(key)
    return _reports(key, Kept(report=group.checkpoint, measured_at=_now(), group=group))


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeptSweep:
    """A finished sweep (one group measurement per process count), when it finished (UTC), and this
    disk as probed right after it (what the save times are predicted from, as the CLI does)."""

    reports: tuple[MultiprocessReport, ...]
    measured_at: str
    probe: DiskProbe

    def times(self) -> tuple[SweepTime, ...]:
        """Each run's save time by the plan's storage model from the probe, beside the measured one."""
        return verify.predict_sweep_times(self.reports, self.probe)

    def record(self) -> dict[str, object]:
        """The sweep's download: each run's record and the prediction, as ``checkpoint --processes-sweep``
        prints them in JSON."""
        return {
            "sweep": [records.multiprocess_record(report) for report in self.reports],
            "on_this_machine": verify.on_this_machine_record(self.reports, self.probe),
        }


def _sweep_key(config: ModelConfig, settings: Settings) -> str:
    params = settings.params()
    del params["processes"]  # a sweep runs every count
    return json.dumps({"config": config.to_dict(), **params, "sweep": list(SWEEP_PROCESSES)}, sort_keys=True)


@st.cache_data(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def _sweeps(key: str, _sweep: KeptSweep | None = None) -> KeptSweep:
    return _stored(key, _sweep)


def cached_sweep(config: ModelConfig, settings: Settings) -> KeptSweep | None:
    """The sweep kept for this configuration, dtype, mesh and strategy, if one ran."""
    return _kept(_sweeps, _sweep_key(config, settings))


def plan_sweep(config: ModelConfig, settings: Settings) -> tuple[MultiprocessPlan, ...]:
    """The sweep's plans with the server's ceiling; raises ``ValueError`` before anything runs."""
    options = MeasurementOptions(
        dtype=settings.dtype, mesh=settings.mesh, strategy=settings.strategy, timeout_seconds=TIMEOUT_SECONDS
    )
    return multiprocess.plan_sweep(config, options, processes=SWEEP_PROCESSES)


def measure_sweep(
    config: ModelConfig, settings: Settings, *, on_progress: Callable[[int, int, str], None] | None = None
) -> KeptSweep:
    """Run the sweep, one group after another, all under one hold of the server's lock.

    ``on_progress(num_processes, process_id, stage)``; raises as ``measure`` does.
    """
    plans = plan_sweep(config, settings)
    with measurement_lock().hold(wait_seconds=WAIT_SECONDS):
        reports = multiprocess.run_sweep(plans, on_progress=on_progress)
        # Probed once the groups have ended (not beside them), where they saved, still under the lock
        # so that no other measurement shares the disk with the probe.
        try:
            probe = disk.probe_disk(disk.probe_bytes(reports[0].checkpoint.disk_bytes))
        except OSError as err:
            raise CheckpointFailed(f"the disk probe after the sweep could not write its files ({err})") from err
    key = _sweep_key(config, settings)
    _sweeps.clear(key)
    return _sweeps(key, KeptSweep(reports=reports, measured_at=_now(), probe=probe))


# --- what the page shows of a group and a sweep ----------------------------------------------------


def group_progress(stages: Mapping[int, str], num_processes: int) -> tuple[float, str]:
    """How far a group is (0 to 1, every process's stage counted) and a line saying where each is."""
    steps = (len(multiprocess.STAGES) - 1) * num_processes
    done = sum(multiprocess.STAGES.index(stage) for stage in stages.values())
    return done / steps, " · ".join(f"process {i}: {stages[i]}" for i in sorted(stages))


def sweep_progress(stages: Mapping[tuple[int, int], str], num_processes: int) -> tuple[float, str]:
    """How far a sweep is, its finished runs counted whole, and where the running group's processes are."""
    current = {process: stage for (count, process), stage in stages.items() if count == num_processes}
    within, text = group_progress(current, num_processes)
    return (SWEEP_PROCESSES.index(num_processes) + within) / len(
        SWEEP_PROCESSES
    ), f"{units.many(num_processes, 'process', 'processes')}: {text}"


def _seconds(value: float) -> str:
    return f"{value:.3f} s"


# Each figure's column label, its text for the screen and its column width.
_SHOWN: dict[str, tuple[str, Callable[[Any], str], Literal["small", "medium", "large"] | None]] = {
    "num_processes": ("Processes", units.count, "small"),
    "process": ("Process", units.count, "small"),
    "num_devices": ("Devices", units.count, "small"),
    "devices_per_process": ("Devices each", units.count, None),
    "device_bytes": ("Bytes held", units.count, None),
    "num_files": ("Files", units.count, "small"),
    "num_bytes": ("Bytes written", units.count, None),
    "disk_bytes": ("On disk", units.bytes_exact, None),
    "raw_payload_bytes": ("Raw payload", units.bytes_exact, None),
    "save_seconds": ("Save", _seconds, "small"),
    "restore_seconds": ("Restore", _seconds, "small"),
    "max_process_bytes": ("Most bytes by one process", units.bytes_exact, None),
    "peak_rss_bytes": ("Peak memory (bytes)", units.count, None),
    "max_peak_rss_bytes": ("Highest peak, one process", units.bytes_exact, None),
    "total_peak_rss_bytes": ("Peaks of all processes", units.bytes_exact, None),
    "restore_verified": ("Verified", lambda ok: "Yes" if ok else "No", "small"),
    "place": ("Where", str, None),
}


def shown_columns(table: pd.DataFrame) -> tuple[dict[str, Any], dict[str, Callable[[Any], str]]]:
    """A ``dcsim.checkpoint.records`` per-process frame's columns for ``frame.text_table``: labels
    and widths, and formats every viewer reads the same (exact bytes, seconds to the millisecond).
    Bytes in these tables are exact counts without the binary reading, so nine columns fit a
    laptop's width."""
    columns = {
        name: st.column_config.TextColumn(
            _SHOWN[name][0],
            width=_SHOWN[name][2],
            help="Restored bit for bit on its devices" if name == "restore_verified" else None,
        )
        for name in table.columns
    }
    return columns, {name: _SHOWN[name][1] for name in table.columns}


def sweep_side_by_side(sweep: pd.DataFrame) -> pd.DataFrame:
    """``dcsim.checkpoint.records.sweep_frame`` turned on its side: one row per figure, one column per
    process count, so three runs read side by side on any screen."""
    columns = {
        units.many(int(count), "process", "processes"): index for index, count in enumerate(sweep["num_processes"])
    }
    figures = [name for name in sweep.columns if name != "num_processes"]
    data = {"Figure": [_SHOWN[name][0] for name in figures]}
    for title, index in columns.items():
        # The side-by-side table has room for the binary reading beside every exact byte count.
        data[title] = [
            (units.bytes_exact if name.endswith("bytes") else _SHOWN[name][1])(sweep[name].iloc[index])
            for name in figures
        ]
    return pd.DataFrame(data)


def sweep_times_frame(times: Sequence[SweepTime]) -> pd.DataFrame:
    """One row a run of the sweep: the save time the plan's storage model predicts from this disk's
    probe (the fastest try to the slowest), the time measured, their ratio, and what limited the
    prediction; as ``checkpoint --processes-sweep`` prints them."""
    return pd.DataFrame(
        {
            "Processes": [units.count(time.num_processes) for time in times],
            "Predicted save (estimate)": [
                f"{time.predicted_seconds:.4f} to {time.predicted_seconds_high:.4f} s" for time in times
            ],
            "Measured save": [f"{time.measured_seconds:.3f} s" for time in times],
            "Measured / predicted": [f"{time.ratio:,.1f}x" for time in times],
            "Limited by": [time.limit for time in times],
        }
    )


Result = TypeVar("Result")


def run_in_status(status: Any, what: str, run: Callable[[], Result]) -> Result | None:
    """Run a measurement (``what``: "measurement", "sweep") inside an ``st.status`` box; on a
    failure, mark the box and show one message saying what happened, and return None.

    Each failure re-expands the box: in the browser a status box collapses when its state
    changes, which hid the message inside it (only the one-line label showed).
    """
    try:
        with turns.aside():  # child processes do the work; other sessions run meanwhile
            return run()
    except CheckpointBusy as err:
        status.update(label="Busy: try again in a moment", state="error", expanded=True)
        st.warning(frame.plain(f"Busy: {err}."), icon=":material/hourglass_top:")
    except CheckpointTimeout as err:
        status.update(label=f"The {what} ran out of time", state="error", expanded=True)
        st.error(frame.plain(f"The {what} was stopped: {err}."), icon=":material/timer_off:")
    except CheckpointFailed as err:
        status.update(label=f"The {what} failed", state="error", expanded=True)
        st.error(frame.plain(f"The {what} failed: {err}."), icon=":material/error:")
    except (TypeError, ValueError) as err:
        status.update(label=f"The {what} was refused", state="error", expanded=True)
        st.error(frame.plain(f"The {what} was refused: {err}."), icon=":material/block:")
    return None
