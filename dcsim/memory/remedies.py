"""The verdict for the mesh a person asked about, and what would make it fit, tried through the engine.

A budget question is asked about one mesh ("Llama 3 8B on data=8 at 8,192 tokens, 80 GiB a
device"). Its answer leads: fits or not, by how much, and which part is over. When it does not fit,
each change a team would make instead of buying devices is tried on the same mesh, one at a time,
with the same layout engine and the same traced activations as the asked figure: every other remat
policy, each larger ZeRO stage, tensor parallelism over the same devices (with and without sequence
parallelism) and each smaller micro-batch. The ones whose device fits are named, with their bytes;
no remedy is suggested that was not computed.

Growing the data axes (``dcsim.memory.search``) splits the state but never a step's activations,
which are per data-parallel replica: ``why_data_cannot`` says so when the activations (and the
parts not split over the data axes) alone pass the budget, so that no device count could fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dcsim.memory import step as steps
from dcsim.memory.report import NOT_COUNTED, TrainingReport
from dcsim.memory.training import STAGES, Training
from dcsim.quantities import units
from dcsim.sharding import layout
from dcsim.sharding.meshes import MeshSpec

if TYPE_CHECKING:
    from dcsim.memory.search import Fit

TENSOR_AXIS = "model"
# Tensor sizes tried: 2, 4, 8 while the data axis holds them. Megatron-LM keeps its tensor-parallel group
# inside one node's NVLink domain (8 GPUs), where its per-layer all-reduces stay fast.
MAX_TENSOR = 8
KINDS = ("remat", "zero", "tensor", "micro-batch")  # the order remedies are tried and named in
KIND_WORDS = {
    "remat": "a remat policy",
    "zero": "a larger ZeRO stage",
    "tensor": "tensor (and sequence) parallelism",
    "micro-batch": "a smaller micro-batch",
}

# A footprint of a changed setup on a mesh: (state bytes, activations bytes or None) a device;
# ValueError or a layout error when the change cannot run (heads a tensor axis does not divide).
Measure = Callable[[MeshSpec, Training, "steps.Step | None"], tuple[int, int | None]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Remedy:
    """One change tried on the asked mesh: what a device then holds, or why it cannot run.

    Attributes:
      kind: one of ``KINDS``.
      label: the change in words, as pages and the CLI name it (``remat minimal``).
      flags: the change as command-line flags (``--remat minimal``).
      total_bytes: a device's state and activations after the change (None: cannot run).
      error: why it cannot run, or None.
    """

    kind: str
    label: str
    flags: str
    total_bytes: int | None
    error: str | None = None

    def fits(self, amount: int) -> bool:
        return self.total_bytes is not None and self.total_bytes <= amount

    def record(self, amount: int) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "change": self.label,
            "flags": self.flags,
            "total_bytes": self.total_bytes,
            "fits": self.fits(amount),
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    """The asked mesh against the budget, and the remedies tried when it does not fit.

    Attributes:
      mesh: the mesh asked about.
      footprint: one of its devices (with the budget: ``footprint.budget_bytes`` is not None).
      remedies: every change tried, in ``KINDS`` order (none when it fits).
      whole_bytes: a device's bytes of the parts the ZeRO stage does not split over the data axes
        (they never shrink with more data-parallel devices).
      more_devices: the smallest mesh of the budget search that fits, when one was searched and fits.
    """

    mesh: MeshSpec
    footprint: TrainingReport
    remedies: tuple[Remedy, ...] = ()
    whole_bytes: int = 0
    more_devices: MeshSpec | None = None

    @property
    def amount(self) -> int:
        if self.footprint.budget_bytes is None:
            raise ValueError("a verdict needs a budget")
        return self.footprint.budget_bytes

    @property
    def fits(self) -> bool:
        return bool(self.footprint.fits)

    @property
    def over_part(self) -> str:
        """The larger of the two parts of the total: ``activations`` or ``state``."""
        activations = self.footprint.activations_bytes or 0
        return "activations" if activations > self.footprint.state_bytes else "state"

    @property
    def fitting(self) -> tuple[Remedy, ...]:
        return tuple(remedy for remedy in self.remedies if remedy.fits(self.amount))

    @property
    def why_data_cannot(self) -> str | None:
        """Why no number of data-parallel devices fits, or None when enough of them would."""
        activations = self.footprint.activations_bytes
        held = (activations or 0) + self.whole_bytes
        if held < self.amount:
            return None
        if activations:
            whole = (
                f" and the parts not split over the data axes ({units.binary_bytes(self.whole_bytes)})"
                if self.whole_bytes
                else ""
            )
            return (
                f"the step's activations ({units.binary_bytes(activations)} a device){whole} do not shrink with data "
                f"parallelism: each data-parallel replica keeps its own, so they alone pass the budget of "
                f"{units.binary_bytes(self.amount)} on any number of devices"
            )
        return (
            f"the parts not split over the data axes ({units.binary_bytes(self.whole_bytes)}) do not shrink with "
            f"data parallelism and alone pass the budget of {units.binary_bytes(self.amount)}"
        )

    @property
    def text(self) -> str:
        """The answer in a sentence or three: the mesh, fits or not and by how much, which part is
        over, and the remedies that fit (or the closest, when none does)."""
        footprint = self.footprint
        total = units.binary_bytes(footprint.total_bytes)
        parts = (
            f" (state {units.binary_bytes(footprint.state_bytes)}, activations "
            f"{units.binary_bytes(footprint.activations_bytes)})"
            if footprint.activations_bytes is not None
            else " (the training state; no step's activations counted)"
        )
        budget = units.binary_bytes(self.amount)
        if self.fits:
            left = units.binary_bytes(footprint.headroom_bytes or 0)
            return (
                f"Mesh {self.mesh.text} fits: {total} a device{parts} of a budget of {budget}, {left} left; "
                f"not counted: {_listed(NOT_COUNTED, 'and')}."
            )
        over = units.binary_bytes(-(footprint.headroom_bytes or 0))
        head = (
            f"Mesh {self.mesh.text} does not fit: {total} a device{parts} against a budget of {budget}, over by "
            f"{over}, most of it the {self.over_part}."
        )
        named = self.fitting_phrases()
        if self.more_devices is not None:
            more = self.more_devices
            named.append(f"more devices, {more.text} ({units.many(more.num_devices, 'device')})")
        if self.why_data_cannot is not None:
            what = "the step's activations" if footprint.activations_bytes else "the parts not split over the data axes"
            head += f" More data-parallel devices cannot help: {what} do not shrink with them."
        if named:
            return f"{head} Fits with {'; '.join(named[:-1]) + '; or ' if len(named) > 1 else ''}{named[-1]}."
        tried = [remedy for remedy in self.remedies if remedy.total_bytes is not None]
        kinds = _listed([KIND_WORDS[kind] for kind in KINDS if any(r.kind == kind for r in self.remedies)], "or")
        closest = min(tried, key=lambda remedy: remedy.total_bytes or 0, default=None)
        tail = (
            f" No single change tried ({kinds}) fits; the closest is {closest.label} "
            f"({units.binary_bytes(closest.total_bytes or 0)})."
            if closest is not None
            else " No change could be tried on this mesh."
        )
        return head + tail

    def fitting_phrases(self) -> list[str]:
        """The remedies that fit, one phrase a kind: every remat policy that fits (those of equal bytes
        together, least recompute first), the smallest ZeRO stage, the smallest tensor size (without
        sequence parallelism when both fit there) and the largest micro-batch."""
        fitting = self.fitting
        phrases = []
        remat = [remedy for remedy in fitting if remedy.kind == "remat"]
        by_bytes: dict[int, list[str]] = {}
        for remedy in sorted(remat, key=lambda r: -(r.total_bytes or 0)):
            by_bytes.setdefault(remedy.total_bytes or 0, []).append(remedy.label.removeprefix("remat "))
        if by_bytes:
            groups = [f"{_listed(names, 'or')} ({units.binary_bytes(size)})" for size, names in by_bytes.items()]
            phrases.append("remat " + _listed(groups, "or"))
        for kind in KINDS[1:]:
            first = next((remedy for remedy in fitting if remedy.kind == kind), None)
            if first is not None:
                phrases.append(f"{first.label} ({units.binary_bytes(first.total_bytes or 0)})")
        return phrases

    def record(self) -> dict[str, Any]:
        """The ``verdict`` JSON object (keys in docs/cli.md)."""
        return {
            "mesh": self.mesh.text,
            "fits": self.fits,
            "total_bytes": self.footprint.total_bytes,
            "budget_bytes": self.amount,
            "headroom_bytes": self.footprint.headroom_bytes,
            "over_part": None if self.fits else self.over_part,
            "remedies": [remedy.record(self.amount) for remedy in self.remedies],
            "fitting": [remedy.label for remedy in self.fitting],
            "more_devices": None if self.more_devices is None else self.more_devices.text,
            "why_data_cannot": self.why_data_cannot,
            "text": self.text,
        }


def _listed(names: Sequence[str], last: str) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def tensor_meshes(mesh: MeshSpec) -> tuple[MeshSpec, ...]:
    """The same devices with the first axis giving 2, 4, ... of its size to the ``model`` axis."""
    (first, size), rest = mesh.axes[0], mesh.axes[1:]
    if first == TENSOR_AXIS:
        return ()
    shape = dict(rest)
    found = []
    t = 2
    while t <= min(size, MAX_TENSOR) and size % t == 0:
        tensor = shape.get(TENSOR_AXIS, 1) * t
        axes = [(first, size // t)] if size > t else []
        axes += [(name, tensor if name == TENSOR_AXIS else n) for name, n in rest]
        if TENSOR_AXIS not in shape:
            axes.append((TENSOR_AXIS, tensor))
        found.append(MeshSpec(tuple(axes)))
        t *= 2
    return tuple(found)


Change = tuple[str, str, str, MeshSpec, Training, Any]  # kind, label, flags, mesh, setup, step


def _changes(mesh: MeshSpec, setup: Training, step: steps.Step | None) -> list[Change]:
    """Every single change tried: (kind, label, flags, mesh, setup, step)."""
    changes: list[Change] = []
    if step is not None:
        for policy in steps.POLICY_NAMES:
            if policy != step.remat:
                changed = dataclasses.replace(step, remat=policy)
                changes.append(("remat", f"remat {policy}", f"--remat {policy}", mesh, setup, changed))
    if setup.zero is not None:
        for zero in range(setup.zero + 1, len(STAGES)):
            changed_setup = dataclasses.replace(setup, zero=zero, shard=STAGES[zero])
            changes.append(("zero", f"ZeRO-{zero}", f"--zero {zero}", mesh, changed_setup, step))
    for tensor_mesh in tensor_meshes(mesh):
        label, flags = f"tensor parallelism {tensor_mesh.text}", f"--mesh {tensor_mesh.text}"
        changes.append(("tensor", label, flags, tensor_mesh, setup, step))
        if step is not None and not step.sequence_parallel:
            changes.append(
                (
                    "tensor",
                    f"tensor and sequence parallelism {tensor_mesh.text}",
                    f"--mesh {tensor_mesh.text} --sequence-parallel",
                    tensor_mesh,
                    setup,
                    dataclasses.replace(step, sequence_parallel=True),
                )
            )
    if step is not None:
        batch = step.micro_batch // 2
        while batch >= 1:
            changed = dataclasses.replace(step, micro_batch=batch)
            changes.append(("micro-batch", f"micro-batch {batch}", f"--micro-batch {batch}", mesh, setup, changed))
            batch //= 2
    return changes


def engine_measure(config: Any, report: Any, strategy: str, rules: Sequence[Any], schedule: Any = None) -> Measure:
    """``measure`` on dcsim's own engine: the state laid out by ``dcsim.memory.state`` and the step's
    activations traced by ``dcsim.memory.activations`` (remembered, as the budget search's are). On
    a mesh with a ``stage`` axis, the most-loaded stage's, its micro-batches in flight as
    ``schedule`` (a ``dcsim.speed.pipeline.Pipeline``; None: 1F1B) runs them (``dcsim.memory.stages``)."""
    from dcsim.memory import activations, stages  # JAX: only when a step is traced
    from dcsim.memory.state import compute_memory

    # remat and micro-batch changes keep the state's layout: each stage's state, by mesh and setup
    states: dict[tuple[MeshSpec, Training], Any] = {}

    def measure(mesh: MeshSpec, setup: Training, step: steps.Step | None) -> tuple[int, int | None]:
        if (mesh, setup) not in states:
            states[mesh, setup] = compute_memory(report, mesh, strategy, rules, setup)
        memory = states[mesh, setup]
        if step is None:
            return memory.total_bytes_per_device, None
        traced = activations.cached_trace(config, step, setup.param_dtype, mesh)
        if memory.pipeline is None:
            return memory.total_bytes_per_device, traced.bytes_per_device
        per_stage = stages.activation_bytes(traced, memory.pipeline.blocks, schedule)
        chosen = stages.most_loaded(memory.pipeline.state_bytes, per_stage)
        return memory.pipeline.state_bytes[chosen], per_stage[chosen]

    return measure


def verdict(
    footprint: TrainingReport,
    mesh: MeshSpec,
    setup: Training,
    step: steps.Step | None,
    measure: Measure,
    fit: Fit | None = None,
) -> Verdict:
    """The verdict for ``mesh``, with every remedy tried through ``measure`` when it does not fit.

    ``measure(mesh, setup, step)``: a device's (state bytes, activations bytes) for a changed request,
    the same engine as ``footprint`` (``dcsim.memory.state`` and ``dcsim.memory.activations``)."""
    whole = sum(size for part, size in footprint.parts if part not in footprint.split)
    more = None if fit is None or fit.real is None or fit.real.mesh == mesh else fit.real.mesh
    if footprint.budget_bytes is None:
        raise ValueError("a verdict needs a budget")
    if footprint.fits:
        return Verdict(mesh=mesh, footprint=footprint, whole_bytes=whole)
    remedies = []
    for kind, label, flags, changed_mesh, changed_setup, changed_step in _changes(mesh, setup, step):
        try:
            state, activations = measure(changed_mesh, changed_setup, changed_step)
        except (ValueError, layout.LayoutError) as err:
            remedies.append(Remedy(kind=kind, label=label, flags=flags, total_bytes=None, error=str(err)))
            continue
        remedies.append(Remedy(kind=kind, label=label, flags=flags, total_bytes=state + (activations or 0)))
    return Verdict(mesh=mesh, footprint=footprint, remedies=tuple(remedies), whole_bytes=whole, more_devices=more)
