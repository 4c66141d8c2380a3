"""The state-space families (issue 30): Mamba and the Mamba-attention hybrid Jamba, counted as
transformers 5.24.0 counts them, and served from a fixed conv and SSM state a sequence.

The counts below are transformers 5.24.0's ``num_parameters()`` on the meta device
(bench/hf_import.py writes the files and tests/data/hf/counts.json), not published figures; what is
published is rounded, and given beside them:
- state-spaces/mamba-130m-hf: 129,135,360 (its model card's "130M");
- state-spaces/mamba-2.8b-hf: 2,768,345,600 (its name's "2.8b");
- ai21labs/Jamba-v0.1: 51,570,323,328 (the model card's "52B total, 12B active");
- jamba-v0.1-reduced, a config.json written by hand, not a Hub file, so nothing publishes its count:
  Jamba-v0.1's layout at small widths and other periods, with the projection biases on and the conv
  bias off: 386,442,880.
A bare ``{"model_type": "mamba"}`` is ``MambaConfig()``: 159,308,544; ``"jamba"``: 51,570,323,328.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dcsim import hf
from dcsim.cli import main
from dcsim.model import breakdown, families, presets
from dcsim.model.cache import CACHE, Decode
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_module, count_params
from dcsim.model.zoo import ssm
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import parse_mesh

DATA = Path(__file__).parent / "data" / "hf"
COUNTS = json.loads((DATA / "counts.json").read_text())
DEFAULTS = json.loads((DATA / "defaults.json").read_text())
# transformers' counts of each config.json, typed again here so a regenerated counts.json that
# changes one fails until a reader checks it; none is a published figure (see the docstring).
TRANSFORMERS_COUNTS = {
    "mamba-130m": 129_135_360,  # the Hub's config.json
    "mamba-2.8b": 2_768_345_600,  # the Hub's config.json
    "jamba-v0.1": 51_570_323_328,  # the Hub's config.json
    "jamba-v0.1-reduced": 386_442_880,  # a config written by hand: transformers' count, published nowhere
}


def opened(name: str, **changes: object) -> ModelConfig:
    data = json.loads((DATA / f"{name}.json").read_text()) | changes
    return hf.read_config_file(json.dumps(data).encode())[0]


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_COUNTS))
def test_each_file_counts_what_transformers_counts(name):
    assert count_params(opened(name)).total_params == COUNTS[name] == TRANSFORMERS_COUNTS[name]


@pytest.mark.parametrize("model_type, count", [("mamba", 159_308_544), ("jamba", 51_570_323_328)])
def test_a_bare_model_type_is_the_class_defaults(model_type, count):
    imported = hf.from_hf_config({"model_type": model_type})
    assert count_params(imported.config).total_params == DEFAULTS[model_type] == count


def test_mamba_130m_has_transformers_layers():
    rows = {row.path: row.shape for row in count_params(opened("mamba-130m")).arrays}
    assert rows["block_7/mixer/in_proj/kernel"] == (768, 2 * 1536)
    assert rows["block_7/mixer/conv1d/kernel"] == (4, 1, 1536)  # depthwise: one filter a channel
    assert rows["block_7/mixer/conv1d/bias"] == (1536,)
    assert rows["block_7/mixer/x_proj/kernel"] == (1536, 48 + 2 * 16)  # time_step_rank auto: 768 / 16
    assert rows["block_7/mixer/dt_proj/bias"] == (1536,)
    assert rows["block_7/mixer/A_log"] == (1536, 16) and rows["block_7/mixer/D"] == (1536,)
    assert "block_7/mixer/in_proj/bias" not in rows and "lm_head/kernel" not in rows  # tied


def test_jambas_blocks_follow_its_periods_and_its_experts_are_the_moe_familys():
    rows = {row.path: row.shape for row in count_params(opened("jamba-v0.1")).arrays}
    assert {path.split("/")[1] for path in rows if path.startswith("block_4/")} == {
        "attn",
        "attn_norm",
        "mlp",
        "mlp_norm",
    }
    assert "block_3/moe/experts/gate" in rows and rows["block_3/moe/router/kernel"] == (4096, 16)
    assert rows["block_3/mixer/dt_norm/scale"] == (256,) and rows["block_3/mixer/b_norm/scale"] == (16,)
    assert rows["block_12/attn/key/kernel"] == (4096, 8, 128) and "block_12/attn/key/bias" not in rows
    assert rows["lm_head/kernel"] == (4096, 65_536)
    # 12B active: 16 MoE blocks each use 2 of their 16 experts of 3 x 4,096 x 14,336
    config = opened("jamba-v0.1")
    active = breakdown.active_params(config, count_params(config))
    assert active == 51_570_323_328 - 16 * 14 * 3 * 4096 * 14_336 == 12_110_311_296


@pytest.mark.parametrize("name", ["mamba-130m", "jamba-v0.1-reduced"])
def test_the_traced_count_is_the_full_init(name):
    config = opened(name, num_hidden_layers=7)
    module, inputs = families.build_family(config.family, presets.resolved_hparams(config))
    assert count_params(config).arrays == count_module(module, *inputs).arrays


def test_jamba_traces_one_block_of_a_kind_twice_not_32_blocks():
    traced, runs = families.traced_hparams("jamba", presets.resolved_hparams(opened("jamba-v0.1")))
    assert len(traced["built_layers"]) == 6  # Mamba + MLP, Mamba + experts, attention + MLP: two each
    assert sorted(index for run in runs for index in run.members) == list(range(32))


@pytest.mark.slow  # a concrete decode, token by token, against the forward
def test_decoding_one_token_at_a_time_is_the_sequence_forward():
    # The decode-mode mixer's conv and SSM state carry exactly what the scan over the sequence does.
    h = presets.resolved_hparams(opened("jamba-v0.1-reduced"))
    h |= {"vocab_size": 64, "d_model": 16, "num_layers": 3, "num_heads": 2, "num_kv_heads": 1, "ffn_dim": 8}
    h |= {"inner_dim": 24, "dt_rank": 4, "num_experts": 1}
    tokens = jnp.arange(5)[None] % 64
    model = ssm.StateSpaceModel("jamba", h)
    params = model.init(jax.random.key(0), tokens)
    whole = model.apply(params, tokens)
    stepper = ssm.StateSpaceModel("jamba", h, decode=Decode(context=8, kv_dtype="float32"))
    # init runs one step; serving starts from the zero state
    cache = jax.tree.map(jnp.zeros_like, stepper.init(jax.random.key(0), tokens[:, :1])[CACHE])
    steps = []
    for index in range(tokens.shape[1]):
        logits, changed = stepper.apply({**params, CACHE: cache}, tokens[:, index : index + 1], mutable=[CACHE])
        cache = changed[CACHE]
        steps.append(logits)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), whole, rtol=1e-4, atol=1e-5)


def serve(name: str, mesh: str = "data=1", **settings: object):
    return compute_serving(opened(name), Serving(mesh=parse_mesh(mesh), **settings))


def test_mamba_serves_from_a_fixed_state_a_sequence_not_a_kv_cache():
    report = serve("mamba-130m", concurrency=8, context=4096)
    assert {layer.kind for layer in report.layers} == {"state"} and len(report.layers) == 24
    # a conv state (1,536 x 4) and an SSM state (1,536 x 16) a layer, in bfloat16
    state = 24 * (1536 * 4 + 1536 * 16) * 2
    assert report.kv_bytes_per_token == 0 and report.kv_bytes_per_sequence == state == 1_474_560
    assert report.kv_bytes_per_device == 8 * state
    assert serve("mamba-130m", concurrency=8, context=64).kv_bytes_per_device == 8 * state  # whatever the context
    assert serve("mamba-130m", kv_dtype="float32").kv_bytes_per_sequence == 2 * state
    assert serve("mamba-130m", kv_dtype="fp8").kv_bytes_per_sequence == state  # a state is not kept in fp8


def test_jamba_keeps_kv_in_its_attention_blocks_and_a_state_in_its_mamba_blocks():
    report = serve("jamba-v0.1", "model=2", concurrency=4, context=8192)
    kinds = [layer.kind for layer in report.layers]
    assert kinds.count("full") == 4 and kinds.count("state") == 28
    kv_a_token = 4 * 2 * 8 * 128 * 2  # 4 attention blocks, keys and values, 8 KV heads of 128, bfloat16
    state = 28 * (8192 * 4 + 8192 * 16) * 2
    assert report.kv_bytes_per_token == kv_a_token
    assert report.kv_bytes_per_sequence == 8192 * kv_a_token + state
    # KV heads split over the 2 tensor ranks; the states whole on each (the weights are not split by channel)
    assert report.kv_bytes_per_device == 4 * (8192 * kv_a_token // 2 + state)


def test_serve_prints_the_state_bytes(capsys):
    main(["serve", "--config", str(DATA / "mamba-130m.json"), "--concurrency", "2"])
    assert "a state of 61,440 bytes a sequence" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name, changes, message",
    [
        ("jamba-v0.1", {"attn_layer_offset": 8}, "`attn_layer_offset` (8) must be below `attn_layer_period` (8)"),
        ("jamba-v0.1", {"num_experts_per_tok": 17}, "`num_experts_per_tok` (17) must be at most `num_experts` (16)"),
        ("jamba-v0.1", {"head_dim": 64}, "`head_dim` is 64; dcsim counts only None"),
        ("mamba-130m", {"expand": "two"}, "`expand` must be a positive number"),
        ("mamba-130m", {"model_type": "mamba2"}, "the nearest is mamba (mamba)"),
    ],
)
def test_what_cannot_be_counted_exactly_is_refused_by_name(name, changes, message):
    with pytest.raises((TypeError, ValueError)) as refused:
        opened(name, **changes)
    assert message in str(refused.value)


def test_a_fractional_expand_is_truncated_as_transformers_does():
    assert presets.resolved_hparams(opened("mamba-130m", expand=1.5))["inner_dim"] == 1152


def test_training_activations_are_refused_cleanly(capsys):
    assert main(["memory", "--config", str(DATA / "mamba-130m.json"), "--sequence", "128", "--mesh", "data=1"]) == 2
    assert "the mamba family has no training forward here" in capsys.readouterr().err


@pytest.mark.parametrize(
    "setting, message",
    [
        ("attn_offset=9", "`attn_offset` (9) must be below `attn_period` (8)"),
        ("experts_per_token=20", "`experts_per_token` (20) must be at most `num_experts` (16)"),
    ],
)
def test_an_override_jamba_cannot_build_is_refused(setting, message, capsys):
    assert main(["count", "--config", str(DATA / "jamba-v0.1.json"), "--set", setting]) == 2
    assert message in capsys.readouterr().err


def test_the_json_record_gives_a_state_layers_bytes_a_sequence(capsys):
    main(["serve", "--config", str(DATA / "mamba-130m.json"), "--format", "json"])
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert layers[0]["kind"] == "state" and layers[0]["state_bytes_per_sequence"] == 61_440
