"""Cross-check the preset table against Hugging Face transformers' own models, on the meta device.

Run with an interpreter that has torch, transformers and accelerate (bench/requirements.txt):
    /tmp/hfvenv/bin/python bench/hf_counts.py

Each model is built from its configuration under ``accelerate.init_empty_weights`` (no memory for
the values) and counted with ``model.num_parameters()``, as built and after ``tie_weights()``: a
meta-device build leaves a tied output layer untied, so it is counted twice until then.
The configurations are the published checkpoints' (written out here: the Hub is not reachable).
Prints a Markdown table; bench/README.md records a run.
"""

from __future__ import annotations

from accelerate import init_empty_weights
from hf_decoders import decoder_sizes
from transformers import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    ResNetConfig,
    ResNetForImageClassification,
    ViTConfig,
    ViTForImageClassification,
)


def llama(vocab, hidden, layers, heads, kv_heads, ffn, positions):
    sizes = decoder_sizes(vocab, hidden, layers, heads, kv_heads, ffn, positions)
    return LlamaForCausalLM, LlamaConfig(**sizes, tie_word_embeddings=False)


MODELS = {
    "gpt2-small": (GPT2LMHeadModel, GPT2Config()),
    "gpt2-medium": (GPT2LMHeadModel, GPT2Config(n_embd=1024, n_layer=24, n_head=16)),
    "gpt2-large": (GPT2LMHeadModel, GPT2Config(n_embd=1280, n_layer=36, n_head=20)),
    "gpt2-xl": (GPT2LMHeadModel, GPT2Config(n_embd=1600, n_layer=48, n_head=25)),
    "bert-base": (BertModel, BertConfig()),
    "bert-large": (
        BertModel,
        BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    ),
    "vit-b16": (ViTForImageClassification, ViTConfig(num_labels=1000)),
    "vit-l16": (
        ViTForImageClassification,
        ViTConfig(
            hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, num_labels=1000
        ),
    ),
    "resnet18": (
        ResNetForImageClassification,
        ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], num_labels=1000),
    ),
    "resnet50": (ResNetForImageClassification, ResNetConfig(depths=[3, 4, 6, 3], num_labels=1000)),
    "resnet152": (ResNetForImageClassification, ResNetConfig(depths=[3, 8, 36, 3], num_labels=1000)),
    "llama2-7b": llama(32000, 4096, 32, 32, 32, 11008, 4096),
    "llama2-13b": llama(32000, 5120, 40, 40, 40, 13824, 4096),
    "llama2-70b": llama(32000, 8192, 80, 64, 8, 28672, 4096),
    "llama3-8b": llama(128256, 4096, 32, 32, 8, 14336, 8192),
}


def main() -> None:
    print("| preset | transformers class | as built under init_empty_weights | after tie_weights() |")
    print("|---|---|---|---|")
    for name, (cls, config) in MODELS.items():
        with init_empty_weights():
            model = cls(config)
        built = model.num_parameters()
        model.tie_weights()
        print(f"| {name} | {cls.__name__} | {built:,} | {model.num_parameters():,} |")


if __name__ == "__main__":
    main()
