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
25 ms a block whatever its width, so counting (``dcsim.model.count.count_params``) traces each set of
blocks built alike (``Repeat``: a stack's blocks, or a Mixture-of-Experts model's dense blocks and
its MoE blocks, wherever they sit) only up to its second member and repeats that block's rows,
renamed, for the rest (``traced_hparams``): exact by construction, because the members of a set are
built from the same hyperparameters on the same input shape, and checked against the full unrolled
init by the tests. DeepSeek-V3's 61 blocks trace as four; so do 256 alternating ones.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model import registry, schemas
from dcsim.model.cache import Decode, step_positions
from dcsim.model.forward import Forward, block_class
from dcsim.model.layers import (
    Attention,
    BlockOptions,
    FeedForward,
    LatentAttention,
    TokenEmbeddings,
    TransformerBlock,
    norm,
    output_logits,
    sandwich,
)
from dcsim.model.moe import MixtureOfExperts
from dcsim.model.vision import ResNet, VisionTransformer
from dcsim.model.zoo import encdec, llama4, multimodal, ssm, variant
from dcsim.model.zoo import schemas as zoo_schemas

# The sequence the transformers are initialised on. Its length changes no count; it only has to fit
# the learned position table.
INIT_SEQUENCE = 8
IMAGE_CHANNELS = 3


class DecoderStack(nn.Module, kw_only=True):
    """What a decoder's blocks serve and trace with, beside the family's hyperparameters.

    ``sliding_window`` and ``local_layers``: the blocks whose attention sees only the last
    ``sliding_window`` tokens (Mistral, Gemma 2 and 3); they change no count, only what a block
    caches in decode mode (``decode``, see ``dcsim.model.cache.Decode``). ``rope_scaling`` changes
    no count either. ``built_layers`` (empty: all) builds only those blocks, under their own names:
    counting traces a few blocks of each kind and repeats their rows (see ``traced_hparams``).
    ``forward``: a training forward's attention and expert dispatch (see ``Forward``).
    """

    sliding_window: int = 0
    local_layers: tuple[int, ...] = ()
    rope_scaling: bool = False
    built_layers: tuple[int, ...] = ()
    decode: Decode | None = None
    forward: Forward | None = None

    def window_of(self, index: int) -> int:
        """The sliding window of block ``index`` (0: it attends to every token)."""
        return self.sliding_window if index in self.local_layers else 0


class Decoder(DecoderStack, BlockOptions):
    """Decoder-only transformer: embeddings, ``block_i`` (causal, pre-norm), ``final_norm``, then
    logits through the tied token table or an untied ``lm_head`` (no bias, as in GPT-2, LLaMA and
    GPT-NeoX). Gemma 2 and 3 add ``post_norms`` (and Gemma 3 ``qk_norm``), Qwen3 ``qk_norm``,
    Phi-3 ``fused_projections``. Windows, ``built_layers`` and ``decode``: see ``DecoderStack``; the
    options each block takes as they are: see ``BlockOptions``.
    """

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_dim: int
    max_positions: int
    position_embedding: str = "learned"
    tied_embeddings: bool = True
    fused_projections: bool = False

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        positions = self.max_positions if self.position_embedding == "learned" else None
        embed = TokenEmbeddings(self.vocab_size, self.d_model, positions, name="embed")
        x = embed(tokens, positions=step_positions(self, tokens) if positions and self.decode else None)
        block = block_class(self.forward, TransformerBlock)
        for index in self.built_layers or range(self.num_layers):
            x = block(
                self.num_heads,
                self.num_kv_heads,
                self.ffn_dim,
                **self.block_options(),
                causal=True,
                fused=self.fused_projections,
                decode=self.decode,
                window=self.window_of(index),
                forward=self.forward,
                rotary=self.position_embedding == "none",  # the presets without a table are rotary
                name=f"block_{index}",
            )(x)
        x = norm(self.norm, "final_norm")(x)
        return output_logits(x, embed, self.vocab_size, self.tied_embeddings)


