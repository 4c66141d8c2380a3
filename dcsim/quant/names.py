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
the format's; only the names are dcsim's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

_LLAMA = (
    (re.compile(r"embed/token/embedding$"), "model.embed_tokens.weight"),
    (re.compile(r"embed/position/embedding$"), "model.embed_positions.weight"),
    (re.compile(r"final_norm/(scale|bias)$"), "model.norm.{w}"),
    (re.compile(r"lm_head/(kernel|bias)$"), "lm_head.{w}"),
    (re.compile(r"block_(\d+)/attn_norm/(scale|bias)$"), "model.layers.{0}.input_layernorm.{w}"),
    (re.compile(r"block_(\d+)/attn/query/(kernel|bias)$"), "model.layers.{0}.self_attn.q_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/key/(kernel|bias)$"), "model.layers.{0}.self_attn.k_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/value/(kernel|bias)$"), "model.layers.{0}.self_attn.v_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/qkv/(kernel|bias)$"), "model.layers.{0}.self_attn.qkv_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/out/(kernel|bias)$"), "model.layers.{0}.self_attn.o_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/query_norm/(scale|bias)$"), "model.layers.{0}.self_attn.q_norm.{w}"),
    (re.compile(r"block_(\d+)/attn/key_norm/(scale|bias)$"), "model.layers.{0}.self_attn.k_norm.{w}"),
    (re.compile(r"block_(\d+)/attn/query_down/(kernel|bias)$"), "model.layers.{0}.self_attn.q_a_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/query_up/(kernel|bias)$"), "model.layers.{0}.self_attn.q_b_proj.{w}"),
    (re.compile(r"block_(\d+)/attn/kv_down/(kernel|bias)$"), "model.layers.{0}.self_attn.kv_a_proj_with_mqa.{w}"),
    (re.compile(r"block_(\d+)/attn/kv_norm/(scale|bias)$"), "model.layers.{0}.self_attn.kv_a_layernorm.{w}"),
    (re.compile(r"block_(\d+)/attn/kv_up/(kernel|bias)$"), "model.layers.{0}.self_attn.kv_b_proj.{w}"),
    (re.compile(r"block_(\d+)/mlp/gate/(kernel|bias)$"), "model.layers.{0}.mlp.gate_proj.{w}"),
    (re.compile(r"block_(\d+)/mlp/up/(kernel|bias)$"), "model.layers.{0}.mlp.up_proj.{w}"),
    (re.compile(r"block_(\d+)/mlp/gate_up/(kernel|bias)$"), "model.layers.{0}.mlp.gate_up_proj.{w}"),
    (re.compile(r"block_(\d+)/mlp/down/(kernel|bias)$"), "model.layers.{0}.mlp.down_proj.{w}"),
    (re.compile(r"block_(\d+)/moe/router/(kernel|bias)$"), "model.layers.{0}.mlp.gate.{w}"),
    (re.compile(r"block_(\d+)/moe/experts/(gate|up|down)()$"), "model.layers.{0}.mlp.experts.{e}.{1}_proj.{w}"),
    (
        re.compile(r"block_(\d+)/moe/shared/(gate|up|down)/(kernel|bias)$"),
        "model.layers.{0}.mlp.shared_experts.{1}_proj.{w}",
    ),
    (re.compile(r"block_(\d+)/moe/shared_gate/(kernel|bias)$"), "model.layers.{0}.mlp.shared_expert_gate.{w}"),
)
# Gemma 2 and 3 norm each sublayer's input and output; transformers names the four norms so.
_GEMMA_NORMS = (
    (re.compile(r"block_(\d+)/attn_post_norm/(scale|bias)$"), "model.layers.{0}.post_attention_layernorm.{w}"),
    (re.compile(r"block_(\d+)/mlp_norm/(scale|bias)$"), "model.layers.{0}.pre_feedforward_layernorm.{w}"),
    (re.compile(r"block_(\d+)/mlp_post_norm/(scale|bias)$"), "model.layers.{0}.post_feedforward_layernorm.{w}"),
)
# DeepSeek's latent attention: dcsim's query_norm is the norm of the query's low-rank latent
# (transformers' q_a_layernorm), not Qwen 3's per-head q_norm.
_LATENT_NORMS = (
    (re.compile(r"block_(\d+)/attn/query_norm/(scale|bias)$"), "model.layers.{0}.self_attn.q_a_layernorm.{w}"),
)
_PLAIN_NORMS = ((re.compile(r"block_(\d+)/mlp_norm/(scale|bias)$"), "model.layers.{0}.post_attention_layernorm.{w}"),)
_MIXTRAL = (
    (re.compile(r"block_(\d+)/moe/router/(kernel|bias)$"), "model.layers.{0}.block_sparse_moe.gate.{w}"),
    (re.compile(r"block_(\d+)/moe/experts/gate()$"), "model.layers.{0}.block_sparse_moe.experts.{e}.w1.{w}"),
    (re.compile(r"block_(\d+)/moe/experts/down()$"), "model.layers.{0}.block_sparse_moe.experts.{e}.w2.{w}"),
    (re.compile(r"block_(\d+)/moe/experts/up()$"), "model.layers.{0}.block_sparse_moe.experts.{e}.w3.{w}"),
)
_GPT2 = (
    (re.compile(r"embed/token/embedding$"), "transformer.wte.weight"),
    (re.compile(r"embed/position/embedding$"), "transformer.wpe.weight"),
    (re.compile(r"final_norm/(scale|bias)$"), "transformer.ln_f.{w}"),
    (re.compile(r"block_(\d+)/attn_norm/(scale|bias)$"), "transformer.h.{0}.ln_1.{w}"),
    (re.compile(r"block_(\d+)/mlp_norm/(scale|bias)$"), "transformer.h.{0}.ln_2.{w}"),
    (re.compile(r"block_(\d+)/attn/(?:query|key|value)/(kernel|bias)$"), "transformer.h.{0}.attn.c_attn.{w}"),
    (re.compile(r"block_(\d+)/attn/out/(kernel|bias)$"), "transformer.h.{0}.attn.c_proj.{w}"),
    (re.compile(r"block_(\d+)/mlp/up/(kernel|bias)$"), "transformer.h.{0}.mlp.c_fc.{w}"),
    (re.compile(r"block_(\d+)/mlp/down/(kernel|bias)$"), "transformer.h.{0}.mlp.c_proj.{w}"),
)
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
    """The naming scheme of a model: ``gpt2``, ``mixtral``, ``llama`` or ``dcsim`` (its own paths)."""
    paths = tuple(paths)
    if family == "decoder":
        gpt2 = hparams.get("position_embedding") == "learned" and not hparams.get("gated_mlp")
        return "gpt2" if gpt2 else "llama"
    if family == "moe":
        shared = any("/moe/shared" in path for path in paths)
        latent = any("/attn/kv_down/" in path for path in paths)
        return "llama" if shared or latent else "mixtral"
    return "dcsim"


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
