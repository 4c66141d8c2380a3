"""The checkpoint plan's request (``checkpoint-plan``'s, and the Checkpoint page's plan when it
lands): hosts, writers, storage, async, the restore mesh and the interval's inputs, beside the
training state's keys (``dcsim.requests.training``). Each parser checks with the engine's own rule
and names the key or flag it was given under."""

from __future__ import annotations

import math

from dcsim.checkpoint.plan import interval, placement, storage, writers
from dcsim.checkpoint.plan.plan import MAX_KEEP
from dcsim.inputs import as_int, number_from_text, show
from dcsim.requests import MESH_KEYS, count, declared, switch, ticked
from dcsim.serving import catalog
from dcsim.sharding import layout, meshes
from dcsim.speed import system

RESTORE_STRATEGIES = tuple(name for name in layout.STRATEGIES if name != "custom")
PLAN_MESH = "data=64"  # the page's default training mesh: 8 hosts of 8
# The page plans meshes of at most this many devices (llama3.1-405b's 16,384 in well under a second,
# with room); the command line takes any mesh dcsim can lay out.
MAX_PLAN_DEVICES = 65_536


def training_dtypes() -> tuple[str, ...]:
    from dcsim.memory import training

    return training.DTYPES


def _device(text: str, name: str) -> str:
    try:
        return catalog.get_accelerator(text).name
    except ValueError as err:
        raise ValueError(f"`{name}`: {err}") from None


def _policy(text: str, name: str) -> str:
    return writers.check_policy(text, f"`{name}`")


def _storage(text: str, name: str) -> str:
    return storage.get_storage(text, f"`{name}`").name


def _bandwidth(text: str, name: str) -> str:
    storage.parse_bandwidth(text, f"`{name}`")
    return text.strip()


def _mesh(text: str, name: str) -> str:
    try:
        mesh = meshes.parse_mesh(text)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}`: {err}") from None
    return ",".join(f"{axis}={size}" for axis, size in mesh.axes)


def _plan_mesh(text: str, name: str) -> str:
    shown = _mesh(text, name)
    devices = meshes.parse_mesh(shown).num_devices
    if devices > MAX_PLAN_DEVICES:
        raise ValueError(f"`{name}` may have at most {MAX_PLAN_DEVICES:,} devices on the page, got {devices:,}")
    return shown


def _stage(text: str, name: str) -> str:
    from dcsim.memory import training

    try:
        return str(training.check_stage(text))
    except ValueError as err:
        raise ValueError(f"`{name}`: {err}") from None


def _strategy(text: str, name: str) -> str:
    if text not in RESTORE_STRATEGIES:
        raise ValueError(f"`{name}` must be one of {', '.join(RESTORE_STRATEGIES)}, got {show(text)}")
    return text


def _restore_dtype(text: str, name: str) -> str:
    from dcsim.memory import training

    if text == "same":
        return text
    try:
        return training.check_dtype(text, "restore")
    except ValueError as err:
        raise ValueError(f"`{name}`: {err}, or same (as saved)") from None


def _number(text: str, name: str, minimum: float, unit: str) -> float:
    value = number_from_text(text.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        rule = "above 0" if minimum > 0 else "0 or more"
        raise ValueError(f"`{name}` must be a number of {unit} {rule}, got {show(text)}")
    return value


def _mttf(text: str, name: str) -> str:
    value = _number(text, name, math.ulp(0), "hours")
    return f"{value:g}" if isinstance(value, float) else str(value)


def _restart(text: str, name: str) -> str:
    value = _number(text, name, 0, "seconds")
    return f"{value:g}" if isinstance(value, float) else str(value)


def _min_slice(text: str, name: str) -> str:
    return str(as_int(number_from_text(text.strip()), name, minimum=0, shown=text))


CHECKPOINT_PLAN = declared(
    "checkpoint_plan",
    {
        "pmesh": _plan_mesh,
        "pzero": _stage,
        "dph": count(system.MAX_DEVICES_PER_HOST),  # the Memory page's `dph`: one key, one limit
        "pdevice": _device,
        "policy": _policy,
        "storage": _storage,
        "wbw": _bandwidth,
        "sbw": _bandwidth,
        "async": switch("off", "on"),
        "rmesh": _mesh,
        "rstrategy": _strategy,
        "rdtype": _restore_dtype,
        "mttf": _mttf,
        "restart": _restart,
        "keep": count(MAX_KEEP),
        "minslice": _min_slice,
        "maxrep": count(meshes.MAX_MESH_DEVICES),
    },
    title="The checkpoint plan's keys",
    faces="the Checkpoint page's plan (`/checkpoint`) and `checkpoint-plan`",
    shared=MESH_KEYS + ", and the Memory page's training keys above (`zero`, `parts`, `optim`, the dtypes)",
    words={
        "per_host": placement.DEFAULT_DEVICES_PER_HOST,
        "device_words": ticked(catalog.DEVICE_NAMES),
        "policy_words": ticked(writers.POLICIES),
        "policies": "; ".join(f"{policy}: {text}" for policy, text in writers.POLICY_HELP.items()),
        "default_storage": storage.DEFAULT_STORAGE,
        "storage_words": ticked(storage.STORAGE_NAMES),
        "storages": ", ".join(storage.STORAGE_NAMES),
        "strategy_words": ticked(RESTORE_STRATEGIES),
        "strategies": ", ".join(RESTORE_STRATEGIES),
        "dtype_words": ticked(training_dtypes()),
        "dtypes": ", ".join(training_dtypes()),
        "mttf": interval.DEFAULT_MTTF_HOURS,
        "mttf_source": interval.MTTF_SOURCE,
        "max_keep": MAX_KEEP,
        "plan_mesh": PLAN_MESH,
        "max_plan_devices": MAX_PLAN_DEVICES,
    },
    notes="`rstrategy` applies with `rmesh` only; `async` needs a `pdevice` whose host link the catalog states. The "
    "page reads `pmesh`, `pzero`, `dph`, `pdevice`, `policy`, `storage`, `async`, `rmesh` and `rdtype` (with `optim` "
    "and `master`); the other keys are the command line's for now.",
)
