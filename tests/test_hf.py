"""Hugging Face config.json files open under their own name, and count what transformers counts.

The files in tests/data/hf/ and their counts were written by bench/hf_import.py with transformers
itself (``config.to_json_string()``; ``num_parameters()`` after ``tie_weights()``).
"""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples, open_app, quick_sample, uploader
from dcsim import hf
from dcsim.cli import main
from dcsim.hf import markdown
from dcsim.model import families, presets
from dcsim.model.config import MAX_CONFIG_BYTES, ModelConfig
from dcsim.model.count import count_module, count_params

DATA = Path(__file__).parent / "data" / "hf"
COUNTS = json.loads((DATA / "counts.json").read_text())


def hf_file(name: str) -> bytes:
    return (DATA / f"{name}.json").read_bytes()


def edited(name: str, **changes) -> bytes:
    data = json.loads(hf_file(name))
    for key, value in changes.items():
        if value is ...:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    # A sample in the quick loop (every kind of reader once); the whole suite opens every file.
    "name",
    quick_sample(
        sorted(COUNTS),
        keep=(
            "gpt2", "llama-2-7b", "mixtral-8x7b", "deepseek-v3", "bert-base-uncased", "t5-small",
            "whisper-tiny", "mamba-130m", "jamba-v0.1-reduced", "llava-1.5-7b-hf", "gemma-3-4b-it", "gpt-oss-20b",
        ),
    ),
)  # fmt: skip
def test_every_file_counts_what_transformers_counts(name):
    config, note = hf.read_config_file(hf_file(name))
    assert count_params(config).total_params == COUNTS[name]
    assert note.startswith(f"Opened {config.origin.title}. Counted as ")
    assert config.preset is None


def test_the_file_is_its_own_model_and_keeps_the_shards_dtype_seed_and_batch():
    base = ModelConfig(num_shards=64, seed=7, batch_size=3, dtype="bfloat16")
    config, note = hf.read_config_file(hf_file("mistral-7b"), base=base)
    assert (config.num_shards, config.seed, config.batch_size, config.dtype) == (64, 7, 3, "bfloat16")
    assert config.preset is None and config.family == "decoder"
    assert config.origin.title == "MistralForCausalLM (mistral, from config.json)"
    assert presets.model_title(config) == config.origin.title
    mistral = presets.resolved_hparams(config)
    llama = presets.resolve("llama2-7b")
    assert {name: value for name, value in mistral.items() if llama[name] != value} == {
        "ffn_dim": 14336,
        "max_positions": 32768,
        "num_kv_heads": 8,
        "sliding_window": 4096,  # Mistral 7B v0.1's window, on every block: it changes what serving caches
        "local_layers": tuple(range(32)),
    }
    assert ModelConfig.from_json(config.to_json()) == config  # downloads and links carry it as it is
    assert note == (
        "Opened MistralForCausalLM (mistral, from config.json). Counted as MistralForCausalLM: embeddings, "
        "blocks, final norm, language-model head untied; rotary positions hold no parameters."
    )
    assert "llama" not in note.lower()


@pytest.mark.parametrize(
    ("changes", "dtype"),
    [
        ({"torch_dtype": "bfloat16"}, "bfloat16"),
        ({"torch_dtype": "float16"}, "float16"),
        ({"dtype": "bfloat16", "torch_dtype": "float32"}, "bfloat16"),  # transformers 4.56 writes `dtype`
        ({"torch_dtype": "auto"}, "float64"),
        ({"torch_dtype": "float8_e4m3fn"}, "float64"),
        ({"torch_dtype": 16}, "float64"),
        ({}, "float64"),
    ],
    ids=["bfloat16", "float16", "dtype-first", "auto", "not-a-storage-dtype", "not-text", "none-said"],
)
def test_the_storage_dtype_is_the_models_own_else_the_one_kept(changes, dtype):
    base = ModelConfig(num_shards=8, dtype="float64")
    config, note = hf.read_config_file(edited("mistral-7b", **changes), base=base)
    assert (config.dtype, config.num_shards) == (dtype, 8)
    said = f" Bytes in {dtype}, the model's own dtype."
    assert note.endswith(said) if dtype != "float64" else said not in note  # said only when the file chose it


