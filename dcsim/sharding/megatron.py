"""Megatron-LM's tensor parallelism, as vLLM lays a model's weights out on its tensor ranks.

The ``tensor`` strategy splits every array's last dimension, which is a rule about shapes. A
serving engine splits by what a layer does (Shoeybi et al., *Megatron-LM*, 2019, section 3;
vLLM's ``ColumnParallelLinear``, ``RowParallelLinear``, ``QKVParallelLinear`` and
``VocabParallelEmbedding``): the first projection of a pair is split on its outputs (the query,
key and value heads; the MLP's gate and up columns), the second on its inputs (the attention
output's heads; the MLP's down rows), so each pair needs one all-reduce, and the vocabulary is
split on its rows. This module says, for one parameter array, which dimension goes over the mesh
axis ``model`` and which shape is split; ``dcsim.sharding.placement`` asks JAX for the split.

Two of vLLM's rules make the split shape differ from the counted one, and both are said as a
*stored shape*, the shape JAX's ``NamedSharding.shard_shape`` splits:

- Vocabulary padding. vLLM pads the vocabulary up to a multiple of ``DEFAULT_VOCAB_PADDING_SIZE``
  (64: ``pad_vocab_size``), then gives each rank ``padded / tp`` rows (``divide`` asserts that tp
  divides the padded size). GPT-2's 50,257 rows become 50,304: 25,152 a rank on two ranks.
- KV heads (``QKVParallelLinear``). A rank holds ``kv_heads / tp`` KV heads when tp divides them;
  when the KV heads divide tp, every rank holds one, the heads copied ``tp / kv_heads`` times
  (``num_kv_head_replicas``); otherwise vLLM refuses. JAX cannot split 8 heads over 16 ranks, so the
  copied case is laid out as the logically repeated array, its KV dimension grown to tp, which
  JAX splits one head a rank. ``kv_heads_per_rank`` is the rule on its own, for the KV cache.

Heads counts are not in the parameter report, so they are read from shapes, one attention module
at a time (``attention_heads``): the query heads are dimension 1 of ``query`` (or ``query_up``),
else dimension 0 of ``out``; the KV heads dimension 1 of ``key``; for a fused ``qkv`` kernel
``(d_model, heads + 2 * kv_heads, head_dim)`` the KV heads are what the fused width leaves after
``out``'s heads, halved. Latent attention (DeepSeek) has no KV heads to split: its latent is
replicated, as vLLM keeps it whole on every rank.
"""

from __future__ import annotations

import dataclasses

from dcsim.inputs import as_int
from dcsim.model.count import ArrayRow, ParamReport, is_routed_expert
from dcsim.sharding.meshes import shape_text

DEFAULT_VOCAB_PADDING_SIZE = 64  # vLLM's, in vocab_parallel_embedding.py
TENSOR_AXIS = "model"
EXPERT_AXIS = "expert"

ATTENTION_MODULES = frozenset({"attn", "self_attn", "cross_attn"})
MLP_MODULES = frozenset({"mlp", "shared"})  # a dense MLP and a Mixture-of-Experts block's shared expert
COLUMN_HEADS = frozenset({"query", "key", "value", "qkv", "query_up", "kv_up"})  # (in, heads, head_dim)
KV_PROJECTIONS = frozenset({"key", "value", "qkv"})
COLUMN_MLP = frozenset({"gate", "up", "gate_up"})
VOCAB_EMBEDDING = "embed/token/embedding"
LM_HEAD = "lm_head"


