"""The readings of Mixture-of-Experts ``model_type``s that their table entries (``dcsim.hf.table``)
cannot say: which blocks are dense, and DeepSeek's latent attention and shared experts.

Each decides which blocks are dense the way transformers' own class does (Qwen's ``mlp_only_layers``
and ``decoder_sparse_step``, DeepSeek's ``first_k_dense_replace``) and writes the answer as the
family's ``dense_layers``. Absent fields take the configuration class's defaults (a bare
``{"model_type": "deepseek_v3"}`` is DeepSeek-V3 itself). See ``dcsim.hf.readers``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from dcsim.hf.fields import Fields
from dcsim.inputs import as_int, show
from dcsim.model import schemas


def _field(fields: Fields, key: str, default: int) -> Any:
    """The field ``key``, its class default when absent; null means none (0), as transformers reads it."""
    value = fields.data.get(key, default)
    return 0 if value is None else value


def _qwen_dense_layers(fields: Fields) -> None:
    """Qwen-MoE's rule: block i is dense when listed in ``mlp_only_layers`` or when (i + 1) is not
    a multiple of ``decoder_sparse_step``."""
    layers = fields.hparams["num_layers"]
    step = as_int(fields.data.get("decoder_sparse_step") or 1, "decoder_sparse_step", maximum=schemas.MAX_BLOCKS)
    listed = fields.data.get("mlp_only_layers") or []
    if not isinstance(listed, list) or len(listed) > schemas.MAX_BLOCKS:
        raise TypeError(f"`mlp_only_layers` must be a list of block numbers, got {show(listed)}")
    only = {as_int(entry, f"mlp_only_layers[{index}]", minimum=0) for index, entry in enumerate(listed)}
    fields.set(dense_layers=tuple(index for index in range(layers) if index in only or (index + 1) % step))


def _shared_expert_width(fields: Fields) -> None:
    """Qwen-MoE's shared expert: refused at width 0; and whether its attention has qkv biases."""
    if fields.hparams["shared_ffn_dim"] == 0:
        raise ValueError(
            "`shared_expert_intermediate_size` is 0: transformers would still build the shared expert's gate "
            "(hidden_size values a block) around an empty expert, which dcsim's family does not; "
            "give the shared expert a width of at least 1"
        )
    fields.text["qkv"] = ", biases on query, key and value" if fields.hparams["qkv_bias"] else ""


def _deepseek(fields: Fields, *, v3: bool) -> None:
    """DeepSeek-V2 and V3: latent attention, routed and shared experts, the first
    ``first_k_dense_replace`` blocks dense; V3's router has a score-correction bias (a buffer)."""
    if "q_lora_rank" in fields.data and fields.data["q_lora_rank"] is None:  # a direct query projection
        fields.set(q_lora_rank=0)
    else:
        fields.take("q_lora_rank", "q_lora_rank", 1536)
    fields.take("kv_lora_rank", "kv_lora_rank", 512)
    fields.take("qk_nope_head_dim", "qk_nope_head_dim", 128)
    fields.take("qk_rope_head_dim", "qk_rope_head_dim", 64)
    fields.take("v_head_dim", "v_head_dim", 128)
    fields.take("num_experts", "n_routed_experts", 256 if v3 else 64)
    top_k = fields.data.get("num_experts_per_tok", 8 if v3 else None)
    if top_k is None:
        fields.note("num_experts_per_tok is unset: the active count assumes 1 routed expert a token")
        fields.set(experts_per_token=1)
    else:
        fields.take("experts_per_token", "num_experts_per_tok", top_k)
    expert_ffn = fields.take("expert_ffn_dim", "moe_intermediate_size", 2048 if v3 else 1407)
    _shared_and_dense_prefix(fields, expert_ffn, shared=1 if v3 else 2, first=3 if v3 else 0)


def _shared_and_dense_prefix(fields: Fields, expert_ffn: int, *, shared: int, first: int) -> None:
    """DeepSeek's layout, which GLM-4 MoE shares: ``n_shared_experts`` shared experts as one MLP,
    the first ``first_k_dense_replace`` blocks dense (``shared`` and ``first``: the class's defaults),
    and the multi-token-prediction layers transformers does not build, noted."""
    experts = fields.hparams["num_experts"]
    shared = as_int(_field(fields, "n_shared_experts", shared), "n_shared_experts", minimum=0, maximum=experts)
    fields.set(shared_ffn_dim=shared * expert_ffn)
    fields.source["shared_ffn_dim"] = "n_shared_experts x moe_intermediate_size"
    layers = fields.hparams["num_layers"]
    first = as_int(_field(fields, "first_k_dense_replace", first), "first_k_dense_replace", minimum=0, maximum=layers)
    frequency = fields.data.get("moe_layer_freq", 1)
    if frequency not in (None, 1):
        fields.note(
            f"moe_layer_freq is {show(frequency)}; transformers' class ignores it (every block from "
            "first_k_dense_replace on has experts), and so does this count"
        )
    extra = fields.data.get("num_nextn_predict_layers") or 0
    if extra:
        fields.note(
            f"num_nextn_predict_layers is {show(extra)}: the multi-token-prediction layer is not part of "
            "transformers' model, nor of this count"
        )
    fields.set(dense_layers=tuple(range(first)))
    fields.text["dense"] = f", the first {first} dense" if first else ""


def _glm4_moe(fields: Fields) -> None:
    """GLM-4 MoE (GLM-4.5): DeepSeek-V3's experts, shared expert and dense prefix under grouped-query
    attention; one shared expert and one dense block by default. Without ``head_dim`` its heads are
    hidden_size // num_attention_heads wide, rounded down (42 at the class's 4,096 and 96 heads)."""
    hidden, heads = fields.hparams["d_model"], fields.hparams["num_heads"]
    if fields.data.get("head_dim") is None and hidden % heads:
        fields.set(head_dim=hidden // heads)
        fields.source["head_dim"] = "hidden_size // num_attention_heads"
    _shared_and_dense_prefix(fields, fields.hparams["expert_ffn_dim"], shared=1, first=1)


# DBRX keeps its attention's and experts' sizes in nested objects: (hyperparameter, object, key, default).
_DBRX_NESTED = (
    ("num_kv_heads", "attn_config", "kv_n_heads", 1),
    ("num_experts", "ffn_config", "moe_num_experts", 4),
    ("experts_per_token", "ffn_config", "moe_top_k", 1),
    ("expert_ffn_dim", "ffn_config", "ffn_hidden_size", 3584),
)


def _dbrx(fields: Fields) -> None:
    """DBRX: the key/value heads in ``attn_config`` and the experts in ``ffn_config`` (``DbrxConfig``'s
    defaults when absent); its fused ``Wqkv`` holds what query, key and value hold apart."""
    for name, parent, key, default in _DBRX_NESTED:
        nested = fields.data.get(parent) or {}
        if not isinstance(nested, Mapping):
            raise TypeError(f"`{parent}` must be a JSON object of sizes, got {show(nested)}")
        inner = Fields(nested, fields.family)
        fields.set(**{name: inner.take(name, key, default)})
        fields.source[name] = f"{parent}.{key}"
    fields.set(ffn_dim=fields.hparams["expert_ffn_dim"])


QUIRKS: Mapping[str, Callable[[Fields], None]] = {
    "qwen_dense_layers": _qwen_dense_layers,
    "shared_expert_width": _shared_expert_width,
    "deepseek_v2": functools.partial(_deepseek, v3=False),
    "deepseek_v3": functools.partial(_deepseek, v3=True),
    "glm4_moe": _glm4_moe,
    "dbrx": _dbrx,
}