def test_count_of_a_bfloat16_file_gives_bytes_per_shard_in_bfloat16_unless_dtype_is_given(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(edited("mistral-7b", torch_dtype="bfloat16"))
    total = COUNTS["mistral-7b"]  # transformers' count
    assert main(["count", "--config", str(path), "--shards", "8", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)
    assert (record["dtype"], record["bytes_per_shard"]) == ("bfloat16", total * 2 // 8)
    assert "Bytes in bfloat16, the model's own dtype." in err
    assert main(["count", "--config", str(path), "--shards", "8", "--dtype", "float32", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["dtype"], record["bytes_per_shard"]) == ("float32", total * 4 // 8)


def test_a_dtype_the_person_chose_is_kept_over_the_files():
    data = json.loads(edited("mistral-7b", torch_dtype="bfloat16"))
    kept = hf.from_hf_config(data, ModelConfig(dtype="float32"), keep_dtype=True).config
    assert kept.dtype == "float32"
    assert hf.from_hf_config(data, ModelConfig(dtype="float32")).config.dtype == "bfloat16"


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"_name_or_path": "google/gemma-7b"}, "google/gemma-7b"),
        ({"_name_or_path": ""}, "GemmaForCausalLM"),
        ({"_name_or_path": "x" * 101}, "GemmaForCausalLM"),
        ({"_name_or_path": "evil\u202e", "architectures": ["A\nB"]}, "GemmaForCausalLM"),
        ({"architectures": ...}, "GemmaForCausalLM"),
        ({"architectures": ["MyGemma"]}, "MyGemma"),
    ],
    ids=["hub-id", "empty-path", "too-long", "control-characters", "no-architectures", "architectures"],
)
def test_the_name_comes_from_the_file(changes, name):
    changes = {
        key: value.encode().decode("unicode_escape") if isinstance(value, str) else value
        for key, value in changes.items()
    }
    if "architectures" in changes and isinstance(changes["architectures"], list):
        changes["architectures"] = [entry.encode().decode("unicode_escape") for entry in changes["architectures"]]
    config, _ = hf.read_config_file(edited("gemma-7b", **changes))
    assert config.origin.name == name
    assert config.origin.title == f"{name} (gemma, from config.json)"


def test_the_published_llama_2_7b_file_has_the_presets_hyperparameters():
    config, _ = hf.read_config_file(hf_file("llama-2-7b"))
    assert presets.resolved_hparams(config) == presets.resolve("llama2-7b")
    assert config.origin.title == "LlamaForCausalLM (llama, from config.json)"


def test_a_tied_head_and_an_explicit_equal_head_dim_are_read():
    config, note = hf.read_config_file(hf_file("llama-3.2-1b"))
    assert presets.resolved_hparams(config)["tied_embeddings"] is True
    assert presets.resolved_hparams(config)["head_dim"] == 0  # 64 = 2,048 / 32
    assert "language-model head tied to the token embedding" in note


def test_heads_of_their_own_width_become_head_dim():
    # Gemma 7B: 16 heads of 256 on a 3,072-wide model; and Llama 2 7B with heads half as wide, by hand:
    # query, key, value and out each lose 4,096 x 4,096 / 2 values in each of the 32 blocks.
    config, _ = hf.read_config_file(hf_file("gemma-7b"))
    assert presets.resolved_hparams(config)["head_dim"] == 256
    config, _ = hf.read_config_file(edited("llama-2-7b", head_dim=64))
    assert presets.resolved_hparams(config) == presets.resolve("llama2-7b", {"head_dim": 64})
    assert count_params(config).total_params == COUNTS["llama-2-7b"] - 32 * 4 * 4096 * 4096 // 2 == 5_664_673_792
    config, _ = hf.read_config_file(hf_file("llama-2-7b"))  # 128 = 4,096 / 32: the usual width, no override
    assert presets.resolved_hparams(config)["head_dim"] == 0


def test_qwen2_has_biases_on_query_key_and_value_only():
    config, note = hf.read_config_file(hf_file("qwen2.5-7b"))
    report = count_params(config)
    biased = {row.path for row in report.arrays if row.path.endswith("/bias")}
    assert biased and {path.rsplit("/", 2)[-2] for path in biased} == {"query", "key", "value"}
    assert "biases on query, key and value only" in note


def test_rotary_lengths_past_the_position_table_cap_change_nothing():
    config, _ = hf.read_config_file(edited("mistral-7b", max_position_embeddings=10_000_000))
    assert count_params(config).total_params == COUNTS["mistral-7b"]
    assert "max_positions" not in dict(config.overrides)


def test_defaults_transformers_applies_are_applied():
    # num_key_value_heads absent: one KV head per query head; n_inner null: 4 x n_embd.
    config, _ = hf.read_config_file(edited("llama-2-7b", num_key_value_heads=..., head_dim=..., mlp_bias=...))
    assert count_params(config).total_params == COUNTS["llama-2-7b"]
    config, _ = hf.read_config_file(edited("gpt2", n_inner=None, tie_word_embeddings=...))
    assert count_params(config).total_params == COUNTS["gpt2"]
    # hidden_size absent: LlamaConfig's 4,096, which Llama 2 7B's file also says.
    config, _ = hf.read_config_file(edited("llama-2-7b", hidden_size=...))
    assert count_params(config).total_params == COUNTS["llama-2-7b"]


def test_the_docs_list_every_model_type_from_the_readers_table():
    docs = (Path(__file__).parent.parent / "docs" / "presets.md").read_text()
    start = "<!-- model types: generated from dcsim.hf.table, do not edit by hand -->\n"
    written = docs[docs.index(start) + len(start) : docs.index("\n<!-- end of model types -->")]
    assert written == markdown.markdown_table()
    assert all(f"| `{model_type}` |" in written for model_type in hf.MODEL_TYPES)


@pytest.mark.parametrize("name", ["olmo-2-7b", "falcon-40b", "phi-2", "bloom-560m", "command-r-v01"])
def test_the_variant_familys_traced_count_is_its_full_init(name):
    # Counting traces two blocks and repeats them; a full init of the same model, 3 blocks, agrees row by row.
    config, _ = hf.read_config_file(edited(name, **{"num_hidden_layers": 3, "n_layer": 3}))
    hparams = presets.resolved_hparams(config)
    module, inputs = families.build_family(config.family, hparams)
    assert count_params(config).arrays == count_module(module, *inputs).arrays


def test_a_dcsim_configuration_still_opens_without_a_note():
    config = ModelConfig(input_dim=784, num_shards=3)
    assert hf.read_config_file(config.to_json()) == (config, None)


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        (
            "llama-2-7b",
            {"model_type": "lama"},
            "got 'lama', whose layers it has no family for; the nearest it reads is llama (decoder)",
        ),
        ("llama-2-7b", {"model_type": ["llama"]}, "got ['llama']"),
        ("llama-2-7b", {"head_dim": 0}, "`head_dim` must be an integer from 1 to 4,096, got 0"),
        ("llama-2-7b", {"attention_bias": True}, "`attention_bias` is true and `mlp_bias` is false; dcsim's decoder"),
        ("llama-2-7b", {"hidden_size": "4096"}, "`hidden_size` must be an integer from 1 to 65,536, got '4096'"),
        ("llama-2-7b", {"hidden_size": True}, "`hidden_size` must be an integer from 1 to 65,536, got the bool True"),
        ("llama-2-7b", {"hidden_size": 4096.5}, "`hidden_size` must be an integer from 1 to 65,536, got 4096.5"),
        ("llama-2-7b", {"hidden_size": 10**6}, "`hidden_size` must be an integer from 1 to 65,536, got 1000000"),
        ("llama-2-7b", {"num_hidden_layers": 0}, "`num_hidden_layers` must be an integer from 1 to 256, got 0"),
        ("llama-2-7b", {"tie_word_embeddings": "no"}, "`tie_word_embeddings` must be true or false, got str 'no'"),
        (
            "llama-2-7b",
            {"num_attention_heads": 3, "head_dim": ...},
            "`num_heads` (3) must divide `d_model` (4,096)",
        ),
        ("llama-2-7b", {"num_attention_heads": 3, "head_dim": ...}, "in this file d_model is hidden_size"),
        ("gpt2", {"add_cross_attention": True}, "`add_cross_attention` is True; dcsim counts only False"),
        ("pythia-160m", {"attention_bias": False}, "`attention_bias` is False; dcsim counts only True"),
        ("bert-base-uncased", {"position_embedding_type": "relative_key"}, "relative position types add"),
        ("vit-base-patch16-224", {"num_channels": 1}, "`num_channels` is 1; dcsim counts only 3"),
        ("vit-base-patch16-224", {"qkv_bias": False}, "`qkv_bias` is False; dcsim counts only True"),
        ("vit-base-patch16-224", {"qkv_bias": 1}, "`qkv_bias` is 1; dcsim counts only True"),
        ("vit-base-patch16-224", {"id2label": ["cat"]}, "`id2label` must be a JSON object naming the labels"),
        ("vit-base-patch16-224", {"patch_size": 15}, "`patch_size` (15) must divide `image_size` (224)"),
    ],
)
def test_what_cannot_be_counted_exactly_is_refused_by_name(name, changes, message):
    with pytest.raises((TypeError, ValueError)) as refused:
        hf.read_config_file(edited(name, **changes))
    assert str(refused.value).startswith("Hugging Face config.json: ")
    assert message in str(refused.value)


