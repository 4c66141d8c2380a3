"""Korthikanti et al.'s activation formula beside dcsim's traced figure, and why the two differ for a
model: the published yardstick, never the answer (``dcsim.memory.activations`` traces the answer).
Pure Python."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dcsim.memory.step import Step
from dcsim.model import registry


def korthikanti_bytes(hparams: Mapping[str, Any], step: Step, t: int = 1) -> int | None:
    """Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models",
    bytes for s, b, h = d_model, a = heads, L = blocks (16-bit activations, dropout masks 1 byte):

    - no recomputation, naive attention: s*b*h*L*(34 + 5*a*s/h); with tensor parallelism over t
      only: s*b*h*L*(10 + 24/t + 5*a*s/(h*t)); with tensor and sequence parallelism: the first / t;
    - no recomputation, flash attention (their selective recomputation of the attention core):
      34*s*b*h*L; 10 + 24/t under tensor parallelism only; / t with sequence parallelism;
    - full recomputation: 2*s*b*h*L (each block's input), / t with sequence parallelism;
    - None for dots, dots-no-batch and minimal: the paper has no counterpart.

    Rounded down to whole bytes where t does not divide."""
    s, b, L = step.sequence, step.micro_batch, hparams["num_layers"]
    h, a = hparams["d_model"], hparams["num_heads"]
    sp = step.sequence_parallel and t > 1
    quadratic = 5 * a * s if step.attention == "naive" else 0  # per s*b*L: 5*a*s^2*b*L
    if step.remat == "none":
        if sp or t == 1:
            total = s * b * L * (34 * h + quadratic)
            return total // t
        return (s * b * L * (10 * h * t + 24 * h + quadratic)) // t
    if step.remat == "full":
        return (2 * s * b * h * L) // (t if sp else 1)
    return None


def formula_note(family: registry.Family, hparams: Mapping[str, Any], step: Step) -> str:
    """Why the exact figure differs from the formula for this model, in one line."""
    h, a = hparams["d_model"], hparams["num_heads"]
    reasons = []
    if family.experts:
        k, e = hparams["experts_per_token"], hparams["num_experts"]
        reasons.append(f"routed experts ({k} of {e} a token) where the formula has one dense MLP of 4h")
    elif hparams.get("gated_mlp"):
        reasons.append(f"a SwiGLU MLP {hparams['ffn_dim']:,} wide (gate, up, down) where the formula has GeLU over 4h")
    elif hparams.get("ffn_dim") != 4 * h:
        reasons.append(f"an MLP {hparams['ffn_dim']:,} wide, not 4h = {4 * h:,}")
    kv = hparams.get("num_kv_heads", a)
    if family.latent(hparams):
        reasons.append("latent attention (DeepSeek's MLA) where the formula has plain heads")
    elif kv != a:
        reasons.append(f"grouped-query attention ({kv} KV heads for {a} query heads)")
    reasons.append("no dropout (the formula keeps 1-byte masks)")
    if hparams.get("norm") == "rmsnorm":
        reasons.append("RMSNorm with float32 statistics")
    if step.attention == "flash":
        reasons.append("flash attention's float32 log-sum-exp")
    reasons.append("the embedding, output layer and float32 loss, which the formula leaves out")
    return "The formula assumes GPT blocks; this model has " + "; ".join(reasons) + "."
