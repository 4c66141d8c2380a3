"""Where a model's parameters sit: by role (embeddings, blocks, norms, head) and by depth.

The grouping reads the module paths that ``dcsim.model.families`` gives (``embed/token``,
``block_3/attn/query``, ``final_norm``, ``lm_head``), so it is a view of the exact per-array rows,
never a separate estimate: every frame here sums to the report's total.

pandas comes with the frames only, so what a JSON count reads (``active_params``, ``group_of``) and
the CLI's ``count --format json`` pay none of its import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dcsim.inputs import as_int
from dcsim.model import presets, registry
from dcsim.model.config import ModelConfig
from dcsim.model.count import ArrayRow, ParamReport, is_routed_expert

if TYPE_CHECKING:
    import pandas as pd

# A vision-language model's three parts are groups of their own (dcsim.model.zoo.multimodal).
MODEL_PARTS = ("vision_tower", "projector", "language_model")
GROUPS = ("embeddings", "stem", "blocks", "norms", "head", *MODEL_PARTS, "other")
_BLOCK_PREFIXES = ("block_", "stage_", "hidden_", "Dense_")
_HEADS = ("lm_head", "head", "pooler")
_STACKS = ("encoder", "decoder")

# Input embedding tables and an untied output projection over the vocabulary: what Pythia (and
# Kaplan et al.) leave out of the "non-embedding" count, because they scale with the vocabulary
# and sequence length, not with the model's depth and width.
EMBEDDING_MODULES = ("embed/token", "embed/position", "embed/token_type", "lm_head")
EMBEDDING_ARRAYS = ("embed/position",)  # ViT's learned position table is a bare parameter


def group_of(path: str) -> str:
    """The role of the module at ``path``: one of ``GROUPS``.

    A vision-language model's ``vision_tower``, ``projector`` and ``language_model`` are each a
    group. Everything inside a block (its norms too) is ``blocks``; ``norms`` are the norms outside
    blocks (``final_norm``, BERT's ``embed_norm``); ``stem`` is a ResNet's first convolution.
    """
    parts = path.split("/")
    if parts[0] in MODEL_PARTS:
        return parts[0]
    if parts[0] in _STACKS and len(parts) > 1:  # T5: encoder/block_0/..., decoder/final_norm
        parts = parts[1:]
    top = parts[0]
    if top.startswith(_BLOCK_PREFIXES):
        return "blocks"
    if top == "embed":
        return "embeddings"
    if top.endswith("norm"):
        return "norms"
    if top == "stem":
        return "stem"
    if top in _HEADS:
        return "head"
    return "other"


def _percent(num_params: list[int], total: int) -> list[float]:
    return [100 * value / total if total else 0.0 for value in num_params]


def _frame(key: str, keys: list[str], arrays: list[int], params: list[int], total: int) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {
            key: keys,
            "num_arrays": pd.array(arrays, dtype="int64"),
            "num_params": pd.array(params, dtype="int64"),
            "percent_of_total": _percent(params, total),
        }
    )


def _rollup(rows: tuple[ArrayRow, ...], key_of) -> tuple[list[str], list[int], list[int]]:
    totals: dict[str, list[int]] = {}
    for row in rows:
        entry = totals.setdefault(key_of(row), [0, 0])
        entry[0] += 1
        entry[1] += row.num_values
    return list(totals), [arrays for arrays, _ in totals.values()], [params for _, params in totals.values()]


def breakdown_frame(report: ParamReport) -> pd.DataFrame:
    """One row per group that holds parameters, in ``GROUPS`` order: group, num_arrays,
    num_params, percent_of_total. BatchNorm statistics and other variables are not in it (see
    ``other_frame``)."""
    keys, arrays, params = _rollup(report.arrays, lambda row: group_of(row.module or row.path))
    order = sorted(range(len(keys)), key=lambda index: GROUPS.index(keys[index]))
    return _frame(
        "group",
        [keys[index] for index in order],
        [arrays[index] for index in order],
        [params[index] for index in order],
        report.total_params,
    )


def depth_frame(report: ParamReport, depth: int = 1) -> pd.DataFrame:
    """Parameters rolled up to module paths ``depth`` levels deep, like ``tabulate(depth=...)``
    but over parameters only: depth 1 gives ``embed``, ``block_0``, ..., ``lm_head``; depth 2
    splits each block into ``block_0/attn``, ``block_0/mlp``, its norms. Rows keep model order."""
    depth = as_int(depth, "depth", maximum=64)

    def prefix(row: ArrayRow) -> str:
        parts = (row.module or row.path).split("/")
        return "/".join(parts[:depth])

    keys, arrays, params = _rollup(report.arrays, prefix)
    frame = _frame("path", keys, arrays, params, report.total_params)
    frame.insert(1, "group", [group_of(key) for key in keys])
    return frame


def _index_free(key: str) -> str | None:
    """``block_`` for ``block_12``: the name a numbered module shares with its siblings; None for
    a module that is not one of a numbered run (``embed``, ``final_norm``)."""
    stem, _, index = key.rpartition("_")
    return stem + "_" if stem and index.isdigit() else None


def repeated_frame(report: ParamReport) -> pd.DataFrame:
    """``depth_frame(report, 1)`` with each run of consecutive numbered modules that hold the same
    arrays (relative paths, shapes and dtypes) as one row: ``block_0..block_31``, ``times`` 32,
    ``each`` the parameters of one, ``num_arrays`` and ``num_params`` of the whole run. A block that
    differs (a dense block before expert blocks, an odd last stage) starts a run of its own, so the
    rows still sum to the total and every distinct block is shown."""
    import pandas as pd

    shapes: dict[str, list[tuple[str, tuple[int, ...], str]]] = {}
    sizes: dict[str, list[int]] = {}
    for row in report.arrays:
        module = row.module or row.path
        key = module.partition("/")[0]
        inner = row.path[len(key) :]
        shapes.setdefault(key, []).append((inner, tuple(row.shape), row.dtype))
        entry = sizes.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += row.num_values
    runs: list[list[str]] = []
    for key in shapes:
        last = runs[-1][-1] if runs else ""
        numbered = _index_free(key) is not None and _index_free(key) == _index_free(last)
        if numbered and sorted(shapes[key]) == sorted(shapes[last]):
            runs[-1].append(key)
        else:
            runs.append([key])
    names = [run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}" for run in runs]
    params = [sum(sizes[key][1] for key in run) for run in runs]
    frame = _frame("path", names, [sum(sizes[key][0] for key in run) for run in runs], params, report.total_params)
    frame.insert(1, "group", [group_of(run[0]) for run in runs])
    frame.insert(2, "times", pd.array([len(run) for run in runs], dtype="int64"))
    frame.insert(3, "each", pd.array([sizes[run[0]][1] for run in runs], dtype="int64"))
    return frame


def other_frame(report: ParamReport) -> pd.DataFrame:
    """Variables outside ``params`` (BatchNorm ``mean``/``var`` in ``batch_stats``), one row per
    array: never parameters, never in the total."""
    import pandas as pd

    return pd.DataFrame(
        {
            "collection": [row.collection for row in report.other],
            "path": [row.path for row in report.other],
            "shape": ["x".join(str(dim) for dim in row.shape) for row in report.other],
            "dtype": [row.dtype for row in report.other],
            "num_values": pd.array([row.num_values for row in report.other], dtype="int64"),
        }
    )


def is_embedding(row: ArrayRow) -> bool:
    """Whether an array is an input embedding table or an untied output projection over the
    vocabulary."""
    module = (row.module or "").removeprefix("language_model/")  # a vision-language model's text tables
    stack, _, inner = module.partition("/")
    if stack in _STACKS:  # an encoder-decoder's own position tables: encoder/embed/position (BART, Whisper)
        module = inner
    return module in EMBEDDING_MODULES or row.path in EMBEDDING_ARRAYS


def embedding_params(config: ModelConfig, report: ParamReport) -> int:
    """Values in the input embedding tables (token, position, token type) and in an untied
    ``lm_head``; 0 for the Dense stack, which has none."""
    if config.is_dense:
        return 0
    return sum(row.num_values for row in report.arrays if is_embedding(row))


def non_embedding_params(config: ModelConfig, report: ParamReport) -> int:
    """The total less the token, position and token-type embedding tables and less an untied
    output projection over the vocabulary, as Pythia reports its "non-embedding" parameters. A tied
    output layer reuses the token table, which is subtracted once."""
    return report.total_params - embedding_params(config, report)


ACTIVE_DEFINITION = (
    "Active per token: every parameter a token's forward pass uses. A token goes through the embeddings, "
    "every attention layer, every dense MLP, the router and the shared experts of every MoE layer, the norms "
    "and the output head, but through only experts_per_token of the num_experts routed experts of each MoE "
    "layer: active = total - (num_experts - experts_per_token) x one expert's parameters, for every MoE "
    "layer. This is what a model card's 'A2.7B' or '37B activated' means; every expert is still stored, so "
    "memory, shards and checkpoints hold the total."
)


def active_params(config: ModelConfig, report: ParamReport) -> int | None:
    """The parameters one token uses (``ACTIVE_DEFINITION``), exactly; None for a model without
    routed experts."""
    if not registry.family_of(config).experts:
        return None
    hparams = presets.resolved_hparams(config)
    experts, top_k = hparams["num_experts"], hparams["experts_per_token"]
    idle = sum(row.num_values // experts * (experts - top_k) for row in report.arrays if is_routed_expert(row))
    return report.total_params - idle


# What each variable collection other than ``params`` holds, in a person's words.
OTHER_COLLECTIONS = {
    "batch_stats": "BatchNorm running statistics",
    "buffers": "buffers (DeepSeek-V3's router score-correction biases, BART's final_logits_bias): stored, "
    "not trained by gradients",
}


def other_variables_text(report: ParamReport) -> str:
    """What the variables outside ``params`` are, by collection: ``BatchNorm running statistics``."""
    collections = dict.fromkeys(row.collection for row in report.other)
    return "; ".join(OTHER_COLLECTIONS.get(name, f"the {name} collection") for name in collections)
