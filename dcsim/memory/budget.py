"""The budget question: how many shards, and how many devices, until each holds at most B?

Two answers, never mixed up:

- **ideal share (an average)**: the smallest shard count N with total / N <= B. It is a closed form,
  ceil(total / B) in exact integer arithmetic, and it says nothing about how arrays really split.
- **real layout (JAX's sharding rules)**: the smallest device count N from 1 to 4,096 on a one-axis
  mesh (``data=N``; ``model=N`` for the tensor strategy) whose every device holds at most B under
  the chosen strategy, as ``dcsim.sharding.layout`` lays it out. It is not monotone: fsdp on 3 devices may
  replicate what 4 devices split, and 5 devices may replicate again. So every N is searched, and
  the larger counts that fail after the smallest fit are reported.

A budget is values or bytes per device. Bytes count each value in the scenario's dtype. With
training state, what each device holds is ``dcsim.memory``'s answer for ZeRO-3 (the parameters,
one gradient per parameter and a real optax optimizer's state, in the scenario's dtype, all split
by the strategy; optax's scalar step counts whole on every device): the figure ``dcsim memory
--zero 3`` and the Memory page give on the same mesh, so the question has one answer.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable
from fractions import Fraction

from dcsim.inputs import show
from dcsim.memory.report import leaves_out_text
from dcsim.memory.state import per_device_by_shape
from dcsim.memory.training import Training
from dcsim.model import optimizer
from dcsim.model.count import ParamReport
from dcsim.quantities import payload, units
from dcsim.quantities.amounts import BUDGET_UNITS, check_amount
from dcsim.sharding import layout, meshes

BUDGET_STRATEGIES = ("fsdp", "replicated", "tensor")
MAX_SEARCH_DEVICES = 4096
DEFAULT_AMOUNT = 80 * 2**30  # 80 GiB, a large accelerator's memory
MAX_FAILURES_LISTED = 12  # device counts listed in a sentence; the JSON keeps every one
MAX_EXAMPLES = 3  # counts that fail, named with the reason


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budget:
    """A per-shard and per-device budget.

    Attributes:
      amount: the budget, an exact int of ``unit``.
      unit: ``bytes`` (each value in its scenario's dtype) or ``values``.
      training: None for the parameters alone; an optimizer name (``dcsim.model.optimizer.OPTIMIZERS``)
        to add the gradients (same as the parameters) and that optimizer's state.
      strategy: the layout strategy of the real answer: fsdp, replicated or tensor.
    """

    amount: int = DEFAULT_AMOUNT
    unit: str = "bytes"
    training: str | None = None
    strategy: str = "fsdp"

    def __post_init__(self) -> None:
        object.__setattr__(self, "amount", check_amount(self.amount))
        if self.unit not in BUDGET_UNITS:
            raise ValueError(f"the budget unit must be one of {', '.join(BUDGET_UNITS)}, got {show(self.unit)}")
        if self.training is not None and self.training not in optimizer.OPTIMIZERS:
            raise ValueError(
                f"training state needs an optimizer, one of {', '.join(optimizer.OPTIMIZER_NAMES)}; "
                f"got {show(self.training)}"
            )
        if self.strategy not in BUDGET_STRATEGIES:
            raise ValueError(
                f"the budget's layout strategy must be one of {', '.join(BUDGET_STRATEGIES)}, got {show(self.strategy)}"
            )

    @property
    def mesh_axis(self) -> str:
        """The one axis of the searched mesh: ``model`` for tensor (which splits over it), else ``data``."""
        return layout.TENSOR_AXIS if self.strategy == "tensor" else "data"

    @property
    def amount_text(self) -> str:
        return units.bytes_exact(self.amount) if self.unit == "bytes" else f"{self.amount:,} values"

    @property
    def holds(self) -> str:
        """What the budget must hold, in words."""
        if self.training is None:
            return "parameters only"
        return (
            f"ZeRO-3 training state: parameters + gradients + {self.training} optimizer state (optax), all split, "
            "as dcsim memory lays it out"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Demand:
    """What must fit: the parameter arrays grouped by shape, their dtype, and the training state.

    Attributes:
      shapes: ``(shape, how many arrays)`` of the parameters.
      dtype: the dtype every parameter is stored in.
      training: None for the parameters alone; else the training state ZeRO-3 keeps (params,
        grads and optimizer state, all split by the layout; see ``dcsim.memory``), which
        ``dcsim.memory.state.per_device_by_shape`` lays out: the figures ``dcsim memory`` and the
        Memory page give for the same mesh, so the budget has one answer, not two.
    """

    shapes: tuple[tuple[tuple[int, ...], int], ...]
    dtype: str
    training: Training | None = None

    @functools.cached_property
    def _whole(self) -> dict[str, tuple[int, int]]:
        """``{part: (values, bytes)}`` of everything once: what one device of a one-device mesh holds."""
        return self.held(meshes.MeshSpec((("data", 1),)), "replicated")

    @property
    def num_values(self) -> int:
        return sum(values for values, _ in self._whole.values())

    @property
    def num_bytes(self) -> int:
        return sum(size for _, size in self._whole.values())

    def amount(self, unit: str) -> int:
        return self.num_bytes if unit == "bytes" else self.num_values

    def held(
        self, mesh: meshes.MeshSpec, strategy: str, splitter: layout.Splitter | None = None
    ) -> dict[str, tuple[int, int]]:
        """``{part: (values, bytes)}`` each device of ``mesh`` holds under ``strategy``; raises
        ``layout.LayoutError`` when the strategy cannot place an array there."""
        splitter = splitter or layout.Splitter(mesh)
        if self.training is not None:
            return per_device_by_shape(dict(self.shapes), mesh, strategy, self.training, splitter)
        placed = layout.specs_by_shape([shape for shape, _ in self.shapes], mesh, strategy, splitter)
        values = sum(placed[shape][1] * count for shape, count in self.shapes)
        return {"params": (values, values * _itemsize(self.dtype))}


def demand(report: ParamReport, dtype: str, training: str | None = None) -> Demand:
    """The arrays a device budget must hold for a model counted as ``report``, stored as ``dtype``;
    with ``training`` (an optimizer's name), ZeRO-3's training state in ``dtype`` (no master copy)."""
    payload.bytes_per_value(dtype)  # checks the dtype
    shapes = Counter(tuple(row.shape) for row in report.arrays)
    setup = None if training is None else Training.stage(3, optimizer=training, param_dtype=dtype)
    return Demand(shapes=tuple(shapes.items()), dtype=dtype, training=setup)


def ideal_shards(need: int, amount: int) -> int:
    """The smallest N with need / N <= amount: ceil(need / amount), exactly, at least 1."""
    return max(1, -(-need // amount))


def per_device(demand: Demand, mesh: meshes.MeshSpec, strategy: str, unit: str) -> int:
    """What each device of ``mesh`` holds of ``demand`` under ``strategy``, in ``unit``; raises
    ``layout.LayoutError`` when the strategy cannot place an array there."""
    held = demand.held(mesh, strategy)
    return sum(size if unit == "bytes" else values for values, size in held.values())


@functools.cache
def _itemsize(dtype: str) -> int:
    """Bytes a value of ``dtype`` takes (``payload.raw_bytes_as`` of one value), looked up once:
    the search asks thousands of times."""
    return payload.raw_bytes_as(1, dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """Both answers to the budget question for one model.

    Attributes:
      need: what must fit in all, in the budget's unit.
      ideal_shards: ideal share (an average): the smallest N with need / N <= budget.
      devices: real layout (JAX's sharding rules): the smallest N in 1..4,096 whose every device
        holds at most the budget; None when no N up to 4,096 fits.
      per_device: what each device holds at ``devices``, in the budget's unit.
      fails_above: device counts above ``devices`` (up to 4,096) that do not fit: over the budget
        or impossible. The search never stops at the first fit for this reason.
      num_impossible: device counts from 1 to 4,096 where the strategy cannot place the model.
      held: per device count 1..4,096, what each device holds (None where impossible).
      activations: per device count, the step's activations a device holds, included in ``held``
        (None where impossible); empty when a step's activations are not counted.
    """

    need: int
    ideal_shards: int
    devices: int | None
    per_device: int | None
    fails_above: tuple[int, ...]
    num_impossible: int
    held: tuple[int | None, ...]
    activations: tuple[int | None, ...] = ()

    @property
    def counts_activations(self) -> bool:
        return bool(self.activations)

    @property
    def shown_activations(self) -> int | None:
        """The step's activations a device holds where the answer is (where the emptiest layout is
        when nothing fits), or None when they are not counted or nothing can be laid out."""
        if not self.activations:
            return None
        if self.devices is not None:
            return self.activations[self.devices - 1]
        placed = [(value, n) for n, value in enumerate(self.held, start=1) if value is not None]
        return self.activations[min(placed)[1] - 1] if placed else None

    @property
    def ideal_share(self) -> Fraction:
        """The ideal share at ``ideal_shards``, exactly."""
        return Fraction(self.need, self.ideal_shards)

    @property
    def searched(self) -> int:
        """The largest device count searched (every count from 1 to it was)."""
        return len(self.held)

    @property
    def fits_above(self) -> tuple[int, ...]:
        """Device counts above ``devices`` (up to ``searched``) that fit too."""
        if self.devices is None:
            return ()
        failing = set(self.fails_above)
        return tuple(n for n in range(self.devices + 1, self.searched + 1) if n not in failing)


# The bytes a step's activations take on a device of a mesh (``dcsim.memory.activations``); a
# ValueError marks a mesh whose model axis cannot split the step (as Megatron splits heads).
Activations = Callable[[meshes.MeshSpec], int]


def _sweep(
    demand: Demand, budget: Budget, up_to: int, activations: Activations | None
) -> tuple[tuple[int | None, ...], tuple[int | None, ...]]:
    """What each device holds on each mesh of 1 to ``up_to`` devices, and of it the activations."""
    held: list[int | None] = []
    steps: list[int | None] = []
    for count in range(1, up_to + 1):
        mesh = meshes.MeshSpec(((budget.mesh_axis, count),))
        state: int | None = None
        step: int | None = None
        try:
            state = per_device(demand, mesh, budget.strategy, budget.unit)
            step = 0 if activations is None else activations(mesh)
        except layout.LayoutError:
            pass
        except ValueError:  # from ``activations``: a model axis the step's heads or widths do not divide
            if activations is None:
                raise
            state = None
        held.append(None if state is None or step is None else state + step)
        steps.append(None if held[-1] is None else step)
    return tuple(held), tuple(steps) if activations is not None else ()


def sweep(
    demand: Demand, budget: Budget, up_to: int = MAX_SEARCH_DEVICES, activations: Activations | None = None
) -> tuple[int | None, ...]:
    """What each device holds, in the budget's unit, on each mesh of 1 to ``up_to`` devices (with
    ``activations``, a step's activations too, in bytes)."""
    return _sweep(demand, budget, up_to, activations)[0]


def answer(
    demand: Demand, budget: Budget, up_to: int = MAX_SEARCH_DEVICES, activations: Activations | None = None
) -> Answer:
    """Both answers for ``demand`` under ``budget``; every device count up to ``up_to`` is searched.
    ``activations`` (a budget in bytes): a step's activations on each mesh, counted beside the
    state in the real layout's answer; the ideal share stays the state's average (activations are
    per data-parallel replica: no shard count divides them)."""
    if activations is not None and budget.unit != "bytes":
        raise ValueError(f"a step's activations are bytes; a budget in {budget.unit} cannot count them")
    need = demand.amount(budget.unit)
    held, steps = _sweep(demand, budget, up_to, activations)
    fits = [count for count, value in enumerate(held, start=1) if value is not None and value <= budget.amount]
    devices = fits[0] if fits else None
    fit_set = set(fits)
    fails_above = () if devices is None else tuple(n for n in range(devices + 1, up_to + 1) if n not in fit_set)
    return Answer(
        need=need,
        ideal_shards=ideal_shards(need, budget.amount),
        devices=devices,
        per_device=None if devices is None else held[devices - 1],
        fails_above=fails_above,
        num_impossible=sum(value is None for value in held),
        held=held,
        activations=steps,
    )


# --- what the front ends show ----------------------------------------------------------------------


def bought_counts(up_to: int = MAX_SEARCH_DEVICES) -> tuple[int, ...]:
    """The device counts a team buys, up to ``up_to``: powers of two and three times a power of two
    (1, 2, 3, 4, 6, 8, 12, 16, 24 ... 3,072, 4,096), as accelerators come in hosts, racks and pods.

    The search covers every count; these are the ones worth drawing. Between them lie counts such
    as 4,095 that nobody buys and that fsdp replicates on, a forest of spikes that hides the answer.
    """
    return tuple(sorted({n for base in (1, 3) for n in (base << k for k in range(up_to.bit_length())) if n <= up_to}))


def shown_counts(answer: Answer) -> tuple[int, ...]:
    """The device counts worth showing for ``answer``: those a team buys, the answer itself and the
    ideal share's shard count (when it was searched), in order."""
    extra = {answer.ideal_shards} if answer.ideal_shards <= answer.searched else set()
    if answer.devices is not None:
        extra.add(answer.devices)
    return tuple(sorted({*bought_counts(answer.searched), *extra}))


def amount_text(amount: int, unit: str) -> str:
    """An exact amount of the budget's unit: ``68,976,648,196 bytes (64.24 GiB)`` or ``7,000 values``."""
    return units.bytes_exact(amount) if unit == "bytes" else f"{amount:,} values"


def _counts_text(counts: tuple[int, ...]) -> str:
    """``16, 32 and 64``; past ``MAX_FAILURES_LISTED`` the first ones and ``…``."""
    shown = [f"{n:,}" for n in counts[:MAX_FAILURES_LISTED]]
    if len(counts) > MAX_FAILURES_LISTED:
        return ", ".join(shown) + ", …"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def summary(answer: Answer, budget: Budget) -> str:
    """The real layout's answer in words a capacity planner reads: where it fits, which larger
    counts fit too and which do not, and why, with the figures. The page and the CLI both say this.

    Exact: every count is searched, and the sentence says how many larger counts fit and fail;
    lists past ``MAX_FAILURES_LISTED`` counts end in ``…`` (``fails_above`` has them all).
    """
    axis, unit, searched = budget.mesh_axis, budget.unit, answer.searched
    if answer.devices is None or answer.per_device is None:  # both None or neither
        placed = [(value, n) for n, value in enumerate(answer.held, start=1) if value is not None]
        if not placed:
            return f"The {budget.strategy} strategy cannot lay this model out on any mesh {axis}=N up to {searched:,}."
        least, where = min(placed)
        return (
            f"Fits on no device count from 1 to {searched:,}: even the emptiest layout, on "
            f"{units.many(where, 'device')} ({axis}={where}), holds {amount_text(least, unit)} a device, over the "
            f"budget of {amount_text(budget.amount, unit)}."
        )
    devices = answer.devices
    found = f"Fits on {units.many(devices, 'device')} ({axis}={devices}), {amount_text(answer.per_device, unit)} each."
    larger = searched - devices
    fit, fail = answer.fits_above, answer.fails_above
    if not larger:
        return f"{found} It is the largest count searched."
    if not fail:
        return f"{found} Every larger count up to {searched:,} fits too."
    if len(fit) > len(fail):
        return (
            f"{found} Of the {larger:,} larger counts up to {searched:,}, {len(fail):,} do not fit "
            f"({_counts_text(fail)}): {_why(answer, budget, fail[0])}"
        )
    bought = [n for n in bought_counts(searched) if n in set(fail)]
    examples = tuple((bought or list(fail))[:MAX_EXAMPLES])
    why = _why(answer, budget, examples[0])
    if not fit:
        return (
            f"{found} None of the {larger:,} larger counts up to {searched:,} fits, e.g. "
            f"{_counts_text(examples)}: {why}"
        )
    return (
        f"{found} Of the {larger:,} larger counts up to {searched:,}, {len(fit):,} also "
        f"fit{'s' * (len(fit) == 1)} ({_counts_text(fit)}); the other {len(fail):,} do not, e.g. "
        f"{_counts_text(examples)}: {why}"
    )


def leaves_out(with_activations: bool) -> str:
    """What a verdict against the budget does not count, said beside it (the Memory page's and the
    Compare page's alike): ``dcsim.memory.report``'s words."""
    return leaves_out_text(with_activations)


def _why(answer: Answer, budget: Budget, count: int) -> str:
    """Why ``count`` devices do not fit, with what they would hold, as the end of a sentence."""
    held = answer.held[count - 1]
    if held is None:
        step = " (and, for the step's activations, the heads and widths, as Megatron does)" * answer.counts_activations
        return (
            f"{budget.strategy} must split every array's last dimension{step} over {budget.mesh_axis}=N, and "
            f"{count:,} does not divide them all, so it cannot lay the model out there."
        )
    would = f"{count:,} devices would hold {amount_text(held, budget.unit)} each"
    if budget.strategy == "fsdp":
        return f"fsdp keeps an array whole on every device when the count divides none of its dimensions, so {would}."
    return f"{would}, over the budget."
