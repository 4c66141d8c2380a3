"""The KV cache, read from the model itself: its decode-mode ``cache`` collection, initialised
abstractly (``jax.eval_shape``, no memory) on one decoding step of the served sequences.

No family keeps a KV formula, and serving reads no variable's name. Each attention (or Mamba)
module makes its cache as Flax variables and emits its spec (``dcsim.model.cache``: full, sliding
window, latent, cross-attention or state, in the shape of vLLM's ``kv_cache_interface``), which
says each variable's axes (sequences, tokens, KV heads) and the layer's bytes a token and its most
memory for a context. This module joins the variables' rows to their module's spec, one
``LayerCache`` a layer:

- ``full``: grouped-query (multi-head, multi-query) attention over every token;
- ``sliding``: a local layer, holding at most its window of tokens (a ring buffer);
- ``latent``: DeepSeek's multi-head latent attention, the compressed latent and the rotary key;
- ``cross``: an encoder-decoder's cross-attention, the encoder output's keys and values;
- ``state``: a Mamba mixer's conv and SSM state (vLLM's ``MambaSpec``), a fixed size a sequence
  whatever its tokens.

The cache arrays whose spec gives them a sequence axis are the KV bytes (keys, values, latents,
int8's per-token scales, a state); the rest (the step index, fp8's per-layer scales, the position
counter) are fixed, and reported apart. Every figure is an exact int.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from dcsim.memory.stages import block_index as block_index  # one rule for the cache and the stages
from dcsim.model import count, families, presets, registry
from dcsim.model.cache import CACHE, CachedArray, CacheSpec, Decode, collect_specs
from dcsim.model.config import ModelConfig
from dcsim.model.count import ArrayRow
from dcsim.quantities import payload

KINDS = ("full", "sliding", "latent", "cross", "state")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheArray:
    """One array of the cache, whole (every sequence served).

    Attributes:
      path: its path (``block_3/attn/cached_key``); ``module`` the module's that made it.
      shape, dtype: as the model made it.
      axes: what its axes carry, as its module's spec says (``dcsim.model.cache.CachedArray``);
        None for an array no spec names (the model's position counter): fixed state.
      layer: its module's spec; None likewise.
    """

    path: str
    module: str
    shape: tuple[int, ...]
    dtype: str
    axes: CachedArray | None = None
    layer: CacheSpec | None = None

    @property
    def per_sequence(self) -> bool:
        """Whether it grows with the sequences served (KV bytes): per token, or a state."""
        return self.axes is not None and self.axes.per_sequence

    @property
    def per_token(self) -> bool:
        """Whether it grows with the sequences and their tokens (keys, values, latents, int8's
        per-token scales)."""
        return self.per_sequence and self.axes is not None and self.axes.token_axis is not None

    @property
    def state(self) -> bool:
        """Whether it is a state: a fixed size a sequence (a Mamba mixer's)."""
        return self.per_sequence and not self.per_token

    @property
    def name(self) -> str:
        """Its name in its module, as shown (``cached_key``)."""
        return self.path.rpartition("/")[2]

    @property
    def bytes(self) -> int:
        return payload.raw_bytes_as(math.prod(self.shape), self.dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerCache:
    """One layer's cache: its module's path and spec, and the spec's figures as the faces show them.

    Attributes:
      path: the module (``block_3/attn``); ``spec`` the one it emitted.
      kind: ``full``, ``sliding``, ``latent``, ``cross`` or ``state`` (``KINDS``).
      window: a sliding layer's window (0: none).
      tokens: the tokens a sequence holds at the requested context (a cross layer: the encoder's;
        a state layer: none).
      bytes_per_token: one token of one sequence, whole (every tensor rank's heads together).
      state_bytes: a state layer's bytes for one sequence, whatever its context.
    """

    path: str
    spec: CacheSpec
    kind: str
    window: int
    tokens: int
    bytes_per_token: int
    state_bytes: int = 0

    @classmethod
    def of(cls, path: str, spec: CacheSpec) -> LayerCache:
        return cls(
            path=path,
            spec=spec,
            kind=spec.kind,
            window=spec.window,
            tokens=spec.tokens,
            bytes_per_token=spec.bytes_per_token,
            state_bytes=spec.state_bytes,
        )

    def tokens_at(self, context: int, full_windows: bool = False) -> int:
        """The tokens a sequence holds at ``context``: a cross layer's do not change with it."""
        return self.spec.tokens_at(context, full_windows)

    def bytes_for(self, context: int, full_windows: bool = False) -> int:
        """The most memory one sequence needs in this layer at ``context`` (vLLM's max_memory_usage)."""
        return self.spec.max_memory_bytes(context, full_windows)


def decode_hparams(config: ModelConfig) -> dict[str, Any]:
    """The hyperparameters a model serves with (its preset's, or its file's, with overrides)."""
    return presets.resolved_hparams(config)


# Bounded like the counts (dcsim.model.count.MAX_CACHED_COUNTS): a capacity curve and the page's
# report ask for the same model's cache at the same context again.
@functools.lru_cache(maxsize=count.MAX_CACHED_COUNTS)
def read_cache(config: ModelConfig, decode: Decode, sequences: int) -> tuple[CacheArray, ...]:
    """The cache arrays of ``config`` serving ``sequences`` at once, read from an abstract init of
    its decode mode with the specs its modules emit. Blocks built alike are traced once and their
    rows repeated, as counting does (``families.traced_hparams``): DeepSeek-V3's 61 blocks trace as
    four, and a repeated block's arrays keep the spec of the block traced for it. Empty for a family
    with no decoder (BERT, ViT, ResNet, an MLP, a Dense stack)."""
    family = config.family
    if family is None or not registry.get(family).decodes:
        return ()
    hparams, runs = families.traced_hparams(family, decode_hparams(config))
    module, inputs = families.build_family(family, hparams, sequences, decode=decode)
    with collect_specs() as specs:
        report = count.count_module(module, *inputs)
    arrays = tuple(_cache_array(row, specs.get(row.module)) for row in report.other if row.collection == CACHE)
    return count.expand_repeats(arrays, runs)


def _cache_array(row: ArrayRow, spec: CacheSpec | None) -> CacheArray:
    axes = None if spec is None else spec.array(row.kind)
    if axes is not None and (axes.shape, axes.dtype) != (row.shape, row.dtype):
        raise RuntimeError(
            f"the spec of {row.path} says {axes.shape} {axes.dtype}, the model made {row.shape} {row.dtype}"
        )
    return CacheArray(
        path=row.path,
        module=row.module,
        shape=row.shape,
        dtype=row.dtype,
        axes=axes,
        layer=None if axes is None else spec,
    )


def layer_caches(arrays: tuple[CacheArray, ...]) -> tuple[LayerCache, ...]:
    """One layer a module whose spec holds arrays that grow with the sequences, in model order."""
    layers: dict[str, LayerCache] = {}
    for array in arrays:
        if array.per_sequence and array.layer is not None and array.module not in layers:
            layers[array.module] = LayerCache.of(array.module, array.layer)
    return tuple(layers.values())
