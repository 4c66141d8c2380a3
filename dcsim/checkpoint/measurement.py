"""A real checkpoint of the configured model: saved with Orbax, measured, restored and compared.

The raw payload (values x bytes per value) is an estimate; this module shows from evidence what a
real checkpoint of the same parameters writes. The measurement runs in a child process
(``dcsim.checkpoint.worker``, run by ``dcsim.checkpoint.child``, started through
``dcsim.runtime.workers``), never in the caller's: the virtual CPU devices of a mesh must be
configured before JAX starts, a concrete initialisation costs memory that a long-lived server must
not keep, and a child can be ended if it overruns.

Everything is checked here first: the request, and the parameter ceiling, counted abstractly
before a single value is allocated. Files are written only inside a fresh temporary folder that
this module creates and always removes, also after a failure, a timeout or a killed child.
Nothing is ever written where a user names a path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from jax.sharding import PartitionSpec

from dcsim.checkpoint import prestart
from dcsim.checkpoint.results import CheckpointFile, CheckpointReport, file_kind
from dcsim.inputs import as_int, number_from_text, show
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport, count_params
from dcsim.quantities import payload
from dcsim.runtime.limits import check_timeout, timeout_from_env
from dcsim.runtime.workers import WorkerFailed, WorkerJob, WorkerTimeout, cpu_worker_env, run_workers
from dcsim.sharding.layout import compute_layout
from dcsim.sharding.meshes import MeshSpec, Rule, parse_mesh, spec_text
from dcsim.sharding.wire import mesh_json, spec_json

STORAGE_DTYPES = ("float32", "bfloat16")
MAX_PARAMS_ENV = "DCSIM_CHECKPOINT_MAX_PARAMS"
# Chosen from bench/bench_checkpoint.py: at this size the child's peak stays under 1 GB.
DEFAULT_MAX_PARAMS = 30_000_000
DEFAULT_TIMEOUT_SECONDS = 120.0
TIMEOUT_ENV = "DCSIM_CHECKPOINT_TIMEOUT_SECONDS"
# Each virtual device costs the child threads and memory; the page offers far fewer.
MAX_DEVICES = 64

STAGES = ("initialising", "saving", "measuring", "restoring", "verifying", "done")


class CheckpointFailed(RuntimeError):
    """The measurement started but did not finish; its temporary folder was removed."""


class CheckpointTimeout(CheckpointFailed):
    """The measurement overran its time limit and was ended."""


class CheckpointNoSpace(CheckpointFailed):
    """The temporary folder's disk has too little free space for the checkpoint; nothing was started."""


class OverCeiling(ValueError):
    """The model, as the devices hold it, is over the measurement's parameter ceiling. The message
    says by how much; how to raise the ceiling is the caller's to say (a flag, a server setting)."""


class CheckpointBusy(RuntimeError):
    """Another measurement holds this process's measurement lock."""


class MeasurementLock:
    """One checkpoint measurement at a time in this process, so a crowd cannot exhaust memory.

    A server keeps one instance (e.g. in ``st.cache_resource``) and wraps every measurement in
    ``with lock.hold(wait_seconds=...):``. A second caller waits at most that long, then gets
    ``CheckpointBusy`` with a message it can show as it is.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @contextlib.contextmanager
    def hold(self, wait_seconds: float = 0.0) -> Iterator[None]:
        if not self._lock.acquire(timeout=max(0.0, float(wait_seconds))):
            raise CheckpointBusy(
                "another checkpoint measurement is running on this server (one at a time keeps memory "
                "bounded); try again in a few seconds"
            )
        try:
            yield
        finally:
            self._lock.release()


_GROUPED_DIGITS = re.compile(r"[0-9]+(?:_[0-9]+)+")


def parse_max_params(text: str, name: str = "max_params") -> int:
    """A parameter ceiling typed by a person: ``30000000``, ``30_000_000``, ``3e7``."""
    text = text.strip()
    # Python's digit grouping (30_000_000) is welcome in an operator's flag or variable.
    value = number_from_text(text.replace("_", "") if _GROUPED_DIGITS.fullmatch(text) else text)
    if isinstance(value, str):  # not a number at all: a bad value, not a wrong type
        raise ValueError(f"`{name}` must be a positive integer, got {show(text)}")
    return as_int(value, name, shown=text)


def default_max_params() -> int:
    """The parameter ceiling: ``DCSIM_CHECKPOINT_MAX_PARAMS`` if set, else ``DEFAULT_MAX_PARAMS``."""
    text = os.environ.get(MAX_PARAMS_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_PARAMS
    return parse_max_params(text, MAX_PARAMS_ENV)


def default_timeout_seconds() -> float:
    """A server's time limit: ``DCSIM_CHECKPOINT_TIMEOUT_SECONDS`` if set, else ``DEFAULT_TIMEOUT_SECONDS``."""
    return timeout_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS)


