"""GGUF recipes as llama.cpp lays them out, and a real file written and read back.

The expected bytes here are computed by hand from GGML's block layouts (Q4_K: 144 bytes a block of
256 values, Q5_K 176, Q6_K 210, Q8_0 34 a block of 32, Q4_0 18, Q5_0 22, F32 4 a value), typed in
on purpose: the code under test reads them from ``gguf.GGML_QUANT_SIZES``, so the two must agree.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from fractions import Fraction

import pytest

from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quant import gguf_file
from dcsim.quant.formats import GGUF, check_format
from dcsim.quant.gguf_layout import (
    LLAMA_CPP_COMMIT,
    gguf_bytes_on_device,
    gguf_table,
    tensor_bytes,
    use_more_bits,
)

# (values a block, bytes a block), from ggml's block structs (ggml-common.h), independent of gguf-py.
BLOCKS = {
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "Q8_0": (32, 34),
    "Q4_0": (32, 18),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "F16": (1, 2),
    "F32": (1, 4),
}


def hand_bytes(row: int, rows: int, type_name: str) -> int:
    values, nbytes = BLOCKS[type_name]
    assert row % values == 0
    return rows * row // values * nbytes


TINY = {"num_layers": 2, "d_model": 256, "num_heads": 2, "num_kv_heads": 2, "ffn_dim": 512, "vocab_size": 1000}


@functools.cache
def table(preset: str, recipe: str, **overrides: int):
    config = ModelConfig(preset=preset, overrides=overrides)
    return gguf_table(config, count_params(config), check_format(recipe))


def types(t) -> dict[str, str]:
    return {name: dtype for name, _, dtype, _ in t.file_tensors()}


def test_block_sizes_come_from_gguf_and_agree_with_ggml():
    import gguf

    for name, expected in BLOCKS.items():
        assert tuple(gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]) == expected
    # A (4096 in, 11008 out) linear in Q4_K: 11008 rows of 16 blocks of 144 bytes.
    assert tensor_bytes((4096, 11008), "Q4_K") == 11008 * 16 * 144 == 25_362_432
    assert tensor_bytes((11008, 4096), "Q6_K") == 4096 * 43 * 210 == 36_986_880
    with pytest.raises(ValueError, match="not a whole number of Q4_K blocks of 256"):
        tensor_bytes((320, 4), "Q4_K")


def test_layers_that_get_more_bits_for_32_layers():
    # llama.cpp: i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2, with n = 32: 0-3, 28-31, and 6, 9, ..., 27.
    more = [i for i in range(32) if use_more_bits(i, 32)]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]


def test_q4_k_m_on_32_layers_gives_q6_k_to_half_the_attn_v_and_ffn_down():
    t = table("llama2-7b", "gguf-q4_k_m", **{**TINY, "num_layers": 32})
    chosen = types(t)
    expected = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}
    for kind in ("attn_v", "ffn_down"):
        q6 = {i for i in range(32) if chosen[f"blk.{i}.{kind}.weight"] == "Q6_K"}
        assert q6 == expected, kind
        assert {chosen[f"blk.{i}.{kind}.weight"] for i in set(range(32)) - expected} == {"Q4_K"}
    for kind in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
        assert {chosen[f"blk.{i}.{kind}.weight"] for i in range(32)} == {"Q4_K"}, kind


# llama.h's LLAMA_FTYPE_MOSTLY_* numbers, which general.file_type carries.
FILE_TYPES = {"gguf-q8_0": 7, "gguf-q6_k": 18, "gguf-q5_k_m": 17, "gguf-q4_k_m": 15, "gguf-q4_0": 2}

RECIPE_TYPES = {
    # recipe: (base, output, token_embd, attn_v / ffn_down on layer 1 of 2 (a "more bits" layer), on layer 0)
    "gguf-q8_0": ("Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0"),
    "gguf-q6_k": ("Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K"),
    "gguf-q5_k_m": ("Q5_K", "Q6_K", "Q5_K", "Q6_K", "Q5_K"),
    "gguf-q4_k_m": ("Q4_K", "Q6_K", "Q4_K", "Q6_K", "Q4_K"),
    "gguf-q4_0": ("Q4_0", "Q6_K", "Q4_0", "Q4_0", "Q4_0"),
}


@pytest.mark.parametrize("recipe", GGUF)
def test_tiny_llama_every_tensor_and_byte(recipe):
    base, output, embed, more, less = RECIPE_TYPES[recipe]
    t = table("llama2-7b", recipe, **TINY)
    d, ffn, vocab = 256, 512, 1000
    expected = {"token_embd.weight": ((d, vocab), embed)}
    for i, extra in ((0, less), (1, more)):
        expected |= {
            f"blk.{i}.attn_norm.weight": ((d,), "F32"),
            f"blk.{i}.attn_q.weight": ((d, d), base),
            f"blk.{i}.attn_k.weight": ((d, d), base),
            f"blk.{i}.attn_v.weight": ((d, d), extra),
            f"blk.{i}.attn_output.weight": ((d, d), base),
            f"blk.{i}.ffn_norm.weight": ((d,), "F32"),
            f"blk.{i}.ffn_gate.weight": ((d, ffn), base),
            f"blk.{i}.ffn_up.weight": ((d, ffn), base),
            f"blk.{i}.ffn_down.weight": ((ffn, d), extra),
        }
    expected |= {"output_norm.weight": ((d,), "F32"), "output.weight": ((d, vocab), output)}
    assert {name: (shape, dtype) for name, shape, dtype, _ in t.file_tensors()} == expected
    by_hand = sum(hand_bytes(ne[0], ne[1] if len(ne) > 1 else 1, kind) for ne, kind in expected.values())
    assert t.payload_bytes == by_hand
    assert t.total_params == count_params(ModelConfig(preset="llama2-7b", overrides=TINY)).total_params
    assert t.bits_per_weight == Fraction(by_hand * 8, t.total_params)
    assert dict(t.metadata)["general.file_type"] == FILE_TYPES[recipe]


def test_rows_not_a_multiple_of_256_fall_back_as_llama_cpp_does():
    # d_model 320 = 10 blocks of 32 but not whole blocks of 256: the k-quant tensors whose rows are
    # d_model long fall back (Q4_K -> Q5_0), the head to Q8_0; ffn_down's rows (512) stay Q4_K/Q6_K.
    t = table("llama2-7b", "gguf-q4_k_m", **{**TINY, "d_model": 320})
    chosen = types(t)
    assert chosen["token_embd.weight"] == "Q5_0"
    assert chosen["output.weight"] == "Q8_0"
    assert chosen["blk.0.attn_q.weight"] == chosen["blk.0.ffn_up.weight"] == "Q5_0"
    assert chosen["blk.1.attn_v.weight"] == "Q8_0"  # Q6_K on a more-bits layer falls back to Q8_0
    assert chosen["blk.0.ffn_down.weight"] == "Q4_K" and chosen["blk.1.ffn_down.weight"] == "Q6_K"
    notes = "\n".join(t.notes)
    assert "blk.0.attn_q.weight: rows of 320 values are not a multiple of Q4_K's block of 256" in notes
    assert "falls back to Q5_0" in notes and "blk.1.attn_v.weight" in notes
    assert t.array("block_0/attn/query/kernel").nbytes == hand_bytes(320, 320, "Q5_0")


def test_rows_not_a_multiple_of_32():
    # ffn_down's rows are ffn_dim long: 272 is neither whole Q4_K blocks nor whole Q5_0 blocks of 32.
    overrides = {**TINY, "ffn_dim": 272}
    chosen = types(table("llama2-7b", "gguf-q4_k_m", **overrides))
    assert chosen["blk.0.ffn_down.weight"] == "F16" and chosen["blk.1.ffn_down.weight"] == "F16"
    assert chosen["blk.0.ffn_up.weight"] == "Q4_K"  # its rows are d_model (256) long
    # Q4_0 and Q8_0 have no fallback in llama.cpp: it refuses the model.
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_down\.weight has rows of 272 values.*no fallback for Q4_0"):
        table("llama2-7b", "gguf-q4_0", **overrides)
    # A head whose rows are not whole Q4_K blocks becomes Q8_0, and 80 is not whole Q8_0 blocks either.
    with pytest.raises(ValueError, match=r"output\.weight has rows of 80 values.*no fallback for Q8_0"):
        table("llama2-7b", "gguf-q4_k_m", **{**TINY, "d_model": 80})


def test_70b_attn_v_gets_q5_k_where_q4_k_m_would_give_q4_k():
    t = table("llama2-70b", "gguf-q4_k_m", d_model=256, num_heads=4, num_kv_heads=2, ffn_dim=512, vocab_size=1000)
    chosen = types(t)
    # n = 80: more bits on 0-9, 70-79 and (i - 10) % 3 == 2; elsewhere Q4_K becomes Q5_K for attn_v only.
    assert chosen["blk.0.attn_v.weight"] == "Q6_K" and chosen["blk.12.attn_v.weight"] == "Q6_K"
    assert chosen["blk.11.attn_v.weight"] == "Q5_K" and chosen["blk.11.ffn_down.weight"] == "Q4_K"
    assert sum(1 for i in range(80) if chosen[f"blk.{i}.attn_v.weight"] == "Q5_K") == 40


def test_the_70b_rule_needs_grouped_queries():
    t = table("llama2-70b", "gguf-q4_k_m", d_model=256, num_heads=2, num_kv_heads=2, ffn_dim=512, vocab_size=1000)
    assert types(t)["blk.11.attn_v.weight"] == "Q4_K"  # llama.cpp calls 80 layers without GQA 65B


MOE = {"num_layers": 2, "d_model": 256, "num_heads": 2, "num_kv_heads": 1, "expert_ffn_dim": 512, "vocab_size": 1000}


def test_mixtral_like_stacked_experts_and_8_expert_rules():
    t = table("mixtral-8x7b", "gguf-q4_k_m", **MOE)
    tensors = {name: (shape, dtype) for name, shape, dtype, _ in t.file_tensors()}
    assert tensors["blk.0.ffn_gate_exps.weight"] == ((256, 512, 8), "Q4_K")
    assert tensors["blk.0.ffn_up_exps.weight"] == ((256, 512, 8), "Q4_K")
    assert tensors["blk.0.ffn_down_exps.weight"] == ((512, 256, 8), "Q4_K")
    assert tensors["blk.1.ffn_down_exps.weight"] == ((512, 256, 8), "Q6_K")
    assert tensors["blk.0.ffn_gate_inp.weight"] == ((256, 8), "F32")  # the router is never quantized
    # 8 experts: attn_k and attn_v to Q8_0 in every recipe, attn_output to Q5_K in Q4_K_M.
    assert tensors["blk.0.attn_k.weight"][1] == tensors["blk.1.attn_v.weight"][1] == "Q8_0"
    assert tensors["blk.0.attn_output.weight"][1] == "Q5_K"
    assert t.array("block_0/moe/experts/down").nbytes == hand_bytes(512, 256 * 8, "Q4_K")
    assert dict(t.metadata)["llama.expert_count"] == 8
    assert types(table("mixtral-8x7b", "gguf-q4_0", **MOE))["blk.0.attn_v.weight"] == "Q8_0"


def test_shared_experts_keep_their_gate_as_the_converter_wrote_it():
    t = table("qwen1.5-moe-a2.7b", "gguf-q4_k_m", **{**MOE, "num_kv_heads": 2, "shared_ffn_dim": 512})
    chosen = types(t)
    assert dict(t.metadata)["general.architecture"] == "qwen2moe"
    assert chosen["blk.0.ffn_gate_shexp.weight"] == "Q4_K"
    # (d_model, 1): two dims to the converter, which writes it F16; one to ggml, which leaves it so.
    assert chosen["blk.0.ffn_gate_inp_shexp.weight"] == "F16"
    assert chosen["blk.0.ffn_gate_inp.weight"] == "F32"
    assert chosen["blk.0.attn_q.bias"] == "F32"


def test_gpt2_keeps_query_key_value_fused():
    t = table("gpt2-small", "gguf-q8_0", num_layers=2)
    tensors = {name: (shape, dtype) for name, shape, dtype, _ in t.file_tensors()}
    assert tensors["blk.0.attn_qkv.weight"] == ((768, 2304), "Q8_0")
    assert tensors["blk.0.attn_qkv.bias"] == ((2304,), "F32")
    assert tensors["position_embd.weight"] == ((768, 1024), "F32")
    assert tensors["token_embd.weight"] == ((768, 50257), "Q8_0")  # tied: the head's rule, Q8_0 in Q8_0
    assert "output.weight" not in tensors and "blk.0.attn_q.weight" not in tensors
    parts = [t.array(f"block_0/attn/{p}/kernel").tensors[0] for p in ("query", "key", "value")]
    assert [part.shape for part in parts] == [(768, 768)] * 3 and {part.concat_axis for part in parts} == {1}
    assert sum(part.nbytes for part in parts) == hand_bytes(768, 2304, "Q8_0")


def test_tied_head_gives_the_token_table_q6_k():
    t = table("gemma-7b", "gguf-q4_k_m", num_layers=2, d_model=256, num_heads=2, num_kv_heads=2, ffn_dim=512)
    assert types(t)["token_embd.weight"] == "Q6_K"
    assert dict(t.metadata)["general.architecture"] == "gemma"


@pytest.mark.parametrize("preset", ["bert-base", "t5-small", "vit-b16"])
def test_other_families_are_refused(preset):
    config = ModelConfig(preset=preset)
    with pytest.raises(ValueError, match=r"decoder-only transformer families \(decoder, moe\); .* is not one"):
        gguf_table(config, count_params(config), check_format("gguf-q4_k_m"))


def test_bytes_on_device_quantize_the_shards_rows():
    t = table("llama2-7b", "gguf-q4_k_m", **TINY)
    query = t.array("block_0/attn/query/kernel")  # (256, 2, 128), input axis 0, Q4_K
    assert gguf_bytes_on_device(query, (256, 2, 128), (0,)) == query.nbytes
    assert gguf_bytes_on_device(query, (256, 1, 128), (0,)) * 2 == query.nbytes  # split by heads: rows
    with pytest.raises(ValueError, match=r"'block_0/attn/query/kernel' has rows of 128 values, not whole Q4_K"):
        gguf_bytes_on_device(query, (128, 2, 128), (0,))
    out = t.array("block_0/attn/out/kernel")  # (2, 128, 256): input axes 0 and 1
    assert gguf_bytes_on_device(out, (2, 128, 128), (0, 1)) * 2 == out.nbytes
    embed = t.array("embed/token/embedding")  # (1000, 256): a token a row
    assert gguf_bytes_on_device(embed, (500, 256)) == hand_bytes(256, 500, "Q4_K")
    with pytest.raises(ValueError, match="does not divide"):
        gguf_bytes_on_device(embed, (300, 256))
    with pytest.raises(ValueError, match="give its input axes"):
        gguf_bytes_on_device(query, (256, 1, 128))


def test_bytes_on_device_of_an_expert_stack():
    t = table("mixtral-8x7b", "gguf-q4_k_m", **MOE)
    down = t.array("block_1/moe/experts/down")  # (8, 512, 256): experts, input, output; Q6_K
    assert gguf_bytes_on_device(down, (2, 512, 256), (1,)) * 4 == down.nbytes == hand_bytes(512, 8 * 256, "Q6_K")
    assert gguf_bytes_on_device(down, (8, 256, 256), (1,)) * 2 == down.nbytes
    with pytest.raises(ValueError, match="rows of 128 values"):
        gguf_bytes_on_device(down, (8, 128, 256), (1,))


@pytest.mark.slow
def test_a_whole_gpt2_is_written_and_read_back(tmp_path):
    # The real thing at full size (124M parameters, about 70 MB in Q4_0), written tensor by tensor.
    config = ModelConfig(preset="gpt2-small")
    t = gguf_table(config, count_params(config), check_format("gguf-q4_0"))
    path = gguf_file.write(t, tmp_path)
    assert os.path.getsize(path) == gguf_file.predicted_file_bytes(t) > 60_000_000
    assert gguf_file.read_back(path) == [(name, shape, dtype) for name, shape, dtype, _ in t.file_tensors()]


# Published files: TheBloke's GGUF conversions of Llama 2 (llama.cpp commit bd33e5a, August 2023),
# sizes as the Hub lists them (GB = 10**9), to the digits shown:
#   https://huggingface.co/TheBloke/Llama-2-7B-GGUF/tree/main: Q4_0 3.83, Q4_K_M 4.08 (4,081,004,224
#     bytes), and the README's table Q5_K_M 4.78, Q6_K 5.53, Q8_0 7.16.
#   https://huggingface.co/TheBloke/Llama-2-13B-GGUF/tree/main: Q4_0 7.37, Q4_K_M 7.87; Q5_K_M 9.23,
#     Q6_K 10.7 and Q8_0 13.8 as TheBloke/LLaMA-13b-GGUF (same shapes) and tensorblock/Llama-2-13b-hf-GGUF
#     list them.
# The real files carry a tokenizer (tokenizer.ggml.*, about 0.5 MB for 32,000 tokens) that dcsim does
# not write: the payload is compared to the file within that and the rounding of the figure shown.
PUBLISHED = {
    ("llama2-7b", "gguf-q8_0"): (7.16, 2),
    ("llama2-7b", "gguf-q6_k"): (5.53, 2),
    ("llama2-7b", "gguf-q5_k_m"): (4.78, 2),
    ("llama2-7b", "gguf-q4_k_m"): (4.08, 2),
    ("llama2-7b", "gguf-q4_0"): (3.83, 2),
    ("llama2-13b", "gguf-q8_0"): (13.8, 1),
    ("llama2-13b", "gguf-q6_k"): (10.7, 1),
    ("llama2-13b", "gguf-q5_k_m"): (9.23, 2),
    ("llama2-13b", "gguf-q4_k_m"): (7.87, 2),
    ("llama2-13b", "gguf-q4_0"): (7.37, 2),
}
METADATA_ALLOWANCE = 1_000_000  # header, tensor infos and the tokenizer a published file adds


def llama_payload_by_hand(layers: int, d: int, ffn: int, vocab: int, recipe: str) -> int:
    """Llama 2's payload from its shapes and llama.cpp's rules, written out independently."""
    base, output, embed, more, less = RECIPE_TYPES[recipe]
    total = hand_bytes(d, vocab, embed) + hand_bytes(d, vocab, output) + 4 * d
    for i in range(layers):
        extra = more if use_more_bits(i, layers) else less
        total += 2 * 4 * d  # attn_norm, ffn_norm
        total += 3 * hand_bytes(d, d, base) + hand_bytes(d, d, extra)  # q, k, output; v
        total += 2 * hand_bytes(d, ffn, base) + hand_bytes(ffn, d, extra)  # gate, up; down
    return total


@pytest.mark.parametrize(("preset", "recipe"), list(PUBLISHED), ids=lambda value: value)
def test_llama2_payload_matches_the_published_file(preset, recipe):
    config = ModelConfig(preset=preset)
    t = gguf_table(config, count_params(config), check_format(recipe))
    shapes = {"llama2-7b": (32, 4096, 11008, 32000), "llama2-13b": (40, 5120, 13824, 32000)}[preset]
    assert t.payload_bytes == llama_payload_by_hand(*shapes, recipe)
    published, digits = PUBLISHED[(preset, recipe)]
    half_digit = 0.5 * 10 ** (9 - digits)
    assert abs(t.payload_bytes - published * 1e9) <= half_digit + METADATA_ALLOWANCE


# Mixtral 8x7B, sizes as the Hub lists them (3 significant figures): Q4_K_M 28.4 and Q5_K_M 33.2
# (https://huggingface.co/mradermacher/Mixtral-8x7B-v0.1-GGUF/tree/main, a recent llama.cpp), Q4_0 26.4
# and Q6_K 38.4 (https://huggingface.co/TheBloke/Mixtral-8x7B-v0.1-GGUF, llama.cpp 8a7b2fa), Q8_0 49.6
# (https://huggingface.co/shenberg1/Mixtral-8x7B-Instruct-v0.1-GGUF, the instruct model: same shapes).
# TheBloke's early Q4_K_M (26.4) predates llama.cpp's ffn_down rule for experts: not compared.
MIXTRAL_PUBLISHED = {"gguf-q4_k_m": 28.4, "gguf-q5_k_m": 33.2, "gguf-q4_0": 26.4, "gguf-q6_k": 38.4, "gguf-q8_0": 49.6}


@pytest.mark.parametrize("recipe", list(MIXTRAL_PUBLISHED))
def test_mixtral_payload_matches_the_published_file(recipe):
    config = ModelConfig(preset="mixtral-8x7b")
    t = gguf_table(config, count_params(config), check_format(recipe))
    assert abs(t.payload_bytes - MIXTRAL_PUBLISHED[recipe] * 1e9) <= 0.05e9 + METADATA_ALLOWANCE


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        ("llama2-7b", TINY),
        ("gpt2-small", {"num_layers": 2}),
        ("phi3-mini", {"num_layers": 2}),
        ("qwen2.5-7b", {"num_layers": 2}),
        ("qwen3-8b", {"num_layers": 2}),
        ("gemma2-2b", {"num_layers": 2}),
        ("mixtral-8x7b", MOE),
        ("qwen1.5-moe-a2.7b", {"num_layers": 2}),
        ("qwen3-30b-a3b", {"num_layers": 2}),
        ("phi3.5-moe", {"num_layers": 2}),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_tensor_names_are_those_of_llama_cpps_architecture(preset, overrides):
    import gguf

    t = table(preset, "gguf-q4_k_m", **overrides)
    arch = dict(t.metadata)["general.architecture"]
    ids = {name: arch_id for arch_id, name in gguf.MODEL_ARCH_NAMES.items()}
    allowed = {gguf.TENSOR_NAMES[kind].format(bid=i) for kind in gguf.MODEL_TENSORS[ids[arch]] for i in range(2)}
    written = {name.rsplit(".", 1)[0] for name, *_ in t.file_tensors()}
    assert written <= allowed, sorted(written - allowed)


def test_llama2_7b_q4_k_m_to_the_byte_of_the_published_file():
    config = ModelConfig(preset="llama2-7b")
    t = gguf_table(config, count_params(config), check_format("gguf-q4_k_m"))
    assert t.payload_bytes == 4_080_263_168
    # dcsim's tokenizer-less file is 4,080,280,928 bytes; the published one, 4,081,004,224, is
    # 723,296 bytes more: the vocabulary (32,000 tokens with their scores and types) and its keys.
    assert gguf_file.predicted_file_bytes(t) == 4_080_280_928
    assert 4_081_004_224 - gguf_file.predicted_file_bytes(t) == 723_296 < METADATA_ALLOWANCE


@pytest.mark.parametrize(
    ("preset", "recipe", "overrides"),
    [
        *[("llama2-7b", recipe, TINY) for recipe in GGUF],
        ("llama2-7b", "gguf-q4_k_m", {**TINY, "d_model": 320}),
        ("gpt2-small", "gguf-q4_0", {"num_layers": 2}),
        ("mixtral-8x7b", "gguf-q4_k_m", MOE),
        ("qwen1.5-moe-a2.7b", "gguf-q4_k_m", {"num_layers": 2}),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_written_file_is_predicted_to_the_byte_and_reads_back(tmp_path, preset, recipe, overrides):
    t = table(preset, recipe, **overrides)
    path = gguf_file.write(t, tmp_path)
    assert os.path.getsize(path) == gguf_file.predicted_file_bytes(t)
    assert gguf_file.read_back(path) == [(name, shape, dtype) for name, shape, dtype, _ in t.file_tensors()]
    assert gguf_file.read_metadata(path) == dict(t.metadata)
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("alignment", [1, 64])
def test_prediction_counts_every_byte_of_the_header(tmp_path, alignment):
    # With an alignment of 1 nothing is padded: a byte miscounted anywhere in the header, the
    # metadata or the tensor infos shows in the file's size.
    t = table("llama2-7b", "gguf-q4_k_m", **TINY)
    aligned = dataclasses.replace(t, metadata=(*t.metadata, ("general.alignment", alignment)))
    path = gguf_file.write(aligned, tmp_path)
    assert os.path.getsize(path) == gguf_file.predicted_file_bytes(aligned)
    if alignment == 1:
        header = 24 + sum(
            8 + len(key) + 4 + (8 + len(value) if isinstance(value, str) else 4) for key, value in aligned.metadata
        )
        infos = sum(8 + len(name) + 4 + 8 * len(shape) + 4 + 8 for name, shape, _, _ in t.file_tensors())
        assert os.path.getsize(path) == header + infos + t.payload_bytes


def test_write_refuses_above_its_limit_and_leaves_nothing(tmp_path):
    t = table("llama2-7b", "gguf-q4_k_m", **TINY)
    size = gguf_file.predicted_file_bytes(t)
    with pytest.raises(ValueError, match=f"would be {size:,} bytes, above the limit of 1,000 bytes"):
        gguf_file.write(t, tmp_path, max_bytes=1000)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    import gguf

    t = table("llama2-7b", "gguf-q4_k_m", **TINY)

    def broken(self, tensor, tensor_endianess=None):
        raise OSError("disk full")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", broken)
    with pytest.raises(OSError, match="disk full"):
        gguf_file.write(t, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_notes_name_the_commit_and_what_the_file_lacks():
    t = table("llama2-7b", "gguf-q4_k_m", **TINY)
    notes = " ".join(t.notes)
    assert LLAMA_CPP_COMMIT[:10] in notes and "no tokenizer" in notes and "rope_freqs" not in notes
    assert "rope_freqs.weight" in " ".join(table("llama3.1-8b", "gguf-q4_k_m", num_layers=2).notes)


@pytest.mark.slow  # one child interpreter, forked a check
def test_importing_the_layout_does_not_import_gguf(imports_probe):
    # A count must not pay for the gguf package: it is imported when a table is built.
    reply = imports_probe({"modules": ["dcsim.quant.gguf_layout", "dcsim.quant.gguf_file"]})
    assert reply["code"] == 0 and "gguf" not in reply["heavy"]
