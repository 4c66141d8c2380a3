"""One object per model family, so the rest of dcsim asks a family what it is instead of testing its name.

Serving, activations, the quantized layouts, the Hub readers and both faces each used to hold their
own list of family names ("decoder", "moe", "t5"...), and adding Llama 4 touched eight files. Each
family here is one frozen ``Family`` that answers those questions: its KV heads, the positions past
which a context is refused, whether it is an encoder-decoder, whether it decodes (serves with a
cache) or trains (has a traced training forward), why dcsim does not serve it, how a tensor axis
splits its widths, its naming scheme in files. The Dense stack (a configuration without a family)
is an object too, ``DENSE_STACK``. Adding a family touches its own module and this table.

Pure Python, like ``dcsim.model.schemas``: no JAX, no Flax, so the command line and the pages can
ask before anything heavy is imported. ``dcsim.model.families``' name sets are derived from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dcsim.model.zoo import schemas as zoo_schemas

if TYPE_CHECKING:
    from dcsim.model.config import ModelConfig

Heads = Callable[[Mapping[str, Any]], tuple[int, int | None]]
Naming = Callable[[Mapping[str, Any], tuple[str, ...]], str]


def _grouped_heads(hparams: Mapping[str, Any]) -> tuple[int, int | None]:
    return hparams["num_heads"], hparams["num_kv_heads"]


def _latent_or_grouped_heads(hparams: Mapping[str, Any]) -> tuple[int, int | None]:
    """DeepSeek's latent cache has no KV heads (None): it is whole on every tensor rank."""
    return (hparams["num_heads"], None) if hparams["attention"] == "mla" else _grouped_heads(hparams)


def _every_head(hparams: Mapping[str, Any]) -> tuple[int, int | None]:
    return hparams["num_heads"], hparams["num_heads"]


def _decoder_heads(hparams: Mapping[str, Any]) -> tuple[int, int | None]:
    """BART's and Whisper's decoder heads: only the decoder caches."""
    return hparams["num_decoder_heads"], hparams["num_decoder_heads"]


def _decoder_naming(hparams: Mapping[str, Any], paths: tuple[str, ...]) -> str:
    """GPT-2's names for a learned position table without a gated MLP, else LLaMA's."""
    gpt2 = hparams.get("position_embedding") == "learned" and not hparams.get("gated_mlp")
    return "gpt2" if gpt2 else "llama"


