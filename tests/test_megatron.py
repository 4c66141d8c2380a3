"""The megatron strategy: Megatron-LM's tensor parallelism as vLLM lays weights out, checked by
hand on published models (Llama 2 70B's 8 KV heads, GPT-2's 50,257-row vocabulary, Mixtral,
DeepSeek-V3's latent attention), vLLM's KV-head rule and vocabulary padding on their own, the
refusals in words, the Layout page, the command line and properties over random models."""

import functools
import json
import math

import hypothesis.strategies as hs
import pytest
from arrays import param_report
from hypothesis import assume, given, settings

from conftest import examples, open_app
from dcsim.checkpoint.measurement import MeasurementOptions, plan_checkpoint
from dcsim.cli import main
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quantities import payload
from dcsim.sharding.layout import LayoutError, compute_layout, partition_specs, specs_by_shape
from dcsim.sharding.megatron import kv_heads_per_rank, pad_vocab_size, padded_vocab_size
from dcsim.sharding.meshes import parse_mesh


@functools.cache
def preset(name):
    return count_params(ModelConfig(preset=name))


@functools.cache
def laid(name, mesh):
    return {row.path: row for row in compute_layout(preset(name), parse_mesh(mesh), "megatron").arrays}


# --- vLLM's rules on their own ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kv_heads, num_heads, tp, expected",
    [
        (8, 64, 1, (8, 1)),
        (8, 64, 4, (2, 1)),
        (8, 64, 8, (1, 1)),  # Llama 2 70B on 8 ranks: one KV head each
        (8, 64, 16, (1, 2)),  # on 16: one head each, every head on two ranks
        (8, 64, 64, (1, 8)),
        (32, 32, 32, (1, 1)),
    ],
    ids=["tp1", "tp4", "tp8", "tp16-copied", "tp64-copied", "mha"],
)
def test_kv_heads_per_rank(kv_heads, num_heads, tp, expected):
    assert kv_heads_per_rank(kv_heads, num_heads, tp) == expected


@pytest.mark.parametrize(
    "kv_heads, num_heads, tp, message",
    [
        (8, 64, 3, r"a tensor size of 3 cannot split 64 query heads evenly"),
        (4, 12, 6, r"a tensor size of 6 cannot hold 4 KV heads: .*neither 6 nor 4 divides the other"),
        (8, 60, 4, r"8 KV heads must divide the 60 query heads"),
        (0, 8, 2, r"kv_heads"),
    ],
    ids=["query-heads", "kv-neither", "groups", "zero"],
)
def test_kv_heads_per_rank_refuses_in_words(kv_heads, num_heads, tp, message):
    with pytest.raises(ValueError, match=message):
        kv_heads_per_rank(kv_heads, num_heads, tp)


@pytest.mark.parametrize(
    "vocab, tp, padded",
    [(50_257, 1, 50_304), (50_257, 2, 50_304), (50_257, 4, 50_304), (32_000, 8, 32_000), (129_280, 8, 129_280)],
    ids=["gpt2-tp1", "gpt2-tp2", "gpt2-tp4", "llama-tp8", "deepseek-tp8"],
)
def test_vocabulary_is_padded_to_64_as_vllm_pads_it(vocab, tp, padded):
    assert pad_vocab_size(vocab) == padded_vocab_size(vocab, tp) == padded


def test_a_tensor_size_that_does_not_divide_the_padded_vocabulary_is_refused():
    with pytest.raises(ValueError, match=r"pads a vocabulary of 32,000 to 32,000 rows.*tensor size of 3 does not"):
        padded_vocab_size(32_000, 3)


# --- published models, by hand -------------------------------------------------------------------


