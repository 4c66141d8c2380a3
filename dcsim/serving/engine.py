"""What one device holds to serve a model, and how much it can serve within its budget.

The request (``dcsim.serving.request.Serving``) gives the mesh. The weights are the model's
parameters laid out by ``dcsim.sharding.layout`` under the request's strategy (``megatron`` by
default), in the serving format's bytes. The cache is the model's own decode-mode cache
(``dcsim.serving.cache``), laid out by JAX's ``NamedSharding.shard_shape``:

- the sequences over the replica axes (``data``, and ``expert``, across which attention runs
  data-parallel): each replica holds its share, the most-loaded ``ceil(concurrency / replicas)``;
- grouped keys and values (and int8's per-token scales) by KV head over ``model``, by vLLM's rule:
  with ``kv_heads % tp == 0`` a rank holds ``kv_heads / tp`` heads; with ``tp % kv_heads == 0`` one
  head, the KV heads repeated to the tensor size first (JAX splits only into equal parts, so the
  repeated array is what it splits, never ``head_dim``); otherwise refused;
- DeepSeek's latent cache whole on every tensor rank, as vLLM keeps it;
- pipeline ``stage``: contiguous blocks a stage, as vLLM's ``get_pp_indices`` partitions them
  (the remainder to the stages before the last); the embedding on the first stage, the final norm
  and head on the last (a tied head's table too). The figure is the most-loaded stage's device.

Under JAX's rules the devices of one stage hold shards of the same shapes, so the most-loaded
device is exact in bytes. The answers (``fits``, ``max_concurrency``, ``max_context``,
``kv_tokens_per_replica``) compare it with ``usable = floor(budget x (1 - reserve))``, exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from jax.sharding import NamedSharding, PartitionSpec

from dcsim.memory.stages import stage_blocks as stage_blocks  # vLLM's split, shared with training
from dcsim.model import registry
from dcsim.model.cache import Decode, SlidingWindowSpec
from dcsim.model.config import ModelConfig
from dcsim.model.count import ArrayRow, ParamReport, count_params
from dcsim.quant import layouts
from dcsim.quant.tables import QuantTable
from dcsim.quantities import payload
from dcsim.serving import cache as caches
from dcsim.serving.request import (
    DEFAULT_CONTEXT,
    MAX_CONTEXT,
    REPLICA_AXES,
    TENSOR_AXIS,
    Serving,
)
from dcsim.sharding import layout, megatron
from dcsim.sharding.meshes import MeshSpec, abstract_mesh

BLOCK_SIZE = 16  # vLLM's default KV block, in tokens: shown beside the exact answers, never instead
# What no figure of the report counts, said beside every verdict against a budget (the verdict's
# sentence, the page's Fits line, the command's total).
LEAVES_OUT = "activations and the decode workspace are not counted; the reserve is for them"


def tensor_heads(num_heads: int, num_kv_heads: int | None, tp: int) -> tuple[int, int]:
    """vLLM's rule for KV heads on ``tp`` tensor ranks (``megatron.kv_heads_per_rank``): ``(KV heads
    a rank holds, copies of each)``. ``num_kv_heads`` None: a latent cache, whole on every rank,
    (0, tp); the query heads must still split evenly."""
    if num_kv_heads is None:
        megatron.kv_heads_per_rank(num_heads, num_heads, tp)
        return 0, tp
    return megatron.kv_heads_per_rank(num_kv_heads, num_heads, tp)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlacedCache:
    """One cache array on the mesh: the spec it has, the shape JAX splits (the KV heads repeated to
    the tensor size when it has more ranks than heads), what a device holds and which stage."""

    array: caches.CacheArray
    spec: PartitionSpec
    split_shape: tuple[int, ...]
    shard_shape: tuple[int, ...]
    bytes_per_device: int
    stage: int
    note: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageLoad:
    """What one device of a pipeline stage holds (every stage's devices hold alike).

    ``kv_per_token``: (window, bytes one token of one sequence takes on this device) for each of
    the stage's layers; ``kv_fixed_per_sequence``: its cross and state layers' bytes a sequence
    (they do not grow with the context)."""

    stage: int
    weights_bytes: int
    other_bytes: int
    kv_bytes: int
    sequences: int
    kv_per_token: tuple[tuple[int, int], ...]
    kv_fixed_per_sequence: int

    def kv_bytes_per_sequence(self, context: int, full_windows: bool = False) -> int:
        """One sequence's cache on this device at ``context``."""
        tokens = sum(
            (context if not window or full_windows else min(window, context)) * per_token
            for window, per_token in self.kv_per_token
        )
        return tokens + self.kv_fixed_per_sequence

    @property
    def kv_bytes_per_token(self) -> int:
        return sum(per_token for _, per_token in self.kv_per_token)

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.other_bytes + self.kv_bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServingReport:
    """A model served on a mesh: the weights and the cache per device, and the capacity answers.

    Every figure is an exact int (bytes unless named otherwise); the answers are None without a budget.
    """

    serving: Serving
    family: str | None
    config_dict: dict[str, Any]
    total_params: int
    weights: layout.LayoutReport
    table: QuantTable
    weights_on_device: tuple[int, ...]
    buffers_bytes: int
    cache: tuple[PlacedCache, ...]
    layers: tuple[caches.LayerCache, ...]
    stages: tuple[StageLoad, ...]
    max_positions: int | None
    notes: tuple[str, ...]
    source_length: int | None = None  # an encoder-decoder's encoder tokens a sequence, cached by its cross-attention

    # --- the model, whole -------------------------------------------------------------------------

    @property
    def has_cache(self) -> bool:
        return bool(self.layers)

    @property
    def weights_bytes(self) -> int:
        """Every weight once, in the format: its tensors' exact bytes (``dcsim.quant``)."""
        return self.table.payload_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """One token of one sequence in every layer that holds the context's tokens, whole model
        (cross-attention layers hold the encoder's tokens instead, and Mamba layers a state: in
        ``kv_bytes_per_sequence``)."""
        return sum(layer.bytes_per_token for layer in self.layers if layer.spec.follows_context)

    @property
    def kv_bytes_per_sequence(self) -> int:
        """One sequence at the context, windows honoured, whole model."""
        return sum(layer.bytes_for(self.serving.context, self.serving.full_windows) for layer in self.layers)

    # --- the most-loaded device -------------------------------------------------------------------

    @property
    def busiest(self) -> StageLoad:
        return max(self.stages, key=lambda stage: (stage.total_bytes, -stage.stage))

    @property
    def weights_on_device_by_path(self) -> dict[str, int]:
        """One device's bytes of each weight array in the format, by path."""
        return {row.path: size for row, size in zip(self.weights.arrays, self.weights_on_device, strict=True)}

    @property
    def weights_bytes_per_device(self) -> int:
        return self.busiest.weights_bytes

    @property
    def kv_bytes_per_device(self) -> int:
        return self.busiest.kv_bytes

    @property
    def other_bytes_per_device(self) -> int:
        return self.busiest.other_bytes

    @property
    def total_bytes_per_device(self) -> int:
        return self.busiest.total_bytes

    # --- the answers --------------------------------------------------------------------------------

    @property
    def budget_bytes(self) -> int | None:
        return self.serving.budget_bytes

    @property
    def usable_bytes(self) -> int | None:
        return self.serving.usable_bytes

    @property
    def fits(self) -> bool | None:
        usable = self.usable_bytes
        return None if usable is None else all(stage.total_bytes <= usable for stage in self.stages)

    @property
    def over_bytes(self) -> int | None:
        """How far the most-loaded device is over the usable memory; None without a budget, or
        where every device fits."""
        if self.fits is not False:
            return None
        assert self.usable_bytes is not None
        return self.busiest.total_bytes - self.usable_bytes

    def _room(self, stage: StageLoad) -> int:
        assert self.usable_bytes is not None
        return self.usable_bytes - stage.weights_bytes - stage.other_bytes

    def concurrency_at(self, context: int) -> int | None:
        """The most sequences at ``context`` over the whole mesh: replicas x the fewest any stage's
        device has room for (an exact floor, no block rounding); None without a budget or a cache."""
        if self.usable_bytes is None or not self.has_cache:
            return None
        per_replica = []
        for stage in self.stages:
            need = stage.kv_bytes_per_sequence(context, self.serving.full_windows)
            if need:
                per_replica.append(max(self._room(stage), 0) // need)
        return self.serving.num_replicas * min(per_replica) if per_replica else None

    @property
    def max_concurrency(self) -> int | None:
        """``concurrency_at`` the request's context."""
        return self.concurrency_at(self.serving.context)

    @property
    def max_concurrency_in_blocks(self) -> int | None:
        """``max_concurrency`` with each sequence's tokens rounded up to vLLM's 16-token blocks, for
        comparison with an engine that allocates in blocks."""
        return self.concurrency_at(-(-self.serving.context // BLOCK_SIZE) * BLOCK_SIZE)

    @property
    def free_bytes_per_device(self) -> int | None:
        """Usable bytes the most-loaded device has left (negative: over by that much); None without a budget."""
        return None if self.usable_bytes is None else self.usable_bytes - self.total_bytes_per_device

    def _fits_context(self, context: int) -> bool:
        sequences = self.serving.sequences_per_replica
        return all(
            sequences * stage.kv_bytes_per_sequence(context, self.serving.full_windows) <= self._room(stage)
            for stage in self.stages
        )

    @property
    def max_context_by_memory(self) -> int | None:
        """The longest context whose sequences (the concurrency's share of a replica) fit, ignoring
        the positions limit: an exact floor, by bisection on the exact per-device bytes (windows
        make the need piecewise linear); None without a budget or a cache."""
        if self.usable_bytes is None or not self.has_cache:
            return None
        if not self._fits_context(1):
            return 0
        low, high = 1, MAX_CONTEXT
        if self._fits_context(high):
            return high
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self._fits_context(middle) else (low, middle)
        return low

    @property
    def max_context(self) -> int | None:
        """``max_context_by_memory`` capped by the model's positions."""
        by_memory = self.max_context_by_memory
        if by_memory is None or self.max_positions is None:
            return by_memory
        return min(by_memory, self.max_positions)

    @property
    def max_context_limited_by(self) -> str | None:
        by_memory = self.max_context_by_memory
        if by_memory is None:
            return None
        return "positions" if self.max_positions is not None and by_memory >= self.max_positions else "memory"

    @property
    def kv_tokens_per_replica(self) -> int | None:
        """The tokens one replica's cache has room for, every layer holding each (vLLM's "GPU KV
        cache size: N tokens"); None without a budget or a cache."""
        if self.usable_bytes is None or not self.has_cache:
            return None
        counts = [
            max(self._room(stage), 0) // stage.kv_bytes_per_token for stage in self.stages if stage.kv_bytes_per_token
        ]
        return min(counts) if counts else None


def _entry(names: tuple[str, ...]) -> Any:
    return None if not names else names[0] if len(names) == 1 else names


def _partition(split: dict[int, Any]) -> PartitionSpec:
    """A PartitionSpec splitting each axis in ``split`` over its mesh axes, the rest unsplit."""
    entries = [None] * (max(split) + 1)
    for axis, names in split.items():
        entries[axis] = names
    return PartitionSpec(*entries)


def place_cache(array: caches.CacheArray, mesh: MeshSpec, copies: int, stage: int) -> PlacedCache:
    """Lay one cache array out on a stage's ``mesh`` by the serving rules (see the module's text):
    its spec's sequence axis over the replicas, its head axis (if any) over ``model``."""
    replicas = tuple(name for name in REPLICA_AXES if name in mesh.names)
    tensor = TENSOR_AXIS if TENSOR_AXIS in mesh.names else None
    split = array.shape
    axes = array.axes
    if axes is None or axes.sequence_axis is None:
        spec, note = PartitionSpec(), "whole on every device: fixed state"
    elif axes.head_axis is not None and tensor:
        heads = axes.head_axis
        if copies > 1:
            split = (*array.shape[:heads], array.shape[heads] * copies, *array.shape[heads + 1 :])
        spec = _partition({axes.sequence_axis: _entry(replicas), heads: tensor})
        note = "sequences over the replicas, KV heads over `model`" + (
            f" (each of the {array.shape[heads]:,} heads copied {copies:,} times first, one a rank)"
            if copies > 1
            else ""
        )
    else:
        spec = _partition({axes.sequence_axis: _entry(replicas)})
        note = "sequences over the replicas" + (", whole on every tensor rank" if tensor else "")
    shard = tuple(int(dim) for dim in NamedSharding(abstract_mesh(mesh), spec).shard_shape(split))
    return PlacedCache(
        array=array,
        spec=spec,
        split_shape=split,
        shard_shape=shard,
        bytes_per_device=payload.raw_bytes_as(math.prod(shard), array.dtype),
        stage=stage,
        note=note,
    )


def _stage_of(path: str, blocks: tuple[range, ...], tied: bool) -> tuple[int, ...]:
    """The stages that hold a weight or a cache array at ``path``."""
    last = len(blocks) - 1
    index = caches.block_index(path)
    if index is not None:
        return tuple(stage for stage, members in enumerate(blocks) if index in members)
    if path.startswith(("final_norm", "lm_head")):
        return (last,)
    if path.startswith("embed/token") and tied:
        return tuple(sorted({0, last}))  # vLLM's last rank holds the tied table as its head
    return (0,)


def _padded_vocab(arrays: tuple[layout.ArrayLayout, ...]) -> int | None:
    """The vocabulary as the layout stores the token embedding (megatron pads it), or None."""
    for row in arrays:
        if row.path == "embed/token/embedding":
            return row.stored_shape[0]
        if row.path == "lm_head/kernel":
            return row.stored_shape[1]
    return None


def _buffer_values(buffer: ArrayRow, vocab: int | None, padded: int | None) -> int:
    """The values a buffer holds as served: one that spans the vocabulary (BART's final_logits_bias)
    pads with it, as transformers' resize_token_embeddings pads the bias with the embedding."""
    if vocab is None or padded is None or padded == vocab or not buffer.shape or buffer.shape[-1] != vocab:
        return buffer.num_values
    return buffer.num_values // vocab * padded


def source_length(family: registry.Family, hparams: Mapping[str, Any], serving: Serving) -> int | None:
    """The encoder tokens a sequence each cross-attention caches, for an encoder-decoder (else None):
    ``serving.source_length``, or by default the context (T5, BART) or the encoder's every position
    (Whisper, whose feature extractor pads each clip to 30 s: 1,500 encoder positions).

    Raises ValueError past the encoder's positions (BART's and Whisper's learned or fixed tables)."""
    if not family.encoder_decoder:
        return None
    if family.relative_positions:  # any length
        return serving.source_tokens()
    positions = hparams["source_positions"]
    audio = bool(hparams["audio_bins"])
    if serving.source_length is None and audio:
        return positions
    wanted = serving.source_tokens()
    if wanted > positions:
        given = "source_length" if serving.source_length is not None else "the context (the default source length)"
        raise ValueError(
            f"{given} ({wanted:,} tokens) is past the encoder's {positions:,} positions (source_positions); "
            f"allowed: 1 to {positions:,}" + ("" if serving.source_length is not None else ": give a source length")
        )
    return wanted


def context_limit(config: ModelConfig) -> int | None:
    """The longest context ``config`` serves: its positions, or None where any length is allowed
    (relative or scaled rotary positions, models without a position table)."""
    hparams = caches.decode_hparams(config)
    return None if hparams.get("rope_scaling") else registry.family_of(config).max_positions(hparams)


def default_context(config: ModelConfig) -> int:
    """The context asked for when none is given: 4,096 tokens, or the model's positions when fewer
    (GPT-2's and BART's 1,024, Whisper's decoder's 448), so the default is never refused."""
    limit = context_limit(config)
    return DEFAULT_CONTEXT if limit is None else min(DEFAULT_CONTEXT, limit)


def compute_serving(config: ModelConfig, serving: Serving, report: ParamReport | None = None) -> ServingReport:
    """The serving report of ``config`` under ``serving``; see the module's text.

    Raises ValueError in the person's terms: a context past the positions, a tensor size the
    heads cannot split, a layout the strategy cannot make (``layout.LayoutError``)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"a configuration must be a dcsim ModelConfig, got {type(config).__name__}")
    if not isinstance(serving, Serving):
        raise TypeError(f"a request must be a dcsim.serving.request.Serving, got {type(serving).__name__}")
    family = registry.family_of(config)
    if family.unserved:
        raise ValueError(family.unserved)
    hparams = caches.decode_hparams(config)
    notes: list[str] = []
    positions = family.max_positions(hparams)
    if positions is not None and serving.context > positions:
        if not hparams.get("rope_scaling"):
            rotary = family.rotary(hparams)
            scaled = ", or more for a model whose rotary positions are scaled (rope_scaling in its config.json)"
            raise ValueError(
                f"`context` ({serving.context:,} tokens) is past the model's {positions:,} positions "
                f"(max_positions); allowed: 1 to {positions:,}{scaled if rotary else ''}"
            )
        notes.append(
            f"The context ({serving.context:,}) is past the model's {positions:,} positions; allowed because its "
            "rotary positions are scaled (rope_scaling): quality past the trained length is the scaling's to keep"
        )
    heads = family.kv_heads(hparams)
    tp = serving.tensor_size
    copies = 1
    if heads is not None:
        _, copies = tensor_heads(heads[0], heads[1], tp)
    source = source_length(family, hparams, serving)
    if family.encoder_decoder and serving.num_stages > 1:
        raise ValueError(
            "pipeline stages (`stage`) are laid out for decoder-only models; an encoder-decoder's encoder and "
            "decoder would each need their own stages: serve it on data, model and expert axes"
        )
    num_layers = hparams.get("num_layers", len(config.layers))
    blocks = stage_blocks(num_layers if config.family is not None else 1, serving.num_stages)
    tied = bool(hparams.get("tied_embeddings", False))
    sub = serving.layout_mesh
    report = report or count_params(config)
    weights = layout.compute_layout(report, sub, serving.strategy, serving.rules)
    table = layouts.weight_table(config, report, serving.weight_format)
    on_device = layouts.device_bytes(table, config, report)

    stage_weights = [0] * len(blocks)
    held_bytes = tuple(on_device(row) for row in weights.arrays)
    for row, size in zip(weights.arrays, held_bytes, strict=True):
        for stage in _stage_of(row.path, blocks, tied):
            stage_weights[stage] += size
    stage_other = [0] * len(blocks)
    buffers = 0
    vocab = _padded_vocab(weights.arrays)
    for buffer in report.other:  # buffers (DeepSeek-V3's router bias) and statistics: whole on each device
        buffer_bytes = payload.raw_bytes_as(_buffer_values(buffer, hparams.get("vocab_size"), vocab), buffer.dtype)
        buffers += buffer_bytes
        for stage in _stage_of(buffer.path, blocks, tied):
            stage_other[stage] += buffer_bytes

    placed: list[PlacedCache] = []
    layers: tuple[caches.LayerCache, ...] = ()
    if family.decodes:
        decode = Decode(
            context=serving.context,
            kv_dtype=serving.kv_dtype,
            source_length=serving.source_tokens() if source is None else source,
            full_windows=serving.full_windows,
        )
        sequences = serving.sequences_per_replica * serving.num_replicas
        arrays = caches.read_cache(config, decode, sequences)
        layers = caches.layer_caches(arrays)
        for array in arrays:
            for stage in _stage_of(array.path, blocks, tied):
                placed.append(place_cache(array, sub, copies, stage))
    else:
        notes.append(
            f"This model ({config.family or 'a Dense stack'}) has no decoder, so no KV cache: weights only. "
            "Serving it holds its activations, which are not counted here"
        )
    loads = []
    for stage in range(len(blocks)):
        mine = [item for item in placed if item.stage == stage]
        per_token: dict[str, int] = {}
        fixed = 0
        windows: dict[str, int] = {}
        sequences = serving.sequences_per_replica
        for item in mine:
            axes, made = item.array.axes, item.array.layer
            if axes is None or axes.sequence_axis is None or made is None:
                continue
            local_sequences = item.shard_shape[axes.sequence_axis]
            if axes.token_axis is None:  # a Mamba state: a fixed size a sequence, whatever its context
                fixed += item.bytes_per_device // local_sequences
                continue
            tokens = item.shard_shape[axes.token_axis]
            share = item.bytes_per_device // (local_sequences * tokens)
            if not made.follows_context:  # a cross-attention's: the encoder's tokens, whatever the context
                fixed += share * tokens
            else:
                per_token[item.array.module] = per_token.get(item.array.module, 0) + share
        for layer in layers:
            windows[layer.path] = layer.window
        loads.append(
            StageLoad(
                stage=stage,
                weights_bytes=stage_weights[stage],
                other_bytes=stage_other[stage]
                + sum(item.bytes_per_device for item in mine if not item.array.per_sequence),
                kv_bytes=sum(item.bytes_per_device for item in mine if item.array.per_sequence),
                sequences=sequences,
                kv_per_token=tuple((windows.get(module, 0), share) for module, share in per_token.items()),
                kv_fixed_per_sequence=fixed,
            )
        )
    notes.extend(family.serving_notes)
    local = [layer for layer in layers if isinstance(layer.spec, SlidingWindowSpec)]
    if local:
        window = local[0].window
        held = (
            "each holds every token (full windows: as engines without window-aware allocation do)"
            if (serving.full_windows)
            else f"each holds at most its window: {min(window, serving.context):,} tokens of {serving.context:,}"
        )
        notes.append(
            f"{len(local):,} of {len(layers):,} layers attend within a sliding window of {window:,} tokens; {held}"
        )
    if serving.concurrency % serving.num_replicas:
        notes.append(
            f"{serving.concurrency:,} sequences over {serving.num_replicas:,} replicas do not split evenly: the "
            f"most-loaded replica holds {serving.sequences_per_replica:,}"
        )
    if copies > 1 and heads is not None and heads[1] is not None:
        notes.append(
            f"The tensor size ({tp:,}) is more than the {heads[1]:,} KV heads: each rank holds one KV head, each head "
            f"copied on {copies:,} ranks (vLLM's rule), in the weights and in the cache"
        )
    return ServingReport(
        serving=serving,
        family=config.family,
        config_dict=config.to_dict(),
        total_params=report.total_params,
        weights=weights,
        table=table,
        weights_on_device=held_bytes,
        buffers_bytes=buffers,
        cache=tuple(placed),
        layers=layers,
        stages=tuple(loads),
        max_positions=positions,
        notes=tuple(notes),
        source_length=source,
    )