def test_a_long_label_table_may_pass_the_dcsim_file_limit():
    labels = {str(index): f"label number {index} " + "x" * 40 for index in range(1000)}
    raw = edited("vit-base-patch16-224", id2label=labels, label2id={v: int(k) for k, v in labels.items()})
    assert MAX_CONFIG_BYTES < len(raw) <= hf.MAX_HF_CONFIG_BYTES
    config, _ = hf.read_config_file(raw)
    assert count_params(config).total_params == COUNTS["vit-base-patch16-224"]


def test_past_the_limits_the_message_says_which():
    with pytest.raises(ValueError, match=r"^a configuration file may be at most 65,536 bytes, got 70,000$"):
        hf.read_config_file(b" " * 70_000)
    with pytest.raises(ValueError, match=r"at most 65,536 bytes, or 262,144 for a Hugging Face config.json, got"):
        hf.read_config_file(edited("gpt2", padding="x" * hf.MAX_HF_CONFIG_BYTES))


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)
_KEYS = sorted(
    {key for name in COUNTS for key in json.loads(hf_file(name))} - {"model_type"} | {"head_dim", "mlp_bias"}
)


@settings(max_examples=examples(300), deadline=None)
@given(
    model_type=st.sampled_from(hf.MODEL_TYPES),
    name=st.sampled_from(sorted(COUNTS)),
    changes=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4),
)
def test_any_field_values_are_opened_or_refused_with_a_message(model_type, name, changes):
    data = json.loads(hf_file(name)) | changes | {"model_type": model_type}
    try:
        imported = hf.from_hf_config(data)
    except (TypeError, ValueError) as err:
        message = str(err)
    else:
        message = "opened"
        assert isinstance(imported.config, ModelConfig)
    assert message and "\n" not in message


