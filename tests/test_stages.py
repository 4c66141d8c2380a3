"""A pipeline stage's memory (``dcsim.memory.stages``): each device holds its own stage's arrays,
and its own blocks' residuals for the micro-batches it has in flight. Golden values by hand on a
two-block Llama whose every array a reader can count."""

from __future__ import annotations

import functools
import json
from fractions import Fraction

import pytest

from conftest import refused_in_one_line, run_cli
from dcsim.memory import activations as act
from dcsim.memory import stages, training
from dcsim.memory.state import compute_memory
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed.pipeline import Pipeline

# Two Llama blocks, width 64, 4 heads of 16, MLP 128, vocabulary 100, an untied head. By hand:
# a block is 4 x 64 x 64 (query, key, value, out) + 3 x 64 x 128 (gate, up, down) + 2 x 64 (norms)
# = 41,088 values; the token table 100 x 64 = 6,400; the final norm 64; the head 64 x 100 = 6,400.
TINY = ModelConfig(
    preset="llama2-7b",
    overrides={
        "num_layers": 2,
        "d_model": 64,
        "num_heads": 4,
        "num_kv_heads": 4,
        "ffn_dim": 128,
        "vocab_size": 100,
        "max_positions": 256,
    },
)
BLOCK, TABLE, NORM, HEAD = 41_088, 6_400, 64, 6_400
# float32 params, float32 grads, no master copy, Adam's two float32 moments: 16 bytes a value, and
# Adam's int32 step count (4 bytes), which the first stage holds.
BYTES_A_VALUE, COUNT = 4 + 4 + 8, 4
FIRST = (BLOCK + TABLE) * BYTES_A_VALUE + COUNT  # 759,812
LAST = (BLOCK + NORM + HEAD) * BYTES_A_VALUE  # 760,832


@functools.cache
def tiny_report():
    return count_params(TINY)


def test_the_tiny_model_is_as_counted_by_hand():
    assert tiny_report().total_params == 2 * BLOCK + TABLE + NORM + HEAD == 95_040


