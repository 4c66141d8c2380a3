"""A comparison's tables, for the Compare page, the ``compare`` command and CSV: one row a scenario
(``comparison_frame``), the shard sweep (``sweep_frame``), the budget question's answers
(``scenario_answer``, ``budget_frame``, ``held_frame``), and the whole as JSON (``comparison_record``)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import pandas as pd

from dcsim.compare import Comparison, Scenario, model_text, step_text
from dcsim.memory import budget as budgets
from dcsim.model.count import ParamReport
from dcsim.quantities import payload, units
from dcsim.sharding import shares


def weights_bytes(scenario: Scenario, report: ParamReport) -> int | None:
    """The scenario's weights in its format, exact (its tensors' bytes), or None without one."""
    if scenario.weights is None:
        return None
    from dcsim.quant import layouts
    from dcsim.quant.formats import check_format

    return layouts.weight_table(scenario.config, report, check_format(scenario.weights)).payload_bytes


def counts_activations(scenario: Scenario, budget: budgets.Budget) -> bool:
    """Whether the budget counts the scenario's step: a training state in bytes, and a step."""
    return scenario.step is not None and budget.training is not None and budget.unit == "bytes"


def scenario_answer(
    scenario: Scenario, report: ParamReport, budget: budgets.Budget, up_to: int = budgets.MAX_SEARCH_DEVICES
) -> budgets.Answer:
    """``budget.answer`` for one scenario: with a step and a training budget in bytes, each mesh's
    step activations (``activations.cached_trace``, the Memory page's and ``memory``'s own figure,
    traced once per ``model`` axis size) beside the state."""
    demand = budgets.demand(report, scenario.dtype, budget.training)
    if not counts_activations(scenario, budget):
        return budgets.answer(demand, budget, up_to)
    config, step = scenario.config.architecture(), scenario.step
    assert step is not None  # counts_activations says so

    from dcsim.memory import activations  # JAX: a step is traced only when a budget counts it

    def per_mesh(mesh: Any) -> int:
        return activations.cached_trace(config, step, scenario.dtype, mesh).bytes_per_device

    return budgets.answer(demand, budget, up_to, activations=per_mesh)


def budget_counts(scenario: Scenario, budget: budgets.Budget) -> str:
    """What the scenario's verdict against the budget counts and leaves out, said beside it."""
    if budget.training is None:
        return (
            "Counts the parameters only: the training state and the step's activations are not counted."
            if scenario.step is not None
            else ""
        )
    if scenario.step is not None and budget.unit != "bytes":
        return "Counts the training state only: a step's activations are bytes, not counted in a budget of values."
    return budgets.leaves_out(scenario.step is not None)


def _ratio(value: int, base: int) -> Fraction:
    return Fraction(value, base)  # a baseline's total and raw bytes are at least 1


def comparison_frame(comparison: Comparison, reports: Sequence[ParamReport]) -> pd.DataFrame:
    """One row per scenario, in order: ``number``, ``name``, ``is_baseline``, ``model``,
    ``num_shards``, ``dtype``, ``total_params``, ``ideal_share`` (float) and ``ideal_share_text``
    (exact), ``raw_bytes`` (in the scenario's dtype), ``raw_<dtype>_bytes`` for every dtype, and
    against the baseline: ``params_vs_baseline`` and ``raw_bytes_vs_baseline`` (exact int
    differences), ``params_ratio``/``raw_bytes_ratio`` (floats) with their exact ``..._text``,
    and ``ideal_share_vs_baseline_text`` (the exact difference of the shares)."""
    if len(reports) != len(comparison.scenarios):
        raise ValueError(
            f"one report per scenario is needed: {len(comparison.scenarios)} scenarios, {len(reports)} reports"
        )
    totals = [report.total_params for report in reports]
    share_of = [
        shares.ideal_share(total, s.num_shards).exact for total, s in zip(totals, comparison.scenarios, strict=True)
    ]
    raw = [payload.raw_bytes(total, s.dtype) for total, s in zip(totals, comparison.scenarios, strict=True)]
    in_format, refusals = [], []
    for scenario, report in zip(comparison.scenarios, reports, strict=True):
        try:
            in_format.append(weights_bytes(scenario, report))
            refusals.append("")
        except ValueError as err:  # a configuration the format cannot lay out (a group that does not divide)
            in_format.append(None)
            refusals.append(str(err))
    base = comparison.baseline - 1
    rows: dict[str, Any] = {
        "number": list(range(1, len(totals) + 1)),
        "name": list(comparison.names),
        "is_baseline": [index == base for index in range(len(totals))],
        "model": [model_text(s.config) for s in comparison.scenarios],
        "num_shards": [s.num_shards for s in comparison.scenarios],
        "dtype": [s.dtype for s in comparison.scenarios],
        "total_params": totals,
        "ideal_share": [float(share) for share in share_of],
        "ideal_share_text": [units.share(share) for share in share_of],
        "raw_bytes": raw,
        "weights": [s.weights or "" for s in comparison.scenarios],
        "weights_bytes": pd.array(in_format, dtype="Int64"),
        "weights_refusal": refusals,
        **{f"raw_{dtype}_bytes": [payload.raw_bytes(total, dtype) for total in totals] for dtype in payload.RAW_DTYPES},
    }
    if any(s.step is not None for s in comparison.scenarios):  # a comparison without steps keeps its columns
        rows["step"] = [step_text(s.step) for s in comparison.scenarios]
        rows |= {
            key: pd.array([None if s.step is None else getattr(s.step, key) for s in comparison.scenarios], dtype=kind)
            for key, kind in STEP_COLUMNS.items()
        }
    if totals:
        params_ratio = [_ratio(total, totals[base]) for total in totals]
        bytes_ratio = [_ratio(value, raw[base]) for value in raw]
        rows |= {
            "params_vs_baseline": [total - totals[base] for total in totals],
            "params_ratio": [float(r) for r in params_ratio],
            "params_ratio_text": [units.share(r) for r in params_ratio],
            "raw_bytes_vs_baseline": [value - raw[base] for value in raw],
            "raw_bytes_ratio": [float(r) for r in bytes_ratio],
            "raw_bytes_ratio_text": [units.share(r) for r in bytes_ratio],
            "ideal_share_vs_baseline_text": [units.share(share - share_of[base]) for share in share_of],
        }
    else:
        rows |= {name: [] for name in _DIFF_COLUMNS}
    frame = pd.DataFrame(rows)
    for name in INT_COLUMNS:
        frame[name] = pd.array(frame[name].tolist(), dtype="int64")
    return frame


