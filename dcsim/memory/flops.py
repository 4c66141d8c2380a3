"""A training step's floating-point operations, exactly, from the same trace the activations use,
and the published approximations beside them (never instead of them).

The trace (``dcsim.memory.activations``, with ``with_recompute``) counts, for each block built
alike once and for the part outside the blocks with the loss, three figures with
``dcsim.memory.residuals.jaxpr_flops``: the forward alone, the forward and backward without remat,
and the forward and backward under the step's remat policy. So:

- forward: the forward's operations;
- backward: the step without remat less the forward (the gradients of the activations and of the
  parameters, about twice the forward);
- recompute: the step under the policy less the step without it (what remat runs again).

Model FLOPs (forward + backward) are what MFU divides by; hardware FLOPs (recompute too) what HFU
does (Korthikanti et al. 2022, section 6; Chowdhery et al. 2022, Appendix B). Every count is a
Python int: the trace's polynomials are evaluated term by term (``residuals._size``), never in
JAX's int32.

The count is of the jaxpr's equations: a matmul 2 x output x contraction, an elementwise operation
one a value, a sum its input; the embedding's gather and its gradient's scatter count nothing. Pure
Python here: the tracing is ``dcsim.memory.activations``'.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.model import breakdown
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepFlops:
    """The operations of one device's training step (one micro-batch of ``tokens`` tokens on a
    tensor-parallel rank of ``tensor_parallel``).

    Attributes:
      forward: the forward pass, the loss included.
      backward: the backward pass without remat.
      recompute: what the remat policy runs again in the backward (0 without remat).
      tokens: the tokens the device's replica runs in the step (micro-batch x sequence).
      tensor_parallel: the ``model`` axis the blocks were split over (1: none).
    """

    forward: int
    backward: int
    recompute: int
    tokens: int
    tensor_parallel: int

    def __post_init__(self) -> None:
        for name in ("forward", "backward", "recompute", "tokens", "tensor_parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"`{name}` must be a non-negative int, got {value!r}")

    @property
    def model(self) -> int:
        """Forward and backward: the operations MFU counts."""
        return self.forward + self.backward

    @property
    def hardware(self) -> int:
        """The model's operations and the recomputation: what the device runs (HFU)."""
        return self.model + self.recompute


def matmul_params(config: ModelConfig, report: ParamReport) -> int:
    """N of the published approximations: the parameters a token multiplies by, the active ones
    of a routed model (``breakdown.active_params``), without the embeddings' gathers (token and
    position tables) and with the output head (the token table again when the head is tied to it).
    Chowdhery et al. 2022, Appendix B: "N is the number of parameters in the model, excluding
    embedding parameters"; their output layer is the tied table's matmul, which costs 2N a token."""
    active = breakdown.active_params(config, report)
    total = report.total_params if active is None else active
    gathered = sum(row.num_values for row in report.arrays if row.path.startswith("embed/"))
    head = any(row.path.startswith("lm_head/") for row in report.arrays)
    tied = 0 if head else sum(row.num_values for row in report.arrays if row.path == "embed/token/embedding")
    return total - gathered + tied


def palm_flops_per_token(n: int, hparams: dict[str, Any], sequence: int) -> int:
    """PaLM's training FLOPs a token (Chowdhery et al. 2022, Appendix B): 6N + 12 L h s, with L
    blocks, h = heads x head size (d_model for plain heads) and s the sequence."""
    return 6 * n + 12 * hparams["num_layers"] * _attention_width(hparams) * sequence


def kaplan_flops_per_token(n: int, hparams: dict[str, Any], sequence: int) -> int:
    """Kaplan et al. 2020's training FLOPs a token (their Table 1, forward 2N + 2 L s h, backward
    twice that): 6N + 6 L s h, with h the attention's width (d_attn)."""
    return 6 * n + 6 * hparams["num_layers"] * sequence * _attention_width(hparams)


def decode_flops_per_token(n: int) -> int:
    """A decode token's forward, the usual rule: 2N (the attention over the cache left out)."""
    return 2 * n


def six_n_d(n: int, tokens: int) -> int:
    """The 6ND rule for a run's training FLOPs (Kaplan et al. 2020, section 2.1)."""
    return 6 * n * tokens


def _attention_width(hparams: dict[str, Any]) -> int:
    head_dim = hparams.get("head_dim") or hparams["d_model"] // hparams["num_heads"]
    return int(hparams["num_heads"] * head_dim)


def flops_record(flops: StepFlops, model_per_token: int, approximations: dict[str, int]) -> dict[str, Any]:
    """The ``flops`` JSON object: the device's step by part, the model's FLOPs a token (the whole
    model, not a rank), and the approximations a token beside them."""
    return {
        "forward": flops.forward,
        "backward": flops.backward,
        "recompute": flops.recompute,
        "model_flops_per_step_per_device": flops.model,
        "hardware_flops_per_step_per_device": flops.hardware,
        "tokens_per_step_per_replica": flops.tokens,
        "model_flops_per_token": model_per_token,
        "approximations_per_token": approximations,
    }
