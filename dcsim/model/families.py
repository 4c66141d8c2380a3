"""Model families as real ``flax.linen`` modules, so presets are counted by initialising them: each
family's module built from its hyperparameters (``build_family``), in decode mode or with a training
forward, and cut to the blocks counting traces (``traced_hparams``). The modules are in
``dcsim.model.decoders`` (the decoder and moe families), ``dcsim.model.encoders`` (T5 and BERT),
``dcsim.model.vision`` (ViT and ResNet) and ``dcsim.model.zoo``; the Dense stack (``MLP``) is here.

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
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dcsim.model import registry, schemas
from dcsim.model.cache import Decode
from dcsim.model.decoders import Decoder, MoEDecoder
from dcsim.model.encoders import T5, Bert
from dcsim.model.forward import Forward
from dcsim.model.vision import ResNet, VisionTransformer
from dcsim.model.zoo import encdec, llama4, multimodal, ssm, variant
from dcsim.model.zoo import schemas as zoo_schemas

# The sequence the transformers are initialised on. Its length changes no count; it only has to fit
# the learned position table.
INIT_SEQUENCE = 8
IMAGE_CHANNELS = 3


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
