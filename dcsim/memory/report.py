"""One device's training footprint, added up once: the state's parts, a step's activations, their
total against a budget, and what the figure leaves out.

The CLI, the Memory page and its ZeRO-stage bars each summed state and activations against the
budget on their own; now each renders this report and adds nothing, as ``dcsim.serving``'s
``ServingReport`` is for serving. The checkpoint plan and the step time read the same report.

Built from the laid-out state (``dcsim.memory.state.MemoryReport``) and the traced step's bytes
(``dcsim.memory.activations``); every figure an exact int.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dcsim.memory.training import PARTS

if TYPE_CHECKING:
    from dcsim.memory.state import MemoryReport

# What no figure of the report counts, in plain words: each is real device memory a run needs.
NOT_COUNTED = ("XLA's temporaries", "communication buffers", "fragmentation")
NO_STEP = "a step's activations"  # left out too when no step (no sequence) is given


def leaves_out_text(with_step: bool) -> str:
    """What a verdict against the budget does not count, in a sentence said beside it (the Memory
    page's and the Compare page's alike)."""
    if with_step:
        *first, last = NOT_COUNTED
        return f"Counts the state and the step's activations; not {', '.join(first)} or {last}."
    return f"Counts the training state only: {NO_STEP} are not counted (give a sequence to add them)."


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingReport:
    """What one device holds for training: every device of a mesh under JAX's even splits holds the
    same, so this is the most-loaded device's figure too.

    Attributes:
      num_devices: the mesh's devices.
      parts: ``(part, bytes a device holds)`` of each part of the setup, in ``PARTS`` order
        (``master`` only when a master copy is kept).
      split: the parts split over the mesh; the others are whole on every device.
      activations_bytes: a step's activations on the device, or None for the state alone.
      budget_bytes: one device's memory, or None without a budget (no verdict then).
    """

    num_devices: int
    parts: tuple[tuple[str, int], ...]
    split: frozenset[str]
    activations_bytes: int | None = None
    budget_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("num_devices", self.num_devices),
            *((f"the {part} bytes", size) for part, size in self.parts),
            ("activations_bytes", self.activations_bytes),
            ("budget_bytes", self.budget_bytes),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        unknown = [part for part, _ in self.parts if part not in PARTS]
        if unknown:
            raise ValueError(f"parts must be among {', '.join(PARTS)}, got {', '.join(unknown)}")

    @classmethod
    def of(
        cls, memory: MemoryReport, activations_bytes: int | None = None, budget_bytes: int | None = None
    ) -> TrainingReport:
        """The footprint of the state laid out as ``memory``, with a step's activations and a budget."""
        setup = memory.training
        return cls(
            num_devices=memory.num_devices,
            parts=tuple((part, memory.part_bytes(part)) for part in setup.parts),
            split=frozenset(setup.shard),
            activations_bytes=activations_bytes,
            budget_bytes=budget_bytes,
        )

    def part_bytes(self, part: str) -> int:
        """Bytes a device holds of ``part`` (0 for a part the setup does not keep)."""
        return dict(self.parts).get(part, 0)

    @property
    def state_bytes(self) -> int:
        """The training state on the device: every part."""
        return sum(size for _, size in self.parts)

    @property
    def with_step(self) -> bool:
        return self.activations_bytes is not None

    @property
    def total_bytes(self) -> int:
        """The state and, with a step, its activations."""
        return self.state_bytes + (self.activations_bytes or 0)

    @property
    def headroom_bytes(self) -> int | None:
        """What the budget leaves after the total (negative: over by that much); None without a budget."""
        return None if self.budget_bytes is None else self.budget_bytes - self.total_bytes

    @property
    def over_bytes(self) -> int | None:
        """How far the total is over the budget; None without a budget, or where it fits."""
        headroom = self.headroom_bytes
        return None if headroom is None or headroom >= 0 else -headroom

    @property
    def fits(self) -> bool | None:
        """Whether the total is within the budget; None without a budget."""
        headroom = self.headroom_bytes
        return None if headroom is None else headroom >= 0

    @property
    def leaves_out(self) -> tuple[str, ...]:
        """What the total does not count, in plain words."""
        return NOT_COUNTED if self.with_step else (NO_STEP, *NOT_COUNTED)

    @property
    def leaves_out_text(self) -> str:
        return leaves_out_text(self.with_step)

    def record(self) -> dict[str, Any]:
        """The ``footprint`` JSON object (keys in docs/cli.md): the state, the activations (null
        without a step), the total, the budget, the verdict and the headroom (null without a
        budget), and what it leaves out."""
        return {
            "state_bytes": self.state_bytes,
            "activations_bytes": self.activations_bytes,
            "total_bytes": self.total_bytes,
            "budget_bytes": self.budget_bytes,
            "fits": self.fits,
            "headroom_bytes": self.headroom_bytes,
            "leaves_out": list(self.leaves_out),
        }

    def per_device_record(self) -> dict[str, int]:
        """The ``per_device`` JSON object (keys in docs/cli.md): each of ``PARTS``' bytes and the total;
        with a step, the state's and the activations' bytes too."""
        record = {f"{part}_bytes": self.part_bytes(part) for part in PARTS}
        if self.activations_bytes is None:
            return record | {"total_bytes": self.state_bytes}
        return record | {
            "total_bytes": self.total_bytes,
            "state_bytes": self.state_bytes,
            "activations_bytes": self.activations_bytes,
        }
