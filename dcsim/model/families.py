"""Model families as real ``flax.linen`` modules, so presets are counted by initialising them.

Each family is what its papers describe, built from ``nn.Dense``, ``nn.DenseGeneral``, ``nn.Embed``,
``nn.Conv``, ``nn.LayerNorm``, ``nn.RMSNorm`` and ``nn.BatchNorm``; no formula stands in for a module.
Modules are named so that paths read like the architecture: ``embed/token``, ``block_3/attn/query``,
``block_3/mlp/gate``, ``final_norm``, ``lm_head``, ``stage_2/block_1/conv_1``.

Every ``__call__`` takes positional inputs only, with defaults for flags (``train=False``), because
``dcsim.model.modules.build`` returns ``(module, inputs)`` and everything initialises with
``module.init(key, *inputs)``.

Blocks are unrolled, one named submodule each (not ``nn.scan``): the variables tree is then exactly
the one a training script would checkpoint and shard, with one row per block. Tracing costs about
25 ms a block whatever its width, so counting (``dcsim.model.count.count_params``) traces each run of
identical blocks only up to its second block and repeats that block's rows, renamed, for the rest
(``traced_hparams``): exact by construction, because the blocks of a run are built from the same
hyperparameters, and checked against the full unrolled init by the tests.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model import schemas

# The sequence the transformers are initialised on. Its length changes no count; it only has to fit
# the learned position table.
INIT_SEQUENCE = 8
IMAGE_CHANNELS = 3


def _norm(kind: str, name: str) -> nn.Module:
    if kind == "rmsnorm":
        return nn.RMSNorm(name=name)
    return nn.LayerNorm(name=name)


class Attention(nn.Module):
    """Multi-head attention with grouped key/value heads (``num_kv_heads`` divides ``num_heads``).

    Built from ``nn.DenseGeneral`` because ``nn.MultiHeadDotProductAttention`` has no grouped KV
    heads: ``query`` is d_model -> (num_heads, head_dim), ``key``/``value`` are d_model ->
    (num_kv_heads, head_dim), ``out`` is (num_heads, head_dim) -> d_model.
    """

    num_heads: int
    num_kv_heads: int
    use_bias: bool = True
    causal: bool = False
    head_dim: int = 0  # 0: d_model / num_heads; Gemma's heads are wider (256 on d_model 3,072 with 16 heads)
    qkv_bias: bool = False  # biases on query, key and value even without use_bias (Qwen2)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d_model = x.shape[-1]
        head_dim = self.head_dim or d_model // self.num_heads
        qkv_bias = self.use_bias or self.qkv_bias
        query = nn.DenseGeneral((self.num_heads, head_dim), use_bias=qkv_bias, name="query")(x)
        key = nn.DenseGeneral((self.num_kv_heads, head_dim), use_bias=qkv_bias, name="key")(x)
        value = nn.DenseGeneral((self.num_kv_heads, head_dim), use_bias=qkv_bias, name="value")(x)
        groups = self.num_heads // self.num_kv_heads
        key, value = jnp.repeat(key, groups, axis=-2), jnp.repeat(value, groups, axis=-2)
        logits = jnp.einsum("...qhd,...khd->...hqk", query, key) / math.sqrt(head_dim)
        if self.causal:
            length = x.shape[-2]
            logits = jnp.where(jnp.tril(jnp.ones((length, length), bool)), logits, jnp.finfo(logits.dtype).min)
        mixed = jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(logits, axis=-1), value)
        return nn.DenseGeneral(d_model, axis=(-2, -1), use_bias=self.use_bias, name="out")(mixed)


class FeedForward(nn.Module):
    """The block's MLP: ``up`` and ``down`` with GELU, or gated (SwiGLU) with ``gate`` too."""

    ffn_dim: int
    gated: bool = False
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.gated:
            gate = nn.Dense(self.ffn_dim, use_bias=self.use_bias, name="gate")(x)
            hidden = nn.silu(gate) * nn.Dense(self.ffn_dim, use_bias=self.use_bias, name="up")(x)
        else:
            hidden = nn.gelu(nn.Dense(self.ffn_dim, use_bias=self.use_bias, name="up")(x))
        return nn.Dense(x.shape[-1], use_bias=self.use_bias, name="down")(hidden)


