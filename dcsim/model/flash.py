"""A flash-style attention for the training forward: a ``jax.custom_vjp`` whose forward is one
primitive of its own (a kernel, as a remat policy sees a Pallas or cuDNN call) and whose backward
recomputes the probabilities blockwise over the keys, so the residuals JAX keeps are
FlashAttention's (q, k, v, the output and the log-sum-exp) and the values are attention's."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jax_core
from jax.interpreters import mlir

# What attention adds to its logits beyond the queries' and keys' product: a bias (T5's relative
# positions) and a sink logit a head (GPT-OSS), each optional; one argument, as ``custom_vjp``
# takes its non-array options.
Extras = tuple[jax.Array | None, jax.Array | None]


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
def _flash(query: jax.Array, key: jax.Array, value: jax.Array, causal: bool, extras: Extras) -> jax.Array:
    return _opaque_reference(query, key, value, causal, *extras)[0]


def _flash_forward(query: jax.Array, key: jax.Array, value: jax.Array, causal: bool, extras: Extras) -> Any:
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
