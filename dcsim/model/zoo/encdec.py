"""The ``encdec`` family: the Hub's encoder-decoders with learned or audio inputs, BART and Whisper.

Both are T5's shape (``dcsim.model.encoders.T5``: a token table the decoder and the head share, an
encoder, a decoder whose blocks cross-attend to the encoder's output) with what sets them apart as
hyperparameters (``dcsim.model.zoo.schemas``): position tables in each stack (BART's two rows
longer than its positions, fairseq's offset kept), an embedding LayerNorm, post- or pre-norm
blocks, biases on every projection but Whisper's keys, and Whisper's audio stem (two
convolutions over mel bins) with its sinusoidal table. BART's ``final_logits_bias`` is a
``buffers`` variable, as transformers registers it (in the checkpoint, not in ``num_parameters()``).

In decode mode (``Decode``), as T5's: the encoder runs only while initialising, on the source (BART's
tokens, Whisper's mel frames), when each decoder block's ``cross_attn`` caches the encoder's keys
and values for ``source_length`` tokens; each ``self_attn`` caches ``context`` tokens. A step is then
one target token a sequence against both caches.

Paths read as T5's do, so the breakdown groups them alike: ``embed/token``,
``stem/conv_1`` (the encoder's audio input), ``encoder/embed/position``, ``encoder/embed_norm``,
``decoder/block_3/cross_attn/key``, ``decoder/final_norm``, ``lm_head``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.cache import Decode, step_positions
from dcsim.model.layers import BUFFERS, Attention, FeedForward, TokenEmbeddings, norm, output_logits

SINUSOID_BASE = 10_000.0  # Whisper's ``sinusoids(length, channels, max_timescale=10000)``


def sinusoids(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    """Whisper's encoder positions: sines then cosines of each position over log-spaced timescales.
    Transformers loads them into a frozen ``nn.Embedding`` whose weight ``num_parameters()`` counts."""
    del key
    length, channels = shape
    half = channels // 2
    scales = jnp.exp(-math.log(SINUSOID_BASE) / max(half - 1, 1) * jnp.arange(half))
    angles = jnp.arange(length)[:, None] * scales[None, :]
    table = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=1)
    return jnp.pad(table, ((0, 0), (0, channels - 2 * half))).astype(dtype)


class Positions(nn.Module):
    """A stack's ``embed/position`` table, ``rows`` + ``offset`` long, added to ``x`` from row
    ``offset`` on (BART looks position p up at row p + 2); ``sinusoidal``: Whisper's fixed table."""

    rows: int
    offset: int
    sinusoidal: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array | None = None) -> jax.Array:
        """``positions``: each token's position (decode mode's step counter); by default 0, 1, ..."""
        init = sinusoids if self.sinusoidal else nn.initializers.normal(stddev=0.02)
        table = nn.Embed(self.rows + self.offset, x.shape[-1], embedding_init=init, name="position")
        return x + table((jnp.arange(x.shape[-2]) if positions is None else positions) + self.offset)


class AudioStem(nn.Module):
    """Whisper's ``conv1`` (mel bins -> d_model, kernel 3) and ``conv2`` (kernel 3, stride 2), each
    with GELU: ``conv_1`` and ``conv_2``, with biases."""

    d_model: int

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        x = nn.gelu(nn.Conv(self.d_model, (3,), padding=1, name="conv_1")(features))
        return nn.gelu(nn.Conv(self.d_model, (3,), strides=2, padding=1, name="conv_2")(x))


class EncDecBlock(nn.Module):
    """One block: ``self_attn`` (causal in the decoder), ``cross_attn`` to the encoder's output in
    the decoder, and ``mlp`` (GELU, biases), each with its LayerNorm (``self_attn_norm``,
    ``cross_attn_norm``, ``mlp_norm``) before it (``pre_norm``) or after its residual sum."""

    num_heads: int
    ffn_dim: int
    decoder: bool
    pre_norm: bool
    key_bias: bool
    decode: Decode | None = None

    @nn.compact
    def __call__(self, x: jax.Array, encoded: jax.Array | None) -> jax.Array:
        attention = functools.partial(
            Attention, self.num_heads, self.num_heads, key_bias=self.key_bias, decode=self.decode
        )
        sublayers: list[tuple[str, Any]] = [("self_attn", attention(causal=self.decoder, name="self_attn"))]
        if self.decoder:
            cross = attention(cross=True, name="cross_attn")
            sublayers.append(("cross_attn", lambda y: cross(y, encoded)))
        sublayers.append(("mlp", FeedForward(self.ffn_dim, use_bias=True, name="mlp")))
        for name, sublayer in sublayers:
            layer_norm = norm("layernorm", f"{name}_norm")
            x = x + sublayer(layer_norm(x)) if self.pre_norm else layer_norm(x + sublayer(x))
        return x