class TransformerBlock(nn.Module):
    """Attention and MLP with residuals; pre-norm (GPT-2, LLaMA, ViT) or post-norm (BERT)."""

    num_heads: int
    num_kv_heads: int
    ffn_dim: int
    use_bias: bool = True
    norm: str = "layernorm"
    gated_mlp: bool = False
    causal: bool = False
    post_norm: bool = False
    head_dim: int = 0
    qkv_bias: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        attn = Attention(
            self.num_heads, self.num_kv_heads, self.use_bias, self.causal, self.head_dim, self.qkv_bias, name="attn"
        )
        mlp = FeedForward(self.ffn_dim, self.gated_mlp, self.use_bias, name="mlp")
        if self.post_norm:
            x = _norm(self.norm, "attn_norm")(x + attn(x))
            return _norm(self.norm, "mlp_norm")(x + mlp(x))
        x = x + attn(_norm(self.norm, "attn_norm")(x))
        return x + mlp(_norm(self.norm, "mlp_norm")(x))


class TokenEmbeddings(nn.Module):
    """Token (and optionally position and token-type) tables: ``embed/token``, ``embed/position``,
    ``embed/token_type``; ``attend`` gives tied output logits."""

    vocab_size: int
    d_model: int
    max_positions: int | None = None
    type_vocab_size: int | None = None

    def setup(self) -> None:
        self.token = nn.Embed(self.vocab_size, self.d_model)
        if self.max_positions is not None:
            self.position = nn.Embed(self.max_positions, self.d_model)
        if self.type_vocab_size is not None:
            self.token_type = nn.Embed(self.type_vocab_size, self.d_model)

    def __call__(self, tokens: jax.Array, token_types: jax.Array | None = None) -> jax.Array:
        x = self.token(tokens)
        if self.max_positions is not None:
            x = x + self.position(jnp.arange(tokens.shape[-1]))
        if self.type_vocab_size is not None:
            x = x + self.token_type(token_types)
        return x

    def attend(self, x: jax.Array) -> jax.Array:
        return self.token.attend(x)


class Decoder(nn.Module):
    """Decoder-only transformer: embeddings, ``block_i`` (causal, pre-norm), ``final_norm``, then
    logits through the tied token table or an untied ``lm_head`` (no bias, as in GPT-2, LLaMA and
    GPT-NeoX)."""

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_dim: int
    max_positions: int
    position_embedding: str = "learned"
    tied_embeddings: bool = True
    use_bias: bool = True
    norm: str = "layernorm"
    gated_mlp: bool = False
    head_dim: int = 0
    qkv_bias: bool = False

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        positions = self.max_positions if self.position_embedding == "learned" else None
        embed = TokenEmbeddings(self.vocab_size, self.d_model, positions, name="embed")
        x = embed(tokens)
        for index in range(self.num_layers):
            x = TransformerBlock(
                self.num_heads,
                self.num_kv_heads,
                self.ffn_dim,
                self.use_bias,
                self.norm,
                self.gated_mlp,
                causal=True,
                head_dim=self.head_dim,
                qkv_bias=self.qkv_bias,
                name=f"block_{index}",
            )(x)
        x = _norm(self.norm, "final_norm")(x)
        if self.tied_embeddings:
            return embed.attend(x)
        return nn.Dense(self.vocab_size, use_bias=False, name="lm_head")(x)


class Bert(nn.Module):
    """BERT encoder: token, position and token-type tables with a LayerNorm (``embed/norm``),
    post-norm blocks, and the ``pooler`` (Dense + tanh on the first token). The pre-training heads
    (masked LM, next sentence) are not part of the published base counts, so they are left out."""

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    max_positions: int
    type_vocab_size: int = 2
    pooler: bool = True
    use_bias: bool = True

    @nn.compact
    def __call__(self, tokens: jax.Array, token_types: jax.Array) -> jax.Array:
        x = TokenEmbeddings(self.vocab_size, self.d_model, self.max_positions, self.type_vocab_size, name="embed")(
            tokens, token_types
        )
        x = nn.LayerNorm(name="embed_norm")(x)
        for index in range(self.num_layers):
            x = TransformerBlock(
                self.num_heads,
                self.num_heads,
                self.ffn_dim,
                self.use_bias,
                post_norm=True,
                name=f"block_{index}",
            )(x)
        if self.pooler:
            return jnp.tanh(nn.Dense(self.d_model, name="pooler")(x[..., 0, :]))
        return x


