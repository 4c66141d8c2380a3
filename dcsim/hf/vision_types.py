"""The entries of ``dcsim.hf.table`` for vision-language models (issue 30): ``VISION_LANGUAGE``, a
vision tower and a projector read from ``vision_config`` by an entry of ``TOWERS``, a language model
read from ``text_config`` by its own type's entry (``dcsim.hf.multimodal`` reads them). Pure data,
no JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim.hf.kinds import WIDTH_KEYS, headless
from dcsim.hf.language import Flag, ModelType, Nested, Only, Size

CHANNELS = Only("num_channels", 3, 3, "the patch convolution is counted on 3-channel images")
_VISION = "multimodal"
_VLM_COUNTED = "the vision tower ({vision}), the projector ({projector}) and the language model ({text}), {head}"


def _vision_sizes(
    hidden: int,
    layers: int,
    heads: int,
    ffn: int,
    patch: int,
    keys: tuple[str, ...] = WIDTH_KEYS,
) -> tuple[Size, ...]:
    """A vision config's widths (under ``keys``: by default as ``widths`` names them) at these
    defaults, as the tower's, and its patch size."""
    names = ("vision_d_model", "vision_layers", "vision_heads", "vision_ffn_dim")
    sizes = (
        Size(name, key, default) for name, key, default in zip(names, keys, (hidden, layers, heads, ffn), strict=True)
    )
    return (*sizes, Size("patch_size", "patch_size", patch))


def _tower(model_class: str, name: str, sizes: tuple[Size, ...], counted: str, **more: Any) -> ModelType:
    """A vision_config's entry: the tower ``name`` of the multimodal family, on 3-channel images."""
    more.setdefault("rules", (CHANNELS,))
    fixed = {"vision_tower": name} | more.pop("fixed", {})
    return headless(_VISION, model_class, sizes, counted, fixed=fixed, **more)


def _vision_language(model_class: str, nested: Nested, projector: str | None, **more: Any) -> ModelType:
    """A vision-language model's entry: its parts read by the ``vision_language`` quirk."""
    return headless(
        _VISION,
        model_class,
        more.pop("sizes", ()),
        _VLM_COUNTED + more.pop("aside", ""),
        fixed={"projector": projector} if projector else {},
        quirks=("vision_language",),
        nested=nested,
        **more,
    )


_LLAVA_CLIP = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16}
_LLAVA_CLIP |= {"image_size": 336, "patch_size": 14}
_MISTRAL_SMALL: dict[str, int | None] = {
    "hidden_size": 5120,
    "intermediate_size": 32_768,
    "num_hidden_layers": 40,
    "head_dim": 128,
}
_MISTRAL_SMALL |= {"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 131_072}
_MISTRAL_SMALL |= {"max_position_embeddings": 131_072, "sliding_window": None}
_PIXTRAL = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16}
_PIXTRAL |= {"image_size": 1540, "patch_size": 14}
_QWEN25_VL = Nested(text_type="qwen2_5_vl_text", vision_type="qwen2_5_vl_vision", text_auto=False, vision_auto=False)
_QWEN25_VL = dataclasses.replace(_QWEN25_VL, top_level_text=True, tied=False, tie_from_text=True)
VISION_LANGUAGE: Mapping[str, ModelType] = MappingProxyType(
    {
        "llava": _vision_language(
            "LlavaForConditionalGeneration",
            Nested(
                text_type="llama", vision_type="clip_vision_model", vision=_LLAVA_CLIP, tied=False, tie_from_text=True
            ),
            "mlp",
            flags=(Flag("multimodal_projector_bias", True, ("projector_bias",)),),
        ),
        "gemma3": _vision_language(
            "Gemma3ForConditionalGeneration",
            Nested(text_type="gemma3_text", vision_type="siglip_vision_model", text_auto=False),
            "soft_embedding",
            aside="; the average pooling to mm_tokens_per_image holds no parameters",
        ),
        "mistral3": _vision_language(
            "Mistral3ForConditionalGeneration",
            Nested(text_type="mistral", vision_type="pixtral", text=_MISTRAL_SMALL, vision=_PIXTRAL),
            "merger_mlp",
            sizes=(Size("merge_size", "spatial_merge_size", 2),),
            flags=(Flag("multimodal_projector_bias", False, ("projector_bias",)),),
        ),
        "qwen2_5_vl": _vision_language(
            "Qwen2_5_VLForConditionalGeneration",
            _QWEN25_VL,
            None,
        ),
    }
)


# The towers' configurations, which a vision-language model nests and which are no model type of their own.
TOWERS: Mapping[str, ModelType] = MappingProxyType(
    {
        "clip_vision_model": _tower(
            "CLIPVisionModel",
            "clip",
            (*_vision_sizes(768, 12, 12, 3072, 32), Size("image_size", "image_size", 224)),
            "CLIP: patch convolution without bias, class token, position table, pre- and post-norm, blocks",
        ),
        "siglip_vision_model": _tower(
            "SiglipVisionModel",
            "siglip",
            (*_vision_sizes(768, 12, 12, 3072, 16), Size("image_size", "image_size", 224)),
            "SigLIP: patch convolution, position table, blocks, post-norm",
            flags=(Flag("vision_use_head", True, ("vision_head",)),),
        ),
        "pixtral": _tower(
            "PixtralVisionModel",
            "pixtral",
            _vision_sizes(1024, 24, 16, 4096, 16),
            "Pixtral: patch convolution without bias, RMSNorms, gated blocks without biases; 2D rotary positions "
            "hold no parameters",
        ),
        "qwen2_5_vl_vision": _tower(
            "Qwen2_5_VisionTransformerPretrainedModel",
            "qwen2_5_vl",
            (
                *_vision_sizes(3584, 32, 16, 3420, 14, keys=("hidden_size", "depth", "num_heads", "intermediate_size")),
                Size("temporal_patch_size", "temporal_patch_size", 2),
                Size("merge_size", "spatial_merge_size", 2),
                Size("projector_out", "out_hidden_size", 3584),
            ),
            "a 3D patch convolution without bias, RMSNorm blocks with biases and a gated MLP; window attention and "
            "rotary positions hold no parameters",
            fixed={"projector": "qwen_merger"},
            rules=(Only("in_channels", 3, 3, "the patch convolution is counted on 3-channel images"),),
        ),
    }
)
