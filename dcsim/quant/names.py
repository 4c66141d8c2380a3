"""The tensor names of the files people download, for dcsim's arrays: Hugging Face transformers' state
dict names (what GPTQ, AWQ, bitsandbytes and FP8 checkpoints keep, with their own suffixes).

Three naming schemes cover the families these formats are published for:

- ``llama``: ``model.layers.{i}.self_attn.q_proj``, ``mlp.gate_proj``, ... (Llama, Mistral, Qwen,
  Gemma with its four norms, Phi-3's fused ``qkv_proj``/``gate_up_proj``, DeepSeek's latent
  projections, Qwen's and DeepSeek's experts and shared experts);
- ``mixtral``: Mixtral's ``block_sparse_moe.gate`` and ``experts.{e}.w1/w2/w3`` (a routed MoE
  without shared experts);
- ``gpt2``: ``transformer.h.{i}.attn.c_attn`` with query, key and value fused in one tensor.

Anything else is named by its dcsim path (``/`` as ``.``), said in the table's notes: the bytes are
the format's; only the names are dcsim's. The schemes' rows are data, in ``names.toml`` beside this
module: a pattern of dcsim's paths and the name transformers gives it, a row each.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from dcsim import shipped
from dcsim.inputs import reject_unknown, show
from dcsim.model import registry


def _scheme(key: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    """The rows of ``names.toml``'s ``key``: (a dcsim path's pattern, compiled; its file name)."""
    rows = _TABLES.get(key)
    if not isinstance(rows, list):
        raise TypeError(f"dcsim/quant/names.toml must hold an array `{key}`, got {show(rows)}")
    for index, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and all(isinstance(text, str) for text in row)):
            raise TypeError(f"dcsim/quant/names.toml `{key}` row {index} must be [pattern, name], got {show(row)}")
    return tuple((re.compile(pattern), name) for pattern, name in rows)


# The naming schemes' rows, as data; what each group is for is said beside it in the file.
_TABLES = shipped.load(__file__, "names.toml")
_LLAMA = _scheme("llama")
_GEMMA_NORMS = _scheme("gemma_norms")
_LATENT_NORMS = _scheme("latent_norms")
_PLAIN_NORMS = _scheme("plain_norms")
_MIXTRAL = _scheme("mixtral")
_GPT2 = _scheme("gpt2")
reject_unknown(_TABLES, ("llama", "gemma_norms", "latent_norms", "plain_norms", "mixtral", "gpt2"), "names.toml")

_WEIGHT = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias", "": "weight"}
# A file tensor several arrays share (GPT-2's c_attn): its members in the order they are joined.
_FUSED = {"gpt2": ("attn/query/", "attn/key/", "attn/value/")}


@dataclasses.dataclass(frozen=True)
class FileName:
    """Where an array goes in a file: its module's name and the tensor suffix of an unquantized
    weight (``weight`` or ``bias``). ``module`` holds ``{e}`` for a stacked expert array (one
    module an expert). ``part`` is its place among the arrays fused into one tensor (0 for the
    first, which holds the tensors the members share), None when it has a tensor of its own."""

    module: str
    suffix: str
    part: int | None = None

    def tensor(self, suffix: str | None = None, expert: int | None = None) -> str:
        module = self.module.format(e=expert) if expert is not None else self.module
        return f"{module}.{suffix or self.suffix}"


def scheme_of(family: str | None, hparams: dict, paths: Iterable[str]) -> str:
    """The naming scheme of a model: ``gpt2``, ``mixtral``, ``llama`` or ``dcsim`` (its own paths),
    as its family names its arrays (``dcsim.model.registry.Family.naming_scheme``)."""
    return registry.get(family).naming_scheme(hparams, paths)


def file_names(scheme: str, paths: Iterable[str]) -> dict[str, FileName]:
    """Each path's ``FileName`` under ``scheme``."""
    paths = tuple(paths)
    table: tuple[tuple[re.Pattern[str], str], ...] = ()
    if scheme == "gpt2":
        table = _GPT2
    elif scheme in ("llama", "mixtral"):
        gemma = any("/attn_post_norm/" in path for path in paths)
        latent = _LATENT_NORMS if any("/attn/kv_down/" in path for path in paths) else ()
        table = (_MIXTRAL if scheme == "mixtral" else ()) + latent + (_GEMMA_NORMS if gemma else _PLAIN_NORMS) + _LLAMA
    compiled = list(table)
    fused = _FUSED.get(scheme, ())
    names: dict[str, FileName] = {}
    for path in paths:
        names[path] = _name(path, compiled, fused)
    return names


def _name(path: str, compiled: list[tuple[re.Pattern[str], str]], fused: tuple[str, ...]) -> FileName:
    for pattern, template in compiled:
        match = pattern.match(path)
        if match is None:
            continue
        groups = match.groups()
        weight = _WEIGHT[groups[-1]] if groups else "weight"
        module, _, _ = template.format(*groups, e="{e}", w="").rpartition(".")
        part = next((index for index, member in enumerate(fused) if f"/{member}" in f"/{path}"), None)
        return FileName(module=module, suffix=weight, part=part)
    module, _, leaf = path.rpartition("/")
    return FileName(module=module.replace("/", ".") or leaf, suffix=leaf if module else "weight")