def pad_vocab_size(vocab_size: int, pad_to: int = DEFAULT_VOCAB_PADDING_SIZE) -> int:
    """vLLM's ``pad_vocab_size``: ``vocab_size`` rounded up to a multiple of ``pad_to``."""
    vocab_size, pad_to = as_int(vocab_size, "vocab_size"), as_int(pad_to, "pad_to")
    return -(-vocab_size // pad_to) * pad_to


def padded_vocab_size(vocab_size: int, tp: int) -> int:
    """The vocabulary rows vLLM lays out over ``tp`` ranks (``pad_vocab_size``); ValueError when tp
    does not divide them, as vLLM's ``divide`` refuses."""
    tp = as_int(tp, "the tensor size")
    padded = pad_vocab_size(vocab_size)
    if padded % tp:
        raise ValueError(
            f"vLLM pads a vocabulary of {vocab_size:,} to {padded:,} rows (a multiple of "
            f"{DEFAULT_VOCAB_PADDING_SIZE}) and splits them evenly over the tensor ranks; a tensor size of {tp:,} "
            "does not divide them"
        )
    return padded


def kv_heads_per_rank(kv_heads: int, num_heads: int, tp: int) -> tuple[int, int]:
    """vLLM's KV-head rule (``QKVParallelLinear``): ``(heads_per_rank, replicas)`` for ``kv_heads``
    KV heads and ``num_heads`` query heads over a tensor size of ``tp``.

    With ``kv_heads % tp == 0`` a rank holds ``kv_heads // tp`` heads and no head is copied
    (replicas 1); with ``tp % kv_heads == 0`` a rank holds one head, each held by ``tp // kv_heads``
    ranks. Raises ValueError, in words naming the heads and the tensor size, when tp does not
    divide the query heads or neither count divides the other.
    """
    kv_heads = as_int(kv_heads, "kv_heads")
    num_heads = as_int(num_heads, "num_heads")
    tp = as_int(tp, "the tensor size")
    if num_heads % kv_heads:
        raise ValueError(f"{kv_heads:,} KV heads must divide the {num_heads:,} query heads into equal groups")
    if num_heads % tp:
        raise ValueError(
            f"a tensor size of {tp:,} cannot split {num_heads:,} query heads evenly: every rank holds the same "
            f"number of heads, so the tensor size must divide {num_heads:,}"
        )
    if kv_heads % tp == 0:
        return kv_heads // tp, 1
    if tp % kv_heads == 0:
        return 1, tp // kv_heads
    raise ValueError(
        f"a tensor size of {tp:,} cannot hold {kv_heads:,} KV heads: vLLM splits the KV heads when the tensor "
        f"size divides them and copies them when they divide the tensor size, and neither {tp:,} nor "
        f"{kv_heads:,} divides the other"
    )


@dataclasses.dataclass(frozen=True)
class Heads:
    """One attention module's heads: query heads, and KV heads (None for latent attention)."""

    num_heads: int
    kv_heads: int | None


def _names(row: ArrayRow) -> tuple[str, str]:
    """The array's layer (``query``) and the module above it (``attn``)."""
    parts = row.module.split("/")
    return parts[-1], parts[-2] if len(parts) > 1 else ""


def attention_module(row: ArrayRow) -> str | None:
    """The attention module an array belongs to (``block_3/attn``), or None."""
    return row.module.rpartition("/")[0] if _names(row)[1] in ATTENTION_MODULES else None


def attention_heads(report: ParamReport) -> dict[str, Heads]:
    """Every attention module's heads, read from its kernels' shapes (see the module docstring)."""
    shapes: dict[str, dict[str, tuple[int, ...]]] = {}
    for row in report.arrays:
        module = attention_module(row)
        if module is not None and row.kind == "kernel":
            shapes.setdefault(module, {})[_names(row)[0]] = tuple(row.shape)
    heads = {}
    for module, kernels in shapes.items():
        query = kernels.get("query") or kernels.get("query_up")
        if query is not None and len(query) == 3:
            num_heads = query[1]
        elif len(kernels.get("out", ())) == 3:
            num_heads = kernels["out"][0]
        else:
            continue
        kv_heads = None
        if len(kernels.get("key", ())) == 3:
            kv_heads = kernels["key"][1]
        elif len(kernels.get("qkv", ())) == 3 and (kernels["qkv"][1] - num_heads) % 2 == 0:
            kv_heads = (kernels["qkv"][1] - num_heads) // 2
        heads[module] = Heads(num_heads=num_heads, kv_heads=kv_heads if kv_heads else None)
    return heads


@dataclasses.dataclass(frozen=True)
class Split:
    """Where one array goes: ``entries`` (one PartitionSpec entry a leading dimension), the
    ``stored_shape`` JAX splits (the counted shape unless padded or repeated) and why."""

    entries: tuple[str | None, ...]
    stored_shape: tuple[int, ...]
    note: str


def _on(dimension: int, rank: int, axis: str = TENSOR_AXIS) -> tuple[str | None, ...]:
    return (*([None] * dimension), axis) if dimension < rank else ()


def split(row: ArrayRow, heads: Heads | None, tp: int, expert_axis: bool) -> Split:
    """Megatron's rule for ``row`` over a tensor size of ``tp`` (the ``model`` axis), experts over
    ``expert`` when ``expert_axis``. Raises ValueError for heads or a vocabulary vLLM would refuse."""
    shape, rank = tuple(row.shape), len(row.shape)
    layer, parent = _names(row)
    whole = Split((), shape, "replicated on every rank (Megatron splits only the paired projections)")
    if is_routed_expert(row) and rank:
        experts: tuple[str | None, ...] = (EXPERT_AXIS,) if expert_axis else (None,)
        over = f"num_experts over `{EXPERT_AXIS}`, " if expert_axis else ""
        if row.kind in ("gate", "up") and rank == 3:
            return Split((*experts, None, TENSOR_AXIS), shape, f"{over}column-parallel: ffn (dimension 2) over `model`")
        if row.kind == "down" and rank == 3:
            return Split((*experts, TENSOR_AXIS), shape, f"{over}row-parallel: ffn (dimension 1) over `model`")
        return Split(experts if expert_axis else (), shape, f"{over}the rest whole")
    if row.path == VOCAB_EMBEDDING or (row.module == LM_HEAD and rank in (1, 2)):
        dimension = 0 if row.path == VOCAB_EMBEDDING or rank == 1 else 1
        vocab = shape[dimension]
        try:
            padded = padded_vocab_size(vocab, tp)
        except ValueError as err:
            raise ValueError(f"`{row.path}` (shape {shape_text(shape)}): {err}") from None
        stored = (*shape[:dimension], padded, *shape[dimension + 1 :])
        padding = (
            f", padded from {vocab:,} to {padded:,} rows as vLLM does (a multiple of {DEFAULT_VOCAB_PADDING_SIZE})"
            if padded != vocab
            else ""
        )
        return Split(_on(dimension, rank), stored, f"vocabulary-parallel: dimension {dimension} over `model`{padding}")
    if parent in ATTENTION_MODULES and row.kind in ("kernel", "bias"):
        dimension = 1 if row.kind == "kernel" else 0
        if layer in COLUMN_HEADS and rank >= dimension + 2:
            return _heads(row, heads, tp, dimension)
        if layer == "out" and row.kind == "kernel" and rank == 3:
            if heads is not None:
                _query_heads(row, heads.num_heads, tp)
            return Split(_on(0, rank), shape, "row-parallel: heads (dimension 0) over `model`")
        if layer == "out":
            return Split((), shape, "row-parallel layer's bias: replicated, added once after the all-reduce")
        return whole
    if parent in MLP_MODULES and row.kind in ("kernel", "bias") and rank:
        if layer in COLUMN_MLP:
            return Split(_on(rank - 1, rank), shape, f"column-parallel: outputs (dimension {rank - 1}) over `model`")
        if layer == "down" and row.kind == "kernel" and rank == 2:
            return Split(_on(0, rank), shape, "row-parallel: inputs (dimension 0) over `model`")
        if layer == "down":
            return Split((), shape, "row-parallel layer's bias: replicated, added once after the all-reduce")
    return whole


def _query_heads(row: ArrayRow, num_heads: int, tp: int) -> None:
    if num_heads % tp:
        raise ValueError(
            f"`{row.path}` (shape {shape_text(row.shape)}): a tensor size of {tp:,} cannot split {num_heads:,} query "
            f"heads evenly: every rank holds the same number of heads, so the tensor size must divide {num_heads:,}"
        )


def _heads(row: ArrayRow, heads: Heads | None, tp: int, dimension: int) -> Split:
    """A column-parallel attention projection: its heads dimension over ``model``, KV heads by
    vLLM's rule (repeated up to tp when they divide it)."""
    shape, rank = tuple(row.shape), len(row.shape)
    layer = _names(row)[0]
    width = shape[dimension]
    num_heads = heads.num_heads if heads is not None else width
    kv_heads = heads.kv_heads if heads is not None else None
    entries = _on(dimension, rank)
    if layer not in KV_PROJECTIONS or kv_heads is None:
        _query_heads(row, num_heads, tp)
        return Split(entries, shape, f"column-parallel: heads (dimension {dimension}) over `model`")
    try:
        per_rank, replicas = kv_heads_per_rank(kv_heads, num_heads, tp)
    except ValueError as err:
        raise ValueError(f"`{row.path}` (shape {shape_text(shape)}): {err}") from None
    kv_stored = kv_heads * replicas
    fused = layer == "qkv"
    stored_width = num_heads + 2 * kv_stored if fused else kv_stored
    stored = (*shape[:dimension], stored_width, *shape[dimension + 1 :])
    what = (
        f"{num_heads // tp:,} query, {per_rank:,} key and {per_rank:,} value heads"
        if fused
        else f"{per_rank:,} KV head"
    )
    what += "s" * (not fused and per_rank != 1)
    note = f"column-parallel: heads (dimension {dimension}) over `model`, {what} a rank"
    if replicas > 1:
        note += (
            f"; the {kv_heads:,} KV heads are repeated {replicas:,} times to the tensor size {tp:,} "
            f"(stored as {shape_text(stored)}), as vLLM copies them"
        )
    return Split(entries, stored, note)
