"""The Mixture-of-Experts layer: a router, routed experts stacked on an expert axis, optional
shared experts, and the dispatches a training forward may use (dense, dropless, capacity).

Routed experts are one module, ``experts``, owning three arrays whose dimension 0 is the expert:
``gate`` and ``up`` (num_experts, d_model, expert_ffn_dim) and ``down`` (num_experts,
expert_ffn_dim, d_model), as MaxText and transformers (since v5) store them. Every expert is stored,
whichever ones a token is routed to, so all of them count; ``dcsim.model.breakdown.active_params``
says what one token uses. ``dcsim.sharding.layout`` splits dimension 0 over a mesh axis named
``expert``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from dcsim.model.forward import Forward
from dcsim.model.layers import BUFFERS, FeedForward

EXPERTS = "experts"  # the module that owns the stacked routed experts


class ExpertArrays(NamedTuple):
    """The routed experts' arrays, dimension 0 the expert: ``gate``, ``up`` (num_experts, d_model,
    ffn_dim), ``down`` (num_experts, ffn_dim, d_model) and GPT-OSS's biases on each, or None."""

    gate: jax.Array
    up: jax.Array
    down: jax.Array
    biases: tuple[jax.Array, jax.Array, jax.Array] | None


class Experts(nn.Module):
    """Routed experts, stacked: ``gate``, ``up`` (num_experts, d_model, ffn_dim) and ``down``
    (num_experts, ffn_dim, d_model), a SwiGLU MLP each. ``combine`` (..., num_experts) weighs each
    expert's output (zero for the experts a token is not routed to).

    ``forward``'s dispatch (see ``Forward``): ``dense`` runs every expert on every token (the
    count's forward); ``dropless`` and ``capacity`` run each token through its ``chosen`` experts
    only, weighted by ``weights`` (both (..., top_k)). The parameters are the same whichever."""

    num_experts: int
    ffn_dim: int
    use_bias: bool = False  # GPT-OSS: gate_bias, up_bias (num_experts, ffn_dim), down_bias (num_experts, d_model)
    forward: Forward | None = None

    @nn.compact
    def __call__(
        self, x: jax.Array, combine: jax.Array, weights: jax.Array | None = None, chosen: jax.Array | None = None
    ) -> jax.Array:
        d_model, init = x.shape[-1], nn.initializers.lecun_normal(batch_axis=(0,))
        gate = self.param("gate", init, (self.num_experts, d_model, self.ffn_dim))
        up = self.param("up", init, (self.num_experts, d_model, self.ffn_dim))
        down = self.param("down", init, (self.num_experts, self.ffn_dim, d_model))
        biases = None
        if self.use_bias:
            zeros = nn.initializers.zeros
            biases = (
                self.param("gate_bias", zeros, (self.num_experts, self.ffn_dim)),
                self.param("up_bias", zeros, (self.num_experts, self.ffn_dim)),
                self.param("down_bias", zeros, (self.num_experts, d_model)),
            )
        dispatch = "dense" if self.forward is None else self.forward.dispatch
        if dispatch != "dense" and weights is not None and chosen is not None:
            tokens = x.reshape(-1, d_model)
            flat_weights, flat_chosen = weights.reshape(tokens.shape[0], -1), chosen.reshape(tokens.shape[0], -1)
            assert self.forward is not None  # dispatch is not dense
            routed = (
                _dropless
                if dispatch == "dropless"
                else functools.partial(_capacity, factor=self.forward.capacity_factor)
            )
            arrays = ExpertArrays(gate, up, down, biases)
            return routed(tokens, flat_weights, flat_chosen, arrays).reshape(x.shape)
        gated, upped = jnp.einsum("...d,edf->...ef", x, gate), jnp.einsum("...d,edf->...ef", x, up)
        if biases is not None:
            gated, upped = gated + biases[0], upped + biases[1]
        out = jnp.einsum("...ef,efd->...ed", nn.silu(gated) * upped, down)
        if biases is not None:
            out = out + biases[2]
        return jnp.einsum("...ed,...e->...d", out, combine)


