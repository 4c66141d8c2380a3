"""The encdec family (dcsim/model/zoo/encdec.py): BART and Whisper as transformers 5.24.0 counts them.

Each published config.json is in tests/data/hf/ as bench/hf_import.py wrote it, with transformers'
own meta-device ``num_parameters()`` in counts.json; the figures are restated here so a reader can
check them against the Hub's model cards.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import pytest

from dcsim import hf
from dcsim.model import count, families, schemas
from dcsim.model.breakdown import embedding_params, group_of
from dcsim.model.count import count_module, count_params
from dcsim.model.zoo import encdec

DATA = Path(__file__).parent / "data" / "hf"


def opened(name: str, **edits: object) -> hf.Imported:
    data = json.loads((DATA / f"{name}.json").read_text())
    return hf.from_hf_config(data | edits)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bart-base", 139_420_416),  # facebook/bart-base, transformers 5.24.0 BartForConditionalGeneration
        ("bart-large", 406_291_456),  # facebook/bart-large
        ("whisper-tiny", 37_760_640),  # openai/whisper-tiny, WhisperForConditionalGeneration
        ("whisper-base", 72_593_920),  # openai/whisper-base
        ("whisper-large-v3", 1_543_490_560),  # openai/whisper-large-v3
    ],
)
def test_published_configs_count_what_transformers_counts(name, expected):
    assert json.loads((DATA / "counts.json").read_text())[name] == expected
    assert count_params(opened(name).config).total_params == expected


def test_bare_types_open_at_their_config_class_defaults():
    # BartConfig() is BART-large's sizes; WhisperConfig() is Whisper tiny's.
    assert count_params(hf.from_hf_config({"model_type": "bart"}).config).total_params == 406_291_456
    assert count_params(hf.from_hf_config({"model_type": "whisper"}).config).total_params == 37_760_640


def test_bart_positions_have_two_rows_more_and_final_logits_bias_is_a_buffer():
    report = count_params(opened("bart-base").config)
    shapes = {row.path: row.shape for row in report.arrays}
    assert shapes["encoder/embed/position/embedding"] == (1026, 768)
    assert shapes["decoder/embed/position/embedding"] == (1026, 768)
    assert "lm_head/kernel" not in shapes  # the head reads the shared table
    assert [(row.collection, row.path, row.shape) for row in report.other] == [
        ("buffers", "final_logits_bias", (50_265,))
    ]
    # token table and both position tables; the buffer is in no parameter count
    assert embedding_params(opened("bart-base").config, report) == 50_265 * 768 + 2 * 1026 * 768


def test_whisper_counts_its_frozen_sinusoids_and_keys_without_bias():
    report = count_params(opened("whisper-tiny").config)
    shapes = {row.path: row.shape for row in report.arrays}
    assert shapes["encoder/embed/position/embedding"] == (1500, 384)  # requires_grad False, but counted
    assert shapes["decoder/embed/position/embedding"] == (448, 384)
    assert shapes["stem/conv_1/kernel"] == (3, 80, 384)
    assert shapes["stem/conv_2/kernel"] == (3, 384, 384)
    assert "encoder/block_0/self_attn/key/bias" not in shapes
    assert "decoder/block_3/cross_attn/value/bias" in shapes
    assert "decoder/final_norm/scale" in shapes and not report.other
    assert group_of("stem/conv_1") == "stem" and group_of("encoder/embed/position") == "embeddings"


def test_whisper_untied_has_its_own_head():
    # transformers 5.24.0 with tie_word_embeddings false: 57,676,800 (proj_out apart), 51,865 x 384 more
    assert count_params(opened("whisper-tiny", tie_word_embeddings=False).config).total_params == 57_676_800


def test_sinusoids_are_whisper_table():
    table = encdec.sinusoids(jax.random.PRNGKey(0), (4, 6))
    assert table.shape == (4, 6)
    assert float(table[0, 0]) == 0.0 and float(table[0, 3]) == 1.0  # sin(0), cos(0)


def test_traced_count_equals_the_unrolled_init():
    # Whisper-like (audio stem, pre-norm, keys without bias) at tiny widths, stacks of unequal depth.
    hparams = schemas.family_defaults("encdec") | {"vocab_size": 64, "d_model": 16, "num_heads": 2, "ffn_dim": 24}
    hparams |= {"num_decoder_heads": 4, "decoder_ffn_dim": 40, "num_layers": 5, "num_decoder_layers": 3}
    hparams |= {"audio_bins": 4, "pre_norm": True, "embed_norm": False, "key_bias": False, "logits_bias": False}
    unrolled = count_module(*_built(hparams)).total_params
    traced, runs = families.traced_hparams("encdec", hparams)
    assert (traced["num_layers"], traced["num_decoder_layers"]) == (2, 2)
    rows = count.expand_repeats(count_module(*_built(traced)).arrays, runs)
    assert sum(row.num_values for row in rows) == unrolled


def _built(hparams):
    module, inputs = families.build_family("encdec", hparams)
    return (module, *inputs)


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"add_final_layer_norm": True}, "`add_final_layer_norm` is True; dcsim counts only False"),
        ({"normalize_before": True}, "`normalize_before` is True; dcsim counts only False"),
        ({"tie_word_embeddings": False}, "`tie_word_embeddings` is False; dcsim counts only True"),
        ({"decoder_attention_heads": 7}, "`num_decoder_heads` \\(7\\) must divide `d_model` \\(768\\)"),
    ],
)
def test_bart_fields_that_change_the_count_unbuilt_are_refused(edits, message):
    with pytest.raises(ValueError, match=message):
        opened("bart-base", **edits)


def served(name: str, mesh: str = "data=1", **settings: object):
    from dcsim.serving.engine import compute_serving
    from dcsim.serving.request import Serving
    from dcsim.sharding.meshes import parse_mesh

    return compute_serving(opened(name).config, Serving(mesh=parse_mesh(mesh), **settings))


@pytest.mark.parametrize(
    "name, settings, per_token, per_sequence, source",
    [
        # 12 decoder layers x 16 heads x 64 x (K, V) x 2 bytes; self at the context plus cross at the source
        pytest.param("bart-large", {"context": 1024}, 49_152, 12 * 2048 * 2 * (1024 + 1024), 1024, id="bart-large"),
        pytest.param(
            "bart-large",
            {"context": 256, "source_length": 700},
            49_152,
            12 * 2048 * 2 * (256 + 700),
            700,
            id="bart-src",
        ),
        # 32 layers x 20 heads x 64: the cross caches hold the encoder's every position (a 30 s clip: 1,500)
        pytest.param("whisper-large-v3", {"context": 448}, 163_840, 32 * 2560 * 2 * (448 + 1500), 1500, id="whisper"),
    ],
)
def test_serving_caches_the_decoder_and_the_encoders_output(name, settings, per_token, per_sequence, source):
    report = served(name, **settings)
    assert report.kv_bytes_per_token == per_token
    assert report.kv_bytes_per_sequence == per_sequence
    assert report.source_length == source
    cross = [layer for layer in report.layers if layer.kind == "cross"]
    assert cross and {layer.tokens for layer in cross} == {source}


@pytest.mark.parametrize(
    "name, settings, message",
    [
        (
            "bart-base",
            {},
            r"`context` \(4,096 tokens\) is past the model's 1,024 positions \(max_positions\); allowed: 1 to 1,024$",
        ),
        (
            "bart-base",
            {"context": 64, "source_length": 2000},
            r"source_length \(2,000 tokens\) is past the encoder's 1,024",
        ),
        ("whisper-tiny", {"context": 448, "source_length": 1501}, r"past the encoder's 1,500 positions"),
        ("bart-base", {"context": 64, "mesh": "stage=2"}, r"an encoder-decoder's encoder and decoder would each need"),
    ],
)
def test_serving_refuses_what_the_positions_or_the_stages_cannot_hold(name, settings, message):
    with pytest.raises(ValueError, match=message):
        served(name, **settings)
    assert "encdec" not in families.TRAINING_FORWARDS


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, mesh, settings",
    [
        # the vocabulary padded to the tensor size pads final_logits_bias with it, as XLA's arguments show
        pytest.param("bart-base", "model=2", {"context": 64, "concurrency": 4}, id="bart-padded-bias"),
        pytest.param("whisper-tiny", "data=2", {"context": 448, "concurrency": 2}, id="whisper"),
    ],
)
def test_xlas_decoding_step_holds_what_dcsim_lays_out(name, mesh, settings):
    from dcsim.serving import verify

    report = served(name, mesh, **settings)
    checked = verify.verify(report)
    assert checked.matches, verify.verify_record(checked)
    assert checked.token_bytes_per_device == 2 * 4 * report.serving.sequences_per_replica
