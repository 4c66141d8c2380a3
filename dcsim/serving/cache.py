"""The KV cache, read from the model itself: its decode-mode ``cache`` collection, initialised
abstractly (``jax.eval_shape``, no memory) on one decoding step of the served sequences.

No family keeps a KV formula. Each attention module makes its cache as Flax variables
(``dcsim.model.layers``); this module reads their shapes and dtypes and groups them into one spec a
layer, in the shape of vLLM's ``kv_cache_interface`` (a spec a kind of cache that can say its bytes
a token and its memory for a request), with the sizes taken from the variables:

- ``full``: grouped-query (multi-head, multi-query) attention over every token;
- ``sliding``: a local layer, holding at most its window of tokens (a ring buffer);
- ``latent``: DeepSeek's multi-head latent attention, the compressed latent and the rotary key;
- ``cross``: an encoder-decoder's cross-attention, the encoder output's keys and values;
- ``state``: a Mamba mixer's conv and SSM state (vLLM's ``MambaSpec``), a fixed size a sequence
  whatever its tokens.

The cache arrays that grow with the sequences and their tokens (keys, values, latents, int8's
per-token scales) are the KV bytes, and so are a state's, which grow with the sequences only;
those that grow with neither (the step index, fp8's per-layer scales) are fixed, and reported
apart. Every figure is an exact int.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from dcsim.model import count, families, presets, registry
from dcsim.model.cache import CACHE, Decode
from dcsim.model.config import ModelConfig
from dcsim.model.count import ArrayRow
from dcsim.model.zoo.ssm import STATE_NAMES
from dcsim.quantities import payload

KINDS = ("full", "sliding", "latent", "cross", "state")
_BLOCK = re.compile(r"(?:^|/)block_(\d+)/")


def block_index(path: str) -> int | None:
    """The block a path belongs to (``block_3/attn/cached_key``: 3), or None (``position``)."""
    found = _BLOCK.search(path)
    return int(found.group(1)) if found else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheArray:
    """One array of the cache, whole (every sequence served).

    Attributes:
      path: its path (``block_3/attn/cached_key``); ``module`` the attention module's.
      shape, dtype: as the model made it.
      per_token: True when its dimensions 0 and 1 are the sequences and their tokens (keys,
        values, latents, per-token scales): KV bytes. False for fixed state (the step index,
        fp8's per-layer scales).
      state: True for a Mamba mixer's conv and SSM state: dimension 0 is the sequences, and no
        dimension is their tokens (KV bytes too, a fixed size a sequence).
    """

    path: str
    module: str
    shape: tuple[int, ...]
    dtype: str
    per_token: bool
    state: bool = False

    @property
    def per_sequence(self) -> bool:
        """Whether it grows with the sequences served (KV bytes): per token, or a state."""
        return self.per_token or self.state

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def bytes(self) -> int:
        return payload.raw_bytes_as(math.prod(self.shape), self.dtype)

    @property
    def bytes_per_token(self) -> int:
        """Bytes of one token of one sequence (the array's bytes over sequences x tokens)."""
        if not self.per_token:
            return 0
        return self.bytes // (self.shape[0] * self.shape[1])

    @property
    def bytes_per_sequence(self) -> int:
        """A state's bytes for one sequence (0 for any other array)."""
        return self.bytes // self.shape[0] if self.state else 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerCache:
    """One attention layer's cache, as a spec.

    Attributes:
      path: the attention module (``block_3/attn``).
      kind: ``full``, ``sliding``, ``latent``, ``cross`` or ``state`` (``KINDS``).
      window: a sliding layer's window (0: none).
      tokens: the tokens a sequence holds at the requested context (a cross layer: the encoder's;
        a state layer: none).
      bytes_per_token: one token of one sequence, whole (every tensor rank's heads together).
      state_bytes: a state layer's bytes for one sequence, whatever its context.
    """

    path: str
    kind: str
    window: int
    tokens: int
    bytes_per_token: int
    state_bytes: int = 0

    def tokens_at(self, context: int, full_windows: bool = False) -> int:
        """The tokens a sequence holds at ``context``: a cross layer's do not change with it."""
        if self.kind in ("cross", "state"):
            return self.tokens
        if self.window and not full_windows:
            return min(self.window, context)
        return context

    def bytes_for(self, context: int, full_windows: bool = False) -> int:
        """The most memory one sequence needs in this layer at ``context`` (vLLM's max_memory_usage)."""
        return self.tokens_at(context, full_windows) * self.bytes_per_token + self.state_bytes


def decode_hparams(config: ModelConfig) -> dict[str, Any]:
    """The hyperparameters a model serves with (its preset's, or its file's, with overrides)."""
    return presets.resolved_hparams(config)


# Bounded like the counts (dcsim.model.count.MAX_CACHED_COUNTS): a capacity curve and the page's
# report ask for the same model's cache at the same context again.
@functools.lru_cache(maxsize=count.MAX_CACHED_COUNTS)
def read_cache(config: ModelConfig, decode: Decode, sequences: int) -> tuple[CacheArray, ...]:
    """The cache arrays of ``config`` serving ``sequences`` at once, read from an abstract init of
    its decode mode. Blocks built alike are traced once and their rows repeated, as counting does
    (``families.traced_hparams``): DeepSeek-V3's 61 blocks trace as four. Empty for a family with
    no decoder (BERT, ViT, ResNet, an MLP, a Dense stack)."""
    family = config.family
    if family is None or not registry.get(family).decodes:
        return ()
    hparams, runs = families.traced_hparams(family, decode_hparams(config))
    module, inputs = families.build_family(family, hparams, sequences, decode=decode)
    report = count.count_module(module, *inputs)
    rows = count.expand_repeats(report.other, runs)
    return tuple(_cache_array(row) for row in rows if row.collection == CACHE)


def _cache_array(row: ArrayRow) -> CacheArray:
    state = row.kind in STATE_NAMES
    per_token = not state and len(row.shape) >= 2 and (row.kind.startswith("cached_") or row.kind.endswith("_scale"))
    return CacheArray(
        path=row.path, module=row.module, shape=row.shape, dtype=row.dtype, per_token=per_token, state=state
    )


def layer_caches(arrays: tuple[CacheArray, ...], hparams: Mapping[str, Any]) -> tuple[LayerCache, ...]:
    """One spec a layer that caches tokens or a state, in model order."""
    modules: dict[str, list[CacheArray]] = {}
    for array in arrays:
        if array.per_sequence:
            modules.setdefault(array.module, []).append(array)
    layers = []
    for path, found in modules.items():
        names = {array.name for array in found}
        if found[0].state:
            state = sum(array.bytes_per_sequence for array in found)
            layers.append(LayerCache(path=path, kind="state", window=0, tokens=0, bytes_per_token=0, state_bytes=state))
            continue
        index = block_index(path + "/")
        window = 0
        if index is not None and index in hparams.get("local_layers", ()):
            window = hparams.get("sliding_window", 0)
        if "cached_latent" in names:
            kind = "latent"
        elif path.endswith("cross_attn"):
            kind = "cross"
        else:
            kind = "sliding" if window else "full"
        layers.append(
            LayerCache(
                path=path,
                kind=kind,
                window=window,
                tokens=found[0].shape[1],
                bytes_per_token=sum(array.bytes_per_token for array in found),
            )
        )
    return tuple(layers)
