"""Architecture presets: one table of published models, each checked against the hyperparameter
schema of its family (``dcsim.model.schemas``).

Every preset names a model family (built from real Flax modules in ``dcsim.model.families``), its full
hyperparameters, the parameter count it is published with and where that figure comes from. The
tests initialise every preset abstractly and assert the published figure exactly, so a row here is
a claim the suite checks, not a number copied in. Beside the table: a model's hyperparameters with
its overrides applied, its title, and where its count comes from, in words.

This module is pure Python (no JAX, no Flax), like the schemas it builds on: the configuration, the
links codec and the dashboard's forms read the table cheaply. Every row is checked at import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dcsim.inputs import show
from dcsim.model.schemas import FAMILY_DESCRIPTIONS, check_hparams, family_defaults, normalize, schema


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """One row of the preset table.

    Attributes:
      name: the preset's name, e.g. ``gpt2-small``.
      family: the family it is built from, a key of ``dcsim.model.schemas.FAMILY_SCHEMAS``.
      hparams: every hyperparameter of the family, by name.
      published_params: the parameter count published for the model; the tests reproduce it.
      source: where that figure comes from.
      title: a readable name, e.g. ``GPT-2 small (124M)``.
    """

    name: str
    family: str
    title: str
    hparams: Mapping[str, Any]
    published_params: int
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "hparams", MappingProxyType(dict(self.hparams)))


_GPT2 = {"vocab_size": 50_257, "max_positions": 1024, "position_embedding": "learned", "tied_embeddings": True}
_GPT2 |= {"use_bias": True, "norm": "layernorm", "gated_mlp": False, "head_dim": 0, "qkv_bias": False}
_PLAIN_BLOCKS: dict[str, Any] = {"qk_norm": False, "post_norms": False, "fused_projections": False}
_PLAIN_BLOCKS |= {"sliding_window": 0, "local_layers": (), "rope_scaling": False}  # every block attends to all
_GPT2 |= _PLAIN_BLOCKS
_LLAMA: dict[str, Any] = {"position_embedding": "none", "tied_embeddings": False, "use_bias": False, "norm": "rmsnorm"}
_LLAMA |= {"gated_mlp": True, "head_dim": 0, "qkv_bias": False} | _PLAIN_BLOCKS
_ROTARY = {**_LLAMA, "max_positions": 4096}  # rotary decoders: no position table to size
_MOE = family_defaults("moe")
_LLAMA4 = family_defaults("llama4")
_T5 = family_defaults("t5")
# Each figure up to Llama 3 8B is also what Hugging Face transformers' own model of the same
# configuration counts (bench/hf_counts.py builds them on the meta device and prints num_parameters()).
_HF = "transformers {cls}({config}).num_parameters(), checked in bench/hf_counts.py"
_TV = "torchvision's model documentation (num_params)"
# The rows after it are checked against transformers too: bench/hf_import.py writes each model's
# config.json and num_parameters() to tests/data/hf/, and tests/test_hf_modern.py opens every file
# named there and requires the preset's hyperparameters and count.
_HF_FILE = "transformers {cls}({config}).num_parameters(), written by bench/hf_import.py to tests/data/hf/"
_TRAP_GEMMA = (
    "; Gemma's paper counts a 256,128-token vocabulary (its padded table), its config.json has 256,000: "
    "the paper's figure is larger by 128 x d_model"
)
_GEMMA_SOURCE = _HF_FILE.format(cls="{cls}", config="{config}") + _TRAP_GEMMA
_TRAP_QWEN2 = "; the Qwen2 blog's figures leave out the untied output head (vocab x d_model)"


def _h(**hparams: Any) -> dict[str, Any]:
    """A row's hyperparameters, written as keywords."""
    return hparams


