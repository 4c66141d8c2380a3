"""The ``multimodal`` family: a vision-language model as transformers builds LLaVA, Gemma 3, Mistral 3
and Qwen2.5-VL, three modules side by side: ``vision_tower``, ``projector`` and ``language_model``.

The language model is dcsim's ``Decoder`` (``dcsim.model.families`` builds it from the family's
decoder hyperparameters and hands it in, so this module needs no import of the families); the tower's
blocks are ``dcsim.model.layers.TransformerBlock`` and CLIP's and SigLIP's inputs
``dcsim.model.vision.PatchEmbeddings``. Where the image features go into the token sequence (a
placeholder token's rows) holds no parameters and is not modelled: the projector's output is
returned beside the logits. Nor are the parameter-free parts: rotary positions (Pixtral's 2D, Qwen's
window attention), Gemma 3's average pooling to ``mm_tokens_per_image``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.layers import Attention, FeedForward, TransformerBlock
from dcsim.model.vision import PatchEmbeddings
from dcsim.model.zoo.schemas import VISION_NAMES

IMAGE_CHANNELS = 3
TOWER_PARENT = "vision_tower"
TEXT_PARENT = "language_model"


class PoolingHead(nn.Module):
    """SigLIP's attention-pooling head: a learned ``probe`` attends over the patches (``attn``, with
    biases), then ``norm`` and a GELU ``mlp`` with a residual."""

    num_heads: int
    ffn_dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        probe = self.param("probe", nn.initializers.normal(0.02), (1, 1, width))
        query = jnp.broadcast_to(probe, (x.shape[0], 1, width))
        y = Attention(self.num_heads, self.num_heads, use_bias=True, cross=True, name="attn")(query, x)
        return y + FeedForward(self.ffn_dim, name="mlp")(nn.LayerNorm(name="norm")(y))


class VisionTower(nn.Module):
    """The image encoder, by ``vision_tower``:

    - ``clip``: ``embed`` (a patch convolution without bias, a class token, a position table),
      ``pre_norm``, LayerNorm blocks with biases and a GELU MLP, ``post_norm`` (CLIPVisionModel);
    - ``siglip``: ``embed`` without class token, the convolution with a bias, blocks as CLIP's,
      ``post_norm`` and, with ``vision_head``, the attention-pooling ``head`` (SiglipVisionModel);
    - ``pixtral``: ``patch`` (no bias), ``pre_norm`` (RMSNorm), RMSNorm blocks without biases and a
      gated MLP (PixtralVisionModel);
    - ``qwen2_5_vl``: ``patch``, a 3D convolution over ``temporal_patch_size`` frames (no bias),
      RMSNorm blocks with biases on attention and the gated MLP.
    """

    h: Mapping[str, Any]

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        h = self.h
        tower, width, patch = h["vision_tower"], h["vision_d_model"], h["patch_size"]
        if tower in ("clip", "siglip"):
            x = PatchEmbeddings(patch, width, use_bias=tower == "siglip", class_token=tower == "clip", name="embed")(
                images
            )
        else:
            kernel = (h["temporal_patch_size"], patch, patch) if tower == "qwen2_5_vl" else (patch, patch)
            x = nn.Conv(width, kernel, strides=kernel, padding="VALID", use_bias=False, name="patch")(images)
            x = x.reshape(x.shape[0], -1, width)
        if tower == "clip":
            x = nn.LayerNorm(name="pre_norm")(x)
        elif tower == "pixtral":
            x = nn.RMSNorm(name="pre_norm")(x)
        gated = tower in ("pixtral", "qwen2_5_vl")
        for index in range(h["vision_layers"]):
            x = TransformerBlock(
                h["vision_heads"],
                h["vision_heads"],
                h["vision_ffn_dim"],
                use_bias=tower != "pixtral",
                norm="rmsnorm" if gated else "layernorm",
                gated_mlp=gated,
                name=f"block_{index}",
            )(x)
        if tower in ("clip", "siglip"):
            x = nn.LayerNorm(name="post_norm")(x)
        if tower == "siglip" and h["vision_head"]:
            PoolingHead(h["vision_heads"], h["vision_ffn_dim"], name="head")(x)  # pooled; the projector reads patches
        return x


def _merged(x: jax.Array, merge_size: int) -> jax.Array:
    """Each ``merge_size`` x ``merge_size`` patches as one, their features side by side."""
    return x.reshape(x.shape[0], -1, merge_size * merge_size * x.shape[-1])


class Projector(nn.Module):
    """The image features into the language model's width, by ``projector``:

    - ``mlp``: ``linear_1`` (the vision width times ``feature_layers``) and ``linear_2``, GELU between
      (LLaVA's multi_modal_projector);
    - ``merger_mlp``: ``norm`` (RMSNorm), ``merger`` over ``merge_size``-square patches (no bias),
      then ``mlp``'s two layers (Mistral 3);
    - ``soft_embedding``: ``norm`` (RMSNorm) and ``projection`` without bias (Gemma 3);
    - ``qwen_merger``: ``norm`` (RMSNorm), merged patches through ``linear_1`` and ``linear_2`` with
      biases (Qwen2.5-VL's ``visual.merger``, counted here as the projector it is).
    """

    h: Mapping[str, Any]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.h
        kind, width = h["projector"], x.shape[-1]
        out = h["projector_out"] or h["d_model"]
        x = nn.RMSNorm(name="norm")(x) if kind != "mlp" else x
        if kind == "soft_embedding":
            return nn.Dense(out, use_bias=False, name="projection")(x)
        if kind == "qwen_merger":
            x = _merged(x, h["merge_size"])
            x = nn.gelu(nn.Dense(x.shape[-1], name="linear_1")(x))
            return nn.Dense(out, name="linear_2")(x)
        if kind == "merger_mlp":
            x = nn.Dense(width, use_bias=False, name="merger")(_merged(x, h["merge_size"]))
        # The outputs of ``feature_layers`` vision layers, side by side; which ones changes no count.
        x = jnp.concatenate([x] * h["feature_layers"], axis=-1)
        x = nn.gelu(nn.Dense(out, use_bias=h["projector_bias"], name="linear_1")(x))
        return nn.Dense(out, use_bias=h["projector_bias"], name="linear_2")(x)


class VisionLanguageModel(nn.Module):
    """``vision_tower``, ``projector`` and ``language_model`` (a decoder, built by the caller). In
    decode mode the image runs only while initialising: a step reads the language model's cache."""

    h: Mapping[str, Any]
    language_model: nn.Module

    @nn.compact
    def __call__(self, images: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        soft_tokens = None
        if getattr(self.language_model, "decode", None) is None or self.is_initializing():
            soft_tokens = Projector(self.h, name="projector")(VisionTower(self.h, name=TOWER_PARENT)(images))
        return self.language_model(tokens), soft_tokens


def text_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's hyperparameters: the decoder family's, out of the multimodal family's."""
    return {name: value for name, value in hparams.items() if name not in VISION_NAMES}


def image_input(hparams: Mapping[str, Any], batch_size: int) -> jax.ShapeDtypeStruct:
    """The images the tower initialises on: CLIP's and SigLIP's at ``image_size`` (their position
    tables are that long); Pixtral's and Qwen's, which take any size, one merged patch square."""
    tower, patch = hparams["vision_tower"], hparams["patch_size"]
    if tower in ("clip", "siglip"):
        side = hparams["image_size"]
        return jax.ShapeDtypeStruct((batch_size, side, side, IMAGE_CHANNELS), jnp.float32)
    side = patch * hparams["merge_size"]
    frames = (hparams["temporal_patch_size"],) if tower == "qwen2_5_vl" else ()
    return jax.ShapeDtypeStruct((batch_size, *frames, side, side, IMAGE_CHANNELS), jnp.float32)