# A step's columns in the table, when any scenario has one (missing where a scenario has none).
STEP_COLUMNS = {"sequence": "Int64", "micro_batch": "Int64", "remat": "string", "attention": "string"}
_DIFF_COLUMNS = (
    "params_vs_baseline",
    "params_ratio",
    "params_ratio_text",
    "raw_bytes_vs_baseline",
    "raw_bytes_ratio",
    "raw_bytes_ratio_text",
    "ideal_share_vs_baseline_text",
)
INT_COLUMNS = (
    "number",
    "num_shards",
    "total_params",
    "raw_bytes",
    *(f"raw_{dtype}_bytes" for dtype in payload.RAW_DTYPES),
    "params_vs_baseline",
    "raw_bytes_vs_baseline",
)


def sweep_frame(comparison: Comparison, reports: Sequence[ParamReport], up_to: int = 4096) -> pd.DataFrame:
    """The ideal share of every scenario at every power of two up to ``up_to`` and at its own
    shard count: ``name``, ``num_shards``, ``ideal_share`` (float) and ``ideal_share_text`` (exact)."""
    rows: dict[str, list[Any]] = {"name": [], "num_shards": [], "ideal_share": [], "ideal_share_text": []}
    for scenario, report in zip(comparison.scenarios, reports, strict=True):
        counts = sorted({*shares.powers_of_two(up_to), scenario.num_shards})
        for share in shares.sweep(report.total_params, counts):
            rows["name"].append(scenario.name)
            rows["num_shards"].append(share.num_shards)
            rows["ideal_share"].append(share.value)
            rows["ideal_share_text"].append(units.share(share.exact))
    frame = pd.DataFrame(rows)
    frame["num_shards"] = pd.array(rows["num_shards"], dtype="int64")
    return frame


def budget_frame(comparison: Comparison, answers: Sequence[budgets.Answer]) -> pd.DataFrame:
    """One row per scenario: ``name``, ``need`` (what must fit in all, in the budget's unit),
    ``ideal_shards`` (ideal share, an average), ``ideal_share_text``, ``devices`` (real layout,
    JAX's sharding rules; missing when no N up to 4,096 fits), ``per_device``, ``larger_searched``
    (how many N above the answer were searched), ``larger_that_fit`` and ``larger_that_fail`` (how
    many of them fit and do not), ``summary`` (``dcsim.memory.budget.summary``: the answer in words),
    ``activations`` (a step's activations a device there, included in ``per_device``; missing
    where not counted) and ``counts`` (``budget_counts``: what the verdict counts and leaves out)."""
    budget = comparison.budget
    return pd.DataFrame(
        {
            "name": list(comparison.names),
            "need": pd.array([a.need for a in answers], dtype="int64"),
            "ideal_shards": pd.array([a.ideal_shards for a in answers], dtype="int64"),
            "ideal_share_text": [units.share(a.ideal_share) for a in answers],
            "devices": pd.array([a.devices for a in answers], dtype="Int64"),
            "per_device": pd.array([a.per_device for a in answers], dtype="Int64"),
            "larger_searched": pd.array(
                [0 if a.devices is None else a.searched - a.devices for a in answers], dtype="int64"
            ),
            "larger_that_fit": pd.array([len(a.fits_above) for a in answers], dtype="int64"),
            "larger_that_fail": pd.array([len(a.fails_above) for a in answers], dtype="int64"),
            "summary": [budgets.summary(a, budget) for a in answers],
            "activations": pd.array([a.shown_activations for a in answers], dtype="Int64"),
            "counts": [budget_counts(s, budget) for s in comparison.scenarios],
        }
    )