# Each row: name, family, title, published count, source, and every hyperparameter of the family,
# most as a base above (GPT-2, Llama, a rotary Llama-style decoder, the moe, llama4 and t5 families'
# defaults) with the model's own values over it. Laid out by hand, one model a few lines.
# fmt: off
_TABLE: tuple[tuple[str, str, str, int, str, dict[str, Any]], ...] = (
    ("mlp-mnist", "mlp", "MLP 784-512-512-10 (MNIST)", 669_706,
     "the Keras MNIST MLP example's model.summary() (Dense 512, 512, 10 on 784 inputs)",
     _h(input_dim=784, hidden_dim=512, num_layers=2, num_classes=10, use_bias=True)),
    *(
        (f"gpt2-{size}", "decoder", f"GPT-2 {size}", count,
         _HF.format(cls="GPT2LMHeadModel", config=f"gpt2-{size}") + "; lm_head tied to wte, counted once",
         _GPT2 | _h(d_model=d_model, num_layers=layers, num_heads=heads, num_kv_heads=heads, ffn_dim=4 * d_model))
        for size, d_model, layers, heads, count in (
            ("small", 768, 12, 12, 124_439_808),
            ("medium", 1024, 24, 16, 354_823_168),
            ("large", 1280, 36, 20, 774_030_080),
            ("xl", 1600, 48, 25, 1_557_611_200),
        )
    ),
    *(
        (f"bert-{size}", "bert", f"BERT {size} (uncased, with pooler)", count,
         _HF.format(cls="BertModel", config=f"bert-{size}-uncased") + "; pooler in, pre-training heads out",
         _h(vocab_size=30_522, d_model=d_model, num_layers=layers, num_heads=heads, ffn_dim=4 * d_model,
            max_positions=512, type_vocab_size=2, pooler=True, use_bias=True))
        for size, d_model, layers, heads, count in (
            ("base", 768, 12, 12, 109_482_240),
            ("large", 1024, 24, 16, 335_141_888),
        )
    ),
    *(
        (f"vit-{size[0]}16", "vit", f"ViT-{size[0].upper()}/16 (224 px, 1000 classes)", count,
         f"{_TV} for vit_{size[0]}_16; "
         + _HF.format(cls="ViTForImageClassification", config=f"vit-{size}-patch16-224, 1000 labels"),
         _h(image_size=224, patch_size=16, d_model=d_model, num_layers=layers, num_heads=heads, ffn_dim=4 * d_model,
            num_classes=1000, use_bias=True))
        for size, d_model, layers, heads, count in (
            ("base", 768, 12, 12, 86_567_656),
            ("large", 1024, 24, 16, 304_326_632),
        )
    ),
    *(
        (f"resnet{depth}", "resnet", f"ResNet-{depth}", count,
         f"{_TV} for resnet{depth} (BatchNorm scale and bias counted, running statistics not); "
         + _HF.format(cls="ResNetForImageClassification", config=f"resnet-{depth}"),
         _h(stage_blocks=blocks, bottleneck=bottleneck, num_classes=1000, image_size=224))
        for depth, blocks, bottleneck, count in (
            (18, (2, 2, 2, 2), False, 11_689_512),
            (50, (3, 4, 6, 3), True, 25_557_032),
            (152, (3, 8, 36, 3), True, 60_192_808),
        )
    ),
    ("llama2-7b", "decoder", "Llama 2 7B", 6_738_415_616,
     _HF.format(cls="LlamaForCausalLM", config="meta-llama/Llama-2-7b-hf"),
     _LLAMA | _h(vocab_size=32_000, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=32, ffn_dim=11_008,
                 max_positions=4096)),
    ("llama2-13b", "decoder", "Llama 2 13B", 13_015_864_320,
     _HF.format(cls="LlamaForCausalLM", config="meta-llama/Llama-2-13b-hf"),
     _LLAMA | _h(vocab_size=32_000, d_model=5120, num_layers=40, num_heads=40, num_kv_heads=40, ffn_dim=13_824,
                 max_positions=4096)),
    ("llama2-70b", "decoder", "Llama 2 70B (8 KV heads)", 68_976_648_192,
     _HF.format(cls="LlamaForCausalLM", config="meta-llama/Llama-2-70b-hf"),
     _LLAMA | _h(vocab_size=32_000, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8, ffn_dim=28_672,
                 max_positions=4096)),
    ("llama3-8b", "decoder", "Llama 3 8B (8 KV heads)", 8_030_261_248,
     _HF.format(cls="LlamaForCausalLM", config="meta-llama/Meta-Llama-3-8B"),
     _LLAMA | _h(vocab_size=128_256, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8, ffn_dim=14_336,
                 max_positions=8192)),
    # The families of issue 16.
    ("gemma-7b", "decoder", "Gemma 7B", 8_537_680_896,
     _GEMMA_SOURCE.format(cls="GemmaForCausalLM", config="google/gemma-7b"),
     _ROTARY | _h(vocab_size=256_000, d_model=3072, num_layers=28, num_heads=16, num_kv_heads=16, ffn_dim=24_576,
                  head_dim=256, tied_embeddings=True, max_positions=8192)),
    ("gemma2-2b", "decoder", "Gemma 2 2B", 2_614_341_888,
     _GEMMA_SOURCE.format(cls="Gemma2ForCausalLM", config="google/gemma-2-2b"),
     _ROTARY | _h(vocab_size=256_000, d_model=2304, num_layers=26, num_heads=8, num_kv_heads=4, ffn_dim=9216,
                  head_dim=256, tied_embeddings=True, post_norms=True, max_positions=8192,
                  sliding_window=4096, local_layers=tuple(range(0, 26, 2)))),
    ("gemma3-1b", "decoder", "Gemma 3 1B", 999_885_952,
     _HF_FILE.format(cls="Gemma3ForCausalLM", config="google/gemma-3-1b-pt"),
     _ROTARY | _h(vocab_size=262_144, d_model=1152, num_layers=26, num_heads=4, num_kv_heads=1, ffn_dim=6912,
                  head_dim=256, tied_embeddings=True, post_norms=True, qk_norm=True, max_positions=32_768,
                  sliding_window=512, local_layers=tuple(index for index in range(26) if (index + 1) % 6))),
    ("qwen2.5-72b", "decoder", "Qwen2.5 72B (8 KV heads)", 72_706_203_648,
     _HF_FILE.format(cls="Qwen2ForCausalLM", config="Qwen/Qwen2.5-72B") + _TRAP_QWEN2,
     _ROTARY | _h(vocab_size=152_064, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8, ffn_dim=29_568,
                  qkv_bias=True, max_positions=131_072)),
    ("qwen3-8b", "decoder", "Qwen3 8B", 8_190_735_360,
     _HF_FILE.format(cls="Qwen3ForCausalLM", config="Qwen/Qwen3-8B"),
     _ROTARY | _h(vocab_size=151_936, d_model=4096, num_layers=36, num_heads=32, num_kv_heads=8, ffn_dim=12_288,
                  qk_norm=True, max_positions=40_960)),
    ("phi3-mini", "decoder", "Phi-3 mini (4k)", 3_821_079_552,
     _HF_FILE.format(cls="Phi3ForCausalLM", config="microsoft/Phi-3-mini-4k-instruct"),
     _ROTARY | _h(vocab_size=32_064, d_model=3072, num_layers=32, num_heads=32, num_kv_heads=32, ffn_dim=8192,
                  fused_projections=True)),
    ("mixtral-8x7b", "moe", "Mixtral 8x7B (8 experts, top-2)", 46_702_792_704,
     _HF_FILE.format(cls="MixtralForCausalLM", config="mistralai/Mixtral-8x7B-v0.1"), _MOE),  # 32,768 positions
    ("qwen1.5-moe-a2.7b", "moe", "Qwen1.5-MoE-A2.7B (60 experts, top-4, shared expert)", 14_315_784_192,
     _HF_FILE.format(cls="Qwen2MoeForCausalLM", config="Qwen/Qwen1.5-MoE-A2.7B"),
     _MOE | _h(vocab_size=151_936, d_model=2048, num_layers=24, num_heads=16, num_kv_heads=16, qkv_bias=True,
               num_experts=60, experts_per_token=4, expert_ffn_dim=1408, shared_ffn_dim=5632, shared_expert_gate=True,
               ffn_dim=5632, max_positions=8192)),
    ("qwen3-30b-a3b", "moe", "Qwen3-30B-A3B (128 experts, top-8)", 30_532_122_624,
     _HF_FILE.format(cls="Qwen3MoeForCausalLM", config="Qwen/Qwen3-30B-A3B"),
     _MOE | _h(vocab_size=151_936, d_model=2048, num_layers=48, num_heads=32, num_kv_heads=4, head_dim=128,
               qk_norm=True, num_experts=128, experts_per_token=8, expert_ffn_dim=768, ffn_dim=6144,
               max_positions=40_960)),
    ("deepseek-v2-lite", "moe", "DeepSeek-V2-Lite (MLA, 64 experts, top-6)", 15_706_484_224,
     _HF_FILE.format(cls="DeepseekV2ForCausalLM", config="deepseek-ai/DeepSeek-V2-Lite"),
     _MOE | _h(vocab_size=102_400, d_model=2048, num_layers=27, attention="mla", num_heads=16, num_kv_heads=16,
               q_lora_rank=0, kv_lora_rank=512, num_experts=64, experts_per_token=6, expert_ffn_dim=1408,
               shared_ffn_dim=2 * 1408, dense_layers=(0,), ffn_dim=10_944, max_positions=163_840, rope_scaling=True)),
    ("deepseek-v3", "moe", "DeepSeek-V3 (671B; MLA, 256 experts, top-8)", 671_026_404_352,
     _HF_FILE.format(cls="DeepseekV3ForCausalLM", config="deepseek-ai/DeepSeek-V3")
     + "; the paper's 671B, without the 14B multi-token-prediction module its checkpoint also holds",
     _MOE | _h(vocab_size=129_280, d_model=7168, num_layers=61, attention="mla", num_heads=128, num_kv_heads=128,
               q_lora_rank=1536, kv_lora_rank=512, num_experts=256, experts_per_token=8, expert_ffn_dim=2048,
               shared_ffn_dim=2048, router_bias=True, dense_layers=(0, 1, 2), ffn_dim=18_432, max_positions=163_840,
               rope_scaling=True)),
    # Issue 30, item 8: the models teams name most. Each count is transformers' for the published
    # config.json (tests/data/hf/), with the serving fields that file publishes: positions, sliding
    # windows (Mistral 7B v0.1 on every block; Gemma 2 on the even ones), scaled rotary positions.
    ("mistral-7b", "decoder", "Mistral 7B v0.1 (8 KV heads, 4,096-token windows)", 7_241_732_096,
     _HF_FILE.format(cls="MistralForCausalLM", config="mistralai/Mistral-7B-v0.1"),
     _ROTARY | _h(vocab_size=32_000, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8, ffn_dim=14_336,
                  max_positions=32_768, sliding_window=4096, local_layers=tuple(range(32)))),
    *(
        (f"llama3.1-{size.lower()}", "decoder", f"Llama 3.1 {size} (8 KV heads, 128K context)", count,
         _HF_FILE.format(cls="LlamaForCausalLM", config=f"meta-llama/Llama-3.1-{size}")
         + f"; Meta's model card: {size}",
         _ROTARY | _h(vocab_size=128_256, d_model=d_model, num_layers=layers, num_heads=heads, num_kv_heads=8,
                      ffn_dim=ffn, max_positions=131_072, rope_scaling=True))
        for size, d_model, layers, heads, ffn, count in (
            ("8B", 4096, 32, 32, 14_336, 8_030_261_248),
            ("70B", 8192, 80, 64, 28_672, 70_553_706_496),
            ("405B", 16_384, 126, 128, 53_248, 405_853_388_800),
        )
    ),
    ("qwen2.5-7b", "decoder", "Qwen2.5 7B (4 KV heads)", 7_615_616_512,
     _HF_FILE.format(cls="Qwen2ForCausalLM", config="Qwen/Qwen2.5-7B") + "; the Qwen2.5 report's 7.61B",
     _ROTARY | _h(vocab_size=152_064, d_model=3584, num_layers=28, num_heads=28, num_kv_heads=4, ffn_dim=18_944,
                  qkv_bias=True, max_positions=131_072)),
    ("qwen2.5-32b", "decoder", "Qwen2.5 32B (8 KV heads)", 32_763_876_352,
     _HF_FILE.format(cls="Qwen2ForCausalLM", config="Qwen/Qwen2.5-32B"),
     _ROTARY | _h(vocab_size=152_064, d_model=5120, num_layers=64, num_heads=40, num_kv_heads=8, ffn_dim=27_648,
                  qkv_bias=True, max_positions=131_072)),
    ("gemma2-9b", "decoder", "Gemma 2 9B", 9_241_705_984,
     _HF_FILE.format(cls="Gemma2ForCausalLM", config="google/gemma-2-9b"),
     _ROTARY | _h(vocab_size=256_000, d_model=3584, num_layers=42, num_heads=16, num_kv_heads=8, ffn_dim=14_336,
                  head_dim=256, tied_embeddings=True, post_norms=True, max_positions=8192,
                  sliding_window=4096, local_layers=tuple(range(0, 42, 2)))),
    ("gemma2-27b", "decoder", "Gemma 2 27B", 27_227_128_320,
     _HF_FILE.format(cls="Gemma2ForCausalLM", config="google/gemma-2-27b"),
     _ROTARY | _h(vocab_size=256_000, d_model=4608, num_layers=46, num_heads=32, num_kv_heads=16, ffn_dim=36_864,
                  head_dim=128, tied_embeddings=True, post_norms=True, max_positions=8192,
                  sliding_window=4096, local_layers=tuple(range(0, 46, 2)))),
    ("phi3.5-moe", "moe", "Phi-3.5-MoE (16 experts, top-2)", 41_873_153_344,
     _HF_FILE.format(cls="PhimoeForCausalLM", config="microsoft/Phi-3.5-MoE-instruct")
     + "; the model card's 6.6B active (dcsim's active count: 6,640,999,744); its rope_scaling is longrope",
     _MOE | _h(vocab_size=32_064, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8, num_experts=16,
               experts_per_token=2, expert_ffn_dim=6400, ffn_dim=6400, norm="layernorm", attn_bias=True,
               head_bias=True, max_positions=131_072, sliding_window=131_072, local_layers=tuple(range(32)),
               rope_scaling=True)),
    # Llama 4 as its Hub files build it (Llama4ForConditionalGeneration): vision tower, projector and
    # language model; Meta's cards say 109B total and 400B total, 17B active each (the language model's).
    *(
        (f"llama4-{size.lower()}", "llama4", f"Llama 4 {size} ({experts} experts, top-1, a shared expert)", count,
         _HF_FILE.format(cls="Llama4ForConditionalGeneration", config=f"meta-llama/Llama-4-{size}-17B-{experts}E")
         + f"; Meta's model card: {total} total, 17B active",
         _LLAMA4 | _h(vocab_size=202_048, d_model=5120, num_layers=48, num_heads=40, num_kv_heads=8,
                      num_experts=experts, experts_per_token=1, expert_ffn_dim=8192, shared_ffn_dim=8192,
                      ffn_dim=16_384, dense_layers=dense))
        for size, experts, dense, count, total in (
            ("Scout", 16, (), 108_641_793_536, "109B"),
            ("Maverick", 128, tuple(range(0, 48, 2)), 401_583_781_376, "400B"),
        )
    ),
    ("t5-small", "t5", "T5-small", 60_506_624,
     _HF_FILE.format(cls="T5ForConditionalGeneration", config="t5-small"), _T5),
    ("t5-large", "t5", "T5-large", 737_668_096,
     _HF_FILE.format(cls="T5ForConditionalGeneration", config="t5-large"),
     _T5 | _h(d_model=1024, num_layers=24, num_decoder_layers=24, num_heads=16, ffn_dim=4096)),
    ("flan-t5-base", "t5", "Flan-T5-base (gated-GELU, untied head)", 247_577_856,
     "the published checkpoint (google/flan-t5-base stores its lm_head.weight apart); transformers 5 ties T5's "
     "head whatever the config says, and counts 24,674,304 fewer",
     _T5 | _h(d_model=768, num_layers=12, num_decoder_layers=12, num_heads=12, gated_mlp=True, tied_embeddings=False)),
)
# fmt: on
_ROWS = tuple(
    Preset(name=name, family=family, title=title, hparams=hparams, published_params=count, source=source)
    for name, family, title, count, source, hparams in _TABLE
)