ONE_DEVICE = MeshSpec((("data", 1),))


def _mesh(mesh: str | MeshSpec | None) -> MeshSpec:
    if mesh is None:
        return ONE_DEVICE
    if isinstance(mesh, MeshSpec):
        return mesh
    return parse_mesh(mesh)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasurementOptions:
    """How a checkpoint measurement runs, grouped once (as Orbax groups a checkpointer's options)
    for every entry point: ``plan_checkpoint``, ``measure_checkpoint``, the group and sweep
    planners of ``dcsim.checkpoint.multiprocess``, the CLI and the Checkpoint page.

    Attributes:
      dtype: the storage dtype, ``float32`` or ``bfloat16``.
      mesh: ``"AXIS=SIZE[,...]"`` or a ``MeshSpec``; one device when None.
      strategy, rules: ``dcsim.sharding.layout``'s, which decides every PartitionSpec.
      max_params: the ceiling on the values all devices hold; the server's (``default_max_params``) when None.
      timeout_seconds: the child's time limit, counted once it is up.

    Nothing is checked here: ``plan_checkpoint`` checks every field, so a refusal reads the same
    whichever front end built the options.
    """

    dtype: str = "float32"
    mesh: str | MeshSpec | None = None
    strategy: str = "replicated"
    rules: Sequence[Rule] = ()
    max_params: int | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS


DEFAULT_OPTIONS = MeasurementOptions()


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointPlan:
    """A validated measurement, ready to run: nothing has been allocated or written yet.

    Attributes:
      config: the model configuration.
      report: its abstract parameter count.
      dtype: the storage dtype, ``float32`` or ``bfloat16``.
      mesh: the mesh of virtual CPU devices.
      strategy: the sharding strategy's name (``dcsim.sharding.layout.STRATEGIES``).
      specs: per parameter path (``Dense_0/kernel``), its PartitionSpec from ``dcsim.sharding.layout``.
      stored_values: values all devices hold together, replicas included (at least the total).
      max_params: the ceiling ``stored_values`` was checked against.
      timeout_seconds: the child's time limit.
    """

    config: ModelConfig
    report: ParamReport
    dtype: str
    mesh: MeshSpec
    strategy: str
    specs: dict[str, PartitionSpec]
    stored_values: int
    max_params: int
    timeout_seconds: float


