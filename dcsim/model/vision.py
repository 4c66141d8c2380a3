"""The vision families as real ``flax.linen`` modules: the Vision Transformer and ResNet.

See ``dcsim.model.families`` for how families are built and counted; the paths read like the
architecture (``embed/patch``, ``block_3/attn/query``, ``stage_2/block_1/conv_1``).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.layers import TransformerBlock


class PatchEmbeddings(nn.Module):
    """ViT's input: a ``patch`` convolution (stride = patch size), a ``cls_token`` and a learned
    ``position`` table over the patches plus the class token. CLIP's convolution has no bias
    (``use_bias``); SigLIP has no class token (``class_token``)."""

    patch_size: int
    d_model: int
    use_bias: bool = True
    class_token: bool = True

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        size = (self.patch_size, self.patch_size)
        x = nn.Conv(self.d_model, size, strides=size, padding="VALID", use_bias=self.use_bias, name="patch")(images)
        x = x.reshape(x.shape[0], -1, self.d_model)
        if self.class_token:
            cls_token = self.param("cls_token", nn.initializers.zeros, (1, 1, self.d_model))
            x = jnp.concatenate([jnp.broadcast_to(cls_token, (x.shape[0], 1, self.d_model)), x], axis=1)
        position = self.param("position", nn.initializers.normal(0.02), (1, x.shape[1], self.d_model))
        return x + position


class VisionTransformer(nn.Module):
    """ViT: patch embeddings, pre-norm ``block_i``, ``final_norm`` and a ``head`` on the class token."""

    image_size: int
    patch_size: int
    d_model: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    num_classes: int
    use_bias: bool = True

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x = PatchEmbeddings(self.patch_size, self.d_model, name="embed")(images)
        for index in range(self.num_layers):
            x = TransformerBlock(
                self.num_heads, self.num_heads, self.ffn_dim, use_bias=self.use_bias, name=f"block_{index}"
            )(x)
        x = nn.LayerNorm(name="final_norm")(x)
        return nn.Dense(self.num_classes, name="head")(x[:, 0])


class ResidualBlock(nn.Module):
    """A ResNet block: basic (two 3x3 convolutions) or bottleneck (1x1, 3x3, 1x1 at 4x width),
    BatchNorm after each convolution, and a projection shortcut (``shortcut_conv``,
    ``shortcut_norm``) where the shape changes. The stride sits on the 3x3 convolution (v1.5)."""

    features: int
    strides: int = 1
    bottleneck: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        def conv(features: int, size: int, strides: int, name: str) -> nn.Module:
            return nn.Conv(features, (size, size), strides=strides, use_bias=False, name=name)

        def norm(name: str) -> nn.Module:
            return nn.BatchNorm(use_running_average=not train, name=name)

        shapes: tuple[tuple[int, int, int], ...]
        if self.bottleneck:
            shapes = ((self.features, 1, 1), (self.features, 3, self.strides), (4 * self.features, 1, 1))
        else:
            shapes = ((self.features, 3, self.strides), (self.features, 3, 1))
        y = x
        for index, (features, size, strides) in enumerate(shapes):
            y = norm(f"norm_{index}")(conv(features, size, strides, f"conv_{index}")(y))
            if index < len(shapes) - 1:
                y = nn.relu(y)
        out_features = shapes[-1][0]
        if self.strides != 1 or x.shape[-1] != out_features:
            x = norm("shortcut_norm")(conv(out_features, 1, self.strides, "shortcut_conv")(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    """ResNet: a ``stem`` (7x7/2 convolution, BatchNorm, 3x3/2 max pool), ``stage_s/block_b``
    residual blocks at 64, 128, 256, ... channels, global average pooling and a ``head``. BatchNorm
    running statistics land in ``batch_stats``: variables, never parameters."""

    stage_blocks: tuple[int, ...]
    bottleneck: bool = True
    num_classes: int = 1000

    @nn.compact
    def __call__(self, images: jax.Array, train: bool = False) -> jax.Array:
        x = Stem(name="stem")(images, train)
        for stage, blocks in enumerate(self.stage_blocks):
            x = Stage(64 * 2**stage, blocks, 2 if stage else 1, self.bottleneck, name=f"stage_{stage}")(x, train)
        return nn.Dense(self.num_classes, name="head")(jnp.mean(x, axis=(1, 2)))


class Stage(nn.Module):
    """``block_b`` residual blocks of one width; the first one may downsample."""

    features: int
    num_blocks: int
    strides: int
    bottleneck: bool

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        for index in range(self.num_blocks):
            strides = self.strides if index == 0 else 1
            x = ResidualBlock(self.features, strides, self.bottleneck, name=f"block_{index}")(x, train)
        return x


class Stem(nn.Module):
    """ResNet's stem: ``conv`` (7x7, stride 2, 64 channels, no bias), ``norm``, ReLU, max pool."""

    @nn.compact
    def __call__(self, images: jax.Array, train: bool = False) -> jax.Array:
        x = nn.Conv(64, (7, 7), strides=2, use_bias=False, name="conv")(images)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, name="norm")(x))
        return nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
