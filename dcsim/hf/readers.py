"""How each Hugging Face ``model_type`` is read: its config.json's fields, under the file's own
names, as a dcsim family's hyperparameters.

A reader takes the fields that change the parameter count, each checked against the dcsim
hyperparameter's range under the file's name (``hidden_size``, not ``d_model``). An absent or null
field takes the default of transformers' own configuration class for that model_type, so a reader
counts what ``AutoModel.from_config`` would build. A field that changes transformers' count and that
no family builds (biases where the family has none, cross-attention, ...) is refused by name; a
field transformers' class ignores (DeepSeek-V3's ``num_nextn_predict_layers``) is noted. Fields that
change no count (dropouts, activations, rotary settings, token ids) are not read.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

from dcsim.hf.experts import READERS as EXPERT_READERS
from dcsim.hf.fields import Fields, lm_head, rotary_decoder, sizes
from dcsim.inputs import as_int, json_kind, show
from dcsim.model import schemas

_ONE_BIAS = "dcsim's decoder has biases on every projection or on none"


def _no_cross_attention(fields: Fields) -> None:
    fields.require("add_cross_attention", False, False, "cross-attention adds weights to every block")


def _gpt2(fields: Fields) -> str:
    _no_cross_attention(fields)
    fields.take("vocab_size", "vocab_size")
    d_model = fields.take("d_model", "n_embd")
    fields.take("num_layers", "n_layer")
    fields.take("num_kv_heads", "n_head")
    fields.take("num_heads", "n_head")
    fields.take("ffn_dim", "n_inner", 4 * d_model)
    fields.take("max_positions", "n_positions")
    tied = fields.flag("tie_word_embeddings", True)
    fields.set(tied_embeddings=tied)
    return f"embeddings, blocks, final norm, {lm_head(tied)}"


def _gpt_neox(fields: Fields) -> str:
    fields.require("attention_bias", True, True, f"{_ONE_BIAS}, and GPT-NeoX's MLP always has them")
    _decoder_dims(fields)
    fields.take("num_kv_heads", "num_attention_heads")
    return rotary_decoder(fields, False, use_bias=True, norm="layernorm", gated_mlp=False)


def _transformer_dims(fields: Fields) -> None:
    """The widths and depth under the names every model type but GPT-2 uses."""
    fields.take("d_model", "hidden_size")
    fields.take("num_layers", "num_hidden_layers")
    fields.take("num_heads", "num_attention_heads")
    fields.take("ffn_dim", "intermediate_size")


def _decoder_dims(fields: Fields) -> None:
    fields.take("vocab_size", "vocab_size")
    _transformer_dims(fields)
    positions = fields.data.get("max_position_embeddings")
    # Rotary positions: the length changes no count, and may pass the learned table's cap.
    if isinstance(positions, int) and not isinstance(positions, bool) and 1 <= positions <= schemas.MAX_VOCAB:
        fields.take("max_positions", "max_position_embeddings")


def _llama(fields: Fields, *, tied_by_default: bool = False) -> str:
    """Llama, Mistral and Gemma: RMSNorm, a gated MLP, rotary positions, grouped KV heads."""
    _decoder_dims(fields)
    fields.head_width(None)
    fields.take("num_kv_heads", "num_key_value_heads", fields.hparams["num_heads"])
    attention_bias, mlp_bias = fields.flag("attention_bias", False), fields.flag("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise ValueError(
            f"`attention_bias` is {str(attention_bias).lower()} and `mlp_bias` is {str(mlp_bias).lower()}; {_ONE_BIAS}"
        )
    return rotary_decoder(fields, tied_by_default, use_bias=attention_bias)


def _qwen2(fields: Fields) -> str:
    """Qwen2 is Llama with biases on query, key and value only (transformers hard-codes them)."""
    _decoder_dims(fields)
    fields.head_width(None)
    fields.take("num_kv_heads", "num_key_value_heads", fields.hparams["num_heads"])
    tied = fields.flag("tie_word_embeddings", False)
    fields.set(
        position_embedding="none", tied_embeddings=tied, use_bias=False, qkv_bias=True, norm="rmsnorm", gated_mlp=True
    )
    return (
        f"embeddings, blocks (biases on query, key and value only), final norm, {lm_head(tied)}; "
        "rotary positions hold no parameters"
    )


_NO_PROJECTION_BIASES = "dcsim's {family} blocks have no biases on the attention projections"


def _qwen3(fields: Fields) -> str:
    """Qwen3: Llama with an RMSNorm over each query and key head, heads 128 wide by default."""
    sizes(
        fields,
        {"vocab_size": 151_936, "hidden_size": 4096, "num_hidden_layers": 32}
        | {"num_attention_heads": 32, "intermediate_size": 22_016, "num_key_value_heads": 32},
    )
    fields.head_width(128)
    fields.no_biases(_NO_PROJECTION_BIASES.format(family="Qwen3"), "attention_bias")
    return rotary_decoder(fields, False, qk_norm=True)


def _gemma2(fields: Fields, *, qk_norm: bool = False, vocab: int = 256_000) -> str:
    """Gemma 2 (and 3, with ``qk_norm``): four norms a block, heads 256 wide, tied by default."""
    sizes(
        fields,
        {"vocab_size": vocab, "hidden_size": 2304, "num_hidden_layers": 26}
        | {"num_attention_heads": 8, "intermediate_size": 9216, "num_key_value_heads": 4},
    )
    fields.head_width(256)
    fields.no_biases(_NO_PROJECTION_BIASES.format(family="Gemma"), "attention_bias")
    return rotary_decoder(fields, True, post_norms=True, qk_norm=qk_norm)


def _phi3(fields: Fields) -> str:
    """Phi-3: one qkv projection and one gate_up projection a block, no biases, untied."""
    sizes(
        fields,
        {"vocab_size": 32_064, "hidden_size": 3072, "num_hidden_layers": 32}
        | {"num_attention_heads": 32, "intermediate_size": 8192, "num_key_value_heads": 0},
    )
    fields.head_width(None)
    return rotary_decoder(fields, False, fused_projections=True)


_T5_PROJECTIONS = re.compile(r"(gated-)?[a-z_]{1,32}")


def _t5(fields: Fields) -> str:
    """T5 (v1.0, v1.1, Flan-T5): transformers' T5ForConditionalGeneration."""
    fields.take("vocab_size", "vocab_size", 32_128)
    fields.take("d_model", "d_model", 512)
    fields.take("head_dim", "d_kv", 64)
    fields.take("ffn_dim", "d_ff", 2048)
    layers = fields.take("num_layers", "num_layers", 6)
    fields.take("num_decoder_layers", "num_decoder_layers", layers)
    fields.take("num_heads", "num_heads", 8)
    fields.take("relative_buckets", "relative_attention_num_buckets", 32)
    projection = fields.data.get("feed_forward_proj", "relu")
    if not isinstance(projection, str) or not _T5_PROJECTIONS.fullmatch(projection):
        raise ValueError(
            f"`feed_forward_proj` must be an activation such as relu, or gated- and one such as gated-gelu; "
            f"got {show(projection)}"
        )
    tied = fields.flag("tie_word_embeddings", True)
    fields.set(gated_mlp=projection.startswith("gated-"), tied_embeddings=tied)
    if not tied:
        fields.note(
            "tie_word_embeddings is false, so lm_head is counted apart, as the published checkpoint stores it; "
            "transformers 5 ties T5's head to the shared table whatever the file says, and counts vocab x d_model fewer"
        )
    return "shared embedding, encoder and decoder stacks (relative position bias in each first block), " + lm_head(
        tied
    ).replace("token embedding", "shared embedding")


