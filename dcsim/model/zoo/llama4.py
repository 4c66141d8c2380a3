"""The ``llama4`` family: Llama 4 (Scout, Maverick) as its Hub files build it,
``Llama4ForConditionalGeneration``: a vision tower, the pixel-shuffle adapter, a projector, and the
language model.

The language model is ``dcsim.model.decoders.MoEDecoder`` itself (its paths at the top level), so its
paths, its stacked ``experts``, its active count and its expert layouts are the moe family's:
Llama 4's dense blocks are ``dense_layers`` (every block not in transformers' ``moe_layers``), the
shared expert is ``shared_ffn_dim`` without a gate, the router has no bias. Chunked attention,
NoPE blocks and the query/key L2 norm hold no parameters, so they are not built. The vision tower
reads like transformers' ``Llama4VisionModel``: ``vision_tower/patch`` (the unfold and linear
without bias, as one convolution: the same kernel), ``class_embedding``, ``position_embedding``
(a row a patch and one for the class token), ``pre_norm``, ``block_i`` (LayerNorms, attention and
MLP with biases; its 2D rotary holds no parameters), ``post_norm`` and ``adapter/fc1``, ``fc2``;
then ``projector`` (no bias).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.layers import TransformerBlock
from dcsim.model.zoo.schemas import LLAMA4_VISION

VISION = tuple(spec.name for spec in LLAMA4_VISION)


def fitted(x: jax.Array, width: int) -> jax.Array:
    """``x`` as the input of a linear layer that transformers sizes from the config, ``width``
    features wide. In every published Llama 4 the widths agree (the adapter's fc1 reads the
    pixel-shuffled patches, 4 x 1,408 = 5,632); ``Llama4VisionConfig()``'s defaults build an fc1
    no image reaches (768-wide patches, 5,632 inputs), and it is counted as built."""
    return x if x.shape[-1] == width else jnp.zeros((*x.shape[:-1], width), x.dtype)


def pixel_shuffle(x: jax.Array) -> jax.Array:
    """Llama 4's pixel shuffle at its ratio of 0.5: each 2 x 2 patches become one token, 4 x as wide."""
    batch, patches, width = x.shape
    side = int(patches**0.5)
    x = x.reshape(batch, side // 2, 2, side // 2, 2, width).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(batch, -1, 4 * width)


class VisionTower(nn.Module):
    """``Llama4VisionModel``: patches, class token and positions, ``pre_norm``, ``block_i``,
    ``post_norm``, then the adapter (``adapter/fc1`` and ``fc2``, GELU, no biases) on the
    pixel-shuffled patches (the class token dropped)."""

    h: Mapping[str, Any]

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        h = self.h
        width, size = h["vision_d_model"], (h["patch_size"], h["patch_size"])
        x = nn.Conv(width, size, strides=size, padding="VALID", use_bias=False, name="patch")(images)
        x = x.reshape(x.shape[0], -1, width)
        cls = self.param("class_embedding", nn.initializers.normal(width**-0.5), (width,))
        x = jnp.concatenate([x, jnp.broadcast_to(cls, (x.shape[0], 1, width))], axis=1)
        x = x + self.param("position_embedding", nn.initializers.normal(width**-0.5), x.shape[1:])
        x = nn.LayerNorm(name="pre_norm")(x)
        for index in h.get("built_vision_layers") or range(h["vision_layers"]):
            x = TransformerBlock(h["vision_heads"], h["vision_heads"], h["vision_ffn_dim"], name=f"block_{index}")(x)
        x = nn.LayerNorm(name="post_norm")(x)[:, :-1]
        x = fitted(pixel_shuffle(x) if int(x.shape[1] ** 0.5) % 2 == 0 else x, h["vision_ffn_dim"])
        x = nn.gelu(nn.Dense(h["projector_input_dim"], use_bias=False, name="adapter_fc1")(x))
        out = h["projector_output_dim"]
        return nn.gelu(nn.Dense(out, use_bias=False, name="adapter_fc2")(fitted(x, out)))


class Llama4Model(nn.Module):
    """``Llama4ForConditionalGeneration``: ``vision_tower``, ``projector`` (vision_output_dim ->
    d_model, no bias), then ``text``, the language model (the moe family's ``MoEDecoder``), sharing
    this module's scope so that its paths stay at the top level (``embed``, ``block_i``,
    ``final_norm``, ``lm_head``) as the moe family names them. The image features would replace the
    image tokens' embeddings; that changes no count, so the two run side by side. ``vision`` holds
    the vision hyperparameters (``VISION``)."""

    text: nn.Module
    vision: Mapping[str, Any]

    def setup(self) -> None:
        nn.share_scope(self, self.text)
        self.vision_tower = VisionTower(self.vision)
        self.projector = nn.Dense(self.text.d_model, use_bias=False)  # type: ignore[attr-defined]

    def __call__(self, tokens: jax.Array, images: jax.Array) -> tuple[jax.Array, jax.Array]:
        features = self.projector(fitted(self.vision_tower(images), self.vision["vision_output_dim"]))
        return self.text(tokens), features


def build(
    decoder: Callable[..., nn.Module], hparams: Mapping[str, Any], batch_size: int
) -> tuple[nn.Module, tuple[jax.ShapeDtypeStruct, ...]]:
    """The llama4 family's module, its language model built by ``decoder`` (``MoEDecoder``) from the
    moe family's hyperparameters, and its inputs: 8 tokens and one image of ``image_size`` pixels."""
    vision = {name: hparams[name] for name in (*VISION, "built_vision_layers") if name in hparams}
    text = {name: value for name, value in hparams.items() if name not in vision}
    tokens = jax.ShapeDtypeStruct((batch_size, 8), jnp.int32)
    side, channels = vision["image_size"], vision["num_channels"]
    images = jax.ShapeDtypeStruct((batch_size, side, side, channels), jnp.float32)
    return Llama4Model(decoder(**text), vision), (tokens, images)
