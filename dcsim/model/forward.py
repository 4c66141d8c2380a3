"""How a training forward computes what the count does not see: the attention kind (naive or
flash), the routed experts' dispatch and the remat policy over the blocks. None of them changes a
parameter; ``dcsim.memory.activations`` traces a step under each."""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax

ATTENTION_KINDS = ("naive", "flash")
DISPATCHES = ("dense", "dropless", "capacity")
# MaxText's ``minimal`` remat policy (its current one): the outputs of the projections, by the
# names the modules here give them with ``checkpoint_name``.
MINIMAL_NAMES = (
    "query_proj",
    "key_proj",
    "value_proj",
    "qkv_proj",
    "out_proj",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwi",
    "mlpwo",
)
REMAT_POLICIES: dict[str, Any] = {
    "none": None,  # no remat: everything saveable is saved
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_saveable,
    "dots-no-batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "minimal": jax.checkpoint_policies.save_only_these_names(*MINIMAL_NAMES),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Forward:
    """How a training forward computes what the count does not see (``dcsim.memory.activations``):
    ``attention`` ``naive`` (the softmax probabilities materialised, as today's modules do) or
    ``flash`` (``flash_attention``: a ``jax.custom_vjp`` whose forward saves only q, k, v, the output
    and the log-sum-exp, as FlashAttention, cuDNN and Pallas splash attention do); ``dispatch`` of
    routed experts ``dense`` (every expert on every token, weighted by zero where not routed: the
    count's forward), ``dropless`` (each token's chosen experts only, ``jax.lax.ragged_dot`` over
    tokens sorted by expert, as MaxText's default) or ``capacity`` (GShard: each expert takes at most
    ``capacity_factor`` x its even share of the routed tokens, the rest dropped). None of them
    changes a parameter; the default is the count's forward exactly."""

    attention: str = "naive"
    dispatch: str = "dense"
    capacity_factor: float = 1.0
    remat: str = "none"  # a whole model's blocks under ``nn.remat`` with this policy (XLA's step check)

    def __post_init__(self) -> None:
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"the remat policy must be one of {', '.join(REMAT_POLICIES)}, got {self.remat!r}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"the attention must be one of {', '.join(ATTENTION_KINDS)}, got {self.attention!r}")
        if self.dispatch not in DISPATCHES:
            raise ValueError(f"the expert dispatch must be one of {', '.join(DISPATCHES)}, got {self.dispatch!r}")
        if not self.capacity_factor > 0:
            raise ValueError(f"the capacity factor must be positive, got {self.capacity_factor!r}")

    @property
    def flash(self) -> bool:
        return self.attention == "flash"

    def block(self, cls: Any) -> Any:
        """``cls``, or ``nn.remat(cls, policy=...)`` under a remat policy, as training code wraps
        its blocks; the parameters' names and shapes are the same."""
        if self.remat == "none":
            return cls
        return nn.remat(cls, policy=REMAT_POLICIES[self.remat])


def block_class(forward: Forward | None, cls: Any) -> Any:
    return cls if forward is None else forward.block(cls)