@pytest.mark.parametrize(
    "mesh, path, spec, shard_shape, stored_shape",
    [
        # Llama 2 70B: 64 query heads, 8 KV heads of 128, d_model 8192, ffn 28672, vocab 32000.
        ("model=8", "block_0/attn/query/kernel", "P(None, 'model')", (8192, 8, 128), (8192, 64, 128)),
        ("model=8", "block_0/attn/key/kernel", "P(None, 'model')", (8192, 1, 128), (8192, 8, 128)),
        ("model=16", "block_0/attn/key/kernel", "P(None, 'model')", (8192, 1, 128), (8192, 16, 128)),
        ("model=16", "block_0/attn/value/kernel", "P(None, 'model')", (8192, 1, 128), (8192, 16, 128)),
        ("model=16", "block_0/attn/query/kernel", "P(None, 'model')", (8192, 4, 128), (8192, 64, 128)),
        ("model=8", "block_0/attn/out/kernel", "P('model',)", (8, 128, 8192), (64, 128, 8192)),
        ("model=8", "block_0/mlp/gate/kernel", "P(None, 'model')", (8192, 3584), (8192, 28672)),
        ("model=8", "block_0/mlp/down/kernel", "P('model',)", (3584, 8192), (28672, 8192)),
        ("model=8", "block_0/attn_norm/scale", "P()", (8192,), (8192,)),
        ("model=8", "final_norm/scale", "P()", (8192,), (8192,)),
        ("model=8", "embed/token/embedding", "P('model',)", (4000, 8192), (32000, 8192)),
        ("model=8", "lm_head/kernel", "P(None, 'model')", (8192, 4000), (8192, 32000)),
        ("data=2,model=8", "block_0/attn/key/kernel", "P(None, 'model')", (8192, 1, 128), (8192, 8, 128)),
    ],
    ids=[
        "query-tp8",
        "key-tp8",
        "key-tp16-copied",
        "value-tp16-copied",
        "query-tp16",
        "out-heads",
        "gate-columns",
        "down-rows",
        "norm",
        "final-norm",
        "embedding-vocab",
        "lm-head-vocab",
        "data-replicates",
    ],
)
def test_llama2_70b(mesh, path, spec, shard_shape, stored_shape):
    row = laid("llama2-70b", mesh)[path]
    assert (row.partition_spec, row.shard_shape, row.stored_shape) == (spec, shard_shape, stored_shape)
    assert row.values_per_shard == math.prod(shard_shape)


def test_llama2_70b_copies_kv_heads_on_16_ranks_and_says_so():
    key = laid("llama2-70b", "model=16")["block_0/attn/key/kernel"]
    assert key.shape == (8192, 8, 128) and key.num_values == 8192 * 8 * 128
    assert "the 8 KV heads are repeated 2 times to the tensor size 16 (stored as 8192x16x128)" in key.note
    assert "1 KV head a rank" in laid("llama2-70b", "model=8")["block_0/attn/key/kernel"].note


def test_llama2_70b_on_3_ranks_is_refused_naming_the_heads():
    with pytest.raises(LayoutError, match=r"`block_0/attn/query/kernel`.*tensor size of 3 cannot split 64 query heads"):
        compute_layout(preset("llama2-70b"), parse_mesh("model=3"), "megatron")


def test_kv_heads_neither_dividing_nor_divided_are_refused():
    # 12 query heads, 4 KV heads, tp 6: 6 divides 12, but neither 6 nor 4 divides the other.
    report = param_report(
        {
            "attn/query/kernel": (24, 12, 2),
            "attn/key/kernel": (24, 4, 2),
            "attn/value/kernel": (24, 4, 2),
            "attn/out/kernel": (12, 2, 24),
        }
    )
    with pytest.raises(LayoutError, match=r"`attn/key/kernel`.*cannot hold 4 KV heads"):
        compute_layout(report, parse_mesh("model=6"), "megatron")


