"""What bench/hf_counts.py and bench/hf_import.py share: a decoder's sizes as transformers names them.

Not a benchmark: both scripts import it from their own folder (``python bench/...`` puts it first on
``sys.path``).
"""

from __future__ import annotations


def decoder_sizes(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, positions: int):
    """The seven sizes every decoder configuration here sets (Llama, Mistral, Gemma, Qwen2), as the
    keyword arguments of its transformers configuration class."""
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": ffn,
        "max_position_embeddings": positions,
    }