def _bert(fields: Fields) -> str:
    _no_cross_attention(fields)
    fields.require("position_embedding_type", "absolute", "absolute", "relative position types add a distance table")
    fields.take("vocab_size", "vocab_size")
    _transformer_dims(fields)
    fields.take("max_positions", "max_position_embeddings")
    fields.take("type_vocab_size", "type_vocab_size", 2)
    return "embeddings, encoder and pooler; task heads (masked LM, classifiers) are not counted"


def _vit(fields: Fields) -> str:
    fields.require("num_channels", 3, 3, "the patch convolution is counted on 3-channel images")
    fields.require("qkv_bias", True, True, "dcsim's ViT has biases on every projection")
    fields.take("image_size", "image_size")
    fields.take("patch_size", "patch_size")
    _transformer_dims(fields)
    labels = fields.data.get("id2label")
    if labels is None:
        classes = fields.take("num_classes", "num_labels", 2)
    elif not isinstance(labels, dict) or not labels:
        raise TypeError(f"`id2label` must be a JSON object naming the labels, got {json_kind(labels)}")
    else:
        classes = as_int(len(labels), "id2label's number of labels", maximum=schemas.MAX_VOCAB)
        fields.set(num_classes=classes)
        fields.source["num_classes"] = "id2label"
    return f"patch embedding, encoder, final norm, a classifier over {classes:,} labels"


# model_type -> (the family that builds it, what transformers calls the model, the reader)
READERS: Mapping[str, tuple[str, str, Callable[[Fields], str]]] = {
    "gpt2": ("decoder", "GPT2LMHeadModel", _gpt2),
    "gpt_neox": ("decoder", "GPTNeoXForCausalLM", _gpt_neox),
    "llama": ("decoder", "LlamaForCausalLM", _llama),
    "mistral": ("decoder", "MistralForCausalLM", _llama),
    "gemma": ("decoder", "GemmaForCausalLM", functools.partial(_llama, tied_by_default=True)),
    "qwen2": ("decoder", "Qwen2ForCausalLM", _qwen2),
    "qwen3": ("decoder", "Qwen3ForCausalLM", _qwen3),
    "gemma2": ("decoder", "Gemma2ForCausalLM", _gemma2),
    "gemma3_text": ("decoder", "Gemma3ForCausalLM", functools.partial(_gemma2, qk_norm=True, vocab=262_208)),
    "phi3": ("decoder", "Phi3ForCausalLM", _phi3),
    **EXPERT_READERS,
    "t5": ("t5", "T5ForConditionalGeneration", _t5),
    "bert": ("bert", "BertModel", _bert),
    "vit": ("vit", "ViTForImageClassification", _vit),
}
MODEL_TYPES = tuple(READERS)
