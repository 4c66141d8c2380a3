"""A comparison's runs by days and cost: each scenario's training step timed by the Memory page's
own call (``scenario_time``: ``dcsim.speed.estimate``), and the table of the runs (``time_frame``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd

from dcsim.compare import Comparison, Scenario, timing_text
from dcsim.memory import budget as budgets
from dcsim.memory.report import TrainingReport
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.serving import catalog

# The optimizer a scenario's state is timed with when the budget counts the parameters only: the
# Memory page's default (``dcsim.requests.training``'s ``optim``).
TIME_OPTIMIZER = "adam"
NO_DEVICE_TEXT = "no device: give the scenario a device to time it"
NO_SEQUENCE_TEXT = "no sequence: give the scenario a training step to time it"
NO_TOKENS_TEXT = "no run: give the run's tokens"
NO_PRICE_TEXT = "no price: give a price a device-hour"


def time_mesh(scenario: Scenario, budget: budgets.Budget) -> Any:
    """The mesh a scenario's step is timed on: its shards as devices on the budget's axis
    (``data=N``, ``model=N`` for the tensor strategy), the mesh the budget's search lays it out on."""
    from dcsim.sharding.meshes import MeshSpec

    return MeshSpec(((budget.mesh_axis, scenario.num_shards),))


def time_training(scenario: Scenario, budget: budgets.Budget) -> Any:
    """The state a scenario's step is timed with: the budget's (ZeRO-3, the budget's optimizer, in
    the scenario's dtype, no master copy), with ``TIME_OPTIMIZER`` where the budget counts parameters only."""
    from dcsim.memory.training import Training

    return Training.stage(3, optimizer=budget.training or TIME_OPTIMIZER, param_dtype=scenario.dtype)


def time_setup_text(budget: budgets.Budget) -> str:
    """How every scenario is timed, in a sentence for the page and the docs."""
    optimizer = budget.training or f"{TIME_OPTIMIZER} (the budget counts parameters only)"
    return (
        f"Each scenario runs on its shard count as devices, mesh {budget.mesh_axis}=N under the {budget.strategy} "
        f"strategy, with ZeRO-3's training state (parameters, gradients and {optimizer} optimizer state, all in the "
        "scenario's dtype, no master copy); the Memory page sets any mesh and state."
    )


@dataclasses.dataclass(frozen=True)
class Timed:
    """A scenario's step time (``dcsim.speed.estimate.StepTime``) and, where the state and the
    step's activations a device exceed the device's memory, by how much (the time is then of a step
    that cannot run as set, and its row says so on the same line)."""

    time: Any
    device_title: str
    over_bytes: int | None = None


def scenario_time(scenario: Scenario, report: ParamReport, budget: budgets.Budget) -> Timed | str:
    """The scenario's step time on its device (``dcsim.speed.estimate.training_time``, the call the
    Memory page makes, on ``time_mesh`` with ``time_training``) with what the device's memory says
    of the setup (``Timed``), or a sentence saying why there is none: no device, no step, or the
    engine's refusal (a layout, a device without speeds...)."""
    if scenario.time is None:
        return NO_DEVICE_TEXT
    if scenario.step is None:
        return NO_SEQUENCE_TEXT
    from dcsim.memory import activations
    from dcsim.memory.state import compute_memory
    from dcsim.speed import estimate, pipeline

    timing, mesh = scenario.time, time_mesh(scenario, budget)
    try:
        held = compute_memory(report, mesh, budget.strategy, (), time_training(scenario, budget))
        traced = activations.cached_trace(
            scenario.config.architecture(), scenario.step, scenario.dtype, mesh, with_recompute=True
        )
        device = catalog.get_accelerator(timing.device)
        time = estimate.training_time(
            scenario.config,
            report,
            held,
            traced,
            device,
            devices_per_host=timing.devices_per_host,
            tokens=timing.tokens,
            price=None if timing.tokens is None else timing.price_per_device_hour,
            schedule=pipeline.Pipeline(micro_batches=timing.micro_batches),
        )
    except (TypeError, ValueError) as err:
        return f"cannot be timed: {err}"
    over = TrainingReport.of(held, traced.bytes_per_device, device.bytes).over_bytes
    return Timed(time=time, device_title=device.title, over_bytes=over)


def _figure(value: float) -> str:
    """An estimate to four significant figures, with thousands separators (27,880, not 2.788e+04)."""
    rounded = float(f"{value:.4g}")
    return f"{rounded:,.0f}" if abs(rounded) >= 1000 else f"{rounded:g}"


def _band(point: float, low: float, high: float, unit: str = "") -> str:
    return f"{_figure(point)}{unit} ({_figure(low)}–{_figure(high)}{unit})"


# The time table's text columns, in the order a page shows them: each figure with its band, or why
# it has none.
TIME_TEXTS = ("fits_text", "step_text", "tokens_per_second_text", "days_text", "device_hours_text", "cost_text")


