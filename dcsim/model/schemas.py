"""Hyperparameter schemas: each model family's hyperparameters, their ranges and defaults, and the
rules that tie them together.

Every family (built from real Flax modules in ``dcsim.model.families``) has a schema here: one
``HParam`` a hyperparameter, with its kind, its range, its default (the family's reference model's
value) and a line of help. The preset table (``dcsim.model.presets``) and models opened from a file
(``dcsim.hf``) are hyperparameters checked against these schemas; editing a form moves the
values that derive from others (``follow``) and shows only those that change the count
(``applicable``).

This module is pure Python (no JAX, no Flax): the configuration, the links codec and the dashboard's
forms read the schema cheaply. Anything that validates a hyperparameter goes through here, and every
rejection is a ``ValueError`` (or ``TypeError`` for the wrong kind of thing) that names the
hyperparameter, the rule, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from dcsim.inputs import show
from dcsim.model.hparams import (
    MAX_LISTED_BLOCKS,
    SERVING_HPARAMS,
    SERVING_ONLY,
    HParam,
    blocks_param,
    bool_param,
    choice_param,
    int_param,
)
from dcsim.model.zoo import schemas as zoo

# Limits keep every preset cheap to trace (tracing cost grows with the number of blocks) and every
# count inside int64, which the tables use. None of them is a limit of Flax.
MAX_WIDTH = 1 << 16  # d_model, hidden widths
MAX_VOCAB = 1 << 20  # vocabularies, classes, FFN widths, positions
MAX_BLOCKS = MAX_LISTED_BLOCKS  # 256 transformer blocks or MLP layers: the same cap as the Dense stack
MAX_HEADS = 1024
MAX_IMAGE = 4096
MAX_STAGES = 8
MAX_STAGE_BLOCKS = 64
MAX_EXPERTS = 1024  # routed experts in one MoE layer (DeepSeek-V3 has 256)

# Shared definitions: a name means the same thing in every family that uses it.
_VOCAB = int_param("vocab_size", 50_257, "tokens in the vocabulary: rows of the token embedding", 1, MAX_VOCAB)
_D_MODEL = int_param("d_model", 768, "width of the residual stream (hidden size)", 1, MAX_WIDTH)
_LAYERS = int_param("num_layers", 12, "number of transformer blocks", 1, MAX_BLOCKS)
_HEADS = int_param("num_heads", 12, "attention heads (query heads); must divide d_model", 1, MAX_HEADS)
_FFN = int_param("ffn_dim", 3072, "hidden width of each block's MLP", 1, MAX_VOCAB)
_POSITIONS = int_param("max_positions", 1024, "longest sequence: rows of a learned position table", 1, MAX_VOCAB)
_BIAS = bool_param("use_bias", True, "biases in the attention and MLP projections")
_CLASSES = int_param("num_classes", 1000, "output classes of the classifier head", 1, MAX_VOCAB)
_KV_HEADS = int_param(
    "num_kv_heads", 12, "key/value heads (grouped-query attention); must divide num_heads", 1, MAX_HEADS
)
_HEAD_DIM = int_param(
    "head_dim", 0, "width of each attention head; 0 for d_model / num_heads (Gemma's are wider)", 0, 4096
)
_QKV_BIAS = bool_param("qkv_bias", False, "biases on query, key and value even without use_bias (Qwen2)")
_QK_NORM = bool_param("qk_norm", False, "an RMSNorm over each query and key head, head_dim wide (Gemma 3, Qwen3)")
_TIED = bool_param("tied_embeddings", True, "the output projection reuses the token embedding")
_IMAGE = int_param("image_size", 224, "input image height and width in pixels (3 channels)", 1, MAX_IMAGE)

FAMILY_SCHEMAS: Mapping[str, tuple[HParam, ...]] = MappingProxyType(
    {
        "mlp": (
            int_param("input_dim", 784, "width of each input example", 1, MAX_VOCAB),
            int_param("hidden_dim", 512, "width of every hidden Dense layer", 1, MAX_VOCAB),
            int_param("num_layers", 2, "number of hidden Dense layers (ReLU after each)", 1, MAX_BLOCKS),
            dataclasses.replace(_CLASSES, default=10),
            dataclasses.replace(_BIAS, description="a bias in every Dense layer"),
        ),
        "decoder": (
            _VOCAB,
            _D_MODEL,
            _LAYERS,
            dataclasses.replace(
                _HEADS, description="attention heads (query heads); divide d_model unless head_dim is set"
            ),
            _KV_HEADS,
            _FFN,
            _POSITIONS,
            choice_param(
                "position_embedding",
                "learned",
                "learned: a position table; none: rotary or other parameter-free positions",
                ("learned", "none"),
            ),
            _TIED,
            _BIAS,
            choice_param(
                "norm", "layernorm", "layernorm (scale and bias) or rmsnorm (scale only)", ("layernorm", "rmsnorm")
            ),
            bool_param("gated_mlp", False, "gated MLP (SwiGLU: gate, up and down projections) instead of up and down"),
            _HEAD_DIM,
            _QKV_BIAS,
            _QK_NORM,
            bool_param(
                "post_norms",
                False,
                "a norm after attention and after the MLP as well as before them (Gemma 2 and 3: four a block)",
            ),
            bool_param(
                "fused_projections",
                False,
                "one qkv projection and one gate_up projection (Phi-3): the same count in fewer, larger arrays",
            ),
            *SERVING_HPARAMS,
        ),
        "moe": (
            dataclasses.replace(_VOCAB, default=32_000),
            dataclasses.replace(_D_MODEL, default=4096),
            dataclasses.replace(_LAYERS, default=32),
            choice_param(
                "attention",
                "gqa",
                "gqa: query, key and value heads (grouped-query); mla: DeepSeek's multi-head latent attention",
                ("gqa", "mla"),
            ),
            dataclasses.replace(
                _HEADS, default=32, description="attention heads (query heads); divide d_model unless head_dim is set"
            ),
            dataclasses.replace(_KV_HEADS, default=8),
            _HEAD_DIM,
            _QKV_BIAS,
            _QK_NORM,
            int_param(
                "q_lora_rank", 0, "MLA: rank of the query's low-rank projection; 0 for a direct one", 0, MAX_WIDTH
            ),
            int_param("kv_lora_rank", 512, "MLA: rank of the compressed key/value latent", 1, MAX_WIDTH),
            int_param("qk_nope_head_dim", 128, "MLA: each query/key head's width without rotary positions", 1, 4096),
            int_param("qk_rope_head_dim", 64, "MLA: each query/key head's rotary width (the key's is shared)", 1, 4096),
            int_param("v_head_dim", 128, "MLA: each value head's width", 1, 4096),
            int_param("num_experts", 8, "routed experts in each MoE layer; every one is stored", 1, MAX_EXPERTS),
            int_param("experts_per_token", 2, "routed experts each token is sent to (top-k)", 1, MAX_EXPERTS),
            int_param("expert_ffn_dim", 14_336, "hidden width of each routed expert's gated MLP", 1, MAX_VOCAB),
            int_param(
                "shared_ffn_dim",
                0,
                "hidden width of the always-on shared experts' MLP in each MoE layer; 0 for none",
                0,
                MAX_VOCAB,
            ),
            bool_param("shared_expert_gate", False, "a sigmoid gate on the shared expert's output (Qwen-MoE)"),
            bool_param(
                "router_bias", False, "a per-expert score-correction bias, a buffer, not a parameter (DeepSeek-V3)"
            ),
            blocks_param(
                "dense_layers",
                "blocks with a dense MLP instead of experts, numbered from 0 (DeepSeek-V3: 0,1,2); "
                "none or empty: every block has experts",
            ),
            dataclasses.replace(_FFN, default=14_336, description="hidden width of the dense blocks' gated MLP"),
            dataclasses.replace(_TIED, default=False),
            choice_param(
                "norm",
                "rmsnorm",
                "rmsnorm (scale only), layernorm (scale and bias: PhiMoE) or layernorm_no_bias (a scale: DBRX)",
                ("rmsnorm", "layernorm", "layernorm_no_bias"),
            ),
            bool_param("attn_bias", False, "biases on the query, key, value and output projections (PhiMoE)"),
            bool_param("attention_sinks", False, "a learned sink logit a head in every attention layer (GPT-OSS)"),
            bool_param(
                "expert_biases", False, "biases on the router and on every routed expert's projections (GPT-OSS)"
            ),
            bool_param(
                "wide_qk_norm",
                False,
                "qk_norm over every query and key feature (num_heads x head_dim scales; OLMoE) instead of each head",
            ),
            bool_param("head_bias", False, "a bias on the untied output head (PhiMoE's lm_head_bias)"),
            dataclasses.replace(
                _POSITIONS,
                default=32_768,
                description="longest sequence the rotary positions were trained for (the serving context's cap); "
                "changes no count",
            ),
            *SERVING_HPARAMS,
        ),
        "t5": (
            dataclasses.replace(_VOCAB, default=32_128),
            dataclasses.replace(_D_MODEL, default=512),
            dataclasses.replace(_LAYERS, default=6, description="encoder blocks"),
            int_param("num_decoder_layers", 6, "decoder blocks (each with self- and cross-attention)", 1, MAX_BLOCKS),
            dataclasses.replace(_HEADS, default=8, description="attention heads in every attention layer"),
            int_param(
                "head_dim", 64, "width of each attention head (d_kv); heads x head_dim need not be d_model", 1, 4096
            ),
            dataclasses.replace(_FFN, default=2048),
            int_param(
                "relative_buckets", 32, "buckets of the relative position bias (first block of each stack)", 1, 4096
            ),
            bool_param(
                "gated_mlp", False, "gated-GELU MLP (T5 v1.1, Flan-T5: wi_0, wi_1, wo) instead of ReLU (wi, wo)"
            ),
            dataclasses.replace(_TIED, description="the output projection reuses the shared token embedding"),
        ),
        "bert": (
            dataclasses.replace(_VOCAB, default=30_522),
            _D_MODEL,
            _LAYERS,
            _HEADS,
            _FFN,
            dataclasses.replace(_POSITIONS, default=512),
            int_param("type_vocab_size", 2, "token types (segments): rows of the token-type embedding", 1, MAX_HEADS),
            bool_param("pooler", True, "the pooler: a Dense with tanh over the first token"),
            _BIAS,
        ),
        "vit": (
            _IMAGE,
            int_param("patch_size", 16, "patch height and width in pixels; must divide image_size", 1, MAX_IMAGE),
            _D_MODEL,
            _LAYERS,
            _HEADS,
            _FFN,
            _CLASSES,
            _BIAS,
        ),
        "resnet": (
            HParam(
                name="stage_blocks",
                kind="ints",
                default=(3, 4, 6, 3),
                description="residual blocks in each stage; stage i is 64 x 2^i channels wide",
                minimum=1,
                maximum=MAX_STAGE_BLOCKS,
                max_length=MAX_STAGES,
            ),
            bool_param(
                "bottleneck", True, "bottleneck blocks (1x1, 3x3, 1x1, 4x wider out) instead of basic (3x3, 3x3)"
            ),
            _CLASSES,
            dataclasses.replace(_IMAGE, description="input image height and width (3 channels); changes no count"),
        ),
    }
    | dict(zoo.ZOO_SCHEMAS)  # the zoo's families come after the first seven
)
# A vision-language model's language model is a decoder: its hyperparameters, then the vision tower's.
FAMILY_SCHEMAS = MappingProxyType(
    dict(FAMILY_SCHEMAS) | {zoo.MULTIMODAL: FAMILY_SCHEMAS["decoder"] + zoo.VISION_HPARAMS}
)
FAMILY_SCHEMAS = MappingProxyType(zoo.with_llama4(FAMILY_SCHEMAS))  # the moe family's and a vision tower's

FAMILY_DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "mlp": "multilayer perceptron: Dense layers with ReLU, then a classifier",
        "decoder": "decoder-only transformer (GPT-2, LLaMA, Mistral, GPT-NeoX style), pre-norm",
        "moe": "Mixture-of-Experts decoder (Mixtral, Qwen-MoE, DeepSeek-V2/V3): routed experts stacked on an "
        "expert axis, a router, optional shared experts and dense blocks, grouped-query or latent attention",
        "t5": "encoder-decoder transformer (T5, Flan-T5): shared embedding, relative position bias, RMSNorm",
        "bert": "encoder transformer (BERT): token, position and token-type embeddings, post-norm, pooler",
        "vit": "vision transformer: patch convolution, class token, learned positions, classifier head",
        "resnet": "ResNet v1.5: basic or bottleneck blocks, BatchNorm (running statistics are variables)",
    }
    | dict(zoo.ZOO_DESCRIPTIONS)
)

FAMILIES = tuple(FAMILY_SCHEMAS)


def schema(family: str) -> tuple[HParam, ...]:
    """The hyperparameters of ``family``, in the order a form should show them."""
    found = FAMILY_SCHEMAS.get(family)
    if found is None:
        raise ValueError(f"unknown family {show(family)}; families: {', '.join(FAMILIES)}")
    return found


def hparam(family: str, name: Any, preset: str) -> HParam:
    """The hyperparameter ``name`` of ``family``, or a message listing the valid names (``preset``
    is named in it for context)."""
    for spec in schema(family):
        if spec.name == name:
            return spec
    valid = ", ".join(spec.name for spec in schema(family))
    raise ValueError(f"unknown hyperparameter {show(name)} for preset {preset!r} ({family} family); valid: {valid}")


def family_defaults(family: str) -> dict[str, Any]:
    """Every hyperparameter of ``family`` at its default (its reference model's value)."""
    return {spec.name: spec.default for spec in schema(family)}


def normalize(family: str, base: Mapping[str, Any], overrides: Any, context: str) -> tuple[tuple[str, Any], ...]:
    """``overrides`` (a mapping, or (name, value) pairs) checked against ``family`` one by one and
    together over ``base``, as a sorted tuple of (name, value) pairs; ``context`` names the model
    in messages."""
    if isinstance(overrides, Mapping):
        pairs = list(overrides.items())
    elif isinstance(overrides, (list, tuple)):
        pairs = []
        for index, pair in enumerate(overrides):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise TypeError(f"`overrides[{index}]` must be a (name, value) pair, got {show(pair)}")
            pairs.append(tuple(pair))
    else:
        raise TypeError(f"`overrides` must map hyperparameter names to values, got {type(overrides).__name__}")
    checked: dict[str, Any] = {}
    for name, value in pairs:
        spec = hparam(family, name, context)
        if name in checked:
            raise ValueError(f"`overrides` repeats the hyperparameter {show(name)}")
        checked[name] = spec.check(value)
    check_hparams(family, {**base, **checked})
    return tuple(sorted(checked.items()))


def normalize_family_overrides(family: str, overrides: Any) -> tuple[tuple[str, Any], ...]:
    """``normalize_overrides`` for a model of ``family`` that is no preset (one opened from a
    file): its overrides are against the family's defaults."""
    return normalize(family, family_defaults(family), overrides, f"{family} family")


def overrides_from(family: str, base: Mapping[str, Any], hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters of ``hparams`` that differ from ``base``: a model's overrides."""
    return {spec.name: hparams[spec.name] for spec in schema(family) if hparams[spec.name] != base[spec.name]}


# --- editing: values that derive from others follow them -----------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived:
    """A hyperparameter that derives from another unless a person sets it.

    ``ratio``: it keeps its ratio to ``source`` (an MLP 4x as wide as ``d_model`` stays 4x).
    ``tied``: it equals ``source`` while it does (as many key/value heads as query heads).
    """

    name: str
    source: str
    kind: str


_FFN_FOLLOWS = Derived(name="ffn_dim", source="d_model", kind="ratio")
DERIVED: Mapping[str, tuple[Derived, ...]] = MappingProxyType(
    {
        "decoder": (_FFN_FOLLOWS, Derived(name="num_kv_heads", source="num_heads", kind="tied")),
        "bert": (_FFN_FOLLOWS,),
        "vit": (_FFN_FOLLOWS,),
    }
)


def follow(family: str, before: Mapping[str, Any], after: Mapping[str, Any], pinned: Any = ()) -> dict[str, Any]:
    """``after`` (``before`` with some values edited) with each derived value following its source.

    A derived value follows when its source changed, it was not itself edited, and it is not in
    ``pinned`` (values a person set): ``ffn_dim`` keeps its ratio to ``d_model`` (rounded to the
    nearest integer), and ``num_kv_heads`` stays equal to ``num_heads`` if it was. GPT-2 small
    taken to ``d_model`` 2048 so gets ``ffn_dim`` 8192, as its 4x MLP means.
    """
    result = dict(after)
    for rule in DERIVED.get(family, ()):
        old_source, new_source = before[rule.source], after[rule.source]
        if rule.name in pinned or after[rule.name] != before[rule.name] or old_source == new_source:
            continue
        if rule.kind == "ratio":
            scaled = round(Fraction(before[rule.name] * new_source, old_source))
            spec = hparam(family, rule.name, family)
            result[rule.name] = min(max(scaled, spec.low), spec.high)
        elif before[rule.name] == old_source:
            result[rule.name] = new_source
    return result


def edit(
    family: str, base: Mapping[str, Any], overrides: Mapping[str, Any], edits: Mapping[str, Any]
) -> dict[str, Any]:
    """A model's overrides once ``edits`` are applied as the Model page applies a person's edits:
    each derived value follows its source (``follow``) unless it is edited too. ``base``: the
    preset's hyperparameters (or the family's defaults for a file's model), ``overrides`` the
    changes already made from it. ``count --set`` and the page share this one rule, so
    ``--set num_heads=16`` on GPT-2 small moves ``num_kv_heads`` with it, as the page does."""
    merged = {**base, **overrides}
    before = {spec.name: merged[spec.name] for spec in schema(family) if spec.name in merged}
    after = {**before, **edits}
    followed = follow(family, before, after, pinned=set(edits))
    return {**overrides, **edits, **{name: value for name, value in followed.items() if value != before.get(name)}}


_MLA_ONLY = frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
_GQA_ONLY = frozenset(
    {"num_kv_heads", "head_dim", "qkv_bias", "qk_norm", "attn_bias", "wide_qk_norm", "attention_sinks"}
)


def applicable(family: str, hparams: Mapping[str, Any]) -> tuple[str, ...]:
    """The hyperparameters that change the count of this model (a form shows only these): a
    decoder without a learned position table has no use for ``max_positions``, and ``qkv_bias``
    adds nothing when ``use_bias`` already puts biases everywhere."""
    hidden: set[str] = set(SERVING_ONLY)
    unused = _UNUSED.get(family)
    if unused is not None:
        hidden |= unused(hparams)
    hidden |= zoo.hidden(family, hparams)
    return tuple(spec.name for spec in schema(family) if spec.name not in hidden)


def _decoder_hidden(hparams: Mapping[str, Any]) -> set[str]:
    """A decoder without a learned position table, or with biases everywhere."""
    hidden = set()
    if hparams["position_embedding"] == "none":
        hidden.add("max_positions")
    if hparams["use_bias"]:
        hidden.add("qkv_bias")
    return hidden


def _moe_hidden(hparams: Mapping[str, Any]) -> set[str]:
    """Rotary positions (no table), the other attention kind's sizes, and what no block of it uses."""
    hidden = {"max_positions"} | (_MLA_ONLY if hparams["attention"] == "gqa" else _GQA_ONLY)
    if not hparams["dense_layers"]:
        hidden.add("ffn_dim")
    if not hparams["shared_ffn_dim"]:
        hidden.add("shared_expert_gate")
    if hparams["tied_embeddings"]:
        hidden.add("head_bias")
    if not hparams["qk_norm"]:
        hidden.add("wide_qk_norm")
    return hidden


# The hyperparameters that change no count, a family (the zoo's: dcsim.model.zoo.schemas.hidden).
_UNUSED: Mapping[str, Callable[[Mapping[str, Any]], set[str]]] = MappingProxyType(
    {"decoder": _decoder_hidden, "moe": _moe_hidden, zoo.MULTIMODAL: _decoder_hidden}
)


def _divisors(number: int, up_to: int) -> str:
    found = [divisor for divisor in range(1, min(number, up_to) + 1) if number % divisor == 0]
    shown = ", ".join(f"{divisor:,}" for divisor in found[:12])
    return shown + (", ..." if len(found) > 12 else "")


def _must_divide(
    hparams: Mapping[str, Any], part: str, whole: str, why: str, options: str, *, aside: str = "", up_to: int = 0
) -> None:
    """Refuse a ``part`` that does not divide ``whole``: say why it must, and which values would
    (divisors of ``whole`` up to ``up_to``, all of them by default)."""
    size, total = hparams[part], hparams[whole]
    if total % size:
        raise ValueError(
            f"`{part}` ({size:,}) must divide `{whole}` ({total:,}) {why}: change {whole} and {part} together"
            f"{aside}; {options} that divide {total:,}: {_divisors(total, up_to or total)}"
        )


def check_hparams(family: str, hparams: Mapping[str, Any]) -> None:
    """Check the rules that tie hyperparameters together; raise a ``ValueError`` that says which."""
    latent = hparams.get("attention") == "mla"  # MLA heads have their own widths
    if "num_heads" in hparams and not hparams.get("head_dim") and not latent:
        _must_divide(
            hparams,
            "num_heads",
            "d_model",
            "so every head gets d_model / num_heads features",
            "head counts",
            aside=_HEAD_DIM_ASIDES.get(family, ""),
            up_to=MAX_HEADS,
        )
    if "num_decoder_heads" in hparams:  # an encoder-decoder's decoder heads (BART, Whisper)
        _must_divide(
            hparams,
            "num_decoder_heads",
            "d_model",
            "so every head gets d_model / its heads",
            "head counts",
            up_to=MAX_HEADS,
        )
    if "num_kv_heads" in hparams and not latent:
        _must_divide(
            hparams,
            "num_kv_heads",
            "num_heads",
            "so each key/value head serves the same number of query heads",
            "key/value head counts",
        )
    if "local_layers" in hparams:
        _check_windows(hparams)
    rule = _RULES.get(family)
    if rule is not None:
        rule(hparams)
    zoo.check(family, hparams)


def _check_windows(hparams: Mapping[str, Any]) -> None:
    """A sliding window and the blocks that use it come together. Blocks past ``num_layers`` are
    allowed and build nothing, so a preset made shallower keeps its pattern (Gemma 2 cut to 3
    blocks: 0 and 2 local); blocks added past the list attend to every token."""
    window, local = hparams["sliding_window"], hparams["local_layers"]
    if bool(window) != bool(local):
        raise ValueError(
            f"`sliding_window` ({window:,}) and `local_layers` ({','.join(map(str, local)) or 'none'}) come together: "
            "a window needs the blocks that use it, and local blocks need a window; set both, or neither"
        )
    _check_block_list("local_layers", local, None)


def _check_block_list(name: str, blocks: tuple[int, ...], layers: int | None) -> None:
    beyond = [index for index in blocks if layers is not None and index >= layers]
    if beyond and layers is not None:
        raise ValueError(
            f"`{name}` names block {beyond[0]:,}, but the model has {layers:,} blocks (`num_layers`), "
            f"numbered 0 to {layers - 1:,}"
        )
    if len(set(blocks)) != len(blocks) or list(blocks) != sorted(blocks):
        raise ValueError(f"`{name}` must list each block once, in increasing order, got {','.join(map(str, blocks))}")


def _check_experts(hparams: Mapping[str, Any]) -> None:
    """A Mixture-of-Experts model's rules: top-k within the experts, dense blocks within the model."""
    experts, top_k = hparams["num_experts"], hparams["experts_per_token"]
    if top_k > experts:
        raise ValueError(
            f"`experts_per_token` ({top_k:,}) must be at most `num_experts` ({experts:,}): each token is routed "
            f"to that many of the experts; allowed: 1 to {experts:,}"
        )
    _check_block_list("dense_layers", hparams["dense_layers"], hparams["num_layers"])
    if hparams.get("attention_sinks") and hparams.get("wide_qk_norm") and hparams["qk_norm"]:
        raise ValueError(
            "`attention_sinks` and `wide_qk_norm` are both true: dcsim's attention normed over every feature has no "
            "sinks; set one of them to false"
        )
    if hparams.get("head_bias") and hparams["tied_embeddings"]:
        raise ValueError(
            "`head_bias` is true but `tied_embeddings` is true too: dcsim builds the head's bias only on an "
            "untied lm_head; set tied_embeddings to false, or head_bias to false"
        )


def _check_patches(hparams: Mapping[str, Any]) -> None:
    _must_divide(hparams, "patch_size", "image_size", "so the patches tile the image", "patch sizes")


def _check_vision_heads(hparams: Mapping[str, Any]) -> None:
    _must_divide(hparams, "vision_heads", "vision_d_model", "so every vision head gets its share", "head counts")


# Each family's own rules, checked after the ones every family shares (the zoo's: dcsim.model.zoo.schemas.check).
_RULES: Mapping[str, Callable[[Mapping[str, Any]], None]] = MappingProxyType(
    {"vit": _check_patches, zoo.MULTIMODAL: _check_vision_heads, "moe": _check_experts, zoo.LLAMA4: _check_experts}
)
# The families whose heads may be set wider than d_model / num_heads (head_dim), as a refusal says.
_HEAD_DIM_ASIDES = MappingProxyType(dict.fromkeys(("decoder", "moe"), " (or set head_dim, each head's own width)"))


def _check_defaults() -> None:
    """Every family's defaults obey the rules that tie its hyperparameters together: checked at
    import (a model opened from a file is overrides against these)."""
    for family in FAMILIES:
        check_hparams(family, family_defaults(family))


_check_defaults()