class MoEDecoder(DecoderStack):
    """Mixture-of-Experts decoder (Mixtral, Qwen-MoE, DeepSeek-V2 and V3): embeddings, ``block_i``
    (pre-norm; attention, then ``moe`` or, in ``dense_layers``, a dense gated ``mlp``),
    ``final_norm`` and the output projection. Attention is grouped-query (``attn``, optionally with
    query/key biases or norms) or, with ``attention="mla"``, multi-head latent attention. Windows,
    ``built_layers`` and ``decode``: see ``DecoderStack``.
    """

    vocab_size: int
    d_model: int
    num_layers: int
    attention: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    qkv_bias: bool
    qk_norm: bool
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    num_experts: int
    experts_per_token: int
    expert_ffn_dim: int
    shared_ffn_dim: int
    shared_expert_gate: bool
    router_bias: bool
    dense_layers: tuple[int, ...]
    ffn_dim: int
    tied_embeddings: bool
    norm: str = "rmsnorm"
    attn_bias: bool = False
    wide_qk_norm: bool = False
    attention_sinks: bool = False
    expert_biases: bool = False
    head_bias: bool = False
    max_positions: int = 32_768

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = TokenEmbeddings(self.vocab_size, self.d_model, name="embed")
        x = embed(tokens)
        if self.attention == "mla":
            attention: dict[str, Any] = {
                "num_heads": self.num_heads,
                "q_lora_rank": self.q_lora_rank,
                "kv_lora_rank": self.kv_lora_rank,
                "qk_nope_head_dim": self.qk_nope_head_dim,
                "qk_rope_head_dim": self.qk_rope_head_dim,
                "v_head_dim": self.v_head_dim,
            }
        else:
            attention = {
                "num_heads": self.num_heads,
                "num_kv_heads": self.num_kv_heads,
                "use_bias": self.attn_bias,
                "causal": True,
                "head_dim": self.head_dim,
                "qkv_bias": self.qkv_bias,
                "qk_norm": self.qk_norm,
                "sinks": self.attention_sinks,
            }
        experts = {
            "num_experts": self.num_experts,
            "top_k": self.experts_per_token,
            "ffn_dim": self.expert_ffn_dim,
            "shared_ffn_dim": self.shared_ffn_dim,
            "shared_gate": self.shared_expert_gate,
            "router_bias": self.router_bias,
            "expert_biases": self.expert_biases,
        }
        block = block_class(self.forward, MoEBlock)
        for index in self.built_layers or range(self.num_layers):
            dense = index in self.dense_layers
            x = block(
                self.attention == "mla",
                attention,
                dense,
                {"ffn_dim": self.ffn_dim} if dense else experts,
                decode=self.decode,
                window=self.window_of(index),
                norm=self.norm,
                wide_qk_norm=self.qk_norm and self.wide_qk_norm,
                forward=self.forward,
                name=f"block_{index}",
            )(x)
        x = norm(self.norm, "final_norm")(x)
        if self.head_bias and not self.tied_embeddings:
            return nn.Dense(self.vocab_size, name="lm_head")(x)
        return output_logits(x, embed, self.vocab_size, self.tied_embeddings)


class MoEBlock(nn.Module):
    """A pre-norm block (RMSNorm, or ``norm`` LayerNorm with biases: PhiMoE): ``attn`` (grouped-query,
    or latent when ``latent``) and ``mlp`` (a dense gated MLP when ``dense``) or ``moe``
    (``dcsim.model.moe.MixtureOfExperts``), each built from its keyword arguments."""

    latent: bool
    attention: Mapping[str, Any]
    dense: bool
    mlp: Mapping[str, Any]
    decode: Decode | None = None
    window: int = 0
    norm: str = "rmsnorm"
    wide_qk_norm: bool = False
    forward: Forward | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        attn: nn.Module
        if self.wide_qk_norm:  # OLMoE: one norm over every query feature, one over every key feature
            h = self.attention
            attn = variant.WideNormAttention(
                num_heads=h["num_heads"],
                num_kv_heads=h["num_kv_heads"],
                head_dim=h["head_dim"] or x.shape[-1] // h["num_heads"],
                qkv_bias=h["use_bias"] or h["qkv_bias"],
                out_bias=h["use_bias"],
                decode=self.decode,
                window=self.window,
                forward=self.forward,
                name="attn",
            )
        else:
            kind = LatentAttention if self.latent else Attention
            attn = kind(
                **self.attention, decode=self.decode, window=self.window, forward=self.forward, rotary=True, name="attn"
            )
        mlp: nn.Module
        if self.dense:
            mlp = FeedForward(**self.mlp, gated=True, use_bias=False, name="mlp")
        else:
            mlp = MixtureOfExperts(**self.mlp, forward=self.forward, name="moe")
        return sandwich(x, attn, mlp, self.norm, post_norms=False)


