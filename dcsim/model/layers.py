"""The transformer parts dcsim's families are built from, as real ``flax.linen`` modules.

Attention (grouped key/value heads, optional per-head query/key norms, optional fused ``qkv``),
multi-head latent attention (DeepSeek-V2 and V3), the MLP (plain, gated, optionally fused
``gate_up``), a Mixture-of-Experts layer (a router, routed experts stacked on an expert axis,
optional shared experts), token embeddings and the pre-norm block that joins them. Names follow the
architecture, so a parameter's path says what it is: ``block_3/attn/query``,
``block_3/moe/experts/gate``, ``block_3/attn/kv_down``.

Routed experts are one module, ``experts``, owning three arrays whose dimension 0 is the expert:
``gate`` and ``up`` (num_experts, d_model, expert_ffn_dim) and ``down`` (num_experts,
expert_ffn_dim, d_model), as MaxText and transformers (since v5) store them. Every expert is stored,
whichever ones a token is routed to, so all of them count; ``dcsim.model.breakdown.active_params``
says what one token uses. ``dcsim.sharding.layout`` splits dimension 0 over a mesh axis named
``expert``.

Decode mode (``Decode``, given to a family's module) is how a model serves: every attention module
keeps its cache as Flax variables in the ``cache`` collection, as ``flax.linen`` attention does with
``decode=True``, and one call is one decoding step (a new token for every sequence, attending to the
cache). ``Attention`` caches keys and values, (sequences, tokens, KV heads, head_dim), a sliding
window's layer at most its window of tokens (a ring buffer); a cross-attention caches its keys and
values of the encoder's output once. ``LatentAttention`` caches DeepSeek's compressed latent and the
shared rotary key, (sequences, tokens, kv_lora_rank) and (sequences, tokens, qk_rope_head_dim), as
DeepSeek's inference code and vLLM do, never the expanded keys and values; its step attends in the
latent space ("absorbed": the key and value up-projections folded into the query and the output).
The KV dtype's scales are cache variables too: int8 keeps a float32 scale a token and head, fp8 one
float32 scale a layer for keys and one for values. ``dcsim.serving`` reads the cache's shapes and
dtypes from an abstract init: no formula.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.extend import core as jax_core
from jax.interpreters import mlir

EXPERTS = "experts"  # the module that owns the stacked routed experts
BUFFERS = "buffers"  # state a checkpoint stores that is not a parameter (DeepSeek-V3's router bias)
CACHE = "cache"  # decode mode's cache: keys and values (or latents), their scales, the step index

# The KV cache's storage dtypes (``--kv-dtype``), by the name a person gives; ``fp8`` is an alias.
KV_DTYPES: dict[str, Any] = {
    "bfloat16": jnp.bfloat16,
    "float16": jnp.float16,
    "float32": jnp.float32,
    "float8_e4m3fn": jnp.float8_e4m3fn,
    "int8": jnp.int8,
}
KV_DTYPE_ALIASES = {"fp8": "float8_e4m3fn"}
SCALED_PER_TOKEN = "int8"  # vLLM's int8_per_token_head: a float32 scale per token and head
SCALED_PER_LAYER = "float8_e4m3fn"  # one float32 scale a layer for keys, one for values (vLLM's k_scale, v_scale)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decode:
    """How a model is built to serve: every attention module keeps a ``cache`` for ``context``
    tokens a sequence (a sliding window's layer at most its window, unless ``full_windows``), in
    ``kv_dtype``; an encoder-decoder's cross-attention caches ``source_length`` encoder tokens.
    Checked by ``dcsim.serving``; a module attribute, so frozen and hashable."""

    context: int
    kv_dtype: str = "bfloat16"
    source_length: int = 0
    full_windows: bool = False

    def tokens(self, window: int) -> int:
        """The tokens a layer with ``window`` (0: none) holds for one sequence."""
        if not window or self.full_windows:
            return self.context
        return min(window, self.context)


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


def _store(decode: Decode, values: jax.Array, scale: Any) -> jax.Array:
    """``values`` in the cache's dtype: int8 divided by its per-token-head scale and rounded, fp8
    divided by the layer's scale, the float dtypes cast."""
    dtype = KV_DTYPES[decode.kv_dtype]
    if decode.kv_dtype == SCALED_PER_TOKEN:
        return jnp.round(values / scale[..., None]).astype(dtype)
    if decode.kv_dtype == SCALED_PER_LAYER:
        return (values / scale).astype(dtype)
    return values.astype(dtype)


def _load(decode: Decode, stored: jax.Array, scale: Any, dtype: Any) -> jax.Array:
    """The cache's values back in ``dtype``, scaled as ``_store`` divided them."""
    values = stored.astype(dtype)
    if decode.kv_dtype == SCALED_PER_TOKEN:
        return values * scale[..., None].astype(dtype)
    if decode.kv_dtype == SCALED_PER_LAYER:
        return values * scale.astype(dtype)
    return values


class _Slots:
    """One cached array of a decode-mode attention: its variable, and its scale's (int8: per token
    and head; fp8: per layer; none for the float dtypes)."""

    def __init__(self, module: nn.Module, name: str, shape: tuple[int, ...], decode: Decode) -> None:
        self.decode = decode
        self.cached = module.variable(CACHE, f"cached_{name}", jnp.zeros, shape, KV_DTYPES[decode.kv_dtype])
        self.scale: Any = None
        if decode.kv_dtype == SCALED_PER_TOKEN:
            self.scale = module.variable(CACHE, f"{name}_scale", jnp.ones, shape[:-1], jnp.float32)
        elif decode.kv_dtype == SCALED_PER_LAYER:
            self.scale = module.variable(CACHE, f"{name}_scale", jnp.ones, (), jnp.float32)

    def write(self, values: jax.Array, slot: Any) -> None:
        """Store ``values`` (sequences, tokens, ...) from token ``slot`` on."""
        start = (0, slot) + (0,) * (values.ndim - 2)
        scale = None
        if self.decode.kv_dtype == SCALED_PER_TOKEN:
            peak = jnp.max(jnp.abs(values), axis=-1).astype(jnp.float32)
            scale = jnp.maximum(peak / 127.0, jnp.finfo(jnp.float32).tiny)
            self.scale.value = jax.lax.dynamic_update_slice(self.scale.value, scale, start[:-1])
        elif self.scale is not None:
            scale = self.scale.value
        stored = _store(self.decode, values.astype(jnp.float32), scale)
        self.cached.value = jax.lax.dynamic_update_slice(self.cached.value, stored, start)

    def read(self, dtype: Any) -> jax.Array:
        return _load(self.decode, self.cached.value, None if self.scale is None else self.scale.value, dtype)


def _step_slot(module: nn.Module, length: int) -> tuple[Any, jax.Array, jax.Array]:
    """The ring buffer's slot for this step's token, which of the ``length`` slots hold tokens
    (all once the buffer has wrapped) and the token's position; advances the step index."""
    index = module.variable(CACHE, "cache_index", lambda: jnp.zeros((), jnp.int32))
    position = index.value
    index.value = position + 1
    return position % length, jnp.arange(length) <= position, position


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


def _attend(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    causal: bool,
    bias: jax.Array | None = None,
    sink: jax.Array | None = None,
) -> jax.Array:
    """Softmax attention of (..., q, heads, d) queries over (..., k, heads, d) keys and values;
    ``sink``: a sink logit a head (heads, 1, 1)."""
    logits = jnp.einsum("...qhd,...khd->...hqk", query, key) / math.sqrt(query.shape[-1])
    if bias is not None:
        logits = logits + bias
    if causal:
        length = query.shape[-3]
        logits = jnp.where(jnp.tril(jnp.ones((length, key.shape[-3]), bool)), logits, jnp.finfo(logits.dtype).min)
    return jnp.einsum("...hqk,...khd->...qhd", _softmax(logits, sink), value)


def _grouped_reference(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    causal: bool,
    bias: jax.Array | None,
    sink: jax.Array | None,
) -> tuple[jax.Array, jax.Array]:
    """Attention of (..., q, heads, d) queries over grouped (..., k, kv_heads, d) keys and values
    (each KV head serves heads / kv_heads queries, never repeated), the softmax in float32; returns
    the output in the query's dtype and the log-sum-exp (..., heads, q) in float32. ``bias``
    broadcasts to (..., heads, q, k); ``sink``: one logit a head (heads,)."""
    *lead, length, heads, depth = query.shape
    kv_heads = key.shape[-2]
    groups = heads // kv_heads
    grouped = query.reshape(*lead, length, kv_heads, groups, depth)
    logits = jnp.einsum("...qkgd,...skd->...kgqs", grouped, key, preferred_element_type=jnp.float32)
    logits = logits.reshape(*lead, heads, length, key.shape[-3]) / math.sqrt(depth)
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    if causal:
        mask = jnp.tril(jnp.ones((length, key.shape[-3]), bool))
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    scores = logits
    if sink is not None:
        column = jnp.broadcast_to(sink.astype(jnp.float32)[:, None, None], (*logits.shape[:-1], 1))
        scores = jnp.concatenate([logits, column], axis=-1)
    lse = jax.nn.logsumexp(scores, axis=-1)
    probs = jnp.exp(logits - lse[..., None]).reshape(*lead, kv_heads, groups, length, key.shape[-3])
    out = jnp.einsum("...kgqs,...skd->...qkgd", probs.astype(value.dtype), value, preferred_element_type=jnp.float32)
    return out.reshape(*lead, length, heads, value.shape[-1]).astype(query.dtype), lse


# A kernel is one operation to a remat policy: ``dots_saveable`` must not find (and keep) the
# s x s scores inside it, as it finds none inside a Pallas or cuDNN call. So the flash forward is
# one primitive of its own, lowered to the reference computation; its derivative is the
# ``custom_vjp``'s, never its own.
FLASH_FORWARD = "dcsim_flash_forward"
FLASH_BACKWARD = "_blockwise_backward"  # the name of the backward's call in a jaxpr
_flash_forward_p = jax_core.Primitive(FLASH_FORWARD)
_flash_forward_p.multiple_results = True


def _flash_parts(args: Any, has_bias: bool, has_sink: bool) -> tuple[Any, Any, Any, Any, Any]:
    query, key, value, *rest = args
    bias = rest.pop(0) if has_bias else None
    sink = rest.pop(0) if has_sink else None
    return query, key, value, bias, sink


def _flash_impl(*args: Any, causal: bool, has_bias: bool, has_sink: bool) -> list[jax.Array]:
    query, key, value, bias, sink = _flash_parts(args, has_bias, has_sink)
    return list(_grouped_reference(query, key, value, causal, bias, sink))


def _flash_abstract(*avals: Any, causal: bool, has_bias: bool, has_sink: bool) -> list[Any]:
    query, _, value, _, _ = _flash_parts(avals, has_bias, has_sink)
    *lead, length, heads, _ = query.shape
    out = jax.core.ShapedArray((*lead, length, heads, value.shape[-1]), query.dtype)
    return [out, jax.core.ShapedArray((*lead, heads, length), jnp.float32)]


_flash_forward_p.def_impl(_flash_impl)
_flash_forward_p.def_abstract_eval(_flash_abstract)
mlir.register_lowering(_flash_forward_p, mlir.lower_fun(_flash_impl, multiple_results=True))


def _opaque_reference(
    query: jax.Array, key: jax.Array, value: jax.Array, causal: bool, bias: Any = None, sink: Any = None
) -> tuple[jax.Array, jax.Array]:
    extras = [x for x in (bias, sink) if x is not None]
    out, lse = _flash_forward_p.bind(
        query, key, value, *extras, causal=causal, has_bias=bias is not None, has_sink=sink is not None
    )
    return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _flash(query: jax.Array, key: jax.Array, value: jax.Array, causal: bool, extras: Any) -> jax.Array:
    return _opaque_reference(query, key, value, causal, *extras)[0]


def _flash_forward(query: jax.Array, key: jax.Array, value: jax.Array, causal: bool, extras: Any) -> Any:
    out, lse = _opaque_reference(query, key, value, causal, *extras)
    return out, (query, key, value, extras, out, lse)


# The backward's key blocks: a block of at most this many keys at a time, (..., heads, q, block)
# in float32, never the whole (..., heads, q, k).
FLASH_BLOCK = 128


def _key_block(length: int) -> int:
    """The largest block of keys of at most ``FLASH_BLOCK`` that divides ``length`` evenly; the
    whole length when only slivers would (a prime length), or when the length is symbolic (the
    activations' shapeless trace): one block is still exact."""
    if not isinstance(length, int):
        return length
    size = next(size for size in range(min(length, FLASH_BLOCK), 0, -1) if length % size == 0)
    return size if size >= FLASH_BLOCK // 8 else length


def _flash_backward(causal: bool, saved: Any, grad: jax.Array) -> Any:
    # one named call, so that counting FLOPs sees the kernel (``FLASH_BACKWARD``), not its blocks
    return jax.jit(_blockwise_backward, static_argnums=0)(causal, saved, grad)


def _blockwise_backward(causal: bool, saved: Any, grad: jax.Array) -> Any:
    # FlashAttention's backward, blockwise over the keys: each block's probabilities come back from
    # q, its keys and the saved log-sum-exp, P = exp(S - lse), and the softmax's gradient is
    # dS = P * (dP - D) with D = rowsum(dO * O) from the saved output. The scan consumes the
    # output's gradient, so XLA cannot hoist the recomputation into the forward pass and keep a
    # whole (..., heads, q, k) a layer until the backward reaches it, as it did when the backward
    # recomputed the reference attention whole.
    query, key, value, (bias, sink), out, lse = saved
    *lead, length, heads, _ = query.shape
    klen, kv_heads = key.shape[-3], key.shape[-2]
    groups, scale = heads // kv_heads, 1.0 / math.sqrt(query.shape[-1])
    block = _key_block(klen)
    count = klen // block
    cotangent = grad.astype(jnp.float32)
    rows = jnp.einsum("...qhd,...qhd->...hq", cotangent, out.astype(jnp.float32))  # D, (..., heads, q)
    pulled = (cotangent, -rows)
    split_bias = bias is not None and bias.shape[-1] == klen

    def blocks(x: jax.Array, axis: int) -> jax.Array:
        """``x`` with ``axis`` cut into ``count`` blocks, the blocks first, for the scan."""
        axis %= x.ndim
        shaped = x.reshape(*x.shape[:axis], count, block, *x.shape[axis + 1 :])
        return jnp.moveaxis(shaped, axis, 0)

    def unblocks(x: jax.Array, axis: int) -> jax.Array:
        axis %= x.ndim - 1
        shaped = jnp.moveaxis(x, 0, axis)
        return shaped.reshape(*shaped.shape[:axis], count * block, *shaped.shape[axis + 2 :])

    def attend_block(q: jax.Array, k: jax.Array, v: jax.Array, b: Any, start: jax.Array) -> Any:
        """The block's share of the output, P @ V, and its probabilities' row sums, P = exp(S - lse)
        with the saved lse held fixed: their vjp with (dO, -D) is dS = P * (dP - D)."""
        grouped = q.reshape(*lead, length, kv_heads, groups, q.shape[-1])
        logits = jnp.einsum("...qkgd,...skd->...kgqs", grouped, k, preferred_element_type=jnp.float32)
        logits = logits.reshape(*lead, heads, length, block) * scale
        if b is not None:
            logits = logits + b.astype(jnp.float32)
        probs = jnp.exp(logits - lse[..., None])
        if causal:
            columns = start + jnp.arange(block)
            probs = jnp.where(columns[None, :] <= jnp.arange(length)[:, None], probs, 0.0)
        grouped_probs = probs.reshape(*lead, kv_heads, groups, length, block).astype(v.dtype)
        mixed = jnp.einsum("...kgqs,...skd->...qkgd", grouped_probs, v, preferred_element_type=jnp.float32)
        return mixed.reshape(*lead, length, heads, v.shape[-1]), probs.sum(axis=-1)

    def step(carry: Any, xs: Any) -> Any:
        d_query, d_bias = carry
        k, v, b, start = xs
        b = b if split_bias else bias
        _, pullback = jax.vjp(lambda q_, k_, v_, b_: attend_block(q_, k_, v_, b_, start), query, k, v, b)
        dq, dk, dv, db = pullback(pulled)
        d_query = d_query + dq.astype(jnp.float32)
        if bias is not None and not split_bias:
            d_bias = d_bias + db.astype(jnp.float32)
            db = None
        return (d_query, d_bias), (dk, dv, db)

    whole_bias = None if bias is None or split_bias else jnp.zeros(bias.shape, jnp.float32)
    starts = jnp.arange(count) * block
    xs = (blocks(key, -3), blocks(value, -3), blocks(bias, -1) if split_bias else None, starts)
    (d_query, d_bias), (d_key, d_value, d_bias_blocks) = jax.lax.scan(
        step, (jnp.zeros(query.shape, jnp.float32), whole_bias), xs
    )
    d_extras: list[Any] = [None, None]
    if bias is not None:
        d_bias = unblocks(d_bias_blocks, -1) if split_bias else d_bias
        d_extras[0] = jnp.asarray(d_bias).astype(bias.dtype)
    if sink is not None:
        # the sink holds no value: d(sink) = -sum over rows of p(sink) * D, p(sink) = exp(sink - lse)
        held = jnp.exp(sink.astype(jnp.float32)[:, None] - lse)
        d_extras[1] = -(held * rows).sum(axis=tuple(range(len(lead)))).sum(axis=-1).astype(sink.dtype)
    return (
        d_query.astype(query.dtype),
        unblocks(d_key, -3).astype(key.dtype),
        unblocks(d_value, -3).astype(value.dtype),
        tuple(d_extras),
    )


_flash.defvjp(_flash_forward, _flash_backward)


def flash_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    causal: bool,
    bias: jax.Array | None = None,
    sink: jax.Array | None = None,
) -> jax.Array:
    """Attention whose backward pass needs only what FlashAttention saves: q, k and v (KV heads
    grouped, not repeated), the output and the float32 log-sum-exp a query and head. A
    ``jax.custom_vjp``: its forward is the exact softmax attention, its backward recomputes the
    probabilities, so the residuals JAX keeps are the kernels' and the values are attention's."""
    return _flash(query, key, value, causal, (bias, sink))


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
    return _attend(query, key, value, causal, bias, None if sink is None else sink[:, None, None])


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
        keys, values = _Slots(self, "key", shape, decode), _Slots(self, "value", shape, decode)
        valid = None
        if key is not None and value is not None:
            slot = 0  # a cross-attention initialised on the encoder's output caches it whole
            if not self.cross:
                slot, valid, position = _step_slot(self, length)
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
            mixed = _attend(query, key, value, causal=True)
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
        latents = _Slots(self, "latent", (batch, length, self.kv_lora_rank), decode)
        rope_keys = _Slots(self, "rope_key", (batch, length, self.qk_rope_head_dim), decode)
        slot, valid, position = _step_slot(self, length)
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
            return routed(tokens, flat_weights, flat_chosen, gate, up, down, biases).reshape(x.shape)
        gated, upped = jnp.einsum("...d,edf->...ef", x, gate), jnp.einsum("...d,edf->...ef", x, up)
        if biases is not None:
            gated, upped = gated + biases[0], upped + biases[1]
        out = jnp.einsum("...ef,efd->...ed", nn.silu(gated) * upped, down)
        if biases is not None:
            out = out + biases[2]
        return jnp.einsum("...ed,...e->...d", out, combine)


