"""The ``mamba`` and ``jamba`` families: state-space models, as real ``flax.linen`` modules.

A Mamba block is an RMSNorm and a selective-scan mixer, as transformers' ``MambaMixer`` builds it:
``in_proj`` (d_model -> 2 x inner_dim), a depthwise causal ``conv1d`` (inner_dim channels,
conv_kernel wide), ``x_proj`` (inner_dim -> dt_rank + 2 x state_size, no bias), ``dt_proj``
(dt_rank -> inner_dim, with a bias), ``A_log`` (inner_dim x state_size), ``D`` (inner_dim) and
``out_proj``. Jamba's mixer adds RMSNorms on dt, B and C (``dt_norm``, ``b_norm``, ``c_norm``),
and Jamba interleaves it with grouped-query attention (``dcsim.model.layers.Attention``, no biases),
each block followed by a dense gated MLP or routed experts (``MixtureOfExperts``: the ``experts``
module stacked on dim 0, as the moe family's, so active parameters and expert layouts read alike).

Serving keeps no KV cache in a Mamba mixer: in decode mode it holds, a sequence, the last
conv_kernel inputs of its convolution (``conv_state``: inner_dim x conv_kernel, as transformers'
cache) and the recurrent state (``ssm_state``: inner_dim x state_size), variables of the same
``cache`` collection the attention's keys and values are in; the mixer emits them as a
``dcsim.model.cache.StateSpec``, which serving reads. Paths: ``embed/token``,
``block_3/mixer/in_proj``, ``block_4/attn/query``, ``block_1/moe/experts``, ``final_norm``, ``lm_head``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.cache import CACHE, KV_DTYPES, CachedArray, Decode, StateSpec, emit
from dcsim.model.layers import Attention, FeedForward, TokenEmbeddings, norm, output_logits, sandwich
from dcsim.model.moe import MixtureOfExperts
from dcsim.model.zoo.schemas import JAMBA, MAMBA

# The dtypes a state is kept in: the cache's when it is one of these (vLLM's mamba cache dtypes),
# else the model's serving dtype, bfloat16 (a recurrent state is not kept in int8 or fp8).
STATE_DTYPES = ("bfloat16", "float16", "float32")


def state_dtype(decode: Decode) -> Any:
    """The dtype of a mixer's conv and SSM state under ``decode`` (see ``STATE_DTYPES``)."""
    return KV_DTYPES[decode.kv_dtype if decode.kv_dtype in STATE_DTYPES else "bfloat16"]


def _scan(decay: jax.Array, drive: jax.Array) -> jax.Array:
    """Every position's state of h_t = decay_t * h_(t-1) + drive_t from h = 0, over axis -3."""

    def combine(earlier: tuple[jax.Array, jax.Array], later: tuple[jax.Array, jax.Array]) -> tuple[Any, Any]:
        return earlier[0] * later[0], later[0] * earlier[1] + later[1]

    return jax.lax.associative_scan(combine, (decay, drive), axis=decay.ndim - 3)[1]


class MambaMixer(nn.Module):
    """The selective-scan mixer (see the module's text); ``h`` holds the mixer's hyperparameters
    (``inner_dim``, ``state_size``, ``conv_kernel``, ``dt_rank``, ``use_bias``, ``conv_bias``);
    ``norms``: Jamba's RMSNorms on dt, B and C."""

    h: Mapping[str, Any]
    norms: bool = False
    decode: Decode | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.h
        inner, size, kernel, rank = h["inner_dim"], h["state_size"], h["conv_kernel"], h["dt_rank"]
        hidden, gate = jnp.split(nn.Dense(2 * inner, use_bias=h["use_bias"], name="in_proj")(x), 2, axis=-1)
        conv = nn.Conv(
            inner, (kernel,), feature_group_count=inner, use_bias=h["conv_bias"], padding="VALID", name="conv1d"
        )
        if self.decode is not None:
            dtype = state_dtype(self.decode)
            window = self.variable(CACHE, "conv_state", jnp.zeros, (x.shape[0], inner, kernel), dtype)
            window.value = jnp.concatenate([window.value[..., 1:], hidden.swapaxes(-1, -2).astype(dtype)], axis=-1)
            hidden = conv(window.value.swapaxes(-1, -2).astype(x.dtype))
        else:
            hidden = conv(jnp.pad(hidden, ((0, 0), (kernel - 1, 0), (0, 0))))
        hidden = nn.silu(hidden)
        dt, b, c = jnp.split(nn.Dense(rank + 2 * size, use_bias=False, name="x_proj")(hidden), [rank, rank + size], -1)
        if self.norms:
            dt, b, c = norm("rmsnorm", "dt_norm")(dt), norm("rmsnorm", "b_norm")(b), norm("rmsnorm", "c_norm")(c)
        dt = jax.nn.softplus(nn.Dense(inner, name="dt_proj")(dt))
        a_log = self.param("A_log", nn.initializers.zeros, (inner, size))
        skip = self.param("D", nn.initializers.ones, (inner,))
        decay = jnp.exp(dt[..., None] * -jnp.exp(a_log))
        drive = (dt * hidden)[..., None] * b[..., None, :]
        if self.decode is not None:
            state = self.variable(CACHE, "ssm_state", jnp.zeros, (x.shape[0], inner, size), state_dtype(self.decode))
            held = (CachedArray.of(window, token_axis=None), CachedArray.of(state, token_axis=None))
            emit(self, StateSpec(arrays=held))
            step = decay[:, 0] * state.value.astype(decay.dtype) + drive[:, 0]
            state.value = step.astype(state.value.dtype)
            states = step[:, None]
        else:
            states = _scan(decay, drive)
        y = jnp.einsum("...in,...n->...i", states, c) + skip * hidden
        return nn.Dense(x.shape[-1], use_bias=h["use_bias"], name="out_proj")(y * nn.silu(gate))