def _moe_naming(hparams: Mapping[str, Any], paths: tuple[str, ...]) -> str:
    """Mixtral's names, or LLaMA's (DeepSeek's) for shared experts or latent attention."""
    shared = any("/moe/shared" in path for path in paths)
    latent = any("/attn/kv_down/" in path for path in paths)
    return "llama" if shared or latent else "mixtral"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
    """What the rest of dcsim asks of one family.

    Attributes:
      name: the family's name in configurations and links (None: the Dense stack).
      decodes: dcsim builds its decode mode: it serves with a cache (KV, cross-attention or state).
      trains: dcsim traces its training forward (attention kind, expert dispatch) for activations.
      encoder_decoder: a decoding step reads the encoder's output from each cross-attention's cache,
        made once a request from its source (T5's and BART's tokens, Whisper's audio frames).
      relative_positions: its source has no position table (T5's relative buckets): any length.
      caps_positions: a context past its ``max_positions`` is refused (or noted, under rope scaling).
      always_rotary: its positions are rotary whatever its hyperparameters say (no position table).
      experts: some of its blocks route each token to a few experts.
      latent_attention: its attention may be DeepSeek's multi-head latent attention (``attention="mla"``).
      windows: a file's sliding windows, rope scaling and rotary length are read as serving hyperparameters.
      convolutions: it holds convolutions (ResNet; ViT's and the vision towers' patch embeddings).
      weight_formats: a weight format (quantized, GGUF) applies to it: a transformer's linears.
      unserved: why dcsim does not size its serving, and what to do instead (None: it does).
      serving_notes: what a serving report of it always says.
      emptied_with_blocks: the block lists to empty beside ``num_layers`` for the model without blocks.
      heads: its (query heads, KV heads) from its hyperparameters; None where nothing caches by head.
      naming: its naming scheme in files from its hyperparameters and paths; None: dcsim's own paths.
    """

    name: str | None
    decodes: bool = False
    trains: bool = False
    encoder_decoder: bool = False
    relative_positions: bool = False
    caps_positions: bool = False
    always_rotary: bool = False
    experts: bool = False
    latent_attention: bool = False
    windows: bool = False
    convolutions: bool = False
    weight_formats: bool = True
    unserved: str | None = None
    serving_notes: tuple[str, ...] = ()
    emptied_with_blocks: tuple[str, ...] = ()
    heads: Heads | None = None
    naming: Naming | None = None

    def kv_heads(self, hparams: Mapping[str, Any]) -> tuple[int, int | None] | None:
        """(query heads, KV heads; None for a latent cache) of a family that caches by head, else None."""
        return None if self.heads is None else self.heads(hparams)

    def max_positions(self, hparams: Mapping[str, Any]) -> int | None:
        """The positions (``max_positions``) past which a context is refused or noted; None: any length."""
        return hparams.get("max_positions") if self.caps_positions else None

    def rotary(self, hparams: Mapping[str, Any]) -> bool:
        """Its positions are rotary: a scaled rotary length may pass its ``max_positions``."""
        return self.always_rotary or hparams.get("position_embedding") == "none"

    def latent(self, hparams: Mapping[str, Any]) -> bool:
        """Its attention is latent (DeepSeek's MLA) with these hyperparameters."""
        return self.latent_attention and hparams.get("attention") == "mla"

    @property
    def trains_experts(self) -> bool:
        """Its training forward routes tokens to experts: a capacity factor applies."""
        return self.trains and self.experts

    def tensor_widths(self, hparams: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """The feed-forward widths a tensor-parallel axis divides in a training step (Megatron's
        column and row split; asked of a family that ``trains``), each with what it is, in the order
        they are checked: the dense MLP's (every block's, or a Mixture-of-Experts model's dense
        blocks'), each expert's, the shared experts'. The heads split by ``kv_heads`` and ``latent``."""
        widths = []
        if not self.experts or hparams.get("dense_layers"):
            widths.append(("ffn_dim", "the feed-forward width (ffn_dim)"))
        if self.experts:
            widths.append(("expert_ffn_dim", "each expert's width (expert_ffn_dim)"))
            if hparams.get("shared_ffn_dim"):
                widths.append(("shared_ffn_dim", "the shared experts' width (shared_ffn_dim)"))
        return tuple(widths)

    def without_blocks(self, hparams: Mapping[str, Any]) -> dict[str, Any]:
        """``hparams`` of the same model with no blocks: its embedding, final norm and output layer."""
        return {**hparams, "num_layers": 0} | dict.fromkeys(self.emptied_with_blocks, ())

    def naming_scheme(self, hparams: Mapping[str, Any], paths: Iterable[str]) -> str:
        """Its arrays' names in files: ``gpt2``, ``mixtral``, ``llama`` or ``dcsim`` (its own paths)."""
        return "dcsim" if self.naming is None else self.naming(hparams, tuple(paths))


DENSE_STACK = Family(name=None, weight_formats=False)

# A causal transformer that serves with a KV cache and trains, its context capped by its position
# table, a file's sliding windows and rope scaling read into it.
_DECODER = Family(
    name="decoder",
    decodes=True,
    trains=True,
    caps_positions=True,
    windows=True,
    heads=_grouped_heads,
    naming=_decoder_naming,
)

# In dcsim.model.schemas.FAMILIES' order (checked by the tests), so the derived name sets list the
# families in the order the messages always have.
FAMILIES: tuple[Family, ...] = (
    Family(name="mlp"),
    _DECODER,
    # The decoder's stack (``dcsim.model.decoders.DecoderStack``) with routed experts in its blocks and,
    # for DeepSeek, latent attention: it decodes, trains, caps its positions and reads windows as the decoder does.
    dataclasses.replace(
        _DECODER,
        name="moe",
        always_rotary=True,
        experts=True,
        latent_attention=True,
        serving_notes=("Routed experts cache nothing: the cache is the attention's alone",),
        emptied_with_blocks=("dense_layers", "local_layers"),
        heads=_latent_or_grouped_heads,
        naming=_moe_naming,
    ),
    Family(name="t5", decodes=True, encoder_decoder=True, relative_positions=True, heads=_every_head),
    Family(name="bert"),
    Family(name="vit", convolutions=True, weight_formats=False),
    Family(name="resnet", convolutions=True, weight_formats=False),
    Family(name=zoo_schemas.VARIANT, decodes=True, windows=True),
    Family(name=zoo_schemas.ENCDEC, decodes=True, encoder_decoder=True, caps_positions=True, heads=_decoder_heads),
    Family(name=zoo_schemas.MAMBA, decodes=True),
    Family(name=zoo_schemas.JAMBA, decodes=True, experts=True, heads=_grouped_heads),
    Family(name=zoo_schemas.MULTIMODAL, decodes=True, convolutions=True),
    Family(
        name=zoo_schemas.LLAMA4,
        experts=True,
        unserved="dcsim does not size the serving of Llama 4's vision-language model (its image tokens' "
        "encoder and the weights' placement beside the language model); open its text_config as a llama4_text "
        "config.json to size the language model's weights and KV cache",
    ),
)

_BY_NAME: Mapping[str | None, Family] = {family.name: family for family in (DENSE_STACK, *FAMILIES)}


def get(name: str | None) -> Family:
    """The family named ``name`` (None: the Dense stack)."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown family {name!r}; families: {', '.join(names(lambda family: True))}")
    return _BY_NAME[name]


def find(name: str | None) -> Family | None:
    """The family named ``name``, or None for a name no family has."""
    return _BY_NAME.get(name)


def family_of(config: ModelConfig) -> Family:
    """The family of ``config`` (the Dense stack's when it has none)."""
    return get(config.family)


def names(where: Callable[[Family], bool]) -> tuple[str, ...]:
    """The names of the families (the Dense stack aside) that answer ``where`` true, in table order."""
    return tuple(family.name for family in FAMILIES if family.name is not None and where(family))
