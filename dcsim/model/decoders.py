"""The decoder-only families as ``flax.linen`` modules: the decoder (GPT-2, LLaMA, Mistral, Gemma,
Qwen, Phi-3 and the other dense decoders) and the Mixture-of-Experts decoder (Mixtral, Qwen-MoE,
DeepSeek, GPT-OSS and the rest), with what both serve and trace with (``DecoderStack``).

They are the two families with a training forward (``Forward``) as well as a decode mode, so their
blocks take both; ``dcsim.model.families`` builds them from a configuration's hyperparameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax

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
from dcsim.model.zoo import variant


class DecoderStack(nn.Module, kw_only=True):
    """What a decoder's blocks serve and trace with, beside the family's hyperparameters.

    ``sliding_window`` and ``local_layers``: the blocks whose attention sees only the last
    ``sliding_window`` tokens (Mistral, Gemma 2 and 3); they change no count, only what a block
    caches in decode mode (``decode``, see ``dcsim.model.cache.Decode``). ``rope_scaling`` changes
    no count either. ``built_layers`` (empty: all) builds only those blocks, under their own names:
    counting traces a few blocks of each kind and repeats their rows (see
    ``dcsim.model.families.traced_hparams``).
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