PRESETS: Mapping[str, Preset] = MappingProxyType({row.name: row for row in _ROWS})
"""The preset table, by name, in the order above (MLP, GPT-2, BERT, ViT, ResNet, Llama, then the
families of issues 16 and 30)."""


def get_preset(name: Any) -> Preset:
    """The preset called ``name``, or a message listing the valid names."""
    if not isinstance(name, str):
        raise TypeError(f"`preset` must be a preset name, got {type(name).__name__} {show(name)}")
    if name not in PRESETS:
        raise ValueError(f"unknown preset {show(name)}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def normalize_overrides(preset: str, overrides: Any) -> tuple[tuple[str, Any], ...]:
    """Check ``overrides`` against the preset's family and return them as a sorted tuple of
    (name, value) pairs; the resolved hyperparameters are checked together too (heads dividing
    ``d_model`` and so on)."""
    row = get_preset(preset)
    return normalize(row.family, row.hparams, overrides, preset)


def resolve(preset: str, overrides: Any = ()) -> dict[str, Any]:
    """The preset's hyperparameters with ``overrides`` applied, every one checked."""
    row = get_preset(preset)
    merged = {**row.hparams, **dict(normalize_overrides(preset, overrides))}
    return {spec.name: merged[spec.name] for spec in schema(row.family)}


def base_hparams(config: Any) -> dict[str, Any]:
    """What a model's overrides are changes from: its preset's hyperparameters, or its family's
    defaults for a model opened from a file; empty for the Dense stack."""
    if config.origin is not None:
        return family_defaults(config.origin.family)
    if config.preset is None:
        return {}
    return dict(PRESETS[config.preset].hparams)


def resolved_hparams(config: Any) -> dict[str, Any]:
    """The hyperparameters a ``ModelConfig`` builds with: its base's (``base_hparams``), overrides
    applied, in the family schema's order; empty for the Dense stack. The configuration checked
    them when it was made."""
    if config.family is None:
        return {}
    merged = {**base_hparams(config), **dict(config.overrides)}
    return {spec.name: merged[spec.name] for spec in schema(config.family)}


def model_title(config: Any) -> str:
    """What a person calls the model: the preset's title (``Llama 2 70B (8 KV heads)``), a file's
    own name (``GemmaForCausalLM (gemma, from config.json)``), or ``Dense stack``."""
    if config.origin is not None:
        return config.origin.title
    if config.preset is not None:
        return PRESETS[config.preset].title
    return "Dense stack"


def provenance(config: Any, total_params: int) -> str | None:
    """One sentence on where the model comes from and how its count compares with the published
    one: ``matches the published ...`` only for a preset at its published values; a changed preset
    names its changes; a file's model says it is built from the file. None for the Dense stack."""
    if config.origin is not None:
        family = config.origin.family
        return (
            f"{config.origin.title}: built from the file's hyperparameters as dcsim's {family} family "
            f"({FAMILY_DESCRIPTIONS[family]})."
        )
    if config.preset is None:
        return None
    row = PRESETS[config.preset]
    if config.overrides:
        changed = ", ".join(f"{name}={value_text(value)}" for name, value in config.overrides)
        return f"{row.title} with {changed}; the published {row.title} has {row.published_params:,}."
    same = "matches" if total_params == row.published_params else "DIFFERS FROM"
    return f"{row.title}: {same} the published {row.published_params:,} ({row.source})."


EMPTY_LIST = "none"


def value_text(value: Any) -> str:
    """A hyperparameter as a link or a message writes it: ``true``, ``3,4,6,3``, ``768``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):  # an empty list is `none`: an empty link value may be dropped on the way
        return ",".join(str(entry) for entry in value) or EMPTY_LIST
    return str(value)


def published_table() -> list[dict[str, Any]]:
    """The preset table as plain rows: name, family, title, published_params, source."""
    return [
        {
            "name": row.name,
            "family": row.family,
            "title": row.title,
            "published_params": row.published_params,
            "source": row.source,
        }
        for row in PRESETS.values()
    ]


def _check_table() -> None:
    """Every row's hyperparameters are exactly its family's, each valid: checked at import."""
    for row in _ROWS:
        names = [spec.name for spec in schema(row.family)]
        if sorted(row.hparams) != sorted(names):
            raise RuntimeError(f"preset {row.name!r} must set exactly {names}, sets {sorted(row.hparams)}")
        for spec in schema(row.family):
            spec.check(row.hparams[spec.name])
        check_hparams(row.family, row.hparams)
        if type(row.published_params) is not int or row.published_params <= 0:
            raise RuntimeError(f"preset {row.name!r} needs a positive published count")


_check_table()
