"""The transformer parts dcsim's families are built from, as real ``flax.linen`` modules.

Attention (grouped key/value heads, optional per-head query/key norms, optional fused ``qkv``),
multi-head latent attention (DeepSeek-V2 and V3), the MLP (plain, gated, optionally fused
``gate_up``), token embeddings and the pre-norm block that joins them; the Mixture-of-Experts layer
is ``dcsim.model.moe``. Names follow the architecture, so a parameter's path says what it is:
``block_3/attn/query``, ``block_3/attn/kv_down``.

Decode mode (``dcsim.model.cache.Decode``, given to a family's module) is how a model serves: every
attention module keeps its cache as Flax variables in the ``cache`` collection and one call is one
decoding step. ``Attention`` caches keys and values, (sequences, tokens, KV heads, head_dim), a
sliding window's layer at most its window of tokens (a ring buffer); a cross-attention caches its
keys and values of the encoder's output once. ``LatentAttention`` caches DeepSeek's compressed
latent and the shared rotary key, (sequences, tokens, kv_lora_rank) and (sequences, tokens,
qk_rope_head_dim), as DeepSeek's inference code and vLLM do, never the expanded keys and values;
its step attends in the latent space ("absorbed": the key and value up-projections folded into the
query and the output).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from dcsim.model.cache import (
    CrossAttentionSpec,
    Decode,
    FullAttentionSpec,
    LatentAttentionSpec,
    SlidingWindowSpec,
    Slots,
    emit,
    step_slot,
)
from dcsim.model.flash import Extras, flash_attention
from dcsim.model.forward import Forward

BUFFERS = "buffers"  # state a checkpoint stores that is not a parameter (DeepSeek-V3's router bias)


ROTARY_BASE = 10_000.0  # the rotary frequencies' base (RoFormer, Llama 2); it changes no size


def rotary(x: jax.Array, positions: jax.Array) -> jax.Array:
    """Rotary position embedding (Su et al., RoFormer) of (..., tokens, heads, dim) features at
    ``positions`` (tokens,): each pair (i, i + dim/2) rotated by position x base^(-2i/dim), the
    half-split layout of Llama's and GPT-NeoX's code. No parameters; computed in float32."""
    half = x.shape[-1] // 2
    frequencies = ROTARY_BASE ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * frequencies[None, :]  # (tokens, half)
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]  # broadcast over heads
    first, second = x[..., :half].astype(jnp.float32), x[..., half : 2 * half].astype(jnp.float32)
    turned = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return jnp.concatenate([turned, x[..., 2 * half :].astype(jnp.float32)], axis=-1).astype(x.dtype)


def norm(kind: str, name: str) -> nn.Module:
    """``nn.RMSNorm`` (a scale), ``nn.LayerNorm`` (a scale and a bias) or, for
    ``layernorm_no_bias``, a LayerNorm with a scale only (DBRX), called ``name``."""
    if kind == "rmsnorm":
        return nn.RMSNorm(name=name)
    return nn.LayerNorm(use_bias=kind != "layernorm_no_bias", name=name)


def _softmax(logits: jax.Array, sink: jax.Array | None) -> jax.Array:
    """Softmax over the last axis; with ``sink`` (one logit a row, broadcast), an attention sink:
    a logit no token holds, so a row's weights may sum to less than 1 (GPT-OSS)."""
    if sink is None:
        return jax.nn.softmax(logits, axis=-1)
    column = jnp.broadcast_to(sink, (*logits.shape[:-1], 1)).astype(logits.dtype)
    return jax.nn.softmax(jnp.concatenate([logits, column], axis=-1), axis=-1)[..., :-1]


def _attend(query: jax.Array, key: jax.Array, value: jax.Array, causal: bool, extras: Extras) -> jax.Array:
    """Softmax attention of (..., q, heads, d) queries over (..., k, heads, d) keys and values, the
    probabilities materialised (the count's forward; ``dcsim.model.flash`` is the kernel's);
    ``extras``: a bias and a sink logit a head (heads, 1, 1), each optional."""
    bias, sink = extras
    logits = jnp.einsum("...qhd,...khd->...hqk", query, key) / math.sqrt(query.shape[-1])
    if bias is not None:
        logits = logits + bias
    if causal:
        length = query.shape[-3]
        logits = jnp.where(jnp.tril(jnp.ones((length, key.shape[-3]), bool)), logits, jnp.finfo(logits.dtype).min)
    return jnp.einsum("...hqk,...khd->...qhd", _softmax(logits, sink), value)


