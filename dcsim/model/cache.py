"""Decode mode's cache, as the attention modules make it: how a model is built to serve
(``Decode``), the KV dtypes and their scales, the slots a module writes and reads, and the spec
each module gives of the cache it made.

Every attention module keeps its cache as Flax variables in the ``cache`` collection, as
``flax.linen`` attention does with ``decode=True``, and one call is one decoding step (a new token
for every sequence, attending to the cache). The KV dtype's scales are cache variables too: int8
keeps a float32 scale a token and head, fp8 one float32 scale a layer for keys and one for values.

The module that makes a cache says what it is, in the shape of vLLM's ``kv_cache_interface``: one
frozen spec a kind (``FullAttentionSpec``, ``SlidingWindowSpec``, ``LatentAttentionSpec``,
``CrossAttentionSpec``, ``StateSpec``), each holding its variables as the module made them (shape,
dtype, and which axis carries the sequences, their tokens and the KV heads) and able to say its
bytes a token and its most memory for a context. It emits the spec while it is initialised
(``emit``); whoever initialises the model abstractly collects them by module path
(``collect_specs``), as ``dcsim.serving`` does: no formula, and no reading of variable names.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.quantities import payload

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


def kv_dtype_label(name: str) -> str:
    """A KV dtype as every face names it: ``fp8 (float8_e4m3fn)`` (vLLM's name, then JAX's), the
    others as they are."""
    short = next((alias for alias, full in KV_DTYPE_ALIASES.items() if full == name), None)
    return name if short is None else f"{short} ({name})"


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class CachedArray:
    """One variable of a module's cache, as the module made it, and what its axes carry.

    Attributes:
      name: the variable's name in its module (the spec's own key for it).
      shape, dtype: as created (the whole cache: every sequence served).
      sequence_axis: the axis of the sequences served; None for state that does not grow with
        them (fp8's per-layer scales).
      token_axis: the axis of a sequence's tokens; None for a state (a Mamba mixer's: a fixed size
        a sequence, whatever its context) and for fixed state.
      head_axis: the axis of the KV heads, which tensor ranks split; None where every rank holds
        the array whole (a latent, a state, a scale without heads).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    sequence_axis: int | None = 0
    token_axis: int | None = 1
    head_axis: int | None = None

    def __post_init__(self) -> None:
        axes = [axis for axis in (self.sequence_axis, self.token_axis, self.head_axis) if axis is not None]
        if len(set(axes)) != len(axes) or any(not 0 <= axis < len(self.shape) for axis in axes):
            raise ValueError(
                f"cache array {self.name!r} of shape {self.shape}: its sequence, token and head axes "
                f"({self.sequence_axis}, {self.token_axis}, {self.head_axis}) must be distinct axes of the shape"
            )
        if self.token_axis is not None and self.sequence_axis is None:
            raise ValueError(f"cache array {self.name!r}: a token axis needs a sequence axis")

    @classmethod
    def of(cls, variable: Any, **axes: int | None) -> CachedArray:
        """The spec of a Flax cache ``variable`` as created (its value's shape and dtype)."""
        value = variable.value
        return cls(name=variable.name, shape=tuple(int(dim) for dim in value.shape), dtype=str(value.dtype), **axes)

    @property
    def bytes(self) -> int:
        return payload.raw_bytes_as(math.prod(self.shape), self.dtype)

    @property
    def per_sequence(self) -> bool:
        """Whether it grows with the sequences served (KV bytes): per token, or a state."""
        return self.sequence_axis is not None

    @property
    def bytes_per_token(self) -> int:
        """One token of one sequence (0 for a state or fixed state)."""
        if self.sequence_axis is None or self.token_axis is None:
            return 0
        return self.bytes // (self.shape[self.sequence_axis] * self.shape[self.token_axis])

    @property
    def state_bytes(self) -> int:
        """A state's bytes for one sequence, whatever its context (0 for any other array)."""
        if self.sequence_axis is None or self.token_axis is not None:
            return 0
        return self.bytes // self.shape[self.sequence_axis]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheSpec:
    """One layer's decode cache, as the module that made it says (vLLM's ``KVCacheSpec``).

    Attributes:
      arrays: its variables (``CachedArray``), keys and values (or latents) and their scales.
      window: the layer's sliding window (0: none), which caps the tokens a sequence holds.
    """

    kind: ClassVar[str]
    follows_context: ClassVar[bool] = True  # False: its tokens do not grow with the served context

    arrays: tuple[CachedArray, ...]
    window: int = 0

    def array(self, name: str) -> CachedArray | None:
        """The variable the module named ``name``, or None where the module made no such one."""
        return next((array for array in self.arrays if array.name == name), None)

    @property
    def bytes_per_token(self) -> int:
        """One token of one sequence, whole (every tensor rank's heads together): vLLM's page size
        over its block size."""
        return sum(array.bytes_per_token for array in self.arrays)

    @property
    def state_bytes(self) -> int:
        """One sequence's bytes that do not depend on its tokens (a state)."""
        return sum(array.state_bytes for array in self.arrays)

    @property
    def tokens(self) -> int:
        """The tokens a sequence holds as the cache was built (0: no token axis)."""
        held = [array.shape[array.token_axis] for array in self.arrays if array.token_axis is not None]
        return held[0] if held else 0

    def tokens_at(self, context: int, full_windows: bool = False) -> int:
        """The tokens a sequence holds at ``context``: a window's at most, unless ``full_windows``
        (an engine without window-aware allocation)."""
        if self.window and not full_windows:
            return min(self.window, context)
        return context

    def max_memory_bytes(self, context: int, full_windows: bool = False) -> int:
        """The most memory one sequence needs in this layer at ``context`` (vLLM's
        ``max_memory_usage_bytes`` for one request)."""
        return self.tokens_at(context, full_windows) * self.bytes_per_token + self.state_bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(CacheSpec):
    """Grouped-query (multi-head, multi-query) attention over every token: keys and values
    (sequences, tokens, KV heads, head_dim)."""

    kind: ClassVar[str] = "full"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(CacheSpec):
    """A local layer, holding at most its ``window`` of tokens (a ring buffer)."""

    kind: ClassVar[str] = "sliding"

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"a sliding window's layer needs a window of at least one token, got {self.window}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LatentAttentionSpec(CacheSpec):
    """DeepSeek's multi-head latent attention: the compressed latent and the shared rotary key
    (sequences, tokens, width), no head axis: every tensor rank holds them whole, as vLLM does."""

    kind: ClassVar[str] = "latent"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CrossAttentionSpec(CacheSpec):
    """An encoder-decoder's cross-attention: the encoder output's keys and values, made once; a
    sequence holds the encoder's tokens whatever the context."""

    kind: ClassVar[str] = "cross"
    follows_context: ClassVar[bool] = False

    def tokens_at(self, context: int, full_windows: bool = False) -> int:
        return self.tokens


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateSpec(CacheSpec):
    """A Mamba mixer's conv and SSM state (vLLM's ``MambaSpec``): a fixed size a sequence, no tokens."""

    kind: ClassVar[str] = "state"
    follows_context: ClassVar[bool] = False

    def tokens_at(self, context: int, full_windows: bool = False) -> int:
        return 0


