"""What a training run keeps on its devices, and which of it is split: the ``Training`` request.

The parts of the training state:

- ``params``: the model's parameters, in ``param_dtype``.
- ``grads``: one gradient per parameter, in ``grad_dtype`` (the params' dtype unless given).
- ``master``: an optional float32 (or other) master copy of the parameters, kept by mixed
  precision beside low-precision params; ``None`` when there is none.
- ``optimizer``: a real optax optimizer's state, initialised abstractly on the parameters in the
  master copy's dtype when there is one, else the params' (as optax does: its moments take the
  dtype of the arrays it is initialised on); its scalar step counts are int32.

Which parts are split over the mesh: the ZeRO stages people know (Rajbhandari et al., 2020; the
names DeepSpeed and PyTorch FSDP use), or any set of parts. The stage decides which parts are
split; the mesh, the strategy and the rules decide only how.

- 0: nothing split: every data-parallel replica holds every part whole (plain data parallelism).

A part the stage does not split is whole over the data axes only: a strategy's split over the
model-parallel axes (``model``, ``expert``, ``stage``) applies to every part at every stage, as
Megatron-LM and DeepSpeed compose them (``dcsim.memory.state``).
- 1: the optimizer state and the master copy are split (ZeRO-1, "optimizer state partitioning").
- 2: the gradients too (ZeRO-2).
- 3: the parameters too (ZeRO-3, PyTorch's FULL_SHARD, what JAX's fsdp layouts do).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.inputs import check_choice, show
from dcsim.model.config import DTYPES as RAW_DTYPES
from dcsim.model.optimizer import check_optimizer
from dcsim.quantities import payload

PARTS = ("params", "grads", "master", "optimizer")
STAGES: dict[int, frozenset[str]] = {
    0: frozenset(),
    1: frozenset({"optimizer", "master"}),
    2: frozenset({"optimizer", "master", "grads"}),
    3: frozenset(PARTS),
}
STAGE_HELP = {
    0: "ZeRO-0: nothing split over the data axes, every replica holds every part whole (plain data parallelism)",
    1: "ZeRO-1: the optimizer state and the master copy split, params and grads whole over the data axes",
    2: "ZeRO-2: the optimizer state, the master copy and the grads split, params whole over the data axes",
    3: "ZeRO-3: every part split (PyTorch's FULL_SHARD; what JAX's fsdp layouts do)",
}
# The storage dtypes dcsim knows everywhere. optax keeps its moments in the dtype it is initialised
# on, so int8 params (quantised storage) get int8 moments, as optax would make them; float64 state
# is initialised with JAX's x64 mode on (``dcsim.memory.state``), without which JAX would quietly
# make it float32.
DTYPES = RAW_DTYPES
NO_MASTER = "none"
# The usual mixed-precision recipe, one definition for the Memory page's button and the Bytes page's
# column: bfloat16 parameters, a float32 master copy, the optimizer's moments in float32 (optax keeps
# them in the dtype of the parameters it updates: the master copy's).
RECIPE = {"param": "bfloat16", "master": "float32"}
RECIPE_TEXT = "bf16 params, fp32 master copy and moments"


def recipe_checkpoint_bytes(total_params: int, float32_state_bytes: int) -> int:
    """What a training checkpoint's arrays come to under ``RECIPE``: the bfloat16 parameters, their
    float32 master copy and the optimizer state initialised on float32 parameters (its raw bytes)."""
    return (
        payload.raw_bytes(total_params, RECIPE["param"])
        + payload.raw_bytes(total_params, RECIPE["master"])
        + (float32_state_bytes)
    )


MAX_PARTS_CHARS = 64


def parse_parts(text: str) -> frozenset[str]:
    """A comma list of parts (``params,grads``; ``none`` for no part) as a set; raises
    ValueError naming the part and the allowed ones."""
    if not isinstance(text, str):
        raise TypeError(f"the parts to shard must be text such as 'optimizer,grads', got {type(text).__name__}")
    if len(text) > MAX_PARTS_CHARS:
        raise ValueError(f"the parts to shard may be at most {MAX_PARTS_CHARS} characters, got {len(text):,}")
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == [NO_MASTER]:
        return frozenset()
    if not names:
        raise ValueError(f"name the parts to shard: a comma list of {', '.join(PARTS)}, or {NO_MASTER}")
    for name in names:
        if name not in PARTS:
            raise ValueError(f"unknown part {show(name)} to shard; parts: {', '.join(PARTS)} (or {NO_MASTER})")
    return frozenset(names)


def parts_text(parts: frozenset[str]) -> str:
    """A set of parts as a comma list in ``PARTS`` order (``none`` when empty)."""
    return ",".join(part for part in PARTS if part in parts) or NO_MASTER


def check_stage(value: Any, shown: Any = None) -> int:
    if isinstance(value, str) and value.strip() in {str(stage) for stage in STAGES}:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value not in STAGES:
        raise ValueError(
            f"the ZeRO stage must be 0, 1, 2 or 3 (0: nothing split ... 3: every part split), "
            f"got {show(value if shown is None else shown)}"
        )
    return value


def check_dtype(value: Any, what: str) -> str:
    return check_choice(value, DTYPES, f"the {what} dtype")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Training:
    """A training setup: the optimizer, the dtypes, and which parts are split over the mesh.

    Attributes:
      optimizer: a key of ``dcsim.model.optimizer.OPTIMIZERS``.
      shard: the parts split over the mesh (the others are whole on every device).
      zero: the ZeRO stage ``shard`` came from, or None when the parts were named freely.
      param_dtype: the parameters' dtype.
      grad_dtype: the gradients' dtype (None: the params').
      master_dtype: the master copy's dtype, or None for no master copy.
    """

    optimizer: str = "adam"
    shard: frozenset[str] = STAGES[3]
    zero: int | None = 3
    param_dtype: str = "bfloat16"
    grad_dtype: str | None = None
    master_dtype: str | None = None

    def __post_init__(self) -> None:
        check_optimizer(self.optimizer)
        if not isinstance(self.shard, frozenset) or not self.shard <= set(PARTS):
            raise ValueError(f"the parts to shard must be a set of {', '.join(PARTS)}, got {show(self.shard)}")
        if self.zero is not None:
            check_stage(self.zero)
            if self.shard != STAGES[self.zero]:
                raise ValueError(
                    f"ZeRO stage {self.zero} shards {parts_text(STAGES[self.zero])}, not {parts_text(self.shard)}"
                )
        check_dtype(self.param_dtype, "param")
        if self.grad_dtype is not None:
            check_dtype(self.grad_dtype, "grad")
        if self.master_dtype is not None:
            check_dtype(self.master_dtype, "master")

    @classmethod
    def stage(cls, zero: int, **kwargs: Any) -> Training:
        """The setup of ZeRO stage ``zero``."""
        zero = check_stage(zero)
        return cls(shard=STAGES[zero], zero=zero, **kwargs)

    @classmethod
    def sharding(cls, parts: frozenset[str], **kwargs: Any) -> Training:
        """A setup that splits ``parts`` (named freely, not by stage)."""
        return cls(shard=frozenset(parts), zero=None, **kwargs)

    @property
    def grads_dtype(self) -> str:
        return self.grad_dtype or self.param_dtype

    @property
    def state_dtype(self) -> str:
        """The dtype optax initialises its state on: the master copy's when there is one."""
        return self.master_dtype or self.param_dtype

    @property
    def parts(self) -> tuple[str, ...]:
        """The parts this setup holds, in ``PARTS`` order (no ``master`` without a master copy)."""
        return tuple(part for part in PARTS if part != "master" or self.master_dtype is not None)

    @property
    def sharded_parts(self) -> tuple[str, ...]:
        """The parts held that are split, in ``PARTS`` order."""
        return tuple(part for part in self.parts if part in self.shard)

    def dtype_of(self, part: str) -> str:
        return {
            "params": self.param_dtype,
            "grads": self.grads_dtype,
            "master": self.master_dtype or self.param_dtype,
            "optimizer": self.state_dtype,
        }[part]

    @property
    def text(self) -> str:
        """One line: ``adam, ZeRO-3 (params, grads, optimizer split), params bfloat16 ...``."""
        which = f"ZeRO-{self.zero}" if self.zero is not None else "parts named freely"
        master = f", master copy {self.master_dtype}" if self.master_dtype else ", no master copy"
        return (
            f"{self.optimizer}, {which} ({', '.join(self.sharded_parts) or 'nothing'} split), params "
            f"{self.param_dtype}, grads {self.grads_dtype}{master}"
        )


