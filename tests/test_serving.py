"""The serving engine: the cache read from the model, laid out per device, and the exact answers.

Published figures, each reproduced from the model's own cache (never typed as a formula):
- Llama 2 70B: 327,680 bytes a token in bfloat16 (80 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes;
  meta-llama/Llama-2-70b-hf config.json; vLLM logs the same per-token figure);
- Llama 3 8B: 131,072 (32 x 8 x 128 x 2 x 2; meta-llama/Meta-Llama-3-8B config.json);
- DeepSeek-V3: 70,272 (61 x (512 + 64) x 2: the latent and the rotary key, DeepSeek-V3's
  inference code and vLLM's MLA cache), and 35,136 in fp8.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from dcsim.model.config import ModelConfig
from dcsim.serving import catalog
from dcsim.serving.engine import compute_serving, context_limit, default_context, stage_blocks, tensor_heads
from dcsim.serving.request import Serving, parse_reserve, reserve_text, usable_bytes
from dcsim.serving.search import smallest_mesh
from dcsim.sharding.meshes import parse_mesh

GIB = 1 << 30


def serve(preset: str, mesh: str = "data=1", **settings_: object):
    return compute_serving(ModelConfig(preset=preset), Serving(mesh=parse_mesh(mesh), **settings_))


@pytest.mark.parametrize(
    "preset, kv_dtype, per_token",
    [
        pytest.param("llama2-70b", "bfloat16", 327_680, id="llama2-70b"),
        pytest.param("llama3-8b", "bfloat16", 131_072, id="llama3-8b"),
        pytest.param("deepseek-v3", "bfloat16", 70_272, id="deepseek-v3"),
        pytest.param("deepseek-v3", "fp8", 35_136, id="deepseek-v3-fp8"),
        pytest.param("llama2-70b", "float32", 655_360, id="llama2-70b-float32"),
        # int8 adds vLLM's per-token-head float32 scales: 80 x 8 x 2 x (128 + 4)
        pytest.param("llama2-70b", "int8", 80 * 8 * 2 * (128 + 4), id="llama2-70b-int8"),
        pytest.param("gpt2-small", "bfloat16", 12 * 12 * 64 * 2 * 2, id="gpt2-multi-head"),
        pytest.param("gemma3-1b", "bfloat16", 26 * 1 * 256 * 2 * 2, id="gemma3-multi-query-wide-heads"),
    ],
)
def test_bytes_a_token_are_the_published_figures(preset, kv_dtype, per_token):
    assert serve(preset, kv_dtype=kv_dtype, context=1024).kv_bytes_per_token == per_token


def test_fp8_keeps_a_float32_scale_a_layer_as_fixed_state():
    fp8 = serve("deepseek-v3", kv_dtype="fp8")
    bf16 = serve("deepseek-v3")
    # 61 layers: a scale for the latent and one for the rotary key, 4 bytes each, beside the step index
    assert fp8.other_bytes_per_device - bf16.other_bytes_per_device == 61 * 2 * 4


def test_the_latent_cache_is_whole_on_every_tensor_rank_and_kv_heads_split():
    one, eight = serve("deepseek-v3", "model=8"), serve("deepseek-v3", "model=1")
    assert one.kv_bytes_per_device == eight.kv_bytes_per_device == 70_272 * 4096
    llama = serve("llama2-70b", "model=8")
    assert llama.kv_bytes_per_device == 327_680 * 4096 // 8


@pytest.mark.parametrize(
    "tp, heads_a_rank, copies",
    [(1, 8, 1), (2, 4, 1), (8, 1, 1), (16, 1, 2), (32, 1, 4), (64, 1, 8)],
)
def test_vllms_kv_head_rule_on_llama2_70b(tp, heads_a_rank, copies):
    assert tensor_heads(64, 8, tp) == (heads_a_rank, copies)
    report = serve("llama2-70b", f"model={tp}")
    key = next(item for item in report.cache if item.array.name == "cached_key")
    assert key.shard_shape[2] == heads_a_rank
    assert report.kv_bytes_per_device == 80 * 2 * 4096 * heads_a_rank * 128 * 2


@pytest.mark.parametrize("tp", [3, 6, 12])
def test_a_tensor_size_the_heads_cannot_split_is_refused_in_heads(tp):
    with pytest.raises(ValueError, match=r"heads"):
        serve("llama2-70b", f"model={tp}")


def test_sliding_windows_hold_at_most_their_window_unless_full_windows():
    gemma = serve("gemma2-2b", context=8192)
    local = [layer for layer in gemma.layers if layer.kind == "sliding"]
    assert len(local) == 13 and all(layer.tokens == 4096 and layer.window == 4096 for layer in local)
    assert {layer.tokens for layer in gemma.layers if layer.kind == "full"} == {8192}
    full = serve("gemma2-2b", context=8192, full_windows=True)
    assert full.kv_bytes_per_sequence == 8192 * full.kv_bytes_per_token
    assert gemma.kv_bytes_per_sequence == (8192 + 4096) * 13 * 4 * 256 * 2 * 2


def test_t5_caches_its_decoder_and_the_encoders_output_at_the_source_length():
    t5 = serve("t5-small", context=128, source_length=512)
    kinds = {layer.kind for layer in t5.layers}
    assert kinds == {"full", "cross"}
    cross = [layer for layer in t5.layers if layer.kind == "cross"]
    assert len(cross) == 6 and {layer.tokens for layer in cross} == {512}
    assert t5.kv_bytes_per_sequence == 6 * 8 * 64 * 2 * 2 * (128 + 512)


@pytest.mark.parametrize("preset", ["bert-base", "vit-b16", "resnet18", "mlp-mnist"])
def test_models_with_no_decoder_are_weights_only_and_say_so(preset):
    report = serve(preset, device="h100-sxm")
    assert not report.has_cache and report.kv_bytes_per_device == 0
    assert report.max_concurrency is None and report.fits is True
    assert any("no KV cache: weights only" in note for note in report.notes)


def test_mixture_of_experts_caches_only_its_attention():
    mixtral = serve("mixtral-8x7b")
    assert mixtral.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert any("experts cache nothing" in note for note in mixtral.notes)


# Llama 2 70B's parameters, by hand from its config.json (vocab 32,000, d_model 8,192, 80 layers,
# 64 heads of 128, 8 KV heads, ffn 28,672, untied head): the embedding and the head 2 x 32,000 x
# 8,192; a layer's query and out 2 x 8,192^2, key and value 2 x 8,192 x 1,024, MLP 3 x 8,192 x
# 28,672 and two norms 2 x 8,192; the final norm 8,192.
LLAMA2_70B_LAYER = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28_672 + 2 * 8192
LLAMA2_70B_NORMS = 80 * 2 * 8192 + 8192  # on every tensor rank; everything else splits four ways evenly
LLAMA2_70B_PARAMS = 2 * 32_000 * 8192 + 80 * LLAMA2_70B_LAYER + 8192


def test_the_answers_on_four_h100s():
    """Llama 2 70B on 4 x H100 at 4,096 tokens (docs/serving.md's worked example), by hand: the
    weights a device from the parameter count, bfloat16, never from the report's own figure."""
    report = serve("llama2-70b", "model=4", device="h100-sxm", concurrency=32)
    assert LLAMA2_70B_PARAMS == report.total_params == 68_976_648_192
    usable = usable_bytes(80 * GIB, Fraction(1, 10))
    assert report.usable_bytes == usable == 77_309_411_328  # floor(80 x 2^30 x 0.9)
    weights = ((LLAMA2_70B_PARAMS - LLAMA2_70B_NORMS) // 4 + LLAMA2_70B_NORMS) * 2
    assert weights == 34_490_302_464
    step_indices = 80 * 4  # an int32 step index a layer
    room = usable - weights - step_indices
    per_sequence = 327_680 // 4 * 4096  # each rank holds 2 of the 8 KV heads
    assert room // per_sequence == 42_819_108_544 // 335_544_320 == 127
    assert report.max_concurrency == 127
    assert report.kv_tokens_per_replica == room // (327_680 // 4)
    assert report.fits and report.max_context == 4096 and report.max_context_limited_by == "positions"
    assert report.kv_bytes_per_device == 32 * per_sequence


def test_max_context_is_the_exact_floor_the_memory_allows():
    report = serve("llama3-8b", device="l4", concurrency=4, context=1024)
    room = report.usable_bytes - report.weights_bytes_per_device - report.other_bytes_per_device
    assert report.max_context_by_memory == room // (4 * 131_072)
    assert report.max_context == min(8192, room // (4 * 131_072))


def test_without_a_budget_every_figure_is_given_and_the_answers_are_none():
    report = serve("llama2-70b", "model=8")
    assert report.total_bytes_per_device > 0
    assert (report.fits, report.max_concurrency, report.max_context, report.kv_tokens_per_replica) == (None,) * 4


def test_replicas_share_the_sequences_and_the_most_loaded_holds_the_ceiling():
    report = serve("llama3-8b", "data=4", concurrency=10, device="h100-sxm")
    assert report.serving.sequences_per_replica == 3
    assert report.kv_bytes_per_device == 3 * 131_072 * 4096
    assert report.max_concurrency % 4 == 0
    assert any("do not split evenly" in note for note in report.notes)


def test_pipeline_stages_hold_contiguous_blocks_as_vllm_partitions_them():
    assert [len(blocks) for blocks in stage_blocks(80, 3)] == [27, 27, 26]
    assert [len(blocks) for blocks in stage_blocks(61, 4)] == [15, 15, 16, 15]  # the one left over: second to last
    report = serve("llama2-70b", "stage=4")
    per_block = next(stage for stage in report.stages if stage.stage == 1).kv_bytes
    assert per_block == 20 * 2 * 4096 * 8 * 128 * 2
    assert report.weights_bytes_per_device == max(stage.weights_bytes for stage in report.stages)
    with pytest.raises(ValueError, match="at least one block"):
        serve("gpt2-small", "stage=13", context=512)


def test_a_context_past_the_positions_is_refused_unless_rope_is_scaled():
    with pytest.raises(ValueError, match=r"`context` \(4,097 tokens\) is past the model's 4,096 positions"):
        serve("llama2-70b", context=4097)
    scaled = serve("deepseek-v3", context=200_000)
    assert any("rope_scaling" in note for note in scaled.notes)
    # a learned table has no rotary scaling to offer: the refusal says only what is allowed
    with pytest.raises(ValueError, match=r"past the model's 1,024 positions \(max_positions\); allowed: 1 to 1,024$"):
        serve("gpt2-small", context=1025)


@pytest.mark.parametrize(
    "preset, limit, default",
    [
        pytest.param("gpt2-small", 1024, 1024, id="gpt2-learned-1024"),
        pytest.param("llama2-70b", 4096, 4096, id="llama2-4096"),
        pytest.param("llama3-8b", 8192, 4096, id="llama3-more-than-the-default"),
        pytest.param("deepseek-v3", None, 4096, id="scaled-rope-any-length"),
        pytest.param("t5-small", None, 4096, id="relative-positions"),
    ],
)
def test_the_default_context_is_never_past_the_positions(preset, limit, default):
    config = ModelConfig(preset=preset)
    assert (context_limit(config), default_context(config)) == (limit, default)
    assert serve(preset, context=default).serving.context == default  # the default is served, not refused


@pytest.mark.parametrize(
    "settings_, message",
    [
        ({"context": 0}, r"`context` must be"),
        ({"concurrency": -1}, r"`concurrency` must be"),
        ({"kv_dtype": "int4"}, r"`kv_dtype` must be one of bfloat16"),
        ({"weights": "gguf"}, r"`weights` must be a weight format"),
        ({"reserve": "1.5"}, r"`reserve` must be at least 0 and below 1"),
        ({"reserve": "1"}, r"below 1"),
        ({"reserve": "-0.1"}, r"`reserve` must be a fraction"),
        ({"device": "h900"}, r"unknown device 'h900'; devices: h100-sxm"),
    ],
)
def test_bad_requests_name_the_setting_and_the_rule(settings_, message):
    with pytest.raises(ValueError, match=message):
        Serving(mesh=parse_mesh("data=1"), **settings_)


def test_a_serving_mesh_names_only_the_serving_axes():
    with pytest.raises(ValueError, match=r"a serving mesh's axes are data, model, expert, stage"):
        Serving(mesh=parse_mesh("fsdp=4"))


@pytest.mark.parametrize("text, value", [("0.1", Fraction(1, 10)), (".25", Fraction(1, 4)), ("10%", Fraction(1, 10))])
def test_the_reserve_is_exact_from_its_text(text, value):
    assert parse_reserve(text) == value
    assert parse_reserve(reserve_text(value)) == value


def test_usable_bytes_never_go_through_a_float():
    # 0.1 as a float is 0.1000000000000000055...; floor(80 GiB x 0.9) exactly is 77,309,411,328
    assert usable_bytes(80 * GIB, parse_reserve("0.1")) == 77_309_411_328


def test_every_catalog_row_states_its_unit_and_source():
    for row in catalog.ACCELERATORS.values():
        assert row.unit in ("GiB", "GB") and row.source and row.stated
        number = int("".join(ch for ch in row.stated if ch.isdigit()))
        assert row.bytes == number * (GIB if row.unit == "GiB" else 10**9)


def test_the_smallest_mesh_grows_the_tensor_size_then_the_replicas():
    request = Serving(mesh=parse_mesh("data=1"), concurrency=64, device="h100-sxm")
    found = smallest_mesh(ModelConfig(preset="llama2-70b"), request)
    assert found is not None and found.answer is not None
    assert found.answer.mesh.text == "data=1,model=4"
    tried = [item.mesh.text for item in found.tried]
    assert tried[:2] == ["data=1,model=1", "data=1,model=2"]
    assert all(item.serves == (item.total_bytes_per_device <= request.usable_bytes) for item in found.tried)


@settings(max_examples=examples(12), deadline=None)
@given(concurrency=st.integers(1, 64), scale=st.integers(2, 5))
def test_kv_bytes_are_linear_in_the_concurrency(concurrency, scale):
    one = serve("gpt2-small", context=256, concurrency=concurrency)
    more = serve("gpt2-small", context=256, concurrency=concurrency * scale)
    assert more.kv_bytes_per_device == scale * one.kv_bytes_per_device


@settings(max_examples=examples(12), deadline=None)
@given(context=st.integers(1, 8192))
def test_each_layer_holds_the_smaller_of_its_window_and_the_context(context):
    report = serve("gemma2-2b", context=context)
    for layer in report.layers:
        assert layer.tokens == (min(layer.window, context) if layer.window else context)


def test_the_figure_is_the_same_whichever_way_the_request_is_written():
    base = Serving(mesh=parse_mesh("model=2"), budget_bytes=80 * GIB)
    same = dataclasses.replace(base, budget_bytes=None, device="h100-sxm")
    assert (
        serve("llama3-8b", "model=2", budget_bytes=80 * GIB).max_concurrency
        == compute_serving(ModelConfig(preset="llama3-8b"), same).max_concurrency
    )


def test_the_capacity_curve_at_doubling_contexts_is_the_arithmetic_by_hand():
    from dcsim.report.serving_charts import curve_frame
    from dcsim.serving.curve import capacity_curve

    report = serve("llama3-8b", "model=2", budget_bytes=80 * GIB, context=3000)
    points = capacity_curve(report)
    contexts = [point.context for point in points]
    assert contexts == [128, 256, 512, 1024, 2048, 3000, 4096, 8192]  # up to Llama 3's 8,192 positions
    # by hand: Llama 3 8B (8,030,261,248 parameters; 32 layers' two norms and the final norm, 266,240
    # values, on both tensor ranks, the rest split in two), bfloat16, 32 int32 step indices, and
    # 131,072 KV bytes a token halved by the two ranks' 4 of 8 KV heads
    norms = 32 * 2 * 4096 + 4096
    weights = ((8_030_261_248 - norms) // 2 + norms) * 2
    room = 77_309_411_328 - weights - 32 * 4  # floor(80 GiB x 0.9) usable
    assert room == 69_278_883_712
    assert [point.max_concurrency for point in points] == [room // (65_536 * c) for c in contexts]
    assert [point.max_concurrency for point in points] == [8258, 4129, 2064, 1032, 516, 352, 258, 129]
    assert [point.context for point in points if point.chosen] == [3000]
    assert points[0].max_concurrency > points[-1].max_concurrency > 0
    frame = curve_frame(points)
    assert list(frame.columns) == ["context", "max_concurrency", "chosen"]
    assert frame.to_dict("records") == [point._asdict() for point in points]
    assert str(frame["max_concurrency"].dtype) == "int64" and str(frame["chosen"].dtype) == "bool"
    assert capacity_curve(serve("llama3-8b", "model=2")) == []  # no budget, no curve


def test_the_capacity_curves_ticks_are_its_own_contexts():
    from dcsim.report.serving_charts import capacity_curve, curve_frame
    from dcsim.serving.curve import capacity_curve as points_of

    frame = curve_frame(points_of(serve("gpt2-xl", budget_bytes=80 * GIB, context=1024)))
    x = capacity_curve(frame).to_dict()["layer"][0]["encoding"]["x"]
    assert x["axis"]["values"] == [128, 256, 512, 1024] and x["axis"]["format"] == ","


def _cache_names() -> tuple[set[str], set[str]]:
    """The names dcsim's modules give their cache variables, and the names of the modules that make
    a cache, read from abstract decode-mode inits: grouped heads with int8 scales, DeepSeek's latent
    with fp8 scales, T5's self- and cross-attention, a Mamba mixer's state."""
    from test_ssm import opened

    from dcsim.model.cache import Decode
    from dcsim.serving.cache import read_cache

    variables: set[str] = set()
    modules: set[str] = set()
    for config, kv_dtype in [
        (ModelConfig(preset="gpt2-small"), "int8"),
        (ModelConfig(preset="deepseek-v2-lite"), "float8_e4m3fn"),
        (ModelConfig(preset="t5-small"), "bfloat16"),
        (opened("mamba-130m"), "bfloat16"),
    ]:
        for array in read_cache(config, Decode(context=16, kv_dtype=kv_dtype, source_length=8), 2):
            variables.add(array.path.rpartition("/")[2])
            if array.layer is not None:
                modules.add(array.module.rpartition("/")[2])
    return variables, modules


def _name_tests(source: str, variables: set[str], modules: set[str]) -> list[tuple[int, str]]:
    """Each string in ``source`` (docstrings aside) that spells a cache variable's or a caching
    module's name, or a piece of a variable's name (``"cached_"``, ``"_scale"``): line, string."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        text = node.value
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
        piece = re.fullmatch(r"\w*_\w*", text) is not None and len(text) >= 4
        if words & (variables | modules) or (piece and any(text in name for name in variables)):
            found.append((node.lineno, text))
    return sorted(found)


def test_serving_reads_cache_specs_never_cache_variable_names():
    """Serving learns what a cache array is (per token, a state, which axis holds the KV heads,
    cross or sliding) from the spec its module emits (``dcsim.model.cache``), never by testing the
    array's or its module's name, which is how it read them before issue 43 (the probes below)."""
    variables, modules = _cache_names()
    assert {"cached_key", "key_scale", "cached_latent", "latent_scale", "conv_state", "ssm_state"} <= variables
    assert {"attn", "self_attn", "cross_attn", "mixer"} <= modules
    probes = (
        'row.kind.startswith("cached_") or row.kind.endswith("_scale")\n'
        'KV_NAMES = frozenset({"cached_key", "cached_value"})\n'
        'if "cached_latent" in names:\n    kind = "latent"\n'
        'elif path.endswith("cross_attn"):\n    kind = "cross"\n'
    )
    assert [line for line, _ in _name_tests(probes, variables, modules)] == [1, 1, 2, 2, 3, 5]
    sources = sorted((Path(__file__).parents[1] / "dcsim" / "serving").glob("*.py"))
    assert len(sources) >= 9
    found = [
        f"{path.name}:{line}: {text!r}"
        for path in sources
        for line, text in _name_tests(path.read_text(), variables, modules)
    ]
    assert found == []


def test_the_device_bar_draws_the_budget_as_a_line_and_what_passes_it_as_overflow():
    from dcsim.report.serving_charts import OVER_COLOUR, device_bar, device_frame
    from dcsim.ui.serving import device_parts

    # Llama 2 70B's bfloat16 weights on one 80 GiB device: over, so no reserve is stacked after them
    over = serve("llama2-70b", budget_bytes=80 * GIB)
    parts = device_parts(over)
    assert set(parts) == {"Weights", "KV cache", "Other (step index, buffers)"}
    spec = device_bar(device_frame(parts), over.budget_bytes, over.usable_bytes).to_dict()
    rules = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "rule")
    lines = spec["datasets"][rules["data"]["name"]]
    assert [line["gib"] for line in lines] == [80.0, over.usable_bytes / GIB]
    band = next(layer for layer in spec["layer"] if layer["mark"].get("color") == OVER_COLOUR)
    (row,) = spec["datasets"][band["data"]["name"]]
    assert row["start"] == 80.0 and row["end"] == over.total_bytes_per_device / GIB
    # on 4 devices it fits: free space, then the reserve up to the device's line, no overflow band
    fits = serve("llama2-70b", "model=4", budget_bytes=80 * GIB)
    parts = device_parts(fits)
    assert list(parts)[-2:] == ["Free", "Reserve"] and sum(parts.values()) == 80 * GIB
    spec = device_bar(device_frame(parts), fits.budget_bytes, fits.usable_bytes).to_dict()
    assert not any(layer["mark"].get("color") == OVER_COLOUR for layer in spec["layer"])
