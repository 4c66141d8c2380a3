"""Weight formats (issue 28): qwix's own arrays, GPTQ and AWQ as their tools lay them out, each to the
byte against figures worked out here from the hyperparameters alone, a published file size, the
per-device bytes, the refusals, and a real safetensors file written and weighed."""

import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples, refused_in_one_line
from conftest import run_cli as run
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quant import formats, layouts, linears, names, write
from dcsim.quant.formats import check_format
from dcsim.quant.tables import element_tensor
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import parse_mesh

TINY = {"num_layers": 2, "d_model": 256, "num_heads": 4, "num_kv_heads": 2, "ffn_dim": 512, "vocab_size": 1000}


def table_of(preset, name, overrides=None, **options):
    config = ModelConfig(preset=preset, overrides=overrides or {})
    report = count_params(config)
    return config, report, layouts.weight_table(config, report, check_format(name, **options))


def llama_linears(d, f, layers, kv=None):
    """(in, out) of every linear of a Llama block stack, from the hyperparameters."""
    kv = kv or d
    block = [(d, d), (d, kv), (d, kv), (d, d), (d, f), (d, f), (f, d)]
    return block * layers


def gptq_bytes(inputs, outputs, group=128, bits=4):
    pack = 32 // bits
    qweight, qzeros = inputs // pack * outputs * 4, inputs // group * outputs // pack * 4
    return qweight + qzeros + inputs // group * outputs * 2 + 4 * inputs


def awq_bytes(inputs, outputs, group=128):
    return inputs * outputs // 8 * 4 + inputs // group * outputs // 8 * 4 + inputs // group * outputs * 2


# --- the formats and their options ------------------------------------------------------------


def test_every_format_has_a_summary_and_a_kind():
    for name in formats.FORMATS:
        fmt = check_format(name)
        assert fmt.summary and fmt.kind in ("plain", "qwix", "gptq", "awq", "bnb", "fp8", "gguf")
    assert check_format("gptq-int4").group == 128 and check_format("gptq-int4").bits == 4
    assert check_format("int4").tile == 128 and check_format("int8").tile is None


@pytest.mark.parametrize(
    ("name", "options", "says"),
    [
        ("int5", {}, "must be a weight format"),
        ("gguf-q4_k_m", {"group": 64}, "applies to gptq-int4 and awq-int4 only"),
        ("int8", {"tile": 64}, "int8 is per channel"),
        ("gptq-int4", {"bits": 3}, "must be 4 or 8"),
        ("awq-int4", {"bits": 8}, "must be 4"),
        ("int4", {"bits": 4}, "fixed width"),
        ("gptq-int4", {"group": 100}, "power of two"),
        ("gptq-int4", {"group": 0}, "must be a positive integer"),
        ("bfloat16", {"quantize_head": True}, "quantizes nothing"),
        ("int4", {"tile": 0}, "must be a positive integer"),
    ],
)
def test_bad_options_are_refused_by_name(name, options, says):
    with pytest.raises(ValueError, match=says):
        check_format(name, **options)


def test_sub_byte_dtypes_count_by_bit_width_not_itemsize():
    assert element_tensor("x", (3, 5), "int4").nbytes == 8  # 15 half-bytes take 8 whole bytes
    assert element_tensor("x", (4096, 4096), "uint4").nbytes == 4096 * 4096 // 2


# --- the linears, found by qwix in the real forward --------------------------------------------


def test_linears_carry_the_contraction_axes_of_the_forward():
    config = ModelConfig(preset="mixtral-8x7b")
    found = linears.find_linears(config, count_params(config))
    assert found["block_0/attn/query/kernel"].in_axes == (0,)
    assert found["block_0/attn/out/kernel"].in_axes == (0, 1)  # heads x head_dim contracted
    experts = found["block_31/moe/experts/down"]
    assert experts.expert_axis == 0 and experts.in_axes == (1,) and experts.dims() == (8, 14336, 4096)
    assert "embed/token/embedding" not in found


# --- GPTQ and AWQ, to the byte ----------------------------------------------------------------


def test_llama2_13b_gptq_is_the_published_7_26_gb():
    # TheBloke/Llama-2-13B-GPTQ, main branch (4 bits, group 128): model.safetensors 7.26 GB.
    _, report, table = table_of("llama2-13b", "gptq-int4")
    d, f, layers, vocab = 5120, 13824, 40, 32000
    expected = sum(gptq_bytes(i, o) for i, o in llama_linears(d, f, layers))
    expected += 2 * vocab * d * 2 + (2 * layers + 1) * d * 2  # table, head and norms in float16
    assert table.payload_bytes == expected == 7_255_009_280
    assert round(write.predicted_file_bytes(table) / 1e9, 2) == 7.26
    assert table.total_params == report.total_params


