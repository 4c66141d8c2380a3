"""The vision-language models of issue 30 (LLaVA, Gemma 3, Mistral 3, Qwen2.5-VL): each published
config.json counts what transformers 5.24.0 counts on the meta device (tests/data/hf/counts.json,
written by bench/hf_import.py), as three groups of the breakdown; a short or absent text_config
takes its class's defaults; what no family builds is refused by name.

The published figures, checked by hand against the model cards: llava-hf/llava-1.5-7b-hf
7,063,427,072; google/gemma-3-4b-it 4,300,079,472; Qwen/Qwen2.5-VL-7B-Instruct 8,292,166,656;
mistralai/Mistral-Small-3.1-24B-Base-2503 23,340,272,640 as transformers ties its head (the
checkpoint's own lm_head makes it 24,011,361,280).
"""

import json

import pytest
from fake_hub import DATA, Repo, running

from conftest import open_app, open_views
from dcsim import hf, links
from dcsim.hf import hub
from dcsim.model import breakdown, families, presets
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_module, count_params
from dcsim.model.forward import Forward
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import parse_mesh

COUNTS = json.loads((DATA / "counts.json").read_text())
DEFAULTS = json.loads((DATA / "defaults.json").read_text())
MISTRAL3 = "mistral-small-3.1-24b-base-2503"

# file, Hub id, transformers 5.24.0's num_parameters(), and its groups: vision tower, projector,
# language model (transformers keeps Qwen2.5-VL's merger inside model.visual: 44,574,464 of its
# 676,550,144; dcsim shows it as the projector it is).
PUBLISHED = [
    ("llava-1.5-7b-hf", "llava-hf/llava-1.5-7b-hf", 7_063_427_072, (303_507_456, 20_979_712, 6_738_939_904)),
    ("gemma-3-4b-it", "google/gemma-3-4b-it", 4_300_079_472, (416_866_032, 2_950_272, 3_880_263_168)),
    (MISTRAL3, "mistralai/Mistral-Small-3.1-24B-Base-2503", 23_340_272_640, (403_305_472, 35_652_608, 22_901_314_560)),
    ("qwen2.5-vl-7b-instruct", "Qwen/Qwen2.5-VL-7B-Instruct", 8_292_166_656, (631_975_680, 44_574_464, 7_615_616_512)),
]


