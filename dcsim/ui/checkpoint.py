"""The Checkpoint page's server-side pieces: the one measurement lock, the plan and the results.

A measurement starts a child process that initialises the model for real, so a server runs one
at a time: ``measurement_lock`` is the process-wide ``MeasurementLock`` every session shares
(``st.cache_resource``). Finished reports are kept per configuration and settings in a bounded
``st.cache_data``, so a rerun, a revisit or another session asking the same thing sees the same
report without measuring again; only a click measures.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable

import streamlit as st

from dcsim import checkpoint
from dcsim.checkpoint import CheckpointPlan, CheckpointReport
from dcsim.config import ModelConfig
from dcsim.layout import MeshSpec, parse_mesh

DTYPES = checkpoint.STORAGE_DTYPES
# The strategies that need no rules and no particular axis names.
STRATEGIES = ("replicated", "fsdp")
DEVICE_CHOICES = (1, 2, 4, 8)
DEFAULT_MESH = "data=1"
MAX_CACHED_REPORTS = 32
MAX_CACHED_PLANS = 128
# A second request waits this long for the running measurement, then is told to come back.
WAIT_SECONDS = 2.0
# The operator's DCSIM_CHECKPOINT_TIMEOUT_SECONDS, read once when the server imports this.
TIMEOUT_SECONDS = checkpoint.default_timeout_seconds()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """What the page measures besides the configuration: storage dtype, mesh and strategy."""

    dtype: str
    mesh: MeshSpec
    strategy: str

    def params(self) -> dict[str, str]:
        """The settings as the page's URL parameters."""
        return {"dtype": self.dtype, "mesh": self.mesh.text, "strategy": self.strategy}


def parse_setting(name: str, text: str) -> str:
    """A page setting from a link or a widget, checked; raises ``ValueError`` naming the rule."""
    if name == "dtype":
        if text not in DTYPES:
            raise ValueError(f"`dtype` must be one of {', '.join(DTYPES)}, got {text!r}")
        return text
    if name == "strategy":
        if text not in STRATEGIES:
            raise ValueError(f"`strategy` must be one of {', '.join(STRATEGIES)} on this page, got {text!r}")
        return text
    if name == "mesh":
        mesh = parse_mesh(text)
        if mesh.num_devices > checkpoint.MAX_DEVICES:
            raise ValueError(
                f"a checkpoint measurement runs on at most {checkpoint.MAX_DEVICES} virtual devices, "
                f"got {mesh.num_devices:,} ({mesh.text})"
            )
        return mesh.text
    raise ValueError(f"unknown setting {name!r}")


@st.cache_resource
def measurement_lock() -> checkpoint.MeasurementLock:
    """The lock every session of this server measures under."""
    return checkpoint.MeasurementLock()


def _key(config: ModelConfig, settings: Settings) -> str:
    return json.dumps({"config": config.to_dict(), **settings.params()}, sort_keys=True)


@st.cache_data(max_entries=MAX_CACHED_PLANS, show_spinner=False)
def _plan(key: str) -> CheckpointPlan:
    request = json.loads(key)
    return checkpoint.plan_checkpoint(
        ModelConfig.from_dict(request["config"]),
        dtype=request["dtype"],
        mesh=request["mesh"],
        strategy=request["strategy"],
        timeout_seconds=TIMEOUT_SECONDS,
    )


def plan(config: ModelConfig, settings: Settings) -> CheckpointPlan:
    """``plan_checkpoint`` with the server's ceiling, cached; raises its ``ValueError`` refusals."""
    return _plan(_key(config, settings))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kept:
    """A finished measurement and when it finished (UTC, ``HH:MM:SS``)."""

    report: CheckpointReport
    measured_at: str


class _NotMeasured(LookupError):
    """No report is kept for this key (exceptions are never cached, so a miss stays a miss)."""


@st.cache_data(max_entries=MAX_CACHED_REPORTS, show_spinner=False)
def _reports(key: str, _report: Kept | None = None) -> Kept:
    # ``_report`` is not part of the key: called without it this only looks up, called with it
    # on a miss it stores the report just measured.
    if _report is None:
        raise _NotMeasured(key)
    return _report


def cached_report(config: ModelConfig, settings: Settings) -> Kept | None:
    """The report kept for this configuration and settings, if one was measured."""
    try:
        return _reports(_key(config, settings))
    except _NotMeasured:
        return None


def measure(config: ModelConfig, settings: Settings, *, on_progress: Callable[[str], None] | None = None) -> Kept:
    """Measure in a child process under the server's lock, then keep the report.

    Raises ``CheckpointBusy`` if another measurement holds the lock past ``WAIT_SECONDS``,
    ``CheckpointFailed``/``CheckpointTimeout`` if the child fails, ``ValueError`` for a refusal.
    """
    key = _key(config, settings)
    planned = _plan(key)
    with measurement_lock().hold(wait_seconds=WAIT_SECONDS):
        report = checkpoint.run_checkpoint(
            dataclasses.replace(planned, timeout_seconds=TIMEOUT_SECONDS), on_progress=on_progress
        )
    measured_at = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    _reports.clear(key)  # "measure again" replaces the kept report
    return _reports(key, Kept(report=report, measured_at=measured_at))