@pytest.mark.parametrize(
    ("mesh", "strategy", "zero", "devices_per_stage", "split"),
    [
        pytest.param((("stage", 2),), "replicated", 0, 1, 1, id="stage=2"),
        pytest.param((("data", 2), ("stage", 2)), "replicated", 0, 2, 1, id="data=2,stage=2-zero0"),
        pytest.param((("data", 2), ("stage", 2)), "fsdp", 3, 2, 2, id="data=2,stage=2-fsdp"),
    ],
)
def test_each_stage_holds_its_own_arrays(mesh, strategy, zero, devices_per_stage, split):
    """Stage 0 holds block 0 and the table, stage 1 block 1, the final norm and the head; ZeRO-3
    splits each stage's state over data=2 (every dimension here is even), never over ``stage``,
    and the step count stays whole. The device shown is the last stage's, which holds the most."""
    setup = training.Training.stage(zero, param_dtype="float32")
    memory = compute_memory(tiny_report(), MeshSpec(mesh), strategy, (), setup)
    assert memory.pipeline is not None
    first = (FIRST - COUNT) // split + COUNT
    assert memory.pipeline.state_bytes == (first, LAST // split)
    assert memory.pipeline.devices_per_stage == devices_per_stage
    assert memory.pipeline.stage == 1 and memory.total_bytes_per_device == LAST // split
    assert {row.path for row in memory.arrays if row.part == "params"} == {
        *(row.path for row in tiny_report().arrays if row.path.startswith("block_1/")),
        "final_norm/scale",
        "lm_head/kernel",
    }
    # The state once is the whole model's, whatever the stages: the ideal share divides it.
    assert memory.total_bytes == (2 * BLOCK + TABLE + NORM + HEAD) * BYTES_A_VALUE + COUNT


def test_the_stages_add_up_to_the_whole_model():
    """On one device a stage, the stages' states sum to the whole model's state on one device
    without stages (an untied head: no array is on two stages)."""
    setup = training.Training.stage(0, param_dtype="float32")
    staged = compute_memory(tiny_report(), MeshSpec((("stage", 2),)), "replicated", (), setup)
    whole = compute_memory(tiny_report(), MeshSpec((("data", 1),)), "replicated", (), setup)
    assert sum(staged.pipeline.state_bytes) == whole.total_bytes_per_device == FIRST + LAST


def test_without_by_stage_the_axis_is_a_data_axis():
    """A checkpoint's layout keeps the stage axis as any other: every array, as before."""
    setup = training.Training.stage(3, param_dtype="float32")
    memory = compute_memory(tiny_report(), MeshSpec((("stage", 2),)), "fsdp", (), setup, by_stage=False)
    assert memory.pipeline is None and len(memory.arrays) == 4 * 21 + 1


def test_more_stages_than_blocks_are_refused():
    setup = training.Training.stage(0)
    with pytest.raises(ValueError, match=r"3 stages .* 2 blocks"):
        compute_memory(tiny_report(), MeshSpec((("stage", 3),)), "replicated", (), setup)


def test_a_model_without_blocks_refuses_a_stage_axis(capsys):
    line = refused_in_one_line(capsys, "memory", "--input-dim", "8", "--features", "8", "--mesh", "stage=2")
    assert "splits a model's blocks into pipeline stages, and this model has none" in line


@pytest.mark.parametrize(
    ("stage", "num_stages", "schedule", "expected"),
    [
        pytest.param(0, 4, None, Fraction(4), id="1f1b-first-holds-p"),
        pytest.param(3, 4, None, Fraction(1), id="1f1b-last-holds-1"),
        pytest.param(1, 4, Pipeline(micro_batches=2), Fraction(2), id="1f1b-at-most-m"),
        # Korthikanti et al. 2022, 4.2.3: the first stage holds p (1 + (p - 1)/(p v)) micro-batches'
        # worth: 4 (1 + 3/8) = 5.5 for p = 4, v = 2.
        pytest.param(0, 4, Pipeline(micro_batches=8, schedule="interleaved", virtual_stages=2), Fraction(11, 2)),
        # at most m v chunks: 4 micro-batches x 2 chunks = 8 chunks, a v-th each: 4
        pytest.param(0, 4, Pipeline(micro_batches=4, schedule="interleaved", virtual_stages=2), Fraction(4)),
        pytest.param(3, 4, Pipeline(micro_batches=8, schedule="interleaved", virtual_stages=2), Fraction(5, 2)),
        pytest.param(0, 1, None, Fraction(1), id="no-pipeline"),
    ],
)
def test_micro_batches_in_flight(stage, num_stages, schedule, expected):
    assert stages.in_flight(stage, num_stages, schedule) == expected


STEP = act.Step(sequence=64, micro_batch=2, attention="flash")


@functools.cache
def tiny_trace():
    return act.cached_trace(TINY, STEP, "float32", MeshSpec((("stage", 2),)))


def test_stage_activations_by_hand():
    """On 2 stages under 1F1B, the first stage keeps 2 micro-batches of block 0's residuals, the last
    one of block 1's with those outside the blocks and the loss's."""
    traced = tiny_trace()
    blocks = stages.stage_blocks(2, 2)
    held = stages.activation_bytes(traced, blocks)
    assert held == (
        2 * traced.blocks[0].bytes,
        traced.blocks[1].bytes + traced.outside.bytes + traced.loss_bytes,
    )
    # one stage: the whole step, as without a pipeline
    assert stages.activation_bytes(traced, (range(2),)) == (traced.bytes_per_device,)


def test_the_device_shown_holds_the_most_state_and_activations():
    traced = tiny_trace()
    setup = training.Training.stage(0, param_dtype="float32")
    memory = compute_memory(
        tiny_report(),
        MeshSpec((("stage", 2),)),
        "replicated",
        (),
        setup,
        stage_activations=lambda blocks: stages.activation_bytes(traced, blocks),
    )
    split = memory.pipeline
    totals = [
        FIRST + 2 * traced.blocks[0].bytes,
        LAST + traced.blocks[1].bytes + traced.outside.bytes + traced.loss_bytes,
    ]
    assert split.stage_bytes == tuple(totals)
    assert split.stage == totals.index(max(totals))
    assert memory.total_bytes_per_device == (FIRST, LAST)[split.stage]


def test_memory_json_names_the_stage_and_adds_its_figures(capsys):
    """The CLI's figure is the stage's that holds the most: its state and its activations."""
    code, out, _ = run_cli(
        capsys,
        "memory",
        "--preset",
        "llama2-7b",
        *("--set", "num_layers=2", "--set", "d_model=64", "--set", "num_heads=4", "--set", "num_kv_heads=4"),
        *("--set", "ffn_dim=128", "--set", "vocab_size=100", "--set", "max_positions=256"),
        *("--mesh", "stage=2", "--strategy", "replicated", "--zero", "0", "--param-dtype", "float32"),
        *("--sequence", "64", "--micro-batch", "2", "--format", "json"),
    )
    assert code == 0
    record = json.loads(out)
    pipeline = record["pipeline"]
    rows = pipeline["stages"]
    assert [row["state_bytes_per_device"] for row in rows] == [FIRST, LAST]
    traced = tiny_trace()
    assert rows[0]["activations_bytes_per_device"] == 2 * traced.blocks[0].bytes
    totals = [row["state_bytes_per_device"] + row["activations_bytes_per_device"] for row in rows]
    chosen = pipeline["stage"]
    assert totals[chosen] == max(totals)
    assert record["per_device"]["total_bytes"] == totals[chosen]
    assert f"stage {chosen} of 2" in record["every_device_alike"]


def test_verify_refuses_a_stage_axis(capsys):
    line = refused_in_one_line(
        capsys, "memory", "--preset", "gpt2-small", "--mesh", "data=2,stage=2", "--verify", "--format", "json"
    )
    assert "`stage` axis" in line


def test_the_budget_search_weighs_each_stage():
    """Each candidate of the search holds its most-loaded stage's state and activations."""
    from dcsim.memory import search

    traced = tiny_trace()
    setup = training.Training.stage(0, param_dtype="float32")
    fit = search.fit(
        tiny_report(),
        MeshSpec((("data", 2), ("stage", 2))),
        "replicated",
        (),
        setup,
        amount=1 << 40,
        activations=lambda mesh: traced.bytes_per_device,
        stage_activations=lambda mesh, _: stages.activation_bytes(traced, stages.stage_blocks(2, 2)),
    )
    first = FIRST + 2 * traced.blocks[0].bytes
    last = LAST + traced.blocks[1].bytes + traced.outside.bytes + traced.loss_bytes
    assert {candidate.total_bytes_per_device for candidate in fit.candidates} == {max(first, last)}


def test_the_step_time_reads_the_slowest_stages_state():
    """The time's slowest stage on 2 stages is the last (block 1 and the head): its state is that
    stage's own arrays, whole on one device a stage: LAST by hand."""
    from dcsim.model import presets
    from dcsim.speed.pipeline import stage_share

    mesh = MeshSpec((("stage", 2),))
    setup = training.Training.stage(0, param_dtype="float32")
    memory = compute_memory(tiny_report(), mesh, "replicated", (), setup)
    traced = act.cached_trace(TINY, STEP, "float32", mesh, with_recompute=True)
    share = stage_share(tiny_report(), traced, memory, presets.resolved_hparams(TINY), 2)
    assert share.stage == 1 and share.state_bytes == LAST


def test_the_interleaved_schedule_reaches_the_memory_figures(capsys):
    """GPT-2 small's 12 blocks on 2 stages, interleaved over 2 chunks, 4 micro-batches: the first
    stage keeps 2 (2 - 0 - 1) + (2 - 1) 2 + 1 = 5 chunks of 3 blocks, 2.5 times its 6 blocks'
    residuals (Korthikanti et al.'s p (1 + (p - 1)/(p v)) = 2 x 1.25); the last 3 chunks, 1.5 times,
    with those outside the blocks and the loss's."""
    code, out, _ = run_cli(
        capsys,
        *("memory", "--preset", "gpt2-small", "--mesh", "stage=2", "--sequence", "128", "--device", "h100-sxm"),
        *("--micro-batches", "4", "--schedule", "interleaved", "--virtual-stages", "2", "--format", "json"),
    )
    assert code == 0
    record = json.loads(out)
    blocks = [row["bytes"] for row in record["activations"]["blocks"][:12]]
    outside_and_loss = record["activations"]["bytes_per_device"] - sum(blocks)
    rows = record["pipeline"]["stages"]
    assert rows[0]["activations_bytes_per_device"] == -(-5 * sum(blocks[:6]) // 2)
    assert rows[1]["activations_bytes_per_device"] == -(-3 * sum(blocks[6:]) // 2) + outside_and_loss