def time_frame(comparison: Comparison, times: Sequence[Any]) -> pd.DataFrame:
    """One row per scenario, its run by time and money (``times``: ``scenario_time``'s answers, in
    order): ``name``, ``device``, ``run`` (``timing_text``), ``num_devices``, the step's
    ``step_seconds`` with its band ``step_seconds_low``/``_high`` (full to no overlap),
    ``tokens_per_second`` and ``global_tokens``; ``fits_text`` whether the state and the step's
    activations a device fit the device (the time of one that does not is of a step that cannot
    run as set, and the row says so); with the run's tokens ``steps`` and ``days``,
    ``device_hours`` (with ``_low``/``_high``: the steps at the band's ends), and with a price ``cost``
    (with its band); floats missing where there is no figure. The ``*_text`` columns are what a page
    shows: each figure with its band, or the reason it is missing (never a blank or a zero), and
    ``note`` says why a scenario is not timed and what the estimate leaves out."""
    if len(times) != len(comparison.scenarios):
        raise ValueError(f"one time per scenario is needed: {len(comparison.scenarios)} scenarios, {len(times)} times")
    float_keys = (
        "step_seconds",
        "step_seconds_low",
        "step_seconds_high",
        "tokens_per_second",
        *(f"{key}{end}" for key in ("days", "device_hours", "cost") for end in ("", "_low", "_high")),
    )
    rows: dict[str, list[Any]] = {
        key: []
        for key in (
            "name",
            "device",
            "run",
            "num_devices",
            "global_tokens",
            "steps",
            *float_keys,
            *TIME_TEXTS,
            "note",
        )
    }
    for scenario, time in zip(comparison.scenarios, times, strict=True):
        rows["name"].append(scenario.name)
        rows["device"].append(NO_DEVICE_TEXT if scenario.time is None else scenario.time.device)
        rows["run"].append(timing_text(scenario.time) or NO_DEVICE_TEXT)
        figures: dict[str, Any] = dict.fromkeys(("num_devices", "global_tokens", "steps", *float_keys))
        if isinstance(time, str):
            texts = dict.fromkeys(("fits", "step", "tokens_per_second", "days", "device_hours", "cost"), time)
            note = time
        else:
            fits = (
                f"yes, on the {time.device_title}"
                if time.over_bytes is None
                else f"no: over the {time.device_title}'s memory by {units.binary_bytes(time.over_bytes)}, "
                "so the time is of a step that cannot run as set"
            )
            time = time.time
            figures |= {
                "num_devices": time.num_devices,
                "global_tokens": time.global_tokens,
                "step_seconds": time.step_seconds,
                "step_seconds_low": time.step_seconds_low,
                "step_seconds_high": time.step_seconds_high,
                "tokens_per_second": time.tokens_per_second,
            }
            note = f"Estimate; leaves out {', '.join(time.leaves_out)}."
            texts = {
                "fits": fits,
                "step": _band(time.step_seconds, time.step_seconds_low, time.step_seconds_high, " s"),
                "tokens_per_second": _figure(time.tokens_per_second),
                "days": NO_TOKENS_TEXT,
                "device_hours": NO_TOKENS_TEXT,
                "cost": NO_TOKENS_TEXT,
            }
            run = time.run
            if run is not None:
                # The run's ends: its steps at the band's ends (the engine's seconds are the point's).
                seconds = {"": run.seconds, "_low": run.steps * time.step_seconds_low}
                seconds["_high"] = run.steps * time.step_seconds_high
                figures["steps"] = run.steps
                for end, value in seconds.items():
                    figures[f"days{end}"] = value / 86400
                    figures[f"device_hours{end}"] = value * time.num_devices / 3600
                    if run.price_per_device_hour is not None:
                        figures[f"cost{end}"] = figures[f"device_hours{end}"] * run.price_per_device_hour
                texts["days"] = _band(figures["days"], figures["days_low"], figures["days_high"])
                texts["device_hours"] = _band(
                    figures["device_hours"], figures["device_hours_low"], figures["device_hours_high"]
                )
                texts["cost"] = (
                    NO_PRICE_TEXT
                    if run.price_per_device_hour is None
                    else _band(figures["cost"], figures["cost_low"], figures["cost_high"])
                )
        for key, value in figures.items():
            rows[key].append(value)
        for key, value in texts.items():
            rows[f"{key}_text"].append(value)
        rows["note"].append(note)
    frame = pd.DataFrame(rows)
    for key in ("num_devices", "global_tokens", "steps"):
        frame[key] = pd.array(rows[key], dtype="Int64")
    for key in float_keys:
        frame[key] = pd.array([None if value is None else float(value) for value in rows[key]], dtype="Float64")
    return frame


def has_time(comparison: Comparison) -> bool:
    """Whether any scenario has a run on an accelerator: the page's time section shows then."""
    return any(scenario.time is not None for scenario in comparison.scenarios)
