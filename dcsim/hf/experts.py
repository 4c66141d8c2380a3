"""How the Mixture-of-Experts ``model_type``s are read into dcsim's ``moe`` family: Mixtral,
Qwen-MoE (qwen2_moe), Qwen3-MoE and DeepSeek-V2 and V3.

Each reader decides which blocks are dense the way transformers' own class does (Qwen's
``mlp_only_layers`` and ``decoder_sparse_step``, DeepSeek's ``first_k_dense_replace``) and writes the
answer as the family's ``dense_layers``. Absent fields take the configuration class's defaults (a
bare ``{"model_type": "deepseek_v3"}`` is DeepSeek-V3 itself). See ``dcsim.hf.readers``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dcsim.hf.fields import Fields, lm_head, sizes
from dcsim.inputs import as_int, show
from dcsim.model import schemas


def _experts(fields: Fields, experts_key: str, experts: int, top_k: int, ffn_key: str, ffn: int) -> None:
    fields.take("num_experts", experts_key, experts)
    fields.take("experts_per_token", "num_experts_per_tok", top_k)
    fields.take("expert_ffn_dim", ffn_key, ffn)


def _field(fields: Fields, key: str, default: int) -> Any:
    """The field ``key``, its class default when absent; null means none (0), as transformers reads it."""
    value = fields.data.get(key, default)
    return 0 if value is None else value


def _moe(fields: Fields, tied_default: bool, what: str, **hparams: Any) -> str:
    tied = fields.flag("tie_word_embeddings", tied_default)
    fields.set(tied_embeddings=tied, **hparams)
    return f"embeddings, blocks ({what}), final norm, {lm_head(tied)}; rotary positions hold no parameters"


def _mixtral(fields: Fields) -> str:
    """Mixtral: every block routes to ``num_local_experts`` SwiGLU experts, no shared one."""
    sizes(
        fields,
        {"vocab_size": 32_000, "hidden_size": 4096, "num_hidden_layers": 32}
        | {"num_attention_heads": 32, "intermediate_size": 14_336, "num_key_value_heads": 8},
    )
    fields.head_width(None)
    _experts(fields, "num_local_experts", 8, 2, "intermediate_size", 14_336)
    return _moe(fields, False, "routed experts in every block", dense_layers=())


def _qwen_dense_layers(fields: Fields) -> tuple[int, ...]:
    """Qwen-MoE's rule: block i is dense when listed in ``mlp_only_layers`` or when (i + 1) is not
    a multiple of ``decoder_sparse_step``."""
    layers = fields.hparams["num_layers"]
    step = as_int(fields.data.get("decoder_sparse_step") or 1, "decoder_sparse_step", maximum=schemas.MAX_BLOCKS)
    listed = fields.data.get("mlp_only_layers") or []
    if not isinstance(listed, list) or len(listed) > schemas.MAX_BLOCKS:
        raise TypeError(f"`mlp_only_layers` must be a list of block numbers, got {show(listed)}")
    only = {as_int(entry, f"mlp_only_layers[{index}]", minimum=0) for index, entry in enumerate(listed)}
    return tuple(index for index in range(layers) if index in only or (index + 1) % step)


def _qwen2_moe(fields: Fields) -> str:
    """Qwen1.5-MoE and Qwen2-MoE: routed experts, one shared expert behind a sigmoid gate, biases on
    query, key and value (``qkv_bias``)."""
    sizes(
        fields,
        {"vocab_size": 151_936, "hidden_size": 2048, "num_hidden_layers": 24}
        | {"num_attention_heads": 16, "intermediate_size": 5632, "num_key_value_heads": 16},
    )
    fields.head_width(None)
    _experts(fields, "num_experts", 60, 4, "moe_intermediate_size", 1408)
    if fields.take("shared_ffn_dim", "shared_expert_intermediate_size", 5632) == 0:
        raise ValueError(
            "`shared_expert_intermediate_size` is 0: transformers would still build the shared expert's gate "
            "(hidden_size values a block) around an empty expert, which dcsim's family does not; "
            "give the shared expert a width of at least 1"
        )
    qkv_bias = fields.flag("qkv_bias", True)
    return _moe(
        fields,
        False,
        "routed experts, a gated shared expert" + (", biases on query, key and value" if qkv_bias else ""),
        shared_expert_gate=True,
        qkv_bias=qkv_bias,
        dense_layers=_qwen_dense_layers(fields),
    )


def _qwen3_moe(fields: Fields) -> str:
    """Qwen3-MoE: routed experts, no shared one, an RMSNorm over each query and key head."""
    sizes(
        fields,
        {"vocab_size": 151_936, "hidden_size": 2048, "num_hidden_layers": 24}
        | {"num_attention_heads": 32, "intermediate_size": 6144, "num_key_value_heads": 4},
    )
    fields.head_width(None)
    fields.no_biases("dcsim's Qwen3-MoE attention has no biases", "attention_bias")
    _experts(fields, "num_experts", 128, 8, "moe_intermediate_size", 768)
    return _moe(
        fields, False, "routed experts, query and key norms", qk_norm=True, dense_layers=_qwen_dense_layers(fields)
    )


def _deepseek(fields: Fields, *, v3: bool) -> str:
    """DeepSeek-V2 and V3: latent attention, routed and shared experts, the first
    ``first_k_dense_replace`` blocks dense; V3's router has a score-correction bias (a buffer)."""
    defaults = (
        {"vocab_size": 129_280, "hidden_size": 7168, "num_hidden_layers": 61}
        | {"num_attention_heads": 128, "intermediate_size": 18_432, "num_key_value_heads": 128}
        if v3
        else {"vocab_size": 102_400, "hidden_size": 4096, "num_hidden_layers": 32}
        | {"num_attention_heads": 32, "intermediate_size": 11_008, "num_key_value_heads": 32}
    )
    sizes(fields, defaults)
    # DeepSeek-V2's MLPs read mlp_bias; V3's class ignores it.
    biases = ("attention_bias",) if v3 else ("attention_bias", "mlp_bias")
    fields.no_biases("dcsim's DeepSeek blocks have no biases on their projections", *biases)
    if "q_lora_rank" in fields.data and fields.data["q_lora_rank"] is None:  # a direct query projection
        fields.set(q_lora_rank=0)
    else:
        fields.take("q_lora_rank", "q_lora_rank", 1536)
    fields.take("kv_lora_rank", "kv_lora_rank", 512)
    fields.take("qk_nope_head_dim", "qk_nope_head_dim", 128)
    fields.take("qk_rope_head_dim", "qk_rope_head_dim", 64)
    fields.take("v_head_dim", "v_head_dim", 128)
    experts = fields.take("num_experts", "n_routed_experts", 256 if v3 else 64)
    top_k = fields.data.get("num_experts_per_tok", 8 if v3 else None)
    if top_k is None:
        fields.note("num_experts_per_tok is unset: the active count assumes 1 routed expert a token")
        fields.set(experts_per_token=1)
    else:
        fields.take("experts_per_token", "num_experts_per_tok", top_k)
    expert_ffn = fields.take("expert_ffn_dim", "moe_intermediate_size", 2048 if v3 else 1407)
    shared = as_int(_field(fields, "n_shared_experts", 1 if v3 else 2), "n_shared_experts", minimum=0, maximum=experts)
    fields.set(shared_ffn_dim=shared * expert_ffn)
    fields.source["shared_ffn_dim"] = "n_shared_experts x moe_intermediate_size"
    layers = fields.hparams["num_layers"]
    first = as_int(
        _field(fields, "first_k_dense_replace", 3 if v3 else 0), "first_k_dense_replace", minimum=0, maximum=layers
    )
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
    return _moe(
        fields,
        False,
        "latent attention, routed and shared experts"
        + (f", the first {first} dense" if first else "")
        + ("; the router's score-correction bias is a buffer, not a parameter" if v3 else ""),
        attention="mla",
        router_bias=v3,
        dense_layers=tuple(range(first)),
    )


READERS: Mapping[str, tuple[str, str, Callable[[Fields], str]]] = {
    "mixtral": ("moe", "MixtralForCausalLM", _mixtral),
    "qwen2_moe": ("moe", "Qwen2MoeForCausalLM", _qwen2_moe),
    "qwen3_moe": ("moe", "Qwen3MoeForCausalLM", _qwen3_moe),
    "deepseek_v2": ("moe", "DeepseekV2ForCausalLM", lambda fields: _deepseek(fields, v3=False)),
    "deepseek_v3": ("moe", "DeepseekV3ForCausalLM", lambda fields: _deepseek(fields, v3=True)),
}