def held_frame(comparison: Comparison, answers: Sequence[budgets.Answer]) -> pd.DataFrame:
    """What the fullest device holds under the real layout at the device counts worth showing
    (``dcsim.memory.budget.shown_counts``: the counts a team buys, the answer, the ideal share's count),
    per scenario: ``name``, ``devices``, ``mesh``, ``held`` (float, missing where the layout is
    impossible), ``held_text`` (exact), ``verdict`` (fits the budget, over the budget, cannot be
    laid out), ``is_answer`` (the fewest devices that fit), ``on_trend`` (a power of two: the
    line a reader follows) and ``note`` (why the count is shown when a team would not buy it)."""
    budget = comparison.budget
    rows: dict[str, list[Any]] = {
        key: [] for key in ("name", "devices", "mesh", "held", "held_text", "verdict", "is_answer", "on_trend", "note")
    }
    for scenario, found in zip(comparison.scenarios, answers, strict=True):
        for devices in budgets.shown_counts(found):
            held = found.held[devices - 1]
            notes = [
                *(["the fewest devices that fit"] if devices == found.devices else []),
                *(["the ideal share's shard count"] if devices == found.ideal_shards else []),
            ]
            rows["name"].append(scenario.name)
            rows["devices"].append(devices)
            rows["mesh"].append(f"{budget.mesh_axis}={devices}")
            rows["held"].append(None if held is None else float(held))
            rows["held_text"].append("cannot be laid out" if held is None else budgets.amount_text(held, budget.unit))
            rows["verdict"].append(
                BUDGET_VERDICTS[2] if held is None else BUDGET_VERDICTS[0 if held <= budget.amount else 1]
            )
            rows["is_answer"].append(devices == found.devices)
            rows["on_trend"].append(devices & (devices - 1) == 0)
            rows["note"].append("; ".join(notes))
    frame = pd.DataFrame(rows)
    frame["devices"] = pd.array(rows["devices"], dtype="int64")
    frame["held"] = frame["held"].astype(float)
    return frame


# What a device count is against the budget, in the chart's legend and tooltips.
BUDGET_VERDICTS = ("Fits the budget", "Over the budget", "Cannot be laid out")


def comparison_record(
    comparison: Comparison, reports: Sequence[ParamReport], answers: Sequence[budgets.Answer] | None = None
) -> dict[str, Any]:
    """The comparison and its table as one JSON-ready object (``comparison``, ``table``, and
    ``budget_answers`` when given); every count an exact int."""
    table = comparison_frame(comparison, reports)
    record: dict[str, Any] = {
        "comparison": comparison.to_dict(),
        "table": [_plain(row) for row in table.to_dict(orient="records")],
    }
    if answers is not None:
        record["budget_answers"] = [
            {
                "name": scenario.name,
                "budget": comparison.budget.amount,
                "unit": comparison.budget.unit,
                "holds": comparison.budget.holds,
                "need": a.need,
                "ideal_shards": a.ideal_shards,
                "ideal_share_fraction": str(a.ideal_share),
                "devices": a.devices,
                "mesh": None if a.devices is None else f"{comparison.budget.mesh_axis}={a.devices}",
                "strategy": comparison.budget.strategy,
                "per_device": a.per_device,
                "larger_device_counts_that_fail": list(a.fails_above),
                "larger_device_counts_that_fit": list(a.fits_above),
                "summary": budgets.summary(a, comparison.budget),
                "num_impossible_device_counts": a.num_impossible,
                **_step_answer(scenario, a, comparison.budget),
            }
            for scenario, a in zip(comparison.scenarios, answers, strict=True)
        ]
    return record


def _step_answer(scenario: Scenario, answer: budgets.Answer, budget: budgets.Budget) -> dict[str, Any]:
    """A scenario with a step: its activations a device at the answer (null when not counted) and
    what the verdict counts; nothing for a scenario without one, whose record stays as it was."""
    if scenario.step is None:
        return {}
    return {"activations_bytes_per_device": answer.shown_activations, "counts": budget_counts(scenario, budget)}


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A table row with NumPy scalars as Python ones, so ``json.dumps`` takes it."""
    return {key: value.item() if hasattr(value, "item") else value for key, value in row.items()}