class EncDecStack(nn.Module):
    """One stack: its ``embed`` positions (and ``embed_norm``), ``block_i``, and with pre-norm
    blocks a ``final_norm``; ``decode`` (the decoder's): its blocks in decode mode."""

    h: Mapping[str, Any]
    decoder: bool = False
    decode: Decode | None = None

    @nn.compact
    def __call__(self, x: jax.Array, encoded: jax.Array | None = None) -> jax.Array:
        h = self.h
        audio = bool(h["audio_bins"]) and not self.decoder
        rows = h["max_positions"] if self.decoder else h["source_positions"]
        positions = step_positions(self, x[..., 0]) if self.decoder and self.decode else None
        x = Positions(rows, 0 if audio else h["position_offset"], sinusoidal=audio, name="embed")(x, positions)
        if h["embed_norm"]:
            x = norm("layernorm", "embed_norm")(x)
        heads = h["num_decoder_heads"] if self.decoder else h["num_heads"]
        ffn = h["decoder_ffn_dim"] if self.decoder else h["ffn_dim"]
        for index in range(h["num_decoder_layers"] if self.decoder else h["num_layers"]):
            block = EncDecBlock(
                heads, ffn, self.decoder, h["pre_norm"], h["key_bias"], decode=self.decode, name=f"block_{index}"
            )
            x = block(x, encoded)
        return norm("layernorm", "final_norm")(x) if h["pre_norm"] else x


class EncoderDecoder(nn.Module):
    """``embed`` (the token table: the encoder's input unless ``audio_bins``, the decoder's, and
    the head's when tied), the ``encoder`` (on tokens, or on mel features through the ``stem``),
    the ``decoder``, and logits through the tied table or an untied ``lm_head``, plus BART's
    ``final_logits_bias`` buffer; ``decode``: the decoder in decode mode (the module's text)."""

    h: Mapping[str, Any]
    decode: Decode | None = None

    @nn.compact
    def __call__(self, source: jax.Array, targets: jax.Array) -> jax.Array:
        h = self.h
        embed = TokenEmbeddings(h["vocab_size"], h["d_model"], name="embed")
        encoded = None
        if self.decode is None or self.is_initializing():
            stem = AudioStem(h["d_model"], name="stem") if h["audio_bins"] else embed
            encoded = EncDecStack(h, name="encoder")(stem(source))
        x = EncDecStack(h, decoder=True, decode=self.decode, name="decoder")(embed(targets), encoded)
        logits = output_logits(x, embed, h["vocab_size"], h["tied_embeddings"])
        if h["logits_bias"]:
            return logits + self.variable(BUFFERS, "final_logits_bias", jnp.zeros, (h["vocab_size"],)).value
        return logits


def build(
    hparams: Mapping[str, Any], batch_size: int, length: int, decode: Decode | None = None
) -> tuple[nn.Module, tuple[Any, ...]]:
    """The module and its inputs: ``length`` source tokens (or, with ``audio_bins``, twice as many
    mel frames, which the stride-2 convolution halves) and ``length`` target tokens, each cut to
    its stack's positions. The lengths change no count. ``decode``: the module in decode mode, on
    ``decode.source_length`` source tokens and one target token a sequence."""
    h = dict(hparams)
    source_length = min(length, h["source_positions"]) if decode is None else decode.source_length
    targets = jax.ShapeDtypeStruct((batch_size, 1 if decode else min(length, h["max_positions"])), jnp.int32)
    if h["audio_bins"]:
        source = jax.ShapeDtypeStruct((batch_size, 2 * source_length, h["audio_bins"]), jnp.float32)
    else:
        source = jax.ShapeDtypeStruct((batch_size, source_length), jnp.int32)
    return EncoderDecoder(h, decode=decode), (source, targets)
