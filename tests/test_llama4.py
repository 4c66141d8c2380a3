"""Llama 4 opens exactly: the multimodal ``llama4`` (``Llama4ForConditionalGeneration``: vision
tower, pixel-shuffle adapter, projector, language model) and ``llama4_text`` (``Llama4ForCausalLM``).

The files and counts in tests/data/hf/ were written by bench/hf_import.py (``--llama4``) with
transformers 5.24.0 on the meta device, from the published config.json files of
meta-llama/Llama-4-Scout-17B-16E and meta-llama/Llama-4-Maverick-17B-128E (the ``-text`` file is
Scout's text_config alone). Meta publishes 109B total and 17B active for Scout, 400B total and
17B active for Maverick.
"""

import json
from pathlib import Path

import pytest

from dcsim import hf
from dcsim.cli import main
from dcsim.model import breakdown, families, presets
from dcsim.model.count import count_module, count_params

DATA = Path(__file__).parent / "data" / "hf"
COUNTS = json.loads((DATA / "counts.json").read_text())
DEFAULTS = json.loads((DATA / "defaults.json").read_text())
SCOUT, MAVERICK, SCOUT_TEXT = "llama-4-scout-17b-16e", "llama-4-maverick-17b-128e", "llama-4-scout-17b-16e-text"


def data_of(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def opened(data: dict):
    return hf.from_hf_config(data).config


@pytest.mark.parametrize(
    ("name", "total"),
    [(SCOUT, 108_641_793_536), (MAVERICK, 401_583_781_376), (SCOUT_TEXT, 107_769_861_120)],
    ids=["scout", "maverick", "scout-text"],
)
def test_each_published_config_counts_what_transformers_counts(name, total):
    # transformers 5.24.0, Llama4ForConditionalGeneration / Llama4ForCausalLM on the meta device.
    assert COUNTS[name] == total
    assert count_params(opened(data_of(name))).total_params == total


@pytest.mark.parametrize("model_type", ["llama4", "llama4_text"])
def test_a_bare_model_type_is_the_class_defaults(model_type):
    # Llama4Config() builds its vision tower's fc1 over 5,632 inputs though its patches are 768 wide: counted as built.
    report = count_params(opened({"model_type": model_type}))
    assert (
        report.total_params
        == DEFAULTS[model_type]
        == {"llama4": 108_225_039_360, "llama4_text": 107_769_861_120}[model_type]
    )


def test_the_vision_tower_projector_and_language_model_are_groups_of_the_breakdown():
    config = opened(data_of(SCOUT))
    report = count_params(config)
    groups = dict(zip(*(breakdown.breakdown_frame(report)[key] for key in ("group", "num_params")), strict=True))
    assert groups["projector"] == 4096 * 5120  # vision_output_dim x hidden_size, no bias
    language_model = sum(value for group, value in groups.items() if group not in ("vision_tower", "projector"))
    assert language_model == COUNTS[SCOUT_TEXT]  # the text_config alone, as Llama4ForCausalLM counts it
    assert groups["vision_tower"] == COUNTS[SCOUT] - COUNTS[SCOUT_TEXT] - 4096 * 5120 == 850_960_896


def test_the_vision_tower_is_llama4s_by_hand():
    width, patches, ffn, layers = 1408, (336 // 14) ** 2 + 1, 5632, 34
    block = 4 * (width * width + width) + (width * ffn + ffn) + (ffn * width + width) + 2 * 2 * width
    embeddings = 3 * 14 * 14 * width + width + patches * width + 2 * 2 * width  # patch, class, positions, norms
    adapter = ffn * 4096 + 4096 * 4096
    report = count_params(opened(data_of(SCOUT)))
    tower = sum(row.num_values for row in report.arrays if row.path.startswith("vision_tower/"))
    assert tower == embeddings + layers * block + adapter


@pytest.mark.parametrize(
    ("name", "active"), [(SCOUT_TEXT, 17_172_894_720), (MAVERICK, 18_056_623_616)], ids=["scout", "maverick"]
)
def test_the_active_count_is_the_published_17b_for_the_language_model(name, active):
    config = opened(data_of(name))
    assert breakdown.active_params(config, count_params(config)) == active
    # Meta's 17B active is the language model's: Maverick's figure less its vision tower and projector is 17.18B.
    tower = COUNTS[SCOUT] - COUNTS[SCOUT_TEXT]
    assert round((active - (tower if name == MAVERICK else 0)) / 1e9) == 17


def test_maverick_interleaves_dense_and_moe_blocks_and_scout_has_experts_everywhere():
    maverick, scout = (presets.resolved_hparams(opened(data_of(name))) for name in (MAVERICK, SCOUT))
    assert maverick["dense_layers"] == tuple(range(0, 48, 2)) and scout["dense_layers"] == ()
    # Without moe_layers, interleave_moe_layer_step says the same: experts in every 2nd block (1, 3, 5, ...).
    text = data_of(MAVERICK)["text_config"] | {"moe_layers": None}
    assert presets.resolved_hparams(opened({"model_type": "llama4_text"} | text))["dense_layers"] == tuple(
        range(0, 48, 2)
    )


def test_the_traced_count_is_the_full_init():
    data = data_of(MAVERICK)
    data["text_config"] |= {"num_hidden_layers": 5, "moe_layers": [1, 3], "num_local_experts": 4}
    data["text_config"] |= {"hidden_size": 64, "head_dim": 16, "intermediate_size": 32, "intermediate_size_mlp": 48}
    data["vision_config"] |= {"num_hidden_layers": 3, "hidden_size": 32, "intermediate_size": 128}
    config = opened(data)
    module, inputs = families.build_family(config.family, presets.resolved_hparams(config))
    assert count_params(config).arrays == count_module(module, *inputs).arrays


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"text_config": [1]}, "`text_config` must be a JSON object"),
        ({"vision_config": {"image_size": [336, 336]}}, "image_size"),
        ({"text_config": {"moe_layers": 3}}, "`moe_layers` must be a list of block numbers"),
        ({"text_config": {"num_local_experts": 1, "num_experts_per_tok": 2}}, "experts_per_token"),
    ],
    ids=["text-config", "image-size-list", "moe-layers", "top-k"],
)
def test_what_dcsim_cannot_count_is_refused_by_name(change, message):
    with pytest.raises((TypeError, ValueError), match=message):
        opened({"model_type": "llama4"} | change)


def test_a_maverick_sized_config_counts_with_each_kind_of_block_traced_once():
    hparams, runs = families.traced_hparams("llama4", presets.resolved_hparams(opened(data_of(MAVERICK))))
    assert hparams["built_layers"] == (0, 1, 2, 3) and hparams["built_vision_layers"] == (0, 1)
    assert sorted(len(run.members) for run in runs) == [24, 24, 34]


def test_the_text_model_serves_with_its_chunked_blocks_as_windows(capsys):
    path = str(DATA / f"{SCOUT_TEXT}.json")
    assert main(["serve", "--config", path, "--context", "131072", "--format", "json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    windows = [layer["window"] for layer in layers]
    assert windows.count(8192) == 36 and windows.count(None) == 12  # a NoPE block, full attention, every fourth


def test_serving_and_activations_of_the_multimodal_model_are_refused(capsys):
    path = str(DATA / f"{SCOUT}.json")
    assert main(["serve", "--config", path]) == 2
    assert "open its text_config as a llama4_text config.json" in capsys.readouterr().err
    assert main(["memory", "--config", path, "--mesh", "data=8", "--sequence", "128"]) == 2
    assert "the llama4 family has no training forward" in capsys.readouterr().err