def test_gptq_tensors_are_named_and_shaped_as_the_downloaded_files():
    _, _, table = table_of("llama2-13b", "gptq-int4")
    files = {name: (shape, dtype) for name, shape, dtype, _ in table.file_tensors()}
    assert files["model.layers.0.self_attn.q_proj.qweight"] == ((640, 5120), "int32")
    assert files["model.layers.0.self_attn.q_proj.qzeros"] == ((40, 640), "int32")
    assert files["model.layers.0.self_attn.q_proj.scales"] == ((40, 5120), "float16")
    assert files["model.layers.0.self_attn.q_proj.g_idx"] == ((5120,), "int32")
    assert files["model.layers.39.mlp.down_proj.qweight"] == ((1728, 5120), "int32")
    assert files["lm_head.weight"] == ((32000, 5120), "float16")  # torch's (out, in)
    assert files["model.embed_tokens.weight"] == ((32000, 5120), "float16")
    assert len(files) == 40 * (7 * 4 + 2) + 3


def test_gptq_8_bits_and_awq_are_their_own_layouts():
    _, _, eight = table_of("llama2-7b", "gptq-int4", bits=8)
    _, _, awq = table_of("llama2-7b", "awq-int4")
    d, f, layers, vocab = 4096, 11008, 32, 32000
    kept = 2 * vocab * d * 2 + (2 * layers + 1) * d * 2
    assert eight.payload_bytes == sum(gptq_bytes(i, o, bits=8) for i, o in llama_linears(d, f, layers)) + kept
    assert awq.payload_bytes == sum(awq_bytes(i, o) for i, o in llama_linears(d, f, layers)) + kept
    files = {name: shape for name, shape, _, _ in awq.file_tensors()}
    assert files["model.layers.0.self_attn.q_proj.qweight"] == (4096, 512)
    assert not any(name.endswith("g_idx") for name in files)


def test_gpt2_keeps_its_fused_c_attn_with_one_group_index():
    _, _, table = table_of("gpt2-small", "gptq-int4")
    files = {name: shape for name, shape, _, _ in table.file_tensors()}
    assert files["transformer.h.0.attn.c_attn.qweight"] == (96, 2304)
    assert files["transformer.h.0.attn.c_attn.g_idx"] == (768,)  # one for the fused q, k and v
    assert files["transformer.h.0.attn.c_attn.bias"] == (2304,)
    assert "lm_head.weight" not in files  # tied: the head is the token table


def test_moe_experts_are_quantized_one_by_one_and_the_router_kept():
    _, _, table = table_of("mixtral-8x7b", "gptq-int4")
    files = {name: (shape, dtype) for name, shape, dtype, _ in table.file_tensors()}
    assert files["model.layers.0.block_sparse_moe.experts.7.w2.qweight"] == ((1792, 4096), "int32")
    assert files["model.layers.0.block_sparse_moe.experts.0.w1.g_idx"] == ((4096,), "int32")
    assert files["model.layers.0.block_sparse_moe.gate.weight"] == ((8, 4096), "float16")


def test_a_group_that_does_not_divide_is_refused_naming_the_array():
    with pytest.raises(ValueError, match=r"block_0/mlp/down/kernel .*11,008 input features.*--group"):
        table_of("llama2-7b", "gptq-int4", group=1024)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([16, 32, 64, 128]))
def test_bytes_shrink_as_the_group_grows(group):
    _, _, small = table_of("llama2-7b", "gptq-int4", TINY, group=group)
    _, _, large = table_of("llama2-7b", "gptq-int4", TINY, group=group * 2)
    assert large.payload_bytes < small.payload_bytes