@pytest.mark.parametrize("tp, padded", [(2, 50_304), (4, 50_304)], ids=["tp2", "tp4"])
def test_gpt2_vocabulary_is_padded_and_split(tp, padded):
    embedding = laid("gpt2-small", f"model={tp}")["embed/token/embedding"]
    assert embedding.shape == (50_257, 768) and embedding.stored_shape == (padded, 768)
    assert embedding.shard_shape == (padded // tp, 768) and embedding.values_per_shard == padded // tp * 768
    assert "padded from 50,257 to 50,304 rows as vLLM does (a multiple of 64)" in embedding.note


def test_an_untied_lm_head_is_padded_on_its_vocabulary():
    report = param_report({"embed/token/embedding": (100, 8), "lm_head/kernel": (8, 100)})
    rows = {row.path: row for row in compute_layout(report, parse_mesh("model=2"), "megatron").arrays}
    assert rows["lm_head/kernel"].stored_shape == (8, 128) and rows["lm_head/kernel"].shard_shape == (8, 64)
    assert rows["embed/token/embedding"].shard_shape == (64, 8)


def test_gpt2_biases_norms_and_position_table():
    rows = laid("gpt2-small", "model=4")
    assert rows["block_0/attn/query/bias"].partition_spec == "P('model',)"  # (heads, head_dim): on heads
    assert rows["block_0/attn/query/bias"].shard_shape == (3, 64)
    assert rows["block_0/mlp/up/bias"].shard_shape == (768,)  # 3072 / 4
    for path in ("block_0/attn/out/bias", "block_0/mlp/down/bias", "embed/position/embedding"):
        assert rows[path].partition_spec == "P()", path
    for path, row in rows.items():
        if "norm" in path:
            assert row.partition_spec == "P()" and row.shard_shape == row.shape, path


def test_phi3_fused_projections():
    rows = laid("phi3-mini", "model=4")  # 32 heads, 32 KV heads of 96: qkv 96 wide
    qkv = rows["block_0/attn/qkv/kernel"]
    assert qkv.partition_spec == "P(None, 'model')" and qkv.shard_shape == (3072, 24, 96)
    assert "8 query, 8 key and 8 value heads a rank" in qkv.note
    assert rows["block_0/mlp/gate_up/kernel"].shard_shape == (3072, 4096)


def test_mixtral_on_expert_8_model_2():
    rows = laid("mixtral-8x7b", "expert=8,model=2")
    gate, down = rows["block_0/moe/experts/gate"], rows["block_0/moe/experts/down"]
    assert gate.partition_spec == "P('expert', None, 'model')" and gate.shard_shape == (1, 4096, 7168)
    assert rows["block_0/moe/experts/up"].shard_shape == (1, 4096, 7168)
    assert down.partition_spec == "P('expert', 'model')" and down.shard_shape == (1, 7168, 4096)
    assert rows["block_0/moe/router/kernel"].partition_spec == "P()"
    assert rows["block_0/attn/key/kernel"].shard_shape == (4096, 4, 128)  # 8 KV heads over 2
    assert rows["block_0/attn/key/kernel"].replication_factor == 8  # copied over `expert`
    assert gate.replication_factor == 1


def test_deepseek_v3_latent_attention():
    rows = laid("deepseek-v3", "model=8")  # 128 heads; q rank 1536, kv rank 512, nope 128 + rope 64, v 128
    expected = {
        "block_0/attn/query_down/kernel": ("P()", (7168, 1536)),
        "block_0/attn/query_norm/scale": ("P()", (1536,)),
        "block_0/attn/kv_down/kernel": ("P()", (7168, 576)),
        "block_0/attn/kv_norm/scale": ("P()", (512,)),
        "block_0/attn/query_up/kernel": ("P(None, 'model')", (1536, 16, 192)),
        "block_0/attn/kv_up/kernel": ("P(None, 'model')", (512, 16, 256)),
        "block_0/attn/out/kernel": ("P('model',)", (16, 128, 7168)),
    }
    for path, (spec, shard_shape) in expected.items():
        assert (rows[path].partition_spec, rows[path].shard_shape) == (spec, shard_shape), path
    assert rows["block_5/moe/experts/gate"].partition_spec == "P(None, None, 'model')"  # no `expert` axis
    assert rows["block_5/moe/shared/down/kernel"].partition_spec == "P('model',)"


def test_deepseek_v2_lite_query_without_lora():
    rows = laid("deepseek-v2-lite", "model=4")  # 16 heads, no query compression
    assert rows["block_0/attn/query/kernel"].shard_shape == (2048, 4, 192)


def test_t5_relative_bias_and_cross_attention():
    rows = laid("t5-small", "model=2")
    assert rows["encoder/block_0/relative_bias/embedding"].partition_spec == "P()"
    assert rows["decoder/block_0/cross_attn/key/kernel"].shard_shape == (512, 4, 64)
    assert rows["decoder/block_0/cross_attn/out/kernel"].shard_shape == (4, 64, 512)


def test_megatron_needs_the_model_axis_and_a_path():
    with pytest.raises(ValueError, match=r"the megatron strategy splits heads.*axis named `model`.*data=4 has none"):
        partition_specs(preset("gpt2-small"), parse_mesh("data=4"), "megatron")
    with pytest.raises(ValueError, match=r"megatron strategy places each array by what its layer does"):
        specs_by_shape([(8, 8)], parse_mesh("model=2"), "megatron")


def test_memory_under_megatron_splits_the_stored_shape():
    report = preset("gpt2-small")
    memory = compute_memory(report, parse_mesh("model=4"), "megatron", (), Training())
    layout = compute_layout(report, parse_mesh("model=4"), "megatron")
    params = {row.path: row for row in memory.part_arrays("params")}
    embedding = params["embed/token/embedding"]
    assert embedding.shape == (50_257, 768) and embedding.stored_shape == (50_304, 768)
    assert embedding.shard_shape == (12_576, 768)
    assert sum(math.prod(row.shard_shape) for row in params.values()) == layout.values_per_device


# --- properties ----------------------------------------------------------------------------------


@hs.composite
def decoders(draw):
    tp = draw(hs.sampled_from([2, 4, 8, 16]))
    kv_heads = draw(hs.sampled_from([1, 2, 4, 8, 16]))
    num_heads = kv_heads * draw(hs.integers(1, 8))
    head_dim, d_model = draw(hs.integers(1, 8)), draw(hs.integers(1, 64))
    ffn, vocab = draw(hs.integers(1, 64)) * tp, draw(hs.integers(64, 5000))
    shapes = {
        "embed/token/embedding": (vocab, d_model),
        "block_0/attn_norm/scale": (d_model,),
        "block_0/attn/query/kernel": (d_model, num_heads, head_dim),
        "block_0/attn/key/kernel": (d_model, kv_heads, head_dim),
        "block_0/attn/value/kernel": (d_model, kv_heads, head_dim),
        "block_0/attn/out/kernel": (num_heads, head_dim, d_model),
        "block_0/mlp/gate/kernel": (d_model, ffn),
        "block_0/mlp/up/kernel": (d_model, ffn),
        "block_0/mlp/down/kernel": (ffn, d_model),
        "lm_head/kernel": (d_model, vocab),
    }
    return param_report(shapes), tp


@settings(max_examples=examples(60), deadline=None)
@given(decoders())
def test_megatron_never_holds_more_than_replicated_and_splits_evenly(case):
    report, tp = case
    try:
        layout = compute_layout(report, parse_mesh(f"model={tp}"), "megatron")
    except LayoutError:
        assume(False)  # heads or a padded vocabulary this tensor size cannot split: refused, as vLLM does
        return
    assert layout.values_per_device <= report.total_params
    for row in layout.arrays:
        assert row.values_per_shard <= row.num_values, row.path
        if row.stored_shape == row.shape and row.partition_spec != "P()":
            assert row.values_per_shard * tp == row.num_values, row.path
        if row.stored_shape != row.shape:
            assert row.values_per_shard * tp == math.prod(row.stored_shape), row.path


# --- the command line and the page ---------------------------------------------------------------


def test_cli_layout_json(capsys):
    code = main(["layout", "--preset", "gpt2-small", "--mesh", "model=2", "--strategy", "megatron", "--format", "json"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and record["strategy"] == "megatron"
    arrays = {row["path"]: row for row in record["arrays"]}
    assert arrays["embed/token/embedding"]["shard_shape"] == [25_152, 768]
    assert "50,304" in arrays["embed/token/embedding"]["note"]
    assert arrays["block_0/attn/query/kernel"]["partition_spec"] == "P(None, 'model')"
    assert record["values_per_device"] == sum(row["values_per_shard"] for row in record["arrays"])


def test_cli_memory_megatron(capsys):
    code = main(["memory", "--preset", "gpt2-small", "--mesh", "model=2", "--strategy", "megatron", "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["strategy"] == "megatron"


def value_column(out, label):
    """Where the figure after ``label`` starts on its line of the totals."""
    line = next(line for line in out.splitlines() if line.startswith(label + " "))
    rest = line[len(label) :]
    return len(label) + len(rest) - len(rest.lstrip())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8"])
def test_cli_raw_bytes_labels_stand_in_one_column(capsys, dtype):
    main(["layout", "--input-dim", "8", "--features", "8", "--mesh", "model=2", "--dtype", dtype])
    out = capsys.readouterr().out
    column = value_column(out, "total parameters")
    assert value_column(out, "raw float32 bytes per device") == column
    assert value_column(out, f"raw {dtype} bytes per device") == column  # bfloat16 stood one column left


def test_layout_page_offers_megatron():
    at = open_app({"preset": "gpt2-small", "mesh": "model=2", "strategy": "megatron"}, "pages/layout.py", editors=False)
    assert not at.exception and not at.error
    assert at.selectbox(key="w.layout.strategy").value == "megatron"
    assert "megatron" in at.selectbox(key="w.layout.strategy").options
    assert any("Megatron-LM's tensor parallelism as vLLM serves it" in caption.value for caption in at.caption)
    values = {metric.label: metric.value for metric in at.metric}
    layout = compute_layout(preset("gpt2-small"), parse_mesh("model=2"), "megatron")
    assert values["Values per device"] == f"{layout.values_per_device:,}"
    # The raw bytes metric: its label over its own value (the storage dtype's bytes).
    (label,) = [label for label in values if label.startswith("Raw ")]
    dtype = label.split()[1]
    assert values[label].startswith(f"{payload.raw_bytes(layout.values_per_device, dtype):,} bytes")
    table = at.dataframe[-1].value
    embedding = table[table["path"] == "embed/token/embedding"].iloc[0]
    assert embedding["shard_shape"] == "25152x768" and "50,304" in embedding["note"]


def test_a_checkpoint_refuses_a_padded_megatron_layout():
    options = MeasurementOptions(mesh="model=2", strategy="megatron")
    with pytest.raises(ValueError, match=r"writes each array at its own shape.*`embed/token/embedding`.*50,304"):
        plan_checkpoint(ModelConfig(preset="gpt2-small"), options)
