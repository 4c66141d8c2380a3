"""The Memory page's tables and sentences, from the engine's answers: what each part holds, every
array (``dcsim.report.memory_tables``, the CSV the CLI writes too), the budget's verdict from the
footprint (``dcsim.memory.report``), and the budget search's answers in words. Nothing here adds
bytes: each figure is read from a report."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd

from dcsim.memory import search
from dcsim.memory import training as trainings
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import MemoryReport
from dcsim.memory.training import STAGES, Training
from dcsim.model.config import ModelConfig
from dcsim.quantities import units
from dcsim.report import memory_charts, memory_tables
from dcsim.report.memory_tables import PART_TITLES
from dcsim.sharding import meshes
from dcsim.ui.memory import Setup, cached_memory


def parts_frame(memory: MemoryReport) -> pd.DataFrame:
    """One row per part the setup holds (``dcsim.report.memory_tables``: the CLI's parts table too)."""
    return memory_tables.state_parts_frame(memory)


def arrays_frame(memory: MemoryReport) -> pd.DataFrame:
    """One row per state array, in the engine's order: ``dcsim.report.memory_tables``' table, the
    CSV ``memory --format csv`` writes."""
    return memory_tables.state_arrays_frame(memory.arrays)


def candidates_frame(answer: search.Fit) -> pd.DataFrame:
    """Every mesh searched as text for a table: mesh, devices, per_device, ideal_share, fits."""
    return pd.DataFrame(
        {
            "mesh": [c.mesh.text for c in answer.candidates],
            "devices": [units.count(c.mesh.num_devices) for c in answer.candidates],
            "per_device": [
                units.bytes_exact(c.total_bytes_per_device)
                if c.total_bytes_per_device is not None
                else "cannot be laid out"
                for c in answer.candidates
            ],
            "ideal_share": [
                units.bytes_share(Fraction(answer.total_bytes, c.mesh.num_devices)) for c in answer.candidates
            ],
            "fits": ["yes" if c.fits(answer.amount) else "no" for c in answer.candidates],
        }
    )


def devices_text(n: int) -> str:
    return f"{units.count(n)} device{'' if n == 1 else 's'}"


def fit_sentences(answer: search.Fit, budget_text: str, verdict: Any = None) -> list[str]:
    """The budget's two answers in words: by the ideal share and by the real layout; when no mesh
    fits, why (``verdict``: the asked mesh's, ``dcsim.memory.remedies``) and what would."""
    least = answer.min_ideal_devices
    searched = answer.candidates[-1].mesh.num_devices if answer.candidates else 0
    ideal = (
        f"**By the ideal share**: the state ({units.bytes_exact(answer.total_bytes)}) needs at least "
        f"{units.count(least)} device{'' if least == 1 else 's'} of {budget_text}"
    )
    if answer.ideal is not None:
        smallest = f"{answer.ideal.text} ({devices_text(answer.ideal.num_devices)})"
        ideal += f"; the smallest mesh searched that reaches it is {smallest}."
    else:
        ideal += f"; no mesh searched, up to {units.many(searched, 'device')}, reaches it."
    if answer.real is not None:
        real = (
            f"**By the real layout**: {answer.real.mesh.text} ({devices_text(answer.real.mesh.num_devices)}) is "
            f"the smallest mesh searched whose devices each hold at most {budget_text}: "
            f"{units.bytes_exact(answer.real.total_bytes_per_device or 0)} a device."
        )
    else:
        real = (
            f"**By the real layout**: no mesh searched, up to {units.many(searched, 'device')}, fits {budget_text} "
            "a device: " + _why_none_fits(answer, verdict)
        )
    return [ideal, real]


def _why_none_fits(answer: search.Fit, verdict: Any) -> str:
    """Why no mesh of the search fits and which remedies (computed on the asked mesh) would."""
    why = answer.why_none_fits or (None if verdict is None or isinstance(verdict, str) else verdict.why_data_cannot)
    fitting = [] if verdict is None or isinstance(verdict, str) else verdict.fitting_phrases()
    said = f"{why}." if why else "no data-parallel size searched brings it under the budget."
    if fitting:
        said += f" On {verdict.mesh.text} it fits with {'; or '.join(fitting)} (the sentence at the top)."
    return said


def refused_meshes(answer: search.Fit) -> list[str]:
    """The meshes searched that cannot be laid out, with the engine's reason (the first few)."""
    refused = [c for c in answer.candidates if c.error]
    return [f"{c.mesh.text}: {c.error}" for c in refused[:3]] + (
        [f"… and {len(refused) - 3:,} more meshes."] if len(refused) > 3 else []
    )


def budget_delta(footprint: TrainingReport) -> tuple[str, str]:
    """The metric's value and help for the budget: what the footprint leaves of it, or by how much it
    is over."""
    headroom = footprint.headroom_bytes or 0
    if footprint.fits:
        return (
            f"Fits: {units.binary_bytes(headroom)} left",
            f"{units.bytes_exact(headroom)} left of the budget.",
        )
    return f"Over by {units.binary_bytes(-headroom)}", f"{units.bytes_exact(-headroom)} over the budget."


def largest_text(memory: MemoryReport) -> str:
    """The array that takes the most bytes on a device, and why, in one sentence."""
    row = memory.largest
    return (
        f"Largest array on a device: {row.path} ({PART_TITLES[row.part].lower()}, {meshes.shape_text(row.shape)} "
        f"{row.dtype}, {row.spec_text}, each device holds {meshes.shape_text(row.shard_shape)}): "
        f"{units.bytes_exact(row.bytes_per_device)}. Why: {row.note}."
    )


def part_filter_label(choice: str) -> str:
    return "All parts" if choice == "all" else PART_TITLES[choice]


def stage_frame(config: ModelConfig, setup: Setup, activations_bytes: int | None = None) -> pd.DataFrame:
    """What one device holds under each ZeRO stage (and under the parts named freely, when that is
    the setup), part by part, for ``memory_charts.stage_bars``. Stages the layout refuses are left
    out. ``activations_bytes`` (a step's, the same under every stage): an ``activations`` part, and
    the ``headroom`` left to the budget, on each bar."""
    training = setup.training
    fields = {
        "optimizer": training.optimizer,
        "param_dtype": training.param_dtype,
        "grad_dtype": training.grad_dtype,
        "master_dtype": training.master_dtype,
    }
    setups = [(f"ZeRO-{stage}", Training.stage(stage, **fields)) for stage in STAGES]
    if training.zero is None:
        setups.append((f"Parts: {trainings.parts_text(training.shard)}", training))
    records = []
    for label, candidate in setups:
        memory = cached_memory(config, setup.with_training(candidate)).memory
        if memory is None:
            continue
        footprint = TrainingReport.of(memory, activations_bytes, setup.budget)
        total = footprint.total_bytes
        chosen = candidate == training
        shown = list(footprint.parts)
        if activations_bytes is not None:
            shown += [("activations", activations_bytes), ("headroom", max(0, footprint.headroom_bytes or 0))]
        for order, (part, held) in enumerate(shown):
            records.append(
                {
                    "setup": f"▶ {label}" if chosen else label,
                    "part": part,
                    "part_title": PART_TITLES[part],
                    "part_order": order,
                    "gib": held / memory_charts.GIB,
                    "bytes_text": units.bytes_exact(held),
                    "total_gib": total / memory_charts.GIB,
                    "total_short": units.binary_bytes(total),
                    "total_text": units.bytes_exact(total),
                    "chosen": chosen,
                }
            )
    return pd.DataFrame(records)
