"""Pipeline stages for a training step's time (``dcsim.speed.pipeline``): the schedule's refusals,
the bubble (p - 1) / (v m) of Narayanan et al. 2021 by hand, which stage holds what, the slowest
stage's FLOPs and sends, gradient accumulation, and the command line's ``time`` object."""

from __future__ import annotations

import functools
import json
from fractions import Fraction

import pytest

from conftest import refused_in_one_line, run_cli
from dcsim.memory import activations as act
from dcsim.memory import training
from dcsim.memory.state import compute_memory
from dcsim.model import presets
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.serving import catalog
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed import estimate
from dcsim.speed.pipeline import Pipeline, stage_of, stage_share

GPT2 = ModelConfig(preset="gpt2-small", overrides={"vocab_size": 50304})  # 12 blocks, d_model 768, tied head
H100 = catalog.get_accelerator("h100-sxm")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"micro_batches": 0}, "`micro-batches` must be an integer from 1 to 1,048,576"),
        ({"micro_batches": 2.5}, "`micro-batches` must be an integer"),
        ({"schedule": "gpipe"}, "the pipeline schedule must be one of 1f1b, interleaved, got 'gpipe'"),
        ({"schedule": "interleaved"}, "the interleaved schedule runs 2 or more virtual stages"),
        ({"virtual_stages": 2}, "virtual stages (2) are the interleaved schedule's model chunks"),
        ({"virtual_stages": 0}, "`virtual stages` must be an integer from 1 to 1,024"),
    ],
    ids=["no-micro-batch", "fraction", "unknown-schedule", "interleaved-of-one", "chunks-on-1f1b", "no-chunk"],
)
def test_bad_settings_are_refused_by_name(settings, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        Pipeline(**settings)


@pytest.mark.parametrize(
    ("settings", "stages", "layers", "message"),
    [
        ({"micro_batches": 16}, 13, 12, "the pipeline has 13 stages (`stage`) and the model 12 blocks"),
        ({"micro_batches": 3}, 4, 12, "3 micro-batches a step on 4 pipeline stages"),
        ({"micro_batches": 8, "schedule": "interleaved", "virtual_stages": 2}, 4, 12, "4 stages x 2 virtual stages"),
        ({"micro_batches": 6, "schedule": "interleaved", "virtual_stages": 3}, 4, 12, "6 is not a multiple of 4"),
        ({"micro_batches": 4, "schedule": "interleaved", "virtual_stages": 2}, 1, 12, "the mesh has no `stage` axis"),
    ],
    ids=[
        "more-stages-than-blocks",
        "fewer-micro-batches-than-stages",
        "chunks-split-unevenly",
        "m-not-multiple",
        "no-stages",
    ],
)
def test_a_schedule_the_model_and_mesh_cannot_run_is_refused(settings, stages, layers, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Pipeline(**settings).check_for(stages, layers)


def test_the_bubble_by_hand():
    """Narayanan et al. 2021, section 2.2: (p - 1) / m for 1F1B, divided by v when interleaved."""
    assert Pipeline(micro_batches=8).bubble_fraction(4) == Fraction(3, 8)
    assert Pipeline(micro_batches=8, schedule="interleaved", virtual_stages=2).bubble_fraction(4) == Fraction(3, 16)
    assert Pipeline(micro_batches=8).bubble_fraction(1) == 0
    Pipeline(micro_batches=16, schedule="interleaved", virtual_stages=3).check_for(4, 12)  # 12 = 4 x 3 chunks of one


@pytest.mark.parametrize(
    ("path", "stages"),
    [
        ("block_0/attn/query/kernel", (0,)),
        ("block_11/mlp/down/kernel", (2,)),
        ("0/mu/block_5/mlp/up/kernel", (1,)),  # an optimizer's moment lives with its block
        ("embed/token/embedding", (0,)),
        ("embed/position/embedding", (0,)),
        ("final_norm/scale", (2,)),
        ("lm_head/kernel", (2,)),
        ("0/nu/lm_head/kernel", (2,)),
    ],
)
def test_which_stage_holds_a_path(path, stages):
    blocks = (range(0, 4), range(4, 8), range(8, 12))
    assert stage_of(path, blocks, tied=False) == stages


def test_a_tied_table_is_on_the_first_and_the_last_stage():
    assert stage_of("embed/token/embedding", (range(0, 6), range(6, 12)), tied=True) == (0, 1)


@functools.cache
def _setup(mesh_text: str, micro_batch: int = 1, sequence_parallel: bool = False):
    mesh = MeshSpec(tuple((name, int(size)) for name, size in (part.split("=") for part in mesh_text.split(","))))
    report = count_params(GPT2)
    memory = compute_memory(
        report, mesh, "megatron" if "model" in mesh.names else "fsdp", (), training.Training.stage(3)
    )
    step = act.Step(sequence=1024, micro_batch=micro_batch, sequence_parallel=sequence_parallel)
    traced = act.cached_trace(GPT2, step, "bfloat16", mesh, with_recompute=True)
    return report, memory, traced


def timed(mesh_text: str, schedule: Pipeline, **step):
    report, memory, traced = _setup(mesh_text, **step)
    return estimate.training_time(GPT2, report, memory, traced, H100, schedule=schedule)


def test_the_stages_flops_add_up_to_the_models_and_the_last_is_slowest():
    """GPT-2's 12 blocks are alike, so on 3 stages of 4 each the last stage carries the same blocks'
    FLOPs plus the head and loss: it is the slowest, and the three sum to the whole step."""
    report, memory, traced = _setup("data=2,stage=3")
    share = stage_share(report, traced, memory, presets.resolved_hparams(GPT2), 3)
    first, middle, last = share.stage_flops
    assert first == middle < last
    assert first + middle + last == traced.flops.hardware
    assert share.stage == 2 and share.last and not share.first and share.blocks == range(8, 12)
    block = traced.flops_parts[0][0].hardware
    assert first == 4 * block  # four blocks built alike
    assert traced.flops.hardware == 12 * block + traced.flops_parts[1].hardware
    assert last - middle == traced.flops_parts[1].hardware  # the part outside the blocks


@pytest.mark.parametrize("stages", range(1, 13))
def test_every_split_of_gpt2_adds_up_and_paces_on_its_largest_stage(stages):
    """For each stage count, the stages' FLOPs sum to the whole step's, the timed stage is one with
    the most, and it holds 12 // p or 12 // p + 1 blocks (serve's split)."""
    report, memory, traced = _setup("data=2")
    share = stage_share(report, traced, memory, presets.resolved_hparams(GPT2), stages)
    assert len(share.stage_flops) == stages
    assert sum(share.stage_flops) == traced.flops.hardware
    assert share.stage_flops[share.stage] == max(share.stage_flops) == share.flops.hardware
    assert share.num_blocks in (12 // stages, 12 // stages + 1)


def test_the_sends_by_hand():
    """A micro-batch of 2 x 1,024 tokens x 768 wide in bfloat16 is 3,145,728 bytes: 8 micro-batches
    send it forward and its gradient back, 16 sends; interleaved over 2 chunks twice as many; under
    sequence parallelism on model=2, half of it each."""
    plain = timed("data=2,stage=2", Pipeline(micro_batches=8), micro_batch=2)
    sends = [row for row in plain.collectives if row.kind == "collective-permute"]
    assert [(row.axis, row.count, row.bytes) for row in sends] == [
        ("stage", 8, 8 * 3_145_728),
        ("stage", 8, 8 * 3_145_728),
    ]
    assert all(row.exposed and row.ring_steps == 1 for row in sends)
    chunks = timed("data=2,stage=2", Pipeline(micro_batches=8, schedule="interleaved", virtual_stages=2), micro_batch=2)
    assert sum(row.bytes for row in chunks.collectives if row.kind == "collective-permute") == 32 * 3_145_728
    split = timed("stage=2,model=2", Pipeline(micro_batches=8), micro_batch=2, sequence_parallel=True)
    assert {row.bytes for row in split.collectives if row.kind == "collective-permute"} == {8 * 3_145_728 // 2}


def test_tensor_parallel_rows_are_the_stages_own():
    """On stage=2, model=2 the slowest stage (the last: blocks 6-11 and the head) all-reduces two
    activations a block in the forward, 12 a micro-batch, and the output layer's input gradient,
    never the embedding's output; 4 micro-batches run each 4 times."""
    time = timed("stage=2,model=2", Pipeline(micro_batches=4), micro_batch=2)
    rows = {row.what: row.count for row in time.collectives if row.axis == "model"}
    assert rows["tensor-parallel block outputs, forward"] == 4 * 12
    assert rows["output layer input's gradient, backward"] == 4
    assert rows["vocabulary-parallel cross-entropy (max, sum, target logit)"] == 4 * 3
    assert "vocabulary-parallel embedding output, forward" not in rows


def test_gradient_accumulation_runs_the_micro_batch_m_times_and_reduces_once():
    one = timed("data=4", Pipeline())
    four = timed("data=4", Pipeline(micro_batches=4))
    assert four.flops.hardware == 4 * one.flops.hardware
    assert four.compute_seconds == pytest.approx(4 * one.compute_seconds)
    grads = {row.kind: row.bytes for row in one.collectives if row.what == "gradients"}
    assert grads == {row.kind: row.bytes for row in four.collectives if row.what == "gradients"}  # once a step
    gathers = [row.bytes for row in one.collectives if row.kind == "all-gather"]
    assert [row.bytes for row in four.collectives if row.kind == "all-gather"] == [4 * b for b in gathers]
    assert four.global_tokens == 4 * one.global_tokens == 4 * 4 * 1024
    assert four.bubble_fraction == 0 and four.step_seconds > one.step_seconds


def test_the_bubble_stretches_every_figure():
    """stage=2 and 4 micro-batches: a bubble of 1/4, so each figure is 5/4 of its ideal, and the
    band still holds the point. Two replicas of one sequence, four times: 8,192 tokens a step."""
    time = timed("data=2,stage=2", Pipeline(micro_batches=4))
    assert time.bubble_fraction == 0.25
    assert time.bubble_seconds == pytest.approx(time.step_seconds / 5)
    ideal = time.step_seconds - time.bubble_seconds
    assert ideal == pytest.approx(max(time.compute_seconds, time.memory_seconds) + time.exposed_comm_seconds)
    assert time.step_seconds_high == pytest.approx(
        1.25 * (time.compute_seconds + time.memory_seconds + time.comm_seconds)
    )
    assert 0 < time.roofline_seconds <= time.step_seconds_low <= time.step_seconds <= time.step_seconds_high
    assert time.global_tokens == 2 * 1 * 1024 * 4
    assert time.mfu == pytest.approx(
        time.model_flops_per_token * time.global_tokens / 4 / time.step_seconds / H100.peak_flops("bfloat16")
    )


def test_memory_times_a_pipelined_step_in_json(capsys):
    flags = ("--mesh", "data=2,stage=2", "--sequence", "1024", "--device", "h100-sxm", "--micro-batches", "4")
    code, out, _ = run_cli(capsys, "memory", "--preset", "gpt2-small", "--format", "json", *flags)
    assert code == 0
    time = json.loads(out)["time"]
    assert (time["stages"], time["micro_batches"], time["schedule"], time["bubble_fraction"]) == (2, 4, "1f1b", 0.25)
    assert time["slowest_stage"]["stage"] == 1 and time["slowest_stage"]["head"] is True
    sends = [row for row in time["comm_bytes_per_device"] if row["kind"] == "collective-permute"]
    # 4 micro-batches x (forward + backward) x 1 x 1,024 x 768 x 2 bytes
    assert sends == [
        {"kind": "collective-permute", "axis": "stage", "bytes": 8 * 1_572_864, "calls": 8, "inside_host": True}
    ]
    assert time["tokens_per_step"] == 2 * 1024 * 4
    assert any("in flight" in item for item in time["leaves_out"])


def test_schedule_flags_need_a_device(capsys):
    line = refused_in_one_line(capsys, "memory", "--preset", "gpt2-small", "--mesh", "data=2", "--micro-batches", "4")
    assert "--micro-batches: for a run's time; give --sequence and --device too" in line
