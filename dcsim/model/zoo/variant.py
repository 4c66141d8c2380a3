"""The ``variant`` family: a decoder-only transformer whose norms, residual wiring and biases are
hyperparameters, as the Hub's decoders differ (see ``dcsim.model.zoo.schemas``).

Built from ``dcsim.model.layers``' ``Attention``, ``FeedForward`` and ``TokenEmbeddings``; only the
norm over every query and key feature (OLMo 2, Cohere's ``use_qk_norm``), which ``Attention``'s
per-head norm is not, has an attention module of its own here. Paths read as the decoder's do:
``embed/token``, ``block_3/attn/query``, ``block_3/mlp/up``, ``final_norm``, ``lm_head``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.cache import Decode, step_positions
from dcsim.model.flash import flash_attention
from dcsim.model.layers import Attention, FeedForward, TokenEmbeddings


def variant_norm(kind: str, name: str, axes: tuple[int, ...] = (-1,)) -> nn.Module:
    """A norm of ``kind`` (``dcsim.model.zoo.schemas.NORMS``) over ``axes``, called ``name``."""
    if kind == "rmsnorm":
        return nn.RMSNorm(reduction_axes=axes, feature_axes=axes, name=name)
    return nn.LayerNorm(
        reduction_axes=axes,
        feature_axes=axes,
        use_bias=kind == "layernorm",
        use_scale=kind != "no_params",
        name=name,
    )


class WideNormAttention(Attention):
    """Attention whose query and key are normed over every feature (``query_norm`` num_heads x
    head_dim scales, ``key_norm`` num_kv_heads x head_dim): OLMo 2 and Cohere's ``use_qk_norm``.
    Its decode mode is ``Attention``'s (``_step``: the same cache, the same ring buffer)."""

    norm: str = "rmsnorm"
    out_bias: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, context: jax.Array | None = None, bias: jax.Array | None = None) -> jax.Array:
        kind = "rmsnorm" if self.norm == "rmsnorm" else "layernorm_no_bias"
        query = nn.DenseGeneral((self.num_heads, self.head_dim), use_bias=self.qkv_bias, name="query")(x)
        key = nn.DenseGeneral((self.num_kv_heads, self.head_dim), use_bias=self.qkv_bias, name="key")(x)
        value = nn.DenseGeneral((self.num_kv_heads, self.head_dim), use_bias=self.qkv_bias, name="value")(x)
        query = variant_norm(kind, "query_norm", (-2, -1))(query)
        key = variant_norm(kind, "key_norm", (-2, -1))(key)
        out = nn.DenseGeneral(x.shape[-1], axis=(-2, -1), use_bias=self.out_bias, name="out")
        if self.decode is not None:
            return out(self._step(self.decode, query, key, value, self.head_dim, None))
        if self.forward is not None and self.forward.flash:
            return out(flash_attention(query, key, value, causal=True))
        groups = self.num_heads // self.num_kv_heads
        key, value = jnp.repeat(key, groups, axis=-2), jnp.repeat(value, groups, axis=-2)
        logits = jnp.einsum("...qhd,...khd->...hqk", query, key) / math.sqrt(self.head_dim)
        length = x.shape[-2]
        logits = jnp.where(jnp.tril(jnp.ones((length, length), bool)), logits, jnp.finfo(logits.dtype).min)
        mixed = jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(logits, axis=-1), value)
        return out(mixed)


class VariantBlock(nn.Module):
    """One block: ``attn`` and ``mlp`` wired as ``residual`` says, with norms of kind ``norm``
    (``attn_norm``, ``mlp_norm``; ``attn_post_norm``, ``mlp_post_norm`` for ``post_norms``);
    ``decode`` and ``window`` go to the attention (``dcsim.model.cache.Decode``)."""

    h: Mapping[str, Any]
    decode: Decode | None = None
    window: int = 0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.h
        head_dim = h["head_dim"] or x.shape[-1] // h["num_heads"]
        attn: nn.Module
        if h["qk_norm"]:
            attn = WideNormAttention(
                num_heads=h["num_heads"],
                num_kv_heads=h["num_kv_heads"],
                head_dim=head_dim,
                norm=h["norm"],
                qkv_bias=h["attn_bias"] or h["qkv_bias"],
                out_bias=h["attn_bias"],
                decode=self.decode,
                window=self.window,
                name="attn",
            )
        else:
            attn = Attention(
                num_heads=h["num_heads"],
                num_kv_heads=h["num_kv_heads"],
                use_bias=h["attn_bias"],
                causal=True,
                head_dim=h["head_dim"],
                qkv_bias=h["qkv_bias"],
                fused=h["fused_qkv"],
                decode=self.decode,
                window=self.window,
                name="attn",
            )
        mlp = FeedForward(ffn_dim=h["ffn_dim"], gated=h["gated_mlp"], use_bias=h["mlp_bias"], name="mlp")
        kind, residual = h["norm"], h["residual"]
        if residual == "parallel":
            y = variant_norm(kind, "attn_norm")(x)
            return x + attn(y) + mlp(y)
        if residual == "parallel_two_norms":
            return x + attn(variant_norm(kind, "attn_norm")(x)) + mlp(variant_norm(kind, "mlp_norm")(x))
        if residual == "post_norms":
            x = x + variant_norm(kind, "attn_post_norm")(attn(x))
            return x + variant_norm(kind, "mlp_post_norm")(mlp(x))
        x = x + attn(variant_norm(kind, "attn_norm")(x))
        return x + mlp(variant_norm(kind, "mlp_norm")(x))


class VariantDecoder(nn.Module):
    """``embed`` (and BLOOM's ``embed_norm``), ``block_i``, ``final_norm``, then logits through the
    tied token table or an untied ``lm_head`` (with ``head_bias``, a bias: GPT-J and Phi).
    ``h["built_layers"]`` (absent or empty: all) builds only those blocks, as ``Decoder`` does."""

    h: Mapping[str, Any]
    decode: Decode | None = None

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        h = self.h
        positions = h["max_positions"] if h["position_embedding"] == "learned" else None
        embed = TokenEmbeddings(h["vocab_size"], h["d_model"], positions, name="embed")
        x = embed(tokens, positions=step_positions(self, tokens) if positions and self.decode else None)
        if h["embed_norm"]:
            x = nn.LayerNorm(name="embed_norm")(x)
        for index in h.get("built_layers") or range(h["num_layers"]):
            window = h["sliding_window"] if index in h["local_layers"] else 0
            x = VariantBlock(h, decode=self.decode, window=window, name=f"block_{index}")(x)
        x = variant_norm(h["norm"], "final_norm")(x)
        if h["tied_embeddings"]:
            return embed.attend(x)
        return nn.Dense(h["vocab_size"], use_bias=h["head_bias"], name="lm_head")(x)


def build(
    family: str, hparams: Mapping[str, Any], tokens: jax.ShapeDtypeStruct, decode: Decode | None = None
) -> tuple[nn.Module, tuple[Any, ...]]:
    """The zoo family's module and the inputs it initialises on (in decode mode, one step's
    tokens: ``tokens`` is then (sequences, 1))."""
    del family  # one family so far
    return VariantDecoder(dict(hparams), decode=decode), (tokens,)