class PatchEmbeddings(nn.Module):
    """ViT's input: a ``patch`` convolution (stride = patch size), a ``cls_token`` and a learned
    ``position`` table over the patches plus the class token."""

    patch_size: int
    d_model: int

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        size = (self.patch_size, self.patch_size)
        x = nn.Conv(self.d_model, size, strides=size, padding="VALID", name="patch")(images)
        x = x.reshape(x.shape[0], -1, self.d_model)
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
            x = TransformerBlock(self.num_heads, self.num_heads, self.ffn_dim, self.use_bias, name=f"block_{index}")(x)
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


class MLP(nn.Module):
    """``hidden_i`` Dense layers with ReLU, then a ``head`` Dense over the classes."""

    hidden_dim: int
    num_layers: int
    num_classes: int
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for index in range(self.num_layers):
            x = nn.relu(nn.Dense(self.hidden_dim, use_bias=self.use_bias, name=f"hidden_{index}")(x))
        return nn.Dense(self.num_classes, use_bias=self.use_bias, name="head")(x)


def build_family(
    family: str, hparams: Mapping[str, Any], batch_size: int = 1
) -> tuple[nn.Module, tuple[jax.ShapeDtypeStruct, ...]]:
    """The module of ``family`` with ``hparams`` (already checked, see ``dcsim.model.presets.resolve``)
    and the abstract inputs it initialises on."""
    h = dict(hparams)
    tokens = jax.ShapeDtypeStruct((batch_size, min(INIT_SEQUENCE, h.get("max_positions", 1))), jnp.int32)
    if family == "mlp":
        module = MLP(h["hidden_dim"], h["num_layers"], h["num_classes"], h["use_bias"])
        return module, (jax.ShapeDtypeStruct((batch_size, h["input_dim"]), jnp.float32),)
    if family == "decoder":
        return Decoder(**h), (tokens,)
    if family == "bert":
        return Bert(**h), (tokens, tokens)
    if family == "vit":
        images = jax.ShapeDtypeStruct((batch_size, h["image_size"], h["image_size"], IMAGE_CHANNELS), jnp.float32)
        return VisionTransformer(**h), (images,)
    if family == "resnet":
        images = jax.ShapeDtypeStruct((batch_size, h["image_size"], h["image_size"], IMAGE_CHANNELS), jnp.float32)
        return ResNet(tuple(h["stage_blocks"]), h["bottleneck"], h["num_classes"]), (images,)
    raise ValueError(f"unknown family {family!r}; families: {', '.join(schemas.FAMILIES)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Repeat:
    """A run of identically built blocks ``{parent}/{prefix}0`` ... ``{prefix}{count - 1}``; from
    index 1 on they are the same module with the same input shape (block 0 may differ: a stage's
    first block downsamples, an MLP's first layer reads the input width)."""

    parent: str
    prefix: str
    count: int

    def path(self, index: int) -> str:
        return f"{self.parent}/{self.prefix}{index}" if self.parent else f"{self.prefix}{index}"


TRACED_PER_RUN = 2


def traced_hparams(family: str, hparams: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """``hparams`` with every run of identical blocks cut to its first ``TRACED_PER_RUN`` blocks,
    and the runs to expand back to full length (see ``dcsim.model.count.expand_repeats``)."""
    h = dict(hparams)
    if family == "resnet":
        runs = tuple(
            Repeat(parent=f"stage_{stage}", prefix="block_", count=blocks)
            for stage, blocks in enumerate(h["stage_blocks"])
        )
        h["stage_blocks"] = tuple(min(blocks, TRACED_PER_RUN) for blocks in h["stage_blocks"])
        return h, runs
    prefix = "hidden_" if family == "mlp" else "block_"
    runs = (Repeat(parent="", prefix=prefix, count=h["num_layers"]),)
    h["num_layers"] = min(h["num_layers"], TRACED_PER_RUN)
    return h, runs