# The strategies whose splits over the model-parallel axes (``dcsim.memory.state.MODEL_PARALLEL_AXES``)
# apply at every ZeRO stage; fsdp and replicated split over the data axes alone.
MODEL_PARALLEL_STRATEGIES = ("tensor", "megatron", "custom")
MODEL_PARALLEL_AXES = ("model", "expert", "stage")


def tensor_parallel_note(strategy: str, training: Training, mesh: Any) -> str | None:
    """What changed for a setup whose strategy splits over a model-parallel axis while the ZeRO stage
    leaves parts unsplit: since this release those parts keep the strategy's split over ``model``,
    ``expert`` and ``stage`` and are whole over the data axes only (Megatron-LM's and DeepSpeed's
    composition); earlier dcsim kept them whole on every device, so old links and commands show
    smaller figures now. ``mesh``: a ``dcsim.sharding.meshes.MeshSpec``."""
    whole = [part for part in training.parts if part not in training.shard]
    axes = dict(mesh.axes)
    if strategy not in MODEL_PARALLEL_STRATEGIES or not whole:
        return None
    if not any(axes.get(name, 1) > 1 for name in MODEL_PARALLEL_AXES):
        return None
    return (
        f"Since this release the {strategy} strategy's splits over the model-parallel axes (`model`, `expert`, "
        f"`stage`) apply at every ZeRO stage, as Megatron-LM and DeepSpeed compose them: the {_listed(whole)} "
        "are split over those axes and whole over the data axes only. Earlier dcsim kept them whole on every "
        "device, so figures from older links and commands are smaller now."
    )


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
