"""The families with an encoder, as ``flax.linen`` modules: T5's encoder-decoder (its stacks
sharing one token table, its relative position bias in each stack's first block) and BERT's encoder.

``dcsim.model.families`` builds them from a configuration's hyperparameters; BART and Whisper, T5's
shape with learned positions, are in ``dcsim.model.zoo.encdec``.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model.cache import Decode, step_positions
from dcsim.model.layers import (
    Attention,
    FeedForward,
    TokenEmbeddings,
    TransformerBlock,
    norm,
    output_logits,
)


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