class T5(nn.Module):
    """T5 encoder-decoder: a ``shared`` token table (``embed/token``) read by both stacks,
    ``encoder`` and ``decoder`` stacks of pre-norm RMSNorm blocks without biases (the first block
    of each holds the ``relative_bias`` table: buckets x heads), each stack's ``final_norm``, and
    logits through the shared table or an untied ``lm_head`` (Flan-T5)."""

    vocab_size: int
    d_model: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    head_dim: int
    ffn_dim: int
    relative_buckets: int
    gated_mlp: bool
    tied_embeddings: bool
    decode: Decode | None = None

    @nn.compact
    def __call__(self, tokens: jax.Array, targets: jax.Array) -> jax.Array:
        """In decode mode the encoder runs only while initialising (on the source tokens), when each
        cross-attention caches its keys and values of the output; a step then reads them cached."""
        embed = TokenEmbeddings(self.vocab_size, self.d_model, name="embed")
        stack = functools.partial(
            T5Stack, self.num_heads, self.head_dim, self.ffn_dim, self.relative_buckets, self.gated_mlp
        )
        encoded = None
        if self.decode is None or self.is_initializing():
            encoded = stack(self.num_layers, name="encoder")(embed(tokens))
        x = stack(self.num_decoder_layers, decoder=True, decode=self.decode, name="decoder")(embed(targets), encoded)
        return output_logits(x, embed, self.vocab_size, self.tied_embeddings)


class T5Stack(nn.Module):
    """One T5 stack: ``block_i`` with ``self_attn`` (and in the decoder ``cross_attn``) and ``mlp``,
    each behind its RMSNorm, then ``final_norm``."""

    num_heads: int
    head_dim: int
    ffn_dim: int
    relative_buckets: int
    gated_mlp: bool
    num_layers: int
    decoder: bool = False
    decode: Decode | None = None

    @nn.compact
    def __call__(self, x: jax.Array, encoded: jax.Array | None = None) -> jax.Array:
        length = x.shape[-2]
        bias = None
        # Each query's distance to each key: decode mode's one query (the step's position) to every
        # slot of the cache; otherwise the sequence to itself.
        keys = length
        if self.decode is not None:
            keys = self.decode.context
            distance = jnp.arange(keys)[None, :] - step_positions(self, x[..., 0])[:, None]
        else:
            distance = jnp.arange(length)[None, :] - jnp.arange(length)[:, None]
        for index in range(self.num_layers):
            x, bias = T5Block(
                self.num_heads,
                self.head_dim,
                self.ffn_dim,
                self.relative_buckets,
                self.gated_mlp,
                self.decoder,
                relative=index == 0,
                decode=self.decode,
                name=f"block_{index}",
            )(x, encoded, bias if bias is not None else jnp.zeros((self.num_heads, length, keys)), distance)
        return norm("rmsnorm", "final_norm")(x)


