"""Write the Hugging Face config.json fixtures of tests/test_hf.py, with transformers' own counts.

Run with an interpreter that has torch, transformers and accelerate (bench/requirements.txt):
    /tmp/hfvenv/bin/python bench/hf_import.py

Each model's published configuration (written out here: the Hub is not reachable) is saved as
transformers saves it (``config.to_json_string()``, every field a real config.json has), and the
model class is built under ``accelerate.init_empty_weights`` and counted with ``num_parameters()``
after ``tie_weights()``. The files go to ``tests/data/hf/``, the counts to
``tests/data/hf/counts.json``; ``tests/test_hf.py`` opens every file with ``dcsim.model.hf`` and requires
dcsim's count to equal transformers'. Prints a Markdown table; bench/README.md records a run.
"""

from __future__ import annotations

import json
from pathlib import Path

import transformers
from accelerate import init_empty_weights
from hf_decoders import decoder_sizes
from transformers import (
    BertConfig,
    BertModel,
    GemmaConfig,
    GemmaForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    ViTConfig,
    ViTForImageClassification,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "hf"


def published(cls, config_class, **fields):
    """The class to build and its configuration as the Hub's config.json has it (``architectures``
    names the class)."""
    return cls, config_class(architectures=[cls.__name__], **fields)


DECODERS = {
    "llama": (LlamaForCausalLM, LlamaConfig),
    "mistral": (MistralForCausalLM, MistralConfig),
    "gemma": (GemmaForCausalLM, GemmaConfig),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config),
}


def decoder(family, vocab, hidden, layers, heads, kv_heads, ffn, positions, **own):
    """A decoder of ``DECODERS``: the seven sizes every one here publishes, then its family's own fields."""
    cls, config_class = DECODERS[family]
    return published(cls, config_class, **decoder_sizes(vocab, hidden, layers, heads, kv_heads, ffn, positions), **own)


# Published configurations (the models' config.json on the Hub), by the file name written. Decoders:
# family, vocab, hidden, layers, heads, kv heads, ffn, positions, then the family's own fields.
MODELS = {
    "gpt2": published(GPT2LMHeadModel, GPT2Config),
    "gpt2-medium": published(GPT2LMHeadModel, GPT2Config, n_embd=1024, n_layer=24, n_head=16),
    "pythia-160m": published(
        GPTNeoXForCausalLM,
        GPTNeoXConfig,
        vocab_size=50304,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=2048,
        rotary_pct=0.25,
        tie_word_embeddings=False,
        use_parallel_residual=True,
    ),
    "llama-2-7b": decoder("llama", 32000, 4096, 32, 32, 32, 11008, 4096, tie_word_embeddings=False),
    "tinyllama-1.1b": decoder("llama", 32000, 2048, 22, 32, 4, 5632, 2048, tie_word_embeddings=False),
    "llama-3.2-1b": decoder("llama", 128256, 2048, 16, 32, 8, 8192, 131072, head_dim=64, tie_word_embeddings=True),
    "mistral-7b": decoder(
        "mistral", 32000, 4096, 32, 32, 8, 14336, 32768, sliding_window=4096, tie_word_embeddings=False
    ),
    "gemma-2b": decoder("gemma", 256000, 2048, 18, 8, 1, 16384, 8192, head_dim=256),
    "gemma-7b": decoder("gemma", 256000, 3072, 28, 16, 16, 24576, 8192, head_dim=256),
    "qwen2.5-0.5b": decoder("qwen2", 151936, 896, 24, 14, 2, 4864, 32768, tie_word_embeddings=True),
    "qwen2.5-7b": decoder("qwen2", 152064, 3584, 28, 28, 4, 18944, 131072, tie_word_embeddings=False),
    "bert-base-uncased": published(BertModel, BertConfig),
    "vit-base-patch16-224": published(ViTForImageClassification, ViTConfig, num_labels=1000),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    counts = {}
    print(f"transformers {transformers.__version__}\n")
    print("| config.json | model_type | transformers class | num_parameters() | file bytes |")
    print("|---|---|---|---|---|")
    for name, (cls, config) in MODELS.items():
        with init_empty_weights():
            model = cls(config)
        model.tie_weights()
        counts[name] = model.num_parameters()
        text = config.to_json_string()
        (OUT / f"{name}.json").write_text(text)
        print(f"| {name} | {config.model_type} | {cls.__name__} | {counts[name]:,} | {len(text.encode()):,} |")
    (OUT / "counts.json").write_text(json.dumps(counts, indent=2) + "\n")


if __name__ == "__main__":
    main()