def _dropless(
    tokens: jax.Array,
    weights: jax.Array,
    chosen: jax.Array,
    gate: jax.Array,
    up: jax.Array,
    down: jax.Array,
    biases: tuple[jax.Array, jax.Array, jax.Array] | None,
) -> jax.Array:
    """Dropless dispatch (MaxText's default, MegaBlocks'): every (token, chosen expert) pair, sorted
    by expert, through ``jax.lax.ragged_dot`` with each expert's group of rows; no token is dropped
    and no expert computes a token not routed to it. (tokens, d) in, (tokens, d) out."""
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
    tokens: jax.Array,
    weights: jax.Array,
    chosen: jax.Array,
    gate: jax.Array,
    up: jax.Array,
    down: jax.Array,
    biases: tuple[jax.Array, jax.Array, jax.Array] | None,
    factor: float,
) -> jax.Array:
    """GShard's dispatch: each expert takes at most ``capacity`` = ceil(factor x top_k x tokens /
    experts) of the tokens routed to it, in token order, the rest dropped (their output for that
    expert is zero); a (tokens, experts, capacity) dispatch tensor gathers each expert's rows and
    a combine tensor of the same shape weighs them back."""
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


def step_positions(module: nn.Module, tokens: jax.Array) -> jax.Array:
    """Decode mode's positions of ``tokens``: a ``position`` counter in the cache, advanced a step."""
    step = module.variable(CACHE, "position", lambda: jnp.zeros((), jnp.int32))
    positions = step.value + jnp.arange(tokens.shape[-1])
    step.value = step.value + tokens.shape[-1]
    return positions
