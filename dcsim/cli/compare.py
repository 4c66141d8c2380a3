"""``compare``: scenarios side by side and the budget question, from a comparison JSON file."""

from __future__ import annotations

import argparse
import io
import json

import pandas as pd

from dcsim import compare
from dcsim.cli.common import add_command, format_flag, frame_text, read_file
from dcsim.compare import tables
from dcsim.memory import budget
from dcsim.model.count import count_params
from dcsim.quantities import units


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = add_command(commands, "compare", run, model=False)
    command.add_argument("file", metavar="FILE", help="comparison JSON ('-' reads stdin)")
    format_flag(command, ("table", "json", "csv"))


_COMPARE_COLUMNS = {
    "number": "#",
    "name": "scenario",
    "model": "model",
    "num_shards": "shards",
    "dtype": "dtype",
    "total_params": "total_params",
    "ideal_share_text": "ideal_share",
    "raw_bytes": "raw_bytes",
    "params_vs_baseline": "params_vs_baseline",
    "params_ratio_text": "params_ratio",
    "raw_bytes_vs_baseline": "raw_bytes_vs_baseline",
}


def render_compare_table(comparison: compare.Comparison, table: pd.DataFrame, answers: list[budget.Answer]) -> str:
    """The comparison for people: the side-by-side table, then both answers to the budget question."""
    if not comparison.scenarios:
        return "the comparison holds no scenarios\n"
    columns = dict(_COMPARE_COLUMNS)
    if any(scenario.weights for scenario in comparison.scenarios):
        columns |= {"weights": "weights", "weights_bytes": "weights_bytes"}
    if any(scenario.step for scenario in comparison.scenarios):
        columns |= {"step": "step"}
    shown = table[list(columns)].rename(columns=columns)
    if "weights_bytes" in shown:
        shown["weights_bytes"] = [f"{value:,}" if value is not pd.NA else "-" for value in shown["weights_bytes"]]
    if "step" in shown:
        shown["step"] = [text or "-" for text in shown["step"]]
    shown["scenario"] = [
        f"{name} (baseline)" if base else name for name, base in zip(table["name"], table["is_baseline"], strict=True)
    ]
    spec = comparison.budget
    lines = [
        frame_text(shown),
        "",
        "raw_bytes: values x bytes per value in the scenario's dtype; a raw estimate, NOT the checkpoint size."
        + (
            " weights_bytes: the weight format's exact tensors, scales included (the file adds its header)."
            if "weights_bytes" in shown
            else ""
        ),
        "",
        f"budget per shard and per device: {spec.amount_text} ({spec.holds})",
    ]
    stepped = any(scenario.step for scenario in comparison.scenarios)
    for scenario, found in zip(comparison.scenarios, answers, strict=True):
        counts = tables.budget_counts(scenario, spec) if stepped else ""
        state = ", of the state alone" if found.counts_activations else ""
        lines += [
            f"  {scenario.name}: needs {units.count(found.need)} {spec.unit} in all",
            f"    ideal share (an average{state}): {units.many(found.ideal_shards, 'shard')}",
            f"    real layout (JAX's sharding rules, {spec.strategy}): {budget.summary(found, spec)}"
            + (f" {counts}" if counts else ""),
        ]
        if found.shown_activations is not None:
            lines.append(
                f"    of it, the step's activations ({compare.step_text(scenario.step)}): "
                f"{units.bytes_exact(found.shown_activations)} a device"
            )
    lines.append(
        f"The real layout is not monotone in N (an array that splits on 4 devices may be replicated on 3), "
        f"so every N from 1 to {budget.MAX_SEARCH_DEVICES:,} was searched."
    )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> str:
    comparison = read_file(args.file, "comparison", compare.MAX_COMPARISON_BYTES, compare.Comparison.from_json)
    reports = [count_params(scenario.config) for scenario in comparison.scenarios]
    if args.format == "csv":
        buffer = io.StringIO()
        tables.comparison_frame(comparison, reports).to_csv(buffer, index=False)
        return buffer.getvalue()
    answers = [
        tables.scenario_answer(scenario, report, comparison.budget)
        for report, scenario in zip(reports, comparison.scenarios, strict=True)
    ]
    if args.format == "json":
        return json.dumps(tables.comparison_record(comparison, reports, answers), indent=2, ensure_ascii=False) + "\n"
    return render_compare_table(comparison, tables.comparison_frame(comparison, reports), answers)