SPEC_KINDS = (FullAttentionSpec, SlidingWindowSpec, LatentAttentionSpec, CrossAttentionSpec, StateSpec)

_COLLECTED: contextvars.ContextVar[dict[str, CacheSpec] | None] = contextvars.ContextVar("cache_specs", default=None)


@contextlib.contextmanager
def collect_specs() -> Iterator[dict[str, CacheSpec]]:
    """Collect the specs the modules emit while a model is initialised inside the block, by module
    path (``block_3/attn``); a module initialised twice (traced again) keeps its last."""
    found: dict[str, CacheSpec] = {}
    token = _COLLECTED.set(found)
    try:
        yield found
    finally:
        _COLLECTED.reset(token)


def emit(module: nn.Module, spec: CacheSpec) -> None:
    """Say what cache ``module`` made (a no-op unless someone collects: an apply, a training step)."""
    found = _COLLECTED.get()
    if found is not None:
        found["/".join(module.path)] = spec


class Slots:
    """One cached array of a decode-mode attention: its variable, and its scale's (int8: per token
    and head; fp8: per layer; none for the float dtypes). ``head_axis``: the cached array's axis of
    KV heads, if it has one (a per-token scale has it too)."""

    def __init__(
        self, module: nn.Module, name: str, shape: tuple[int, ...], decode: Decode, head_axis: int | None = None
    ) -> None:
        self.decode = decode
        self.head_axis = head_axis
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

    def specs(self) -> tuple[CachedArray, ...]:
        """The cached array and its scale as created: (sequences, tokens, ...) with the heads where
        ``head_axis`` says; a per-layer scale grows with nothing."""
        arrays = [CachedArray.of(self.cached, head_axis=self.head_axis)]
        if self.decode.kv_dtype == SCALED_PER_TOKEN:
            arrays.append(CachedArray.of(self.scale, head_axis=self.head_axis))
        elif self.scale is not None:
            arrays.append(CachedArray.of(self.scale, sequence_axis=None, token_axis=None))
        return tuple(arrays)


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