def attend_heads(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    causal: bool,
    forward: Forward | None,
    bias: jax.Array | None = None,
    sink: jax.Array | None = None,
) -> jax.Array:
    """Grouped-query attention as ``forward`` computes it: flash (grouped KV heads) or naive (KV
    heads repeated to every query head, the probabilities materialised: the count's forward)."""
    if forward is not None and forward.flash:
        return flash_attention(query, key, value, causal, bias, sink)
    groups = query.shape[-2] // key.shape[-2]
    key, value = jnp.repeat(key, groups, axis=-2), jnp.repeat(value, groups, axis=-2)
    return _attend(query, key, value, causal, (bias, None if sink is None else sink[:, None, None]))


class Attention(nn.Module):
    """Multi-head attention with grouped key/value heads (``num_kv_heads`` divides ``num_heads``).

    Built from ``nn.DenseGeneral`` because ``nn.MultiHeadDotProductAttention`` has no grouped KV
    heads: ``query`` is d_model -> (num_heads, head_dim), ``key``/``value`` are d_model ->
    (num_kv_heads, head_dim), ``out`` is (num_heads, head_dim) -> d_model. ``fused`` makes the three
    input projections one, ``qkv`` (Phi-3); ``qk_norm`` adds ``query_norm`` and ``key_norm``, an
    RMSNorm over each head (Gemma 3, Qwen3). ``context`` given: cross-attention, keys and values
    from it (T5's decoder).

    ``decode`` (see ``Decode``): one decoding step against a cache of ``cached_key`` and
    ``cached_value`` (sequences, tokens, num_kv_heads, head_dim) and ``cache_index``; ``window``
    (0: none) makes it a sliding-window layer whose cache is a ring buffer of that many tokens.
    ``cross``: a cross-attention, whose cache holds the encoder's keys and values, made once when
    the model is initialised on the encoder's output and read at every step after.
    """

    num_heads: int
    num_kv_heads: int
    use_bias: bool = True
    causal: bool = False
    head_dim: int = 0  # 0: d_model / num_heads; Gemma's heads are wider (256 on d_model 3,072 with 16 heads)
    qkv_bias: bool = False  # biases on query, key and value even without use_bias (Qwen2)
    qk_norm: bool = False
    fused: bool = False
    decode: Decode | None = None
    window: int = 0
    cross: bool = False
    sinks: bool = False  # GPT-OSS: a learned sink logit a head, ``sinks`` (num_heads values)
    forward: Forward | None = None  # a training forward's attention kind (see ``Forward``)
    rotary: bool = False  # rotary positions on queries and keys (a self-attention's; no parameters)
    key_bias: bool = True  # False: the key projection has no bias whatever the others have (Whisper's k_proj)

    @nn.compact
    def __call__(self, x: jax.Array, context: jax.Array | None = None, bias: jax.Array | None = None) -> jax.Array:
        d_model = x.shape[-1]
        head_dim = self.head_dim or d_model // self.num_heads
        qkv_bias = self.use_bias or self.qkv_bias
        key: jax.Array | None
        value: jax.Array | None
        if self.fused:
            heads = self.num_heads + 2 * self.num_kv_heads
            qkv = checkpoint_name(nn.DenseGeneral((heads, head_dim), use_bias=qkv_bias, name="qkv")(x), "qkv_proj")
            query, key, value = jnp.split(qkv, (self.num_heads, self.num_heads + self.num_kv_heads), axis=-2)
        else:
            query = nn.DenseGeneral((self.num_heads, head_dim), use_bias=qkv_bias, name="query")(x)
            query = checkpoint_name(query, "query_proj")
            key = value = None
            if not (self.cross and self.decode is not None and context is None):  # a step reads them cached
                source = x if context is None else context
                key_bias = qkv_bias and self.key_bias
                key = nn.DenseGeneral((self.num_kv_heads, head_dim), use_bias=key_bias, name="key")(source)
                value = nn.DenseGeneral((self.num_kv_heads, head_dim), use_bias=qkv_bias, name="value")(source)
                key, value = checkpoint_name(key, "key_proj"), checkpoint_name(value, "value_proj")
        if self.qk_norm:
            query = nn.RMSNorm(name="query_norm")(query)
            key = None if key is None else nn.RMSNorm(name="key_norm")(key)
        sink = self.param("sinks", nn.initializers.zeros, (self.num_heads,)) if self.sinks else None
        if self.decode is not None:
            mixed = self._step(self.decode, query, key, value, head_dim, bias, sink)
        elif key is None or value is None:  # only a decoding step reads them from its cache
            raise ValueError("a cross-attention outside decode mode needs the encoder's output (`context`)")
        else:
            if self.rotary:
                positions = jnp.arange(query.shape[-3])
                query, key = rotary(query, positions), rotary(key, positions)
            mixed = attend_heads(query, key, value, self.causal, self.forward, bias, sink)
        out = nn.DenseGeneral(d_model, axis=(-2, -1), use_bias=self.use_bias, name="out")(mixed)
        return checkpoint_name(out, "out_proj")

    def _step(
        self,
        decode: Decode,
        query: jax.Array,
        key: jax.Array | None,
        value: jax.Array | None,
        head_dim: int,
        bias: jax.Array | None,
        sink: jax.Array | None = None,
    ) -> jax.Array:
        """Decode mode: write this step's keys and values into the cache, attend to what it holds.
        Query heads attend to their KV head in groups (no repeated copy of the cache)."""
        batch = query.shape[0]
        length = decode.source_length if self.cross else decode.tokens(self.window)
        shape = (batch, length, self.num_kv_heads, head_dim)
        keys, values = Slots(self, "key", shape, decode, head_axis=2), Slots(self, "value", shape, decode, head_axis=2)
        arrays = keys.specs() + values.specs()
        if self.cross:
            emit(self, CrossAttentionSpec(arrays=arrays, window=self.window))
        elif self.window:
            emit(self, SlidingWindowSpec(arrays=arrays, window=self.window))
        else:
            emit(self, FullAttentionSpec(arrays=arrays))
        valid = None
        if key is not None and value is not None:
            slot = 0  # a cross-attention initialised on the encoder's output caches it whole
            if not self.cross:
                slot, valid, position = step_slot(self, length)
                if self.rotary:
                    query, key = rotary(query, position[None]), rotary(key, position[None])
            keys.write(key, slot)
            values.write(value, slot)
        groups = self.num_heads // self.num_kv_heads
        grouped = query.reshape(*query.shape[:-2], self.num_kv_heads, groups, head_dim)
        logits = jnp.einsum("bqkgd,bskd->bkgqs", grouped, keys.read(query.dtype)) / math.sqrt(head_dim)
        if bias is not None:  # (heads, queries, cached tokens), T5's relative positions
            logits = logits + bias.reshape(self.num_kv_heads, groups, *bias.shape[-2:])
        if valid is not None:
            logits = jnp.where(valid, logits, jnp.finfo(logits.dtype).min)
        sinks = None if sink is None else sink.reshape(self.num_kv_heads, groups, 1, 1)
        mixed = jnp.einsum("bkgqs,bskd->bqkgd", _softmax(logits, sinks), values.read(query.dtype))
        return mixed.reshape(*query.shape)


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2 and V3): keys and values are rebuilt from a small
    latent the cache keeps.

    ``query`` (d_model -> heads x (nope + rope)) or, with ``q_lora_rank``, ``query_down`` (d_model
    -> rank), ``query_norm`` and ``query_up`` (rank -> heads x (nope + rope)); ``kv_down`` (d_model
    -> kv_lora_rank + rope: the latent and one rotary key shared by every head), ``kv_norm`` over
    the latent, ``kv_up`` (kv_lora_rank -> heads x (nope + v)); ``out`` (heads x v -> d_model).
    No biases, as in the published models.

    ``decode``: one step against ``cached_latent`` (sequences, tokens, kv_lora_rank, after
    ``kv_norm``) and ``cached_rope_key`` (sequences, tokens, rope), the only per-token state MLA
    needs; keys and values are never expanded (``_step``).
    """

    num_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    decode: Decode | None = None
    window: int = 0
    forward: Forward | None = None  # a training forward's attention kind (see ``Forward``)
    rotary: bool = False  # rotary positions on the rope part of queries and on the shared key

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        heads, nope, rope = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim
        if self.q_lora_rank:
            latent_q = nn.RMSNorm(name="query_norm")(nn.Dense(self.q_lora_rank, use_bias=False, name="query_down")(x))
            query = nn.DenseGeneral((heads, nope + rope), use_bias=False, name="query_up")(latent_q)
        else:
            query = nn.DenseGeneral((heads, nope + rope), use_bias=False, name="query")(x)
        query = checkpoint_name(query, "query_proj")
        compressed = nn.Dense(self.kv_lora_rank + rope, use_bias=False, name="kv_down")(x)
        latent, shared_rope = jnp.split(compressed, (self.kv_lora_rank,), axis=-1)
        up = nn.DenseGeneral((heads, nope + self.v_head_dim), use_bias=False, name="kv_up")
        latent = nn.RMSNorm(name="kv_norm")(latent)
        kv = up(latent)
        out = nn.DenseGeneral(x.shape[-1], axis=(-2, -1), use_bias=False, name="out")
        if self.decode is not None:
            return out(self._step(self.decode, query, latent, shared_rope, up.variables["params"]["kernel"]))
        key_nope, value = jnp.split(kv, (nope,), axis=-1)
        if self.rotary:
            positions = jnp.arange(x.shape[-2])
            query = jnp.concatenate([query[..., :nope], rotary(query[..., nope:], positions)], axis=-1)
            shared_rope = rotary(shared_rope[..., None, :], positions)[..., 0, :]
        key_rope = jnp.broadcast_to(shared_rope[..., None, :], (*key_nope.shape[:-1], rope))
        key = jnp.concatenate([key_nope, key_rope], axis=-1)
        if self.forward is not None and self.forward.flash:
            mixed = flash_attention(query, key, value, causal=True)
        else:
            mixed = _attend(query, key, value, True, (None, None))
        return checkpoint_name(out(mixed), "out_proj")

    def _step(
        self, decode: Decode, query: jax.Array, latent: jax.Array, rope_key: jax.Array, up: jax.Array
    ) -> jax.Array:
        """Decode mode: cache this step's latent and rotary key, then attend in the latent space.
        The key up-projection is folded into the query and the value up-projection applied after
        the weighted sum (DeepSeek-V2's absorbed form), so the cache is read as it is stored."""
        nope = self.qk_nope_head_dim
        length = decode.tokens(self.window)
        batch = query.shape[0]
        latents = Slots(self, "latent", (batch, length, self.kv_lora_rank), decode)
        rope_keys = Slots(self, "rope_key", (batch, length, self.qk_rope_head_dim), decode)
        emit(self, LatentAttentionSpec(arrays=latents.specs() + rope_keys.specs(), window=self.window))
        slot, valid, position = step_slot(self, length)
        if self.rotary:
            query = jnp.concatenate([query[..., :nope], rotary(query[..., nope:], position[None])], axis=-1)
            rope_key = rotary(rope_key[..., None, :], position[None])[..., 0, :]
        latents.write(latent, slot)
        rope_keys.write(rope_key, slot)
        cached, cached_rope = latents.read(query.dtype), rope_keys.read(query.dtype)
        query_nope, query_rope = jnp.split(query, (nope,), axis=-1)
        absorbed = jnp.einsum("bqhn,rhn->bqhr", query_nope, up[..., :nope])
        logits = jnp.einsum("bqhr,bsr->bhqs", absorbed, cached) + jnp.einsum("bqhp,bsp->bhqs", query_rope, cached_rope)
        logits = jnp.where(valid, logits / math.sqrt(nope + self.qk_rope_head_dim), jnp.finfo(logits.dtype).min)
        mixed = jnp.einsum("bhqs,bsr->bqhr", jax.nn.softmax(logits, axis=-1), cached)
        return jnp.einsum("bqhr,rhv->bqhv", mixed, up[..., nope:])


class FeedForward(nn.Module):
    """The block's MLP: ``up`` and ``down`` with GELU (or ReLU, T5), or gated with ``gate`` too
    (SwiGLU; GeGLU for T5 v1.1); ``fused`` makes gate and up one array, ``gate_up`` (Phi-3)."""

    ffn_dim: int
    gated: bool = False
    use_bias: bool = True
    fused: bool = False
    activation: str = "gelu"  # of the plain MLP; gated ones use silu, or gelu when activation is "geglu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.gated:
            gate_activation = nn.gelu if self.activation == "geglu" else nn.silu
            if self.fused:
                gate_up = nn.Dense(2 * self.ffn_dim, use_bias=self.use_bias, name="gate_up")(x)
                gate, up = jnp.split(checkpoint_name(gate_up, "mlpwi"), 2, axis=-1)
            else:
                gate = checkpoint_name(nn.Dense(self.ffn_dim, use_bias=self.use_bias, name="gate")(x), "mlpwi_0")
                up = checkpoint_name(nn.Dense(self.ffn_dim, use_bias=self.use_bias, name="up")(x), "mlpwi_1")
            hidden = gate_activation(gate) * up
        else:
            activation = nn.relu if self.activation == "relu" else nn.gelu
            up = checkpoint_name(nn.Dense(self.ffn_dim, use_bias=self.use_bias, name="up")(x), "mlpwi")
            hidden = activation(up)
        return checkpoint_name(nn.Dense(x.shape[-1], use_bias=self.use_bias, name="down")(hidden), "mlpwo")


class BlockOptions(nn.Module, kw_only=True):
    """The options of a ``TransformerBlock`` that a decoder takes as its own hyperparameters and
    hands to every block as they are (``block_options``), keyword-only on both.

    ``use_bias`` on the attention's and the MLP's Dense layers, the ``norm``'s kind, a ``gated_mlp``; ``head_dim``,
    ``qkv_bias`` and ``qk_norm`` go to the attention (see ``Attention``); ``post_norms``: a norm
    after each sublayer as well as before it (Gemma 2 and 3), ``attn_post_norm`` and
    ``mlp_post_norm``.
    """

    use_bias: bool = True
    norm: str = "layernorm"
    gated_mlp: bool = False
    head_dim: int = 0
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False

    def block_options(self) -> dict[str, Any]:
        """This module's ``BlockOptions``, as a block's keyword arguments."""
        return {name: getattr(self, name) for name in BLOCK_OPTIONS}


# Flax adds ``parent`` and ``name`` to every module's fields; they are no option.
BLOCK_OPTIONS = tuple(field.name for field in dataclasses.fields(BlockOptions) if field.name not in ("parent", "name"))


class TransformerBlock(BlockOptions):
    """Attention and MLP with residuals; pre-norm (GPT-2, LLaMA, ViT) or post-norm (BERT).

    Options a decoder passes down unchanged: see ``BlockOptions``. ``fused`` goes to the attention
    (and to a gated MLP too), as do ``decode`` and ``window`` (see ``Attention``).
    """

    num_heads: int
    num_kv_heads: int
    ffn_dim: int
    causal: bool = False
    post_norm: bool = False
    fused: bool = False
    decode: Decode | None = None
    window: int = 0
    forward: Forward | None = None
    rotary: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        attn = Attention(
            self.num_heads,
            self.num_kv_heads,
            self.use_bias,
            self.causal,
            self.head_dim,
            self.qkv_bias,
            self.qk_norm,
            self.fused,
            decode=self.decode,
            window=self.window,
            forward=self.forward,
            rotary=self.rotary,
            name="attn",
        )
        mlp = FeedForward(self.ffn_dim, self.gated_mlp, self.use_bias, self.fused, name="mlp")
        if self.post_norm:
            x = norm(self.norm, "attn_norm")(x + attn(x))
            return norm(self.norm, "mlp_norm")(x + mlp(x))
        return sandwich(x, attn, mlp, self.norm, self.post_norms)


def sandwich(x: jax.Array, attn: nn.Module, mlp: nn.Module, kind: str, post_norms: bool) -> jax.Array:
    """The pre-norm residual block: ``attn_norm`` before attention and ``mlp_norm`` before the MLP,
    and with ``post_norms`` also ``attn_post_norm`` and ``mlp_post_norm`` after them (Gemma 2)."""
    y = attn(norm(kind, "attn_norm")(x))
    x = x + (norm(kind, "attn_post_norm")(y) if post_norms else y)
    y = mlp(norm(kind, "mlp_norm")(x))
    return x + (norm(kind, "mlp_post_norm")(y) if post_norms else y)


class TokenEmbeddings(nn.Module):
    """Token (and optionally position and token-type) tables: ``embed/token``, ``embed/position``,
    ``embed/token_type``; ``attend`` gives tied output logits."""

    vocab_size: int
    d_model: int
    max_positions: int | None = None
    type_vocab_size: int | None = None

    def setup(self) -> None:
        self.token = nn.Embed(self.vocab_size, self.d_model)
        if self.max_positions is not None:
            self.position = nn.Embed(self.max_positions, self.d_model)
        if self.type_vocab_size is not None:
            self.token_type = nn.Embed(self.type_vocab_size, self.d_model)

    def __call__(
        self, tokens: jax.Array, token_types: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """``positions``: each token's position (decode mode's step index); by default 0, 1, ..."""
        x = self.token(tokens)
        if self.max_positions is not None:
            x = x + self.position(jnp.arange(tokens.shape[-1]) if positions is None else positions)
        if self.type_vocab_size is not None:
            x = x + self.token_type(token_types)
        return x

    def attend(self, x: jax.Array) -> jax.Array:
        return self.token.attend(x)


def output_logits(x: jax.Array, embed: TokenEmbeddings, vocab_size: int, tied: bool) -> jax.Array:
    """Logits through the tied token table, or through an untied ``lm_head`` (no bias)."""
    if tied:
        return embed.attend(x)
    return nn.Dense(vocab_size, use_bias=False, name="lm_head")(x)