@settings(max_examples=examples(16), deadline=None)
@given(
    st.sampled_from(["int8", "int4", "fp8", "nf4", "gptq-int4", "awq-int4", *formats.BNB, *formats.FP8]),
    st.sampled_from([256, 512, 1024]),
)
def test_no_format_is_larger_than_bfloat16_on_real_widths(name, width):
    overrides = dict(TINY, d_model=width, ffn_dim=2 * width, num_heads=width // 128, num_kv_heads=width // 128)
    _, report, table = table_of("llama2-7b", name, overrides)
    assert table.payload_bytes < 2 * report.total_params


# --- qwix ---------------------------------------------------------------------------------------


def test_qwix_int4_arrays_are_qwix_s_own():
    _, _, table = table_of("llama2-7b", "int4")
    query = table.array("block_0/attn/query/kernel")
    assert [(t.name.rsplit("/", 1)[1], t.shape, t.dtype) for t in query.tensors] == [
        ("qvalue", (4096, 32, 128), "int4"),
        ("scale", (32, 32, 128), "float32"),  # 4096 / 128 tiles along the contraction
    ]
    assert query.nbytes == 4096 * 4096 // 2 + 32 * 4096 * 4
    head = table.array("lm_head/kernel")
    assert not head.quantized and head.tensors[0].dtype == "bfloat16"
    _, _, with_head = table_of("llama2-7b", "int4", quantize_head=True)
    assert with_head.array("lm_head/kernel").quantized


def test_qwix_int8_is_per_channel_and_differs_from_the_raw_int8_dtype():
    _, report, table = table_of("llama2-7b", "int8")
    down = table.array("block_0/mlp/down/kernel")
    assert [t.shape for t in down.tensors] == [(11008, 4096), (1, 4096)]
    assert table.payload_bytes > report.total_params  # the raw int8 figure: 1 byte a value, no scales


def test_a_tile_that_does_not_divide_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match=r"tile of 100 does not divide.*--tile"):
        table_of("gpt2-small", "int4", tile=100)


def test_a_tied_head_cannot_be_quantized_by_qwix():
    with pytest.raises(ValueError, match="tied embeddings"):
        table_of("gpt2-small", "int4", quantize_head=True)


def test_convolutions_are_refused_for_quantized_formats():
    with pytest.raises(ValueError, match="convolutions"):
        table_of("resnet18", "int8")


# --- per device -------------------------------------------------------------------------------


def serve(preset, mesh, weights, **options):
    config = ModelConfig(preset=preset)
    return compute_serving(config, Serving(mesh=parse_mesh(mesh), weights=weights, **options))