def _dropless(tokens: jax.Array, weights: jax.Array, chosen: jax.Array, arrays: ExpertArrays) -> jax.Array:
    """Dropless dispatch (MaxText's default, MegaBlocks'): every (token, chosen expert) pair, sorted
    by expert, through ``jax.lax.ragged_dot`` with each expert's group of rows; no token is dropped
    and no expert computes a token not routed to it. (tokens, d) in, (tokens, d) out."""
    gate, up, down, biases = arrays
    num_tokens, top_k = chosen.shape
    num_experts = gate.shape[0]
    flat = chosen.reshape(-1)
    order = jnp.argsort(flat)
    rows = tokens[order // top_k]
    sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    experts = flat[order]
    gated = checkpoint_name(jax.lax.ragged_dot(rows, gate, sizes), "mlpwi_0")
    upped = checkpoint_name(jax.lax.ragged_dot(rows, up, sizes), "mlpwi_1")
    if biases is not None:
        gated, upped = gated + biases[0][experts], upped + biases[1][experts]
    out = checkpoint_name(jax.lax.ragged_dot(nn.silu(gated) * upped, down, sizes), "mlpwo")
    if biases is not None:
        out = out + biases[2][experts]
    unsorted = out[jnp.argsort(order)].reshape(num_tokens, top_k, -1)
    return jnp.einsum("tkd,tk->td", unsorted, weights.astype(out.dtype))


def _capacity(
    tokens: jax.Array, weights: jax.Array, chosen: jax.Array, arrays: ExpertArrays, factor: float
) -> jax.Array:
    """GShard's dispatch: each expert takes at most ``capacity`` = ceil(factor x top_k x tokens /
    experts) of the tokens routed to it, in token order, the rest dropped (their output for that
    expert is zero); a (tokens, experts, capacity) dispatch tensor gathers each expert's rows and
    a combine tensor of the same shape weighs them back."""
    gate, up, down, biases = arrays
    num_tokens, top_k = chosen.shape
    num_experts = gate.shape[0]
    capacity = max(1, math.ceil(factor * top_k * num_tokens / num_experts))
    routed = jax.nn.one_hot(chosen, num_experts, dtype=jnp.int32)  # (tokens, top_k, experts)
    # a token's place in its expert's queue: the routings before it (earlier tokens, earlier choices)
    place = jnp.cumsum(routed.reshape(-1, num_experts), axis=0).reshape(routed.shape) - 1
    kept = routed * (place < capacity)
    slots = jax.nn.one_hot(jnp.where(kept > 0, place, -1), capacity, dtype=tokens.dtype)  # (t, k, e, c)
    dispatch = jnp.sum(slots, axis=1)  # (tokens, experts, capacity)
    combine = jnp.einsum("tkec,tk->tec", slots, weights.astype(tokens.dtype))
    rows = jnp.einsum("tec,td->ecd", dispatch, tokens)
    gated = checkpoint_name(jnp.einsum("ecd,edf->ecf", rows, gate), "mlpwi_0")
    upped = checkpoint_name(jnp.einsum("ecd,edf->ecf", rows, up), "mlpwi_1")
    if biases is not None:
        gated, upped = gated + biases[0][:, None], upped + biases[1][:, None]
    out = checkpoint_name(jnp.einsum("ecf,efd->ecd", nn.silu(gated) * upped, down), "mlpwo")
    if biases is not None:
        out = out + biases[2][:, None]
    return jnp.einsum("tec,ecd->td", combine, out)


class MixtureOfExperts(nn.Module):
    """A Mixture-of-Experts MLP: ``router`` (d_model -> num_experts logits, no bias) picks
    ``top_k`` of the ``experts`` for each token; ``shared`` experts (a gated MLP every token goes
    through, DeepSeek and Qwen-MoE) and Qwen-MoE's ``shared_gate`` (d_model -> 1) are optional.
    ``router_bias``: DeepSeek-V3's per-expert score correction, a ``buffers`` variable (transformers
    registers it as a buffer: in the checkpoint, not in ``num_parameters()``)."""

    num_experts: int
    top_k: int
    ffn_dim: int
    shared_ffn_dim: int = 0
    shared_gate: bool = False
    router_bias: bool = False
    expert_biases: bool = False  # GPT-OSS: a bias on the router and on every expert's projections
    forward: Forward | None = None  # how the routed experts are dispatched (see ``Forward``)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scores = jax.nn.softmax(nn.Dense(self.num_experts, use_bias=self.expert_biases, name="router")(x), axis=-1)
        if self.router_bias:
            correction = self.variable(BUFFERS, "router_bias", jnp.zeros, (self.num_experts,))
            scores = scores + correction.value
        weights, chosen = jax.lax.top_k(scores, self.top_k)
        combine = jnp.sum(jax.nn.one_hot(chosen, self.num_experts) * weights[..., None], axis=-2)
        experts = Experts(self.num_experts, self.ffn_dim, self.expert_biases, self.forward, name=EXPERTS)
        y = experts(x, combine, weights, chosen)
        if self.shared_ffn_dim:
            shared = FeedForward(self.shared_ffn_dim, gated=True, use_bias=False, name="shared")(x)
            if self.shared_gate:
                shared = jax.nn.sigmoid(nn.Dense(1, use_bias=False, name="shared_gate")(x)) * shared
            y = y + shared
        return y