def data(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def qwen_hub_file() -> dict:
    """Qwen2.5-VL-7B-Instruct as its Hub file has it: the text fields at the top level."""
    saved = data("qwen2.5-vl-7b-instruct")
    flat = {key: value for key, value in saved.items() if key != "text_config"} | saved["text_config"]
    return flat | {"model_type": "qwen2_5_vl"}


def total(imported: hf.Imported) -> int:
    return count_params(imported.config).total_params


@pytest.mark.parametrize("name, hub_id, count, groups", PUBLISHED, ids=[row[0] for row in PUBLISHED])
def test_each_published_model_counts_what_transformers_counts_in_three_groups(name, hub_id, count, groups):
    imported = hf.from_hf_config(data(name))
    report = count_params(imported.config)
    assert report.total_params == COUNTS[name] == count
    frame = breakdown.breakdown_frame(report)
    assert list(frame["group"]) == list(breakdown.MODEL_PARTS)
    assert tuple(int(value) for value in frame["num_params"]) == groups
    assert imported.config.origin.family == "multimodal"
    assert "the vision tower (" in imported.counted_as and "the language model (" in imported.counted_as


@pytest.mark.parametrize("model_type", ["llava", "gemma3", "mistral3", "qwen2_5_vl"])
def test_a_bare_vision_language_type_is_its_class_defaults(model_type):
    # Gemma3Config() starts SigLIP at SiglipVisionConfig's defaults, attention-pooling head included;
    # Qwen2.5-VL's text defaults are the 72B's.
    assert total(hf.from_hf_config({"model_type": model_type})) == DEFAULTS[model_type]


def test_llavas_short_text_config_takes_llamas_defaults():
    # The Hub's file sets five text fields; hidden_size, the layers and the MLP are LlamaConfig's.
    hub_file = data("llava-1.5-7b-hf")
    hub_file["text_config"] = {"model_type": "llama", "vocab_size": 32064, "max_position_embeddings": 4096}
    assert total(hf.from_hf_config(hub_file)) == 7_063_427_072
    # Without model_type the text_config is LLaVA's default type, llama.
    del hub_file["text_config"]["model_type"]
    assert total(hf.from_hf_config(hub_file)) == 7_063_427_072


def test_qwen_25_vls_hub_file_keeps_its_text_fields_at_the_top_level():
    saved = data("qwen2.5-vl-7b-instruct")  # transformers 5 writes a text_config
    assert total(hf.from_hf_config(qwen_hub_file())) == total(hf.from_hf_config(saved)) == 8_292_166_656


def test_mistral_3_ties_its_head_as_transformers_does_and_says_so():
    imported = hf.from_hf_config(data(MISTRAL3))  # no top-level tie_word_embeddings, as on the Hub
    assert "tie_word_embeddings" not in data(MISTRAL3)
    assert total(imported) == 23_340_272_640
    message = imported.message()
    assert "sets no top-level tie_word_embeddings" in message and "Mistral3ForConditionalGeneration ties" in message
    assert "671,088,640 parameters more" in message  # 131,072 x 5,120: the published files' 24.01B
    untied = hf.from_hf_config(data(MISTRAL3) | {"tie_word_embeddings": False})
    assert total(untied) == 24_011_361_280 and "sets no top-level" not in untied.message()


def test_llava_ties_when_an_older_file_says_so_in_its_text_config():
    tied = data("llava-1.5-7b-hf")
    tied["text_config"]["tie_word_embeddings"] = True  # transformers 5 forwards it to the top level
    assert total(hf.from_hf_config(tied)) == 7_063_427_072 - 32064 * 4096


@pytest.mark.parametrize(
    "name, part, change, says",
    [
        ("llava-1.5-7b-hf", "text_config", {"model_type": "t5"}, "`text_config` has model_type 't5'"),
        ("llava-1.5-7b-hf", "vision_config", {"model_type": "resnet"}, "`vision_config` has model_type 'resnet'"),
        ("llava-1.5-7b-hf", "vision_config", {"num_channels": 4}, "vision_config: `num_channels` is 4"),
        ("qwen2.5-vl-7b-instruct", "vision_config", {"in_channels": 1}, "vision_config: `in_channels` is 1"),
        ("llava-1.5-7b-hf", "text_config", {"attention_bias": True}, "text_config: `attention_bias` is true"),
        ("gemma-3-4b-it", "text_config", {"hidden_size": 0}, "text_config: `hidden_size`"),
    ],
)
def test_what_no_family_builds_is_refused_by_name(name, part, change, says):
    broken = data(name)
    broken[part] = broken[part] | change
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        hf.from_hf_config(broken)


def test_a_part_that_is_not_an_object_is_refused():
    with pytest.raises(TypeError, match="`vision_config` must be a JSON object"):
        hf.from_hf_config({"model_type": "llava", "vision_config": [1, 2]})


def test_llava_with_pixtrals_tower_reads_the_vision_config_by_its_type():
    # mistral-community/pixtral-12b is a llava file with a pixtral vision_config: no merger, no norm.
    pixtral = data("llava-1.5-7b-hf") | {"vision_config": data(MISTRAL3)["vision_config"]}
    report = count_params(hf.from_hf_config(pixtral).config)
    tower, projector, _ = (int(value) for value in breakdown.breakdown_frame(report)["num_params"])
    assert tower == 403_305_472  # Mistral 3's Pixtral tower
    assert projector == (1024 * 4096 + 4096) + (4096 * 4096 + 4096)


def test_the_traced_count_is_the_unrolled_one_and_does_not_grow_with_depth():
    small = data("gemma-3-4b-it")
    small["text_config"] |= {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 7, "vocab_size": 512}
    small["text_config"] |= {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "layer_types": None}
    small["vision_config"] |= {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 5}
    small["vision_config"] |= {"num_attention_heads": 2, "image_size": 56}
    config = hf.from_hf_config(small).config
    hparams = presets.resolved_hparams(config)
    traced, runs = families.traced_hparams("multimodal", hparams)
    assert traced["vision_layers"] == 2 and {run.namespace for run in runs} >= {"vision_tower/block_"}
    module, inputs = families.build_family("multimodal", hparams)
    unrolled = count_module(module, *inputs)
    assert count_params(config).total_params == unrolled.total_params
    assert [row.path for row in count_params(config).arrays] == [row.path for row in unrolled.arrays]
    # The real depth, 27 vision and 34 text blocks, is traced as a few: every block is in a run whose
    # traced rows are repeated, and the tower is built two blocks deep (its cost is in bench/, not here).
    deep = hf.from_hf_config(data("gemma-3-4b-it")).config
    traced, runs = families.traced_hparams("multimodal", presets.resolved_hparams(deep))
    assert traced["vision_layers"] == 2 and sum(len(run.members) for run in runs) == 27 + 34
    assert count_params(deep).total_params > 0


def test_serving_holds_the_language_models_cache():
    served = compute_serving(hf.from_hf_config(data("llava-1.5-7b-hf")).config, Serving(mesh=parse_mesh("data=1")))
    assert served.kv_bytes_per_token == 32 * 32 * 128 * 2 * 2  # Llama 2 7B's, in bfloat16
    assert served.weights_bytes == 2 * 7_063_427_072


def test_training_activations_are_refused_plainly():
    hparams = presets.resolved_hparams(hf.from_hf_config(data("llava-1.5-7b-hf")).config)
    with pytest.raises(ValueError, match="the multimodal family has no training forward to trace"):
        families.build_family("multimodal", hparams, forward=Forward())


def test_a_vision_language_model_opens_by_its_hub_id():
    repo = "llava-hf/llava-1.5-7b-hf"
    with running({repo: Repo(files={"main": (DATA / "llava-1.5-7b-hf.json").read_bytes()})}) as fake:
        fetcher = hub.Fetcher(hub.HubSettings(endpoint=fake.url, timeout=5))
        opened = hub.open_model(repo, fetcher=fetcher, base=ModelConfig())
    assert count_params(opened.config).total_params == 7_063_427_072
    assert opened.config.origin.model_type == "llava"


def test_a_model_config_travels_with_its_vision_hyperparameters():
    config = hf.from_hf_config(data("qwen2.5-vl-7b-instruct")).config
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_the_model_page_opens_a_vision_language_link_with_its_three_groups():
    config = hf.from_hf_config(data("llava-1.5-7b-hf")).config
    decoded = links.decode({key: [value] for key, value in links.encode(config).items()})
    assert decoded.config == config  # the link keeps the vision hyperparameters
    at = open_app(links.encode(config), editors=False)
    assert {metric.label: metric.value for metric in at.metric}["Total parameters"] == "7,063,427,072"
    open_views(at, "model.groups_open")
    assert list(at.dataframe[0].value["group"]) == list(breakdown.MODEL_PARTS)


_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "vocab_size": 500}
_LLAMA |= {"num_attention_heads": 4, "num_key_value_heads": 2}
_MISTRAL = _LLAMA | {"model_type": "mistral"}
_GEMMA3 = _LLAMA | {"model_type": "gemma3_text", "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}
_TOWER = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 2}
_CLIP = _TOWER | {"model_type": "clip_vision_model", "image_size": 60, "patch_size": 14}
_SIGLIP = _TOWER | {"model_type": "siglip_vision_model", "image_size": 56, "patch_size": 14}
_PIXTRAL = _TOWER | {"model_type": "pixtral", "patch_size": 10}
_QWEN_TOWER = {"depth": 3, "hidden_size": 32, "intermediate_size": 40, "num_heads": 2, "out_hidden_size": 48}
_QWEN_TEXT = {key: value for key, value in _LLAMA.items() if key != "model_type"}


