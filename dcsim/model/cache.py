"""Decode mode's cache, as the attention modules make it: how a model is built to serve
(``Decode``), the KV dtypes and their scales, and the slots a module writes and reads.

Every attention module keeps its cache as Flax variables in the ``cache`` collection, as
``flax.linen`` attention does with ``decode=True``, and one call is one decoding step (a new token
for every sequence, attending to the cache). The KV dtype's scales are cache variables too: int8
keeps a float32 scale a token and head, fp8 one float32 scale a layer for keys and one for values.
``dcsim.serving`` reads the cache's shapes and dtypes from an abstract init: no formula.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

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


def store(decode: Decode, values: jax.Array, scale: Any) -> jax.Array:
    """``values`` in the cache's dtype: int8 divided by its per-token-head scale and rounded, fp8
    divided by the layer's scale, the float dtypes cast."""
    dtype = KV_DTYPES[decode.kv_dtype]
    if decode.kv_dtype == SCALED_PER_TOKEN:
        return jnp.round(values / scale[..., None]).astype(dtype)
    if decode.kv_dtype == SCALED_PER_LAYER:
        return (values / scale).astype(dtype)
    return values.astype(dtype)


def load(decode: Decode, stored: jax.Array, scale: Any, dtype: Any) -> jax.Array:
    """The cache's values back in ``dtype``, scaled as ``store`` divided them."""
    values = stored.astype(dtype)
    if decode.kv_dtype == SCALED_PER_TOKEN:
        return values * scale[..., None].astype(dtype)
    if decode.kv_dtype == SCALED_PER_LAYER:
        return values * scale.astype(dtype)
    return values


class Slots:
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
        stored = store(self.decode, values.astype(jnp.float32), scale)
        self.cached.value = jax.lax.dynamic_update_slice(self.cached.value, stored, start)

    def read(self, dtype: Any) -> jax.Array:
        return load(self.decode, self.cached.value, None if self.scale is None else self.scale.value, dtype)


def step_slot(module: nn.Module, length: int) -> tuple[Any, jax.Array, jax.Array]:
    """The ring buffer's slot for this step's token, which of the ``length`` slots hold tokens
    (all once the buffer has wrapped) and the token's position; advances the step index."""
    index = module.variable(CACHE, "cache_index", lambda: jnp.zeros((), jnp.int32))
    position = index.value
    index.value = position + 1
    return position % length, jnp.arange(length) <= position, position


def step_positions(module: nn.Module, tokens: jax.Array) -> jax.Array:
    """Decode mode's positions of ``tokens``: a ``position`` counter in the cache, advanced a step."""
    step = module.variable(CACHE, "position", lambda: jnp.zeros((), jnp.int32))
    positions = step.value + jnp.arange(tokens.shape[-1])
    step.value = step.value + tokens.shape[-1]
    return positions