def test_the_cli_counts_a_hugging_face_file_and_says_what_it_opened(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(hf_file("tinyllama-1.1b"))
    assert main(["count", "--config", str(path), "--shards", "4", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["total_params"] == COUNTS["tinyllama-1.1b"] == 1_100_048_384
    assert report["ideal_share_fraction"] == "275012096"
    assert err.startswith("dcsim: Opened LlamaForCausalLM (llama, from config.json). Counted as LlamaForCausalLM")


def test_the_cli_refuses_an_unsupported_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(edited("llama-2-7b", model_type="mamba2"))
    assert main(["count", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "got 'mamba2', whose layers it has no family for" in err


def test_the_upload_box_opens_a_hugging_face_file():
    at = open_app({"shards": "8"})
    uploader(at).set_value(("config.json", hf_file("mistral-7b"), "application/json")).run()
    assert not at.exception and not at.sidebar.get("error")
    metrics = {metric.label: metric.value for metric in at.metric}
    assert metrics["Total parameters"] == "7,241,732,096"
    assert "MistralForCausalLM" in at.sidebar.get("success")[0].value
    query = dict(at.query_params)
    assert "preset" not in query and query["shards"] == "8"
    assert (query["family"], query["model_type"], query["name"]) == ("decoder", "mistral", "MistralForCausalLM")
    assert query["h.num_kv_heads"] == "8" and query["h.ffn_dim"] == "14336"
    at.run()  # what the file was opened as stays said while that model is shown
    assert not at.sidebar.get("success")  # the upload box is a fresh one
    assert any("MistralForCausalLM" in info.value for info in at.sidebar.get("info"))
    next(box for box in at.number_input if "shards" in box.label).set_value(16).run()  # the same model
    assert any("MistralForCausalLM" in info.value for info in at.sidebar.get("info"))
    assert {metric.label: metric.value for metric in at.metric}["Ideal share per shard (16 shards)"] == "452,608,256"


def test_the_upload_box_refuses_an_unsupported_hugging_face_file():
    at = open_app()
    bad = edited("llama-2-7b", attention_bias=True)
    uploader(at).set_value(("config.json", bad, "application/json")).run()
    assert not at.exception
    error = at.sidebar.get("error")[0].value.replace("\\", "")
    assert error.startswith("This file was not opened: Hugging Face config.json: `attention_bias` is true and")
    assert {metric.label: metric.value for metric in at.metric}["Total parameters"] == "20"