def plan_checkpoint(config: ModelConfig, options: MeasurementOptions = DEFAULT_OPTIONS) -> CheckpointPlan:
    """Validate a measurement (``options``: see ``MeasurementOptions``) and check the parameter
    ceiling, allocating nothing.

    Raises ``ValueError``/``TypeError`` naming what was wrong; the ceiling refusal
    (``OverCeiling``) states the ceiling and the model's size.
    """
    if not isinstance(config, ModelConfig):
        raise TypeError(f"`config` must be a ModelConfig, got {type(config).__name__}")
    if not isinstance(options, MeasurementOptions):
        raise TypeError(f"`options` must be MeasurementOptions, got {type(options).__name__}")
    dtype, strategy, rules, max_params = options.dtype, options.strategy, options.rules, options.max_params
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"`dtype` must be one of {', '.join(STORAGE_DTYPES)}, got {show(dtype)}")
    ceiling = default_max_params() if max_params is None else as_int(max_params, "max_params")
    seconds = check_timeout(options.timeout_seconds)
    mesh_spec = _mesh(options.mesh)
    if mesh_spec.num_devices > MAX_DEVICES:
        raise ValueError(
            f"a checkpoint measurement runs on at most {MAX_DEVICES} virtual devices, "
            f"got a mesh of {mesh_spec.num_devices:,} ({mesh_spec.text})"
        )
    report = count_params(config)  # abstract: shapes only
    placed = compute_layout(report, mesh_spec, strategy, rules)  # abstract too: JAX's sharding rules
    grown = [row for row in placed.arrays if row.stored_shape != row.shape]
    if grown:  # the checkpoint writes the model's own arrays, which JAX cannot split as laid out
        first = grown[0]
        raise ValueError(
            f"a checkpoint writes each array at its own shape, and the {strategy} layout on {mesh_spec.text} "
            f"lays {len(grown):,} out at another (`{first.path}`: {first.note}); pick a mesh where it does not, "
            "or another strategy"
        )
    # Every device holds its own copy of a replica, and a concrete init computes each copy, so
    # the ceiling bounds the values held by all devices together, not just the model's.
    held = placed.total_stored_values
    if held > ceiling:
        size = f"this model has {report.total_params:,} parameters"
        if held != report.total_params:
            size += (
                f", and on the mesh {mesh_spec.text} the {strategy} layout has the devices hold {held:,} values "
                "together (replicas included)"
            )
        raise OverCeiling(
            f"{size}, over the checkpoint measurement's ceiling of {ceiling:,} values (it would initialise "
            f"{payload.raw_bytes(held, dtype):,} bytes for real)"
        )
    return CheckpointPlan(
        config=config,
        report=report,
        dtype=dtype,
        mesh=mesh_spec,
        strategy=strategy,
        specs={row.path: row.spec for row in placed.arrays},
        stored_values=held,
        max_params=ceiling,
        timeout_seconds=seconds,
    )


def _report(plan: CheckpointPlan, result: dict[str, Any]) -> CheckpointReport:
    files = tuple(
        CheckpointFile(path=row["path"], kind=file_kind(row["path"]), num_bytes=int(row["num_bytes"]))
        for row in result["files"]
    )
    expected = payload.raw_bytes(plan.report.total_params, plan.dtype)
    if int(result["raw_payload_bytes"]) != expected:
        raise CheckpointFailed(
            f"the child initialised {result['raw_payload_bytes']:,} bytes, the count says {expected:,}: "
            "the measurement and the count disagree"
        )
    return CheckpointReport(
        config=plan.config,
        total_params=plan.report.total_params,
        dtype=plan.dtype,
        strategy=plan.strategy,
        mesh=plan.mesh.text,
        num_devices=int(result["num_devices"]),
        partition_specs=tuple((path, spec_text(spec)) for path, spec in plan.specs.items()),
        raw_payload_bytes=expected,
        raw_float32_bytes=payload.raw_bytes(plan.report.total_params, "float32"),
        device_bytes=int(result["device_bytes"]),
        disk_bytes=sum(file.num_bytes for file in files),
        num_files=len(files),
        largest_file_bytes=max((file.num_bytes for file in files), default=0),
        files=files,
        init_seconds=float(result["init_seconds"]),
        save_seconds=float(result["save_seconds"]),
        restore_seconds=float(result["restore_seconds"]),
        restore_verified=bool(result["restore_verified"]),
        compilation_cache=str(result.get("compilation_cache", "off")),
        baseline_rss_bytes=int(result["baseline_rss_bytes"]),
        peak_rss_bytes=int(result["peak_rss_bytes"]),
        peak_rss_before_stage=tuple((stage, int(peak)) for stage, peak in result["peak_rss_before_stage"].items()),
        jax_version=str(result["versions"]["jax"]),
        orbax_version=str(result["versions"]["orbax-checkpoint"]),
    )


# Room kept free beyond the payload: metadata files, the worker's own files, and a margin so a
# measurement never fills the disk a server shares.
DISK_HEADROOM_BYTES = 16 * 2**20


def disk_bytes_needed(plan: CheckpointPlan) -> int:
    """Free space a measurement asks for: its raw payload (freshly initialised random values barely
    compress), an eighth more, and ``DISK_HEADROOM_BYTES``. Replicas are written once."""
    payload_bytes = payload.raw_bytes(plan.report.total_params, plan.dtype)
    return payload_bytes + payload_bytes // 8 + DISK_HEADROOM_BYTES


