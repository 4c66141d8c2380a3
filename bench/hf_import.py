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


def llama(**fields):
    return LlamaForCausalLM, LlamaConfig(architectures=["LlamaForCausalLM"], **fields)


# Published configurations (the models' config.json on the Hub), by the file name written.
MODELS = {
    "gpt2": (GPT2LMHeadModel, GPT2Config(architectures=["GPT2LMHeadModel"])),
    "gpt2-medium": (GPT2LMHeadModel, GPT2Config(n_embd=1024, n_layer=24, n_head=16, architectures=["GPT2LMHeadModel"])),
    "pythia-160m": (
        GPTNeoXForCausalLM,
        GPTNeoXConfig(
            vocab_size=50304,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            max_position_embeddings=2048,
            rotary_pct=0.25,
            tie_word_embeddings=False,
            use_parallel_residual=True,
            architectures=["GPTNeoXForCausalLM"],
        ),
    ),
    "llama-2-7b": llama(
        vocab_size=32000,
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        intermediate_size=11008,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    ),
    "tinyllama-1.1b": llama(
        vocab_size=32000,
        hidden_size=2048,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        intermediate_size=5632,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    ),
    "llama-3.2-1b": llama(
        vocab_size=128256,
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=8192,
        max_position_embeddings=131072,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "mistral-7b": (
        MistralForCausalLM,
        MistralConfig(
            vocab_size=32000,
            hidden_size=4096,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=14336,
            max_position_embeddings=32768,
            sliding_window=4096,
            tie_word_embeddings=False,
            architectures=["MistralForCausalLM"],
        ),
    ),
    "gemma-2b": (
        GemmaForCausalLM,
        GemmaConfig(
            vocab_size=256000,
            hidden_size=2048,
            num_hidden_layers=18,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=256,
            intermediate_size=16384,
            max_position_embeddings=8192,
            architectures=["GemmaForCausalLM"],
        ),
    ),
    "gemma-7b": (
        GemmaForCausalLM,
        GemmaConfig(
            vocab_size=256000,
            hidden_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=16,
            head_dim=256,
            intermediate_size=24576,
            max_position_embeddings=8192,
            architectures=["GemmaForCausalLM"],
        ),
    ),
    "qwen2.5-0.5b": (
        Qwen2ForCausalLM,
        Qwen2Config(
            vocab_size=151936,
            hidden_size=896,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            intermediate_size=4864,
            max_position_embeddings=32768,
            tie_word_embeddings=True,
            architectures=["Qwen2ForCausalLM"],
        ),
    ),
    "qwen2.5-7b": (
        Qwen2ForCausalLM,
        Qwen2Config(
            vocab_size=152064,
            hidden_size=3584,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            intermediate_size=18944,
            max_position_embeddings=131072,
            tie_word_embeddings=False,
            architectures=["Qwen2ForCausalLM"],
        ),
    ),
    "bert-base-uncased": (BertModel, BertConfig(architectures=["BertModel"])),
    "vit-base-patch16-224": (
        ViTForImageClassification,
        ViTConfig(num_labels=1000, architectures=["ViTForImageClassification"]),
    ),
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