def test_a_device_holds_its_shard_quantized_as_vllm_loads_it():
    one = serve("llama2-7b", "model=1", "gptq-int4")
    two = serve("llama2-7b", "model=2", "gptq-int4")
    assert one.weights_bytes_per_device == one.weights_bytes
    d, f, layers = 4096, 11008, 32
    column = [(d, d // 2)] * 3 + [(d, f // 2)] * 2  # q, k, v, gate, up: outputs split
    row = [(d // 2, d), (f // 2, d)]  # o, down: inputs split, each rank its own groups and g_idx
    blocks = layers * sum(gptq_bytes(i, o) for i, o in column + row)
    vocab = 32000 // 2 * d * 2 * 2  # megatron splits the table and the head over the vocabulary
    norms = (2 * layers + 1) * d * 2
    assert two.weights_bytes_per_device == blocks + vocab + norms


def test_qwix_scales_split_with_their_kernels():
    served = serve("llama2-7b", "model=2", "int4")
    on_device = dict(zip((row.path for row in served.weights.arrays), served.weights_on_device, strict=True))
    assert on_device["block_0/attn/query/kernel"] == 4096 * 2048 // 2 + 32 * 2048 * 4
    # out: (heads, head_dim, d), contracted over both; qwix tiles head_dim (128: one tile) and keeps
    # a scale an output channel, whole on every device
    assert on_device["block_0/attn/out/kernel"] == 2048 * 4096 // 2 + 4096 * 4
    assert on_device["block_0/mlp/down/kernel"] == 5504 * 4096 // 2 + 43 * 4096 * 4  # 86 tiles over 2


def test_a_shard_that_splits_a_tile_is_refused():
    # 11,008 / 4 = 2,752 rows of down_proj a device: not whole tiles of 128 (JAX cannot split 86 tiles in 4)
    with pytest.raises(ValueError, match=r"block_0/mlp/down/kernel: a device holds 2,752 .* tiles of 128"):
        serve("llama2-7b", "model=4", "int4")


def test_serving_quantized_frees_room_for_more_sequences():
    plain = serve("llama2-70b", "model=1", "bfloat16", device="h100-sxm")
    int4 = serve("llama2-70b", "model=1", "gptq-int4", device="h100-sxm")
    assert not plain.fits and int4.fits
    assert int4.max_concurrency > 0


# --- the file, written and weighed ------------------------------------------------------------


@pytest.mark.parametrize("name", ["gptq-int4", "awq-int4"])
def test_the_written_file_is_the_predicted_size_to_the_byte(tmp_path, name):
    _, _, table = table_of("gpt2-small", name)
    written = write.write(table, tmp_path / "out")
    assert written.file_bytes == written.predicted_file_bytes == os.path.getsize(written.path)
    assert written.tensors_checked == len(table.file_tensors())
    assert os.listdir(tmp_path / "out") == ["model.safetensors"]


def test_the_header_is_the_one_safetensors_writes(tmp_path):
    _, _, table = table_of("llama2-7b", "gptq-int4", TINY)
    path = write.write(table, tmp_path).path
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        written = handle.read(length)
    assert write.safetensors_header(table) == length.to_bytes(8, "little") + written
    assert json.loads(written)["__metadata__"] == {"format": "pt"}


def test_write_refuses_and_leaves_nothing(tmp_path):
    _, _, table = table_of("gpt2-small", "gptq-int4")
    with pytest.raises(ValueError, match="above the 1,000-byte limit"):
        write.write(table, tmp_path / "small", limit=1000)
    assert not (tmp_path / "small").exists()
    write.write(table, tmp_path)
    with pytest.raises(ValueError, match="does not overwrite"):
        write.write(table, tmp_path)
    assert os.listdir(tmp_path) == ["model.safetensors"]
    _, _, qwix = table_of("gpt2-small", "int8")
    with pytest.raises(ValueError, match="no file format of its own"):
        write.write(qwix, tmp_path / "q")


def test_a_failed_check_leaves_nothing_behind(tmp_path, monkeypatch):
    _, _, table = table_of("gpt2-small", "gptq-int4")
    monkeypatch.setattr(write, "predicted_file_bytes", lambda _: 123)
    with pytest.raises(ValueError, match="dcsim predicted 123"):
        write.write(table, tmp_path)
    assert os.listdir(tmp_path) == []


# --- names ----------------------------------------------------------------------------------------


def test_naming_schemes_follow_the_family():
    assert names.scheme_of("decoder", {"position_embedding": "learned", "gated_mlp": False}, []) == "gpt2"
    assert names.scheme_of("decoder", {"position_embedding": "none", "gated_mlp": True}, []) == "llama"
    assert names.scheme_of("moe", {}, ["block_0/moe/experts/up"]) == "mixtral"
    assert names.scheme_of("moe", {}, ["block_0/moe/shared/up/kernel"]) == "llama"
    gemma = names.file_names("llama", ["block_0/attn_post_norm/scale", "block_0/mlp_norm/scale"])
    assert gemma["block_0/mlp_norm/scale"].tensor() == "model.layers.0.pre_feedforward_layernorm.weight"


def test_deepseek_latent_attention_is_named_as_its_files():
    # deepseek-ai/DeepSeek-V3's model.safetensors.index.json: q_a_proj, q_a_layernorm, q_b_proj
    paths = ["block_3/attn/query_down/kernel", "block_3/attn/query_norm/scale", "block_3/attn/query_up/kernel"]
    latent = names.file_names("llama", [*paths, "block_3/attn/kv_down/kernel"])
    assert [latent[path].tensor() for path in paths] == [
        "model.layers.3.self_attn.q_a_proj.weight",
        "model.layers.3.self_attn.q_a_layernorm.weight",
        "model.layers.3.self_attn.q_b_proj.weight",
    ]
    qwen3 = names.file_names("llama", ["block_0/attn/query_norm/scale"])  # Qwen 3's per-head norm
    assert qwen3["block_0/attn/query_norm/scale"].tensor() == "model.layers.0.self_attn.q_norm.weight"


def test_a_family_without_a_published_naming_uses_dcsim_paths_and_says_so():
    _, _, table = table_of("t5-small", "gptq-int4")
    assert any("named by dcsim's paths" in note for note in table.notes)
    assert math.isclose(float(table.bits_per_weight), table.payload_bytes * 8 / table.total_params)


# --- the command line ---------------------------------------------------------------------------


def test_count_weights_reports_the_format(capsys):
    code, out, err = run(capsys, "count", "--preset", "llama2-13b", "--weights", "gptq-int4", "--format", "json")
    assert code == 0, err
    record = json.loads(out)
    assert record["weights_bytes"] == 7_255_009_280 and record["weights_format"] == "gptq-int4"
    assert record["weights_bytes_per_shard_fraction"] == "3627504640"
    assert record["bits_per_weight"] == round(7_255_009_280 * 8 / 13_015_864_320, 4)
    first = record["weights_arrays"][0]
    assert set(first) >= {"path", "tensors", "shape", "dtype", "bytes"}
    code, out, _ = run(capsys, "count", "--preset", "llama2-13b", "--weights", "gptq-int4")
    assert "weights in gptq-int4 (group 128): 7,255,009,280 bytes" in out and "bits a weight" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("count", "--preset", "llama2-7b", "--weights", "int8", "--dtype", "int8"), "not both"),
        (("count", "--preset", "llama2-7b", "--group", "64"), "--group needs --weights"),
        (("count", "--preset", "llama2-7b", "--weights", "q4"), "`--weights` must be a weight format"),
        (("serve", "--preset", "llama2-7b", "--weights", "gptq-int4", "--bits", "3"), "`--bits` of gptq-int4"),
        (("serve", "--preset", "llama2-7b", "--weights", "gguf-q4_0", "--group", "32"), "`--group` applies"),
        (("serve", "--preset", "llama2-7b", "--weights", "gptq-int4", "--group", "abc"), "--group"),
        (("serve", "--preset", "llama2-7b", "--weights", "int4", "--tile", "100"), "--tile"),
    ],
)
def test_cli_refusals_name_the_flag(capsys, argv, says):
    assert says in refused_in_one_line(capsys, *argv)


def test_serve_write_weighs_the_file(capsys, tmp_path):
    argv = ("serve", "--preset", "gpt2-small", "--context", "1024", "--weights", "awq-int4")
    code, out, err = run(capsys, *argv, "--write", str(tmp_path), "--format", "json")
    assert code == 0, err
    record = json.loads(out)
    written = record["written"]
    assert written["file_bytes"] == written["predicted_file_bytes"] == os.path.getsize(tmp_path / "model.safetensors")
    # GPT-2 small in AWQ: 12 blocks of 20 tensors (ln_1 and ln_2, weight and bias; c_attn, c_proj,
    # c_fc and mlp.c_proj, each qweight, qzeros, scales and bias) and wte, wpe, ln_f's weight and
    # bias (the head is wte, tied, not stored): 12 x 20 + 4.
    assert written["tensors_checked"] == 12 * 20 + 4 == 244
    assert (
        record["weights_bytes"] + len(write.safetensors_header(table_of("gpt2-small", "awq-int4")[2]))
        == (written["file_bytes"])
    )


# --- Compare's scenarios ------------------------------------------------------------------------


def test_a_scenario_carries_its_format_through_json_links_and_the_table():
    from dcsim import compare
    from dcsim.compare import tables
    from dcsim.links import comparisons

    scenario = compare.Scenario(name="13B int4", config=ModelConfig(preset="llama2-13b"), weights="gptq-int4")
    plain = compare.Scenario(name="13B", config=ModelConfig(preset="llama2-13b"))
    comparison = compare.Comparison(scenarios=(plain, scenario))
    assert compare.Comparison.from_json(comparison.to_json()) == comparison
    assert comparisons.decode(comparisons.encode(comparison)).comparison == comparison
    reports = [count_params(item.config) for item in comparison.scenarios]
    table = tables.comparison_frame(comparison, reports)
    assert table["weights_bytes"].tolist()[1] == 7_255_009_280 and table["weights_bytes"].isna().tolist()[0]
    assert table["weights"].tolist() == ["", "gptq-int4"]


def test_a_dense_stack_takes_no_weight_format():
    from dcsim import compare

    with pytest.raises(ValueError, match="applies to transformer families"):
        compare.Scenario(name="d", config=ModelConfig(), weights="int8")


def test_a_bad_format_in_a_comparison_link_is_named_and_dropped():
    from dcsim.links import comparisons

    decoded = comparisons.decode({"cv": ["2"], "s": ["float32~preset=gpt2-small~weights=q4~n=A"]})
    assert decoded.comparison.scenarios[0].weights is None
    assert any("`weights` must be a weight format" in problem for problem in decoded.problems)
    dense = comparisons.decode({"cv": ["2"], "s": ["float32~weights=int8~n=A"]})
    assert dense.comparison.scenarios[0].weights is None
    assert any("applies to transformer families" in problem for problem in dense.problems)


def test_cli_compare_shows_the_format_column(capsys, tmp_path):
    from dcsim import compare

    scenario = compare.Scenario(name="7B awq", config=ModelConfig(preset="llama2-7b"), weights="awq-int4")
    path = tmp_path / "c.json"
    path.write_text(compare.Comparison(scenarios=(scenario,)).to_json())
    code, out, err = run(capsys, "compare", str(path))
    assert code == 0, err
    assert "awq-int4" in out and f"{layouts_payload('llama2-7b', 'awq-int4'):,}" in out


def layouts_payload(preset, name):
    return table_of(preset, name)[2].payload_bytes