class MambaBlock(nn.Module):
    """``norm`` (RMSNorm) and ``mixer``, with a residual."""

    h: Mapping[str, Any]
    decode: Decode | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + MambaMixer(self.h, decode=self.decode, name="mixer")(norm("rmsnorm", "norm")(x))


def block_kind(h: Mapping[str, Any], index: int) -> tuple[bool, bool]:
    """Whether block ``index`` is attention and whether it has routed experts (Mamba: neither),
    as ``JambaConfig.layers_block_type`` and ``layers_num_experts`` say."""
    if "attn_period" not in h:
        return False, False
    attention = index % h["attn_period"] == h["attn_offset"]
    return attention, h["num_experts"] > 1 and index % h["expert_period"] == h["expert_offset"]


class JambaBlock(nn.Module):
    """A pre-norm block (``attn_norm``, ``mlp_norm``: RMSNorms): ``attn`` (grouped-query, no biases,
    no positions) or ``mixer`` (Mamba with norms on dt, B and C), then ``mlp`` or ``moe``."""

    h: Mapping[str, Any]
    attention: bool
    experts: bool
    decode: Decode | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.h
        mixer: nn.Module
        if self.attention:
            mixer = Attention(
                h["num_heads"], h["num_kv_heads"], use_bias=False, causal=True, decode=self.decode, name="attn"
            )
        else:
            mixer = MambaMixer(h, norms=True, decode=self.decode, name="mixer")
        mlp: nn.Module
        if self.experts:
            mlp = MixtureOfExperts(h["num_experts"], h["experts_per_token"], h["ffn_dim"], name="moe")
        else:
            mlp = FeedForward(h["ffn_dim"], gated=True, use_bias=False, name="mlp")
        return sandwich(x, mixer, mlp, "rmsnorm", post_norms=False)


def _mamba_block(h: Mapping[str, Any], index: int, decode: Decode | None, name: str) -> nn.Module:
    return MambaBlock(h, decode=decode, name=name)


def _jamba_block(h: Mapping[str, Any], index: int, decode: Decode | None, name: str) -> nn.Module:
    return JambaBlock(h, *block_kind(h, index), decode=decode, name=name)


# Each family's block ``index``: Mamba's every block alike, Jamba's of its kind (see ``block_kind``).
_BLOCKS: Mapping[str, Callable[[Mapping[str, Any], int, Decode | None, str], nn.Module]] = {
    MAMBA: _mamba_block,
    JAMBA: _jamba_block,
}


class StateSpaceModel(nn.Module):
    """``embed``, ``block_i`` (Mamba's, or Jamba's of each kind), ``final_norm``, then logits through
    the tied token table or an untied ``lm_head``. ``h["built_layers"]`` (absent or empty: all)
    builds only those blocks, under their own names, as the moe family's does."""

    family: str
    h: Mapping[str, Any]
    decode: Decode | None = None

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        h = self.h
        embed = TokenEmbeddings(h["vocab_size"], h["d_model"], name="embed")
        x = embed(tokens)
        for index in h.get("built_layers") or range(h["num_layers"]):
            name = f"block_{index}"
            x = _BLOCKS[self.family](h, index, self.decode, name)(x)
        return output_logits(norm("rmsnorm", "final_norm")(x), embed, h["vocab_size"], h["tied_embeddings"])


def build(
    family: str, hparams: Mapping[str, Any], tokens: jax.ShapeDtypeStruct, decode: Decode | None = None
) -> tuple[nn.Module, tuple[Any, ...]]:
    """The family's module and the inputs it initialises on (in decode mode one step's tokens)."""
    return StateSpaceModel(family, dict(hparams), decode=decode), (tokens,)