def check_free_space(plan: CheckpointPlan, folder: str | Path | None = None) -> None:
    """Refuse, before anything is written, a measurement the temporary folder's disk cannot hold.

    Raises ``CheckpointNoSpace`` naming the folder, the bytes needed and the bytes free.
    """
    folder = Path(folder or tempfile.gettempdir())
    needed, free = disk_bytes_needed(plan), shutil.disk_usage(folder).free
    if free < needed:
        raise CheckpointNoSpace(
            f"the temporary folder {folder} has {free:,} bytes free and this checkpoint needs about {needed:,} "
            f"(its raw {plan.dtype} payload of {payload.raw_bytes(plan.report.total_params, plan.dtype):,} bytes "
            "and room for metadata); nothing was written. Free some space, or point TMPDIR at a larger disk"
        )


def run_checkpoint(
    plan: CheckpointPlan,
    *,
    on_progress: Callable[[str], None] | None = None,
    prestarted: prestart.Prestarted | None = None,
) -> CheckpointReport:
    """Run a planned measurement in a child process; ``on_progress(stage)`` sees each of ``STAGES``.

    ``prestarted``: a child already started by ``dcsim.checkpoint.prestart`` and waiting for its request, used
    instead of starting one if it is still alive; this function ends it and removes its folder on
    every path, used or not.

    Raises ``CheckpointNoSpace`` if the temporary disk cannot hold the checkpoint (nothing started),
    ``CheckpointTimeout`` past the plan's time limit and ``CheckpointFailed`` if the child fails;
    the child's process group is ended and the temporary folder removed either way.
    """
    if prestarted is not None and not prestarted.alive():
        prestarted.discard()
        prestarted = None
    try:
        check_free_space(plan)
        try:
            folder = prestarted.folder if prestarted else Path(tempfile.mkdtemp(prefix=prestart.FOLDER_PREFIX))
        except OSError as err:
            raise CheckpointFailed(f"no temporary folder could be made for the checkpoint: {err}") from None
        return _run_in(plan, folder, on_progress, prestarted)
    finally:
        if prestarted is not None:
            prestarted.discard()


def _run_in(
    plan: CheckpointPlan,
    folder: Path,
    on_progress: Callable[[str], None] | None,
    prestarted: prestart.Prestarted | None,
) -> CheckpointReport:
    try:
        job = WorkerJob(
            name="checkpoint measurement",
            module=prestart.CHILD_MODULE,
            args=("single",),
            request={
                "config": plan.config.to_dict(),
                "dtype": plan.dtype,
                "mesh": mesh_json(plan.mesh),
                "specs": {path: spec_json(spec) for path, spec in plan.specs.items()},
            },
            folder=folder,
            env=cpu_worker_env(plan.mesh.num_devices),
            started=None if prestarted is None else prestarted.process,
        )
        progress = None if on_progress is None else (lambda _name, stage: on_progress(stage))
        try:
            (result,) = run_workers([job], timeout_seconds=plan.timeout_seconds, on_progress=progress)
        except WorkerTimeout as err:
            raise CheckpointTimeout(f"{err} (the temporary checkpoint was removed)") from None
        except WorkerFailed as err:
            raise CheckpointFailed(f"{err} (the temporary checkpoint was removed)") from None
        except OSError as err:  # the worker's request could not be written: a full disk, say
            raise CheckpointFailed(
                f"the measurement could not start: {err} (the temporary folder was removed)"
            ) from None
        return _report(plan, result)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_checkpoint(
    config: ModelConfig,
    options: MeasurementOptions = DEFAULT_OPTIONS,
    *,
    on_progress: Callable[[str], None] | None = None,
    prestarted: prestart.Prestarted | None = None,
) -> CheckpointReport:
    """Plan (validate, check the ceiling) and run one measurement: ``run_checkpoint(plan_checkpoint(...))``.

    ``prestarted`` as for ``run_checkpoint``; it is ended and its folder removed also when the
    plan is refused."""
    try:
        plan = plan_checkpoint(config, options)
    except BaseException:
        if prestarted is not None:
            prestarted.discard()
        raise
    return run_checkpoint(plan, on_progress=on_progress, prestarted=prestarted)