class T5Block(nn.Module):
    num_heads: int
    head_dim: int
    ffn_dim: int
    relative_buckets: int
    gated_mlp: bool
    decoder: bool
    relative: bool
    decode: Decode | None = None

    @nn.compact
    def __call__(
        self, x: jax.Array, encoded: jax.Array | None, bias: jax.Array, distance: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        if self.relative:  # the first block computes the position bias every block of its stack adds
            buckets = bucket_of(distance, self.relative_buckets, bidirectional=not self.decoder)
            bias = nn.Embed(self.relative_buckets, self.num_heads, name="relative_bias")(buckets).transpose(2, 0, 1)
        attention = functools.partial(
            Attention, self.num_heads, self.num_heads, use_bias=False, head_dim=self.head_dim, decode=self.decode
        )
        x = x + attention(causal=self.decoder, name="self_attn")(norm("rmsnorm", "self_attn_norm")(x), bias=bias)
        if self.decoder:
            x = x + attention(cross=True, name="cross_attn")(norm("rmsnorm", "cross_attn_norm")(x), encoded)
        activation = "geglu" if self.gated_mlp else "relu"
        mlp = FeedForward(self.ffn_dim, self.gated_mlp, use_bias=False, activation=activation, name="mlp")
        return x + mlp(norm("rmsnorm", "mlp_norm")(x)), bias


def bucket_of(distance: jax.Array, num_buckets: int, bidirectional: bool, max_distance: int = 128) -> jax.Array:
    """T5's bucket of each (query, key) distance (key position minus query position): exact for
    near ones, logarithmic for far ones."""
    bucket = jnp.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (distance > 0) * num_buckets
        distance = jnp.abs(distance)
    else:
        distance = -jnp.minimum(distance, 0)
    exact = max(num_buckets // 2, 1)
    far = exact + (
        jnp.log(jnp.maximum(distance, 1) / exact) / math.log(max(max_distance / exact, 2)) * (num_buckets - exact)
    ).astype(distance.dtype)
    return bucket + jnp.where(distance < exact, distance, jnp.minimum(far, max(num_buckets - 1, 0)))


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
                use_bias=self.use_bias,
                post_norm=True,
                name=f"block_{index}",
            )(x)
        if self.pooler:
            return jnp.tanh(nn.Dense(self.d_model, name="pooler")(x[..., 0, :]))
        return x


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


# The name sets of dcsim.model.registry's answers, for the messages that list them and the tests.
TRAINING_FORWARDS = registry.names(lambda family: family.trains)
DECODING_FAMILIES = registry.names(lambda family: family.decodes)
ENCODER_DECODERS = registry.names(lambda family: family.encoder_decoder)
UNSERVED_FAMILIES = {
    family.name: family.unserved for family in registry.FAMILIES if family.name is not None and family.unserved
}


def build_family(
    family: str,
    hparams: Mapping[str, Any],
    batch_size: int = 1,
    decode: Decode | None = None,
    forward: Forward | None = None,
    sequence: int = 0,
) -> tuple[nn.Module, tuple[jax.ShapeDtypeStruct, ...]]:
    """The module of ``family`` with ``hparams`` (already checked, see ``dcsim.model.presets.resolve``)
    and the abstract inputs it initialises on.

    ``decode``: the module in decode mode (a family of ``DECODING_FAMILIES``), initialised on one
    step, a token for each of ``batch_size`` sequences (T5's encoder on ``decode.source_length``
    source tokens): its ``cache`` collection is then what serving holds.

    ``forward`` (the decoder and moe families): a training forward's attention kind and expert
    dispatch, on ``sequence`` tokens (0: the init sequence); it changes no parameter."""
    h = dict(hparams)
    length = sequence or min(INIT_SEQUENCE, h.get("max_positions", 1))
    tokens = jax.ShapeDtypeStruct((batch_size, length), jnp.int32)
    answers = registry.find(family)
    builds = _BUILDS.get(family)
    if forward is not None:
        if answers is None or not answers.trains:
            raise ValueError(
                f"the {family} family has no training forward to trace; families with one: "
                f"{', '.join(TRAINING_FORWARDS)}"
            )
        return (MoEDecoder if answers.experts else Decoder)(**h, forward=forward), (tokens,)
    if decode is not None:
        decoding = builds.decode if builds is not None and answers is not None and answers.decodes else None
        if decoding is None:
            raise ValueError(
                f"the {family} family has no decoder, so no decode mode; decoding families: "
                f"{', '.join(DECODING_FAMILIES)}"
            )
        return decoding(h, batch_size, jax.ShapeDtypeStruct((batch_size, 1), jnp.int32), decode)
    if builds is None:
        raise ValueError(f"unknown family {family!r}; families: {', '.join(schemas.FAMILIES)}")
    return builds.build(h, batch_size, tokens)


def _vision_language(
    h: Mapping[str, Any], batch_size: int, tokens: jax.ShapeDtypeStruct, decode: Decode | None = None
) -> tuple[nn.Module, tuple[jax.ShapeDtypeStruct, ...]]:
    """A vision-language model: its language model a ``Decoder`` (in decode mode with ``decode``)."""
    text = Decoder(**multimodal.text_hparams(h), decode=decode)
    return multimodal.VisionLanguageModel(h, text), (multimodal.image_input(h, batch_size), tokens)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Repeat:
    """Blocks built alike: ``{parent}/{prefix}{i}`` for each ``i`` of ``members``, in order. From
    its second member on they are the same module on the same input shape (the first may differ: a
    stage's first block downsamples, an MLP's first layer reads the input width). The members need
    not be neighbours: a Mixture-of-Experts model's dense blocks are one set and its MoE blocks
    another, in any pattern."""

    parent: str
    prefix: str
    members: tuple[int, ...]

    @property
    def namespace(self) -> str:
        """What every member's path starts with: ``stage_2/block_``, ``block_``."""
        return f"{self.parent}/{self.prefix}" if self.parent else self.prefix

    def path(self, index: int) -> str:
        """The path of the set's ``index``-th member: ``block_{members[index]}``."""
        return f"{self.namespace}{self.members[index]}"


def _first_blocks(parent: str, prefix: str, count: int) -> Repeat:
    return Repeat(parent=parent, prefix=prefix, members=tuple(range(count)))


TRACED_PER_RUN = 2


def _under(parent: str, path: str) -> str:
    return f"{parent}/{path}" if path else parent


def traced_hparams(family: str, hparams: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """``hparams`` with every set of blocks built alike cut to its first ``TRACED_PER_RUN`` members,
    and the sets to expand back to full length (see ``dcsim.model.count.expand_repeats``)."""
    builds = _BUILDS.get(family)
    return (_stack_runs if builds is None else builds.traced)(dict(hparams))


def _stack_runs(h: dict[str, Any], prefix: str = "block_") -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """One stack of blocks built alike (an MLP's ``hidden_`` layers); with a sliding window, its
    local blocks and its global ones (the same weights, another cache)."""
    if h.get("local_layers"):
        return _runs_by_kind(h, _block_kind)
    runs = (_first_blocks("", prefix, h["num_layers"]),)
    h["num_layers"] = min(h["num_layers"], TRACED_PER_RUN)
    return h, runs


def _block_kind(h: Mapping[str, Any], index: int) -> tuple[bool, bool]:
    """A block's kind: dense (in a Mixture-of-Experts model) or not, local (windowed) or not."""
    return index in h.get("dense_layers", ()), index in h.get("local_layers", ())


def _runs_by_kind(
    h: dict[str, Any], kind_of: Callable[[Mapping[str, Any], int], tuple[bool, bool]]
) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """Sets built alike, in any pattern: a Mixture-of-Experts model's dense blocks and its MoE
    blocks; a sliding window's local blocks and the global ones (the same weights, another cache);
    Jamba's Mamba and attention blocks, each with a dense MLP or experts."""
    kinds: dict[tuple[bool, bool], list[int]] = {}
    for index in range(h["num_layers"]):
        kinds.setdefault(kind_of(h, index), []).append(index)
    runs = tuple(Repeat(parent="", prefix="block_", members=tuple(members)) for members in kinds.values())
    h["built_layers"] = tuple(sorted(index for run in runs for index in run.members[:TRACED_PER_RUN]))
    return h, runs


def _stage_runs(h: dict[str, Any]) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """A ResNet's stages, each a set."""
    runs = tuple(_first_blocks(f"stage_{stage}", "block_", blocks) for stage, blocks in enumerate(h["stage_blocks"]))
    h["stage_blocks"] = tuple(min(blocks, TRACED_PER_RUN) for blocks in h["stage_blocks"])
    return h, runs


def _encoder_decoder_runs(h: dict[str, Any]) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    runs = (
        _first_blocks("encoder", "block_", h["num_layers"]),
        _first_blocks("decoder", "block_", h["num_decoder_layers"]),
    )
    h["num_layers"] = min(h["num_layers"], TRACED_PER_RUN)
    h["num_decoder_layers"] = min(h["num_decoder_layers"], TRACED_PER_RUN)
    return h, runs


def _vision_language_runs(h: dict[str, Any]) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """The tower's blocks, and the language model's as a decoder's."""
    text, text_runs = _stack_runs(dict(multimodal.text_hparams(h)))
    runs = tuple(dataclasses.replace(run, parent=_under(multimodal.TEXT_PARENT, run.parent)) for run in text_runs)
    tower = _first_blocks(multimodal.TOWER_PARENT, "block_", h["vision_layers"])
    return h | text | {"vision_layers": min(h["vision_layers"], TRACED_PER_RUN)}, (tower, *runs)


def _llama4_runs(h: dict[str, Any]) -> tuple[dict[str, Any], tuple[Repeat, ...]]:
    """The language model's blocks as the moe family's, then the vision tower's."""
    h, runs = _runs_by_kind(h, _block_kind)
    h["built_vision_layers"] = tuple(range(min(h["vision_layers"], TRACED_PER_RUN)))
    return h, (*runs, _first_blocks("vision_tower", "block_", h["vision_layers"]))


Built = tuple[nn.Module, tuple[jax.ShapeDtypeStruct, ...]]


def _images(h: Mapping[str, Any], batch_size: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch_size, h["image_size"], h["image_size"], IMAGE_CHANNELS), jnp.float32)


def _t5_decode(h: dict[str, Any], batch_size: int, step: jax.ShapeDtypeStruct, decode: Decode) -> Built:
    source = jax.ShapeDtypeStruct((batch_size, decode.source_length), jnp.int32)
    return T5(**h, decode=decode), (source, step)


def _state_space(name: str) -> _Builds:
    """Mamba's or Jamba's row: their blocks' kinds (Mamba or attention, dense MLP or experts)."""
    return _Builds(
        build=lambda h, b, tokens: ssm.build(name, h, tokens),
        decode=lambda h, b, step, decode: ssm.build(name, h, step, decode),
        traced=lambda h: _runs_by_kind(h, ssm.block_kind),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Builds:
    """How one family's module is built: ``build`` (hyperparameters, batch size, the init's tokens),
    ``decode`` in decode mode (the same, a step's token and the ``Decode``; None without a decoder),
    and ``traced``, its hyperparameters cut to the blocks counting traces (see ``traced_hparams``)."""

    build: Callable[[dict[str, Any], int, jax.ShapeDtypeStruct], Built]
    decode: Callable[[dict[str, Any], int, jax.ShapeDtypeStruct, Decode], Built] | None = None
    traced: Callable[[dict[str, Any]], tuple[dict[str, Any], tuple[Repeat, ...]]] = _stack_runs


# The Flax side of dcsim.model.registry: one row a family, by its name, in schemas.FAMILIES' order.
_BUILDS: Mapping[str, _Builds] = {
    "mlp": _Builds(
        build=lambda h, b, tokens: (
            MLP(h["hidden_dim"], h["num_layers"], h["num_classes"], h["use_bias"]),
            (jax.ShapeDtypeStruct((b, h["input_dim"]), jnp.float32),),
        ),
        traced=functools.partial(_stack_runs, prefix="hidden_"),
    ),
    "decoder": _Builds(
        build=lambda h, b, tokens: (Decoder(**h), (tokens,)),
        decode=lambda h, b, step, decode: (Decoder(**h, decode=decode), (step,)),
    ),
    "moe": _Builds(
        build=lambda h, b, tokens: (MoEDecoder(**h), (tokens,)),
        decode=lambda h, b, step, decode: (MoEDecoder(**h, decode=decode), (step,)),
        traced=lambda h: _runs_by_kind(h, _block_kind),
    ),
    "t5": _Builds(
        build=lambda h, b, tokens: (T5(**h), (tokens, tokens)), decode=_t5_decode, traced=_encoder_decoder_runs
    ),
    "bert": _Builds(build=lambda h, b, tokens: (Bert(**h), (tokens, tokens))),
    "vit": _Builds(build=lambda h, b, tokens: (VisionTransformer(**h), (_images(h, b),))),
    "resnet": _Builds(
        build=lambda h, b, tokens: (
            ResNet(tuple(h["stage_blocks"]), h["bottleneck"], h["num_classes"]),
            (_images(h, b),),
        ),
        traced=_stage_runs,
    ),
    zoo_schemas.VARIANT: _Builds(
        build=lambda h, b, tokens: variant.build(zoo_schemas.VARIANT, h, tokens),
        decode=lambda h, b, step, decode: variant.build(zoo_schemas.VARIANT, h, step, decode),
    ),
    zoo_schemas.ENCDEC: _Builds(
        build=lambda h, b, tokens: encdec.build(h, b, INIT_SEQUENCE),
        decode=lambda h, b, step, decode: encdec.build(h, b, 1, decode),
        traced=_encoder_decoder_runs,
    ),
    zoo_schemas.MAMBA: _state_space(zoo_schemas.MAMBA),
    zoo_schemas.JAMBA: _state_space(zoo_schemas.JAMBA),
    zoo_schemas.MULTIMODAL: _Builds(
        build=lambda h, b, tokens: _vision_language(h, b, tokens),
        decode=lambda h, b, step, decode: _vision_language(h, b, step, decode),
        traced=_vision_language_runs,
    ),
    zoo_schemas.LLAMA4: _Builds(build=lambda h, b, tokens: llama4.build(MoEDecoder, h, b), traced=_llama4_runs),
}