def vlm(model_type: str, text: dict, vision: dict, **top) -> dict:
    return {"model_type": model_type, "text_config": text, "vision_config": vision, **top}


# Small files that turn each switch, with transformers 5.24.0's num_parameters() of each (built by
# AutoModelForImageTextToText.from_config on the meta device, as bench/hf_import.py builds the others).
SWITCHES = [
    ("llava-two-feature-layers", vlm("llava", _LLAMA, _CLIP, vision_feature_layer=[-2, -3]), 206_960),
    ("llava-siglip-with-its-head", vlm("llava", _LLAMA, _SIGLIP), 212_288),
    ("llava-pixtral", vlm("llava", _MISTRAL, _PIXTRAL, multimodal_projector_bias=False), 198_688),
    ("llava-tied", vlm("llava", _LLAMA, _CLIP, multimodal_projector_bias=False, tie_word_embeddings=True), 172_784),
    ("gemma3-pooling-head", vlm("gemma3", _GEMMA3, _SIGLIP | {"vision_use_head": True}), 176_672),
    ("gemma3-untied", vlm("gemma3", _GEMMA3, _SIGLIP | {"vision_use_head": False}, tie_word_embeddings=False), 201_200),
    (
        "mistral3-merge-3-biases",
        vlm("mistral3", _MISTRAL, _PIXTRAL, multimodal_projector_bias=True, spatial_merge_size=3)
        | {"vision_feature_layer": [-1, -2], "tie_word_embeddings": False},
        210_112,
    ),
    (
        "qwen2.5-vl-patches",
        {"model_type": "qwen2_5_vl", **_QWEN_TEXT}
        | {"vision_config": _QWEN_TOWER | {"patch_size": 7, "temporal_patch_size": 3, "spatial_merge_size": 3}},
        292_960,
    ),
    (
        "qwen2.5-vl-tied-in-text-config",
        vlm(
            "qwen2_5_vl", _QWEN_TEXT | {"tie_word_embeddings": True}, _QWEN_TOWER | {"depth": 2, "out_hidden_size": 64}
        ),
        203_904,
    ),
]


@pytest.mark.parametrize("fields, count", [row[1:] for row in SWITCHES], ids=[row[0] for row in SWITCHES])
def test_each_switch_counts_what_transformers_counts(fields, count):
    assert total(hf.from_hf_config(fields)) == count


def test_a_quantization_config_is_noted_once():
    imported = hf.from_hf_config(qwen_hub_file() | {"quantization_config": {"quant_method": "awq", "bits": 4}})
    assert imported.message().count("counted unquantized") == 1
    assert total(imported) == 8_292_166_656
