"""The budget question for training: the smallest mesh whose most-loaded device holds the whole
training state within a budget, by the ideal share and by the real layout.

The meshes searched keep the given mesh's shape: its first axis takes every power of two (and its
own size), the other axes stay as given, up to ``MAX_SEARCH_DEVICES`` devices (or the given mesh's
count when larger). So ``data=8,model=4`` is searched as ``data=1,model=4`` (4 devices),
``data=2,model=4`` (8) ... ``data=1024,model=4`` (4,096): the tensor-parallel group a team has
chosen stays, and data parallelism grows. Two answers, never mixed up:

- **ideal share**: the smallest count searched with total state bytes / devices <= budget (and,
  exactly, ceil(total / budget), the fewest devices an even split could ever use).
- **real layout**: the smallest count searched whose most-loaded device, laid out by
  ``dcsim.memory.state.compute_memory``, holds at most the budget. Not monotone: a layout may
  replicate on a larger mesh what a smaller one splits, so every candidate is laid out and shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from dcsim.memory import budget as budgets
from dcsim.memory.stages import most_loaded
from dcsim.memory.state import MODEL_PARALLEL_AXES, MODEL_PARALLEL_STRATEGIES, compute_memory
from dcsim.memory.training import Training
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.sharding import layout
from dcsim.sharding.meshes import MeshSpec, Rule

MAX_SEARCH_DEVICES = budgets.MAX_SEARCH_DEVICES


def candidate_meshes(mesh: MeshSpec, up_to: int = MAX_SEARCH_DEVICES) -> tuple[MeshSpec, ...]:
    """The meshes searched: ``mesh`` with its first axis at each power of two and at its own size,
    the other axes as given, up to ``max(up_to, mesh.num_devices)`` devices, fewest first."""
    (first, size), rest = mesh.axes[0], mesh.axes[1:]
    others = mesh.num_devices // size
    limit = max(up_to, mesh.num_devices)
    sizes = sorted({size, *(1 << k for k in range(limit.bit_length()) if (1 << k) * others <= limit)})
    return tuple(MeshSpec(((first, n), *rest)) for n in sizes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Candidate:
    """One mesh searched: what its most-loaded device holds, or why the layout is impossible."""

    mesh: MeshSpec
    total_bytes_per_device: int | None
    error: str | None = None
    activations_bytes_per_device: int = 0  # included in the total, when the step's activations are counted
    # With a ``stage`` axis: each stage's device's state (``dcsim.memory.stages``); the total is then
    # the stage's that holds the most, state and activations together.
    stage_state_bytes: tuple[int, ...] | None = None

    def fits(self, amount: int) -> bool:
        return self.total_bytes_per_device is not None and self.total_bytes_per_device <= amount


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fit:
    """Both answers to "how many devices until each holds at most ``amount`` bytes of state?".

    Attributes:
      amount: the budget, bytes per device.
      total_bytes: the training state once (what the ideal share divides).
      candidates: every mesh searched, fewest devices first.
      ideal: the smallest candidate by the ideal share (None if none is large enough).
      real: the smallest candidate by the real layout (None if none fits).
      whole_bytes: bytes a device holds of the parts the setup does not split, ``{part: bytes}``:
        the same on every mesh, so when they alone pass the budget no device count can fit.
    """

    amount: int
    total_bytes: int
    candidates: tuple[Candidate, ...]
    ideal: MeshSpec | None
    real: Candidate | None
    whole_bytes: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def why_none_fits(self) -> str | None:
        """Why no device count could ever fit, when the parts kept whole alone pass the budget."""
        held = sum(self.whole_bytes.values())
        if not self.whole_bytes or held <= self.amount:
            return None
        parts = ", ".join(self.whole_bytes)
        return (
            f"the parts this setup does not split over the data axes ({parts}) alone take {units.bytes_exact(held)} "
            f"a device, over the budget of {units.bytes_exact(self.amount)} on any number of devices; split them "
            "(a higher ZeRO stage) or store them in a smaller dtype"
        )

    @property
    def min_ideal_devices(self) -> int:
        """ceil(total / budget): the fewest devices an even split could ever use, searched or not."""
        return budgets.ideal_shards(self.total_bytes, self.amount)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sweep:
    """The training state laid out on every candidate mesh, before any budget or step: the part of
    the search that takes time, kept apart so that a new budget or a new sequence reuses it.

    Attributes:
      total_bytes: the training state once (the same on every mesh).
      states: each candidate mesh, fewest devices first, with what its most-loaded device holds of
        the state (``activations_bytes_per_device`` 0), or why it cannot be laid out.
      whole_bytes: bytes a device holds of the parts the setup does not split, ``{part: bytes}``.
    """

    total_bytes: int
    states: tuple[Candidate, ...]
    whole_bytes: dict[str, int]


def sweep(
    report: ParamReport,
    mesh: MeshSpec,
    strategy: str,
    rules: Sequence[Rule],
    training: Training,
    up_to: int = MAX_SEARCH_DEVICES,
) -> Sweep:
    """Lay the training state out on every candidate mesh (``candidate_meshes``)."""
    states = []
    total = None
    whole: dict[str, int] = {}
    for candidate in candidate_meshes(mesh, up_to):
        try:
            memory = compute_memory(report, candidate, strategy, rules, training)
        except (layout.LayoutError, ValueError) as err:
            states.append(Candidate(mesh=candidate, total_bytes_per_device=None, error=str(err)))
            continue
        total = memory.total_bytes
        # The parts the setup does not split shrink only when the axis searched is one the strategy
        # splits them over (``model`` under tensor parallelism): then no floor is claimed.
        grows_model = mesh.axes[0][0] in MODEL_PARALLEL_AXES and strategy in MODEL_PARALLEL_STRATEGIES
        whole = (
            {}
            if grows_model
            else {part: memory.part_bytes(part) for part in training.parts if part not in training.shard}
        )
        staged = None if memory.pipeline is None else memory.pipeline.state_bytes
        states.append(
            Candidate(mesh=candidate, total_bytes_per_device=memory.total_bytes_per_device, stage_state_bytes=staged)
        )
    if total is None:  # nothing could be laid out: the state's size does not depend on the mesh
        total = compute_memory(report, mesh, "replicated", (), training).total_bytes
    return Sweep(total_bytes=total, states=tuple(states), whole_bytes=whole)


def fit(
    report: ParamReport,
    mesh: MeshSpec,
    strategy: str,
    rules: Sequence[Rule],
    training: Training,
    amount: int,
    up_to: int = MAX_SEARCH_DEVICES,
    activations: Callable[[MeshSpec], int] | None = None,
    stage_activations: Callable[[MeshSpec, tuple[int, ...]], tuple[int, ...]] | None = None,
) -> Fit:
    """Lay the training state out on every candidate mesh and answer the budget question
    (``sweep``, then ``answer``)."""
    amount = budgets.check_amount(amount)
    return answer(sweep(report, mesh, strategy, rules, training, up_to), amount, activations, stage_activations)


def answer(
    swept: Sweep,
    amount: int,
    activations: Callable[[MeshSpec], int] | None = None,
    stage_activations: Callable[[MeshSpec, tuple[int, ...]], tuple[int, ...]] | None = None,
) -> Fit:
    """The budget question answered on a sweep's layouts.

    ``activations``: the bytes a step's activations take on a device of a mesh
    (``dcsim.memory.activations``), added to the state on each candidate and to the ideal share
    (activations are per data-parallel replica: more devices on the data axes never split them);
    a ValueError it raises (a model axis that cannot split the heads) marks that mesh impossible.
    ``stage_activations(mesh, stages)``: on a mesh with a ``stage`` axis, each stage's activations
    (``dcsim.memory.stages.activation_bytes``), so that the figure is the most-loaded stage's."""
    amount = budgets.check_amount(amount)
    candidates = []
    for state in swept.states:
        if state.total_bytes_per_device is None:
            candidates.append(state)
            continue
        held = state.total_bytes_per_device
        try:
            if state.stage_state_bytes is not None and stage_activations is not None:
                per_stage = stage_activations(state.mesh, state.stage_state_bytes)
                chosen = most_loaded(state.stage_state_bytes, per_stage)
                held, extra = state.stage_state_bytes[chosen], per_stage[chosen]
            else:
                extra = 0 if activations is None else activations(state.mesh)
        except ValueError as err:
            candidates.append(Candidate(mesh=state.mesh, total_bytes_per_device=None, error=str(err)))
            continue
        candidates.append(
            Candidate(
                mesh=state.mesh,
                total_bytes_per_device=held + extra,
                activations_bytes_per_device=extra,
                stage_state_bytes=state.stage_state_bytes,
            )
        )
    total = swept.total_bytes
    ideal = next(
        (
            c.mesh
            for c in candidates
            if c.total_bytes_per_device is not None
            and Fraction(total, c.mesh.num_devices) + c.activations_bytes_per_device <= amount
        )
        if activations is not None
        else (c.mesh for c in candidates if Fraction(total, c.mesh.num_devices) <= amount),
        None,
    )
    real = next((c for c in candidates if c.fits(amount)), None)
    return Fit(
        amount=amount,
        total_bytes=total,
        candidates=tuple(candidates),
        ideal=ideal,
        real=real,
        whole_bytes=swept.whole_bytes,
    )


def fit_record(answer: Fit) -> dict[str, Any]:
    """The answer as JSON-ready data: ``bytes``, ``ideal`` and ``real`` (``{devices, mesh}`` or
    null), ``min_ideal_devices`` and every ``candidate``."""
    return {
        "bytes": answer.amount,
        "total_bytes": answer.total_bytes,
        "min_ideal_devices": answer.min_ideal_devices,
        "whole_bytes_per_device": answer.whole_bytes,
        "why_none_fits": answer.why_none_fits,
        "ideal": None if answer.ideal is None else {"devices": answer.ideal.num_devices, "mesh": answer.ideal.text},
        "real": None
        if answer.real is None
        else {
            "devices": answer.real.mesh.num_devices,
            "mesh": answer.real.mesh.text,
            "total_bytes_per_device": answer.real.total_bytes_per_device,
        },
        "candidates": [
            {
                "mesh": c.mesh.text,
                "devices": c.mesh.num_devices,
                "total_bytes_per_device": c.total_bytes_per_device,
                "fits": c.fits(answer.amount),
                "activations_bytes_per_device": c.activations_bytes_per_device,
                "error": c.error,
            }
            for c in answer.candidates
        ],
    }
