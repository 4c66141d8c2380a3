"""A training step's time and a serving replica's speed (``dcsim.speed``): the efficiencies' steps,
which axes run inside a host, the band's order, a run's arithmetic, the decode step's bounds, and
the command line's ``time`` object and refusals."""

from __future__ import annotations

import functools
import json

import pytest

from conftest import refused_in_one_line, run_cli
from dcsim.memory import activations as act
from dcsim.memory import training
from dcsim.memory.state import compute_memory
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.serving import catalog
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed import estimate, system

GPT2 = ModelConfig(preset="gpt2-small", overrides={"vocab_size": 50304})
H100 = catalog.get_accelerator("h100-sxm")


def test_calculons_efficiencies_by_size():
    assert system.matmul_efficiency(200 * 10**9) == 0.95
    assert system.matmul_efficiency(16 * 10**9) == 0.90
    assert system.matmul_efficiency(10**9) == 0.60
    assert system.matmul_efficiency(10**6) == 0.10
    assert system.hbm_efficiency(10**8) == 0.90 and system.hbm_efficiency(5 * 10**6) == 0.60


@pytest.mark.parametrize(
    ("axes", "names", "per_host", "inside"),
    [
        ((("data", 64), ("model", 8)), ["model"], 8, True),
        ((("data", 64), ("model", 8)), ["data"], 8, False),
        ((("data", 2), ("model", 4)), ["data"], 8, True),
        ((("model", 8), ("data", 2)), ["model"], 8, False),  # model=8 x the 2 after it: 16 devices
    ],
)
def test_an_axis_runs_inside_a_host_when_it_and_the_axes_after_it_fit(axes, names, per_host, inside):
    assert system.inside_host(axes, names, per_host) is inside


DP_TP = MeshSpec((("data", 2), ("model", 2)))


def timed(mesh=DP_TP, zero=3, tokens=None, price=None, **step):
    report = count_params(GPT2)
    strategy = "megatron" if "model" in mesh.names else "fsdp"
    memory = compute_memory(report, mesh, strategy, (), training.Training.stage(zero))
    traced = act.cached_trace(GPT2, act.Step(**({"sequence": 1024} | step)), "bfloat16", mesh, with_recompute=True)
    return estimate.training_time(GPT2, report, memory, traced, H100, tokens=tokens, price=price)


@pytest.mark.parametrize("zero", [0, 3])
@pytest.mark.parametrize("remat", ["none", "full"])
def test_the_roofline_the_band_and_the_point_in_order(zero, remat):
    time = timed(zero=zero, remat=remat, micro_batch=2)
    assert 0 < time.roofline_seconds <= time.step_seconds_low <= time.step_seconds <= time.step_seconds_high
    assert time.step_seconds_high == pytest.approx(time.compute_seconds + time.memory_seconds + time.comm_seconds)
    assert time.step_seconds_low == max(time.compute_seconds, time.memory_seconds, time.comm_seconds)
    assert 0 < time.mfu <= time.hfu < 1


def test_mfu_is_the_models_flops_over_the_time_and_the_peak():
    """MFU by hand from the record's own figures: the model's FLOPs a token x the step's tokens, a
    device's share, over the step time and the peak."""
    time = timed(micro_batch=2)
    by_hand = time.model_flops_per_token * (2 * 2 * 1024) / 4 / time.step_seconds / 989_400_000_000_000
    assert time.global_tokens == 2 * 2 * 1024  # two replicas of two sequences
    assert time.mfu == pytest.approx(by_hand)


def test_a_run_in_steps_days_and_device_hours():
    time = timed(tokens=10**9, price=2.0)
    run = time.run
    assert run.steps == -(-(10**9) // (2 * 1024))
    assert run.seconds == pytest.approx(run.steps * time.step_seconds)
    assert run.device_hours == pytest.approx(run.seconds * 4 / 3600)
    assert run.cost == pytest.approx(2 * run.device_hours)


def test_tensor_parallel_communication_is_exposed_and_data_parallel_hidden():
    """At one data-parallel replica nothing hides; the tensor axis's all-reduces show in full."""
    tp = timed(mesh=MeshSpec((("model", 4),)))
    assert tp.exposed_comm_seconds == pytest.approx(tp.comm_seconds)
    dp = timed(mesh=MeshSpec((("data", 4),)), micro_batch=4)
    assert dp.comm_seconds > 0 and dp.exposed_comm_seconds < dp.comm_seconds


def test_memory_writes_the_time_object_with_the_issues_keys(capsys):
    flags = ("--mesh", "data=4", "--sequence", "1024", "--device", "h100-sxm", "--tokens", "1e9")
    code, out, _ = run_cli(capsys, "memory", "--preset", "gpt2-small", "--format", "json", *flags)
    assert code == 0
    record = json.loads(out)
    time = record["time"]
    for key in (
        "flops_per_step_per_device",
        "model_flops_per_token",
        "comm_bytes_per_device",
        "compute_seconds",
        "memory_seconds",
        "comm_seconds",
        "step_seconds",
        "step_seconds_low",
        "step_seconds_high",
        "roofline_seconds",
        "mfu",
        "tokens_per_second",
        "run_seconds",
        "device_hours",
    ):
        assert key in time, key
    assert {(row["kind"], row["axis"]) for row in time["comm_bytes_per_device"]} == {
        ("all-gather", "data"),
        ("reduce-scatter", "data"),
    }
    assert record["footprint"]["budget_bytes"] == H100.bytes  # the device's memory is the budget
    assert time["approximations_per_token"]["matmul_params"] == 123_653_376


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tokens", "0"], "`--tokens` must be an integer from 1 to 1,000,000,000,000,000,000"),
        (["--tokens", "1e9", "--price", "-1"], "`--price` must be a price a device-hour, a number at least 0, got -1"),
        (["--device", "tpu-v9"], "unknown device 'tpu-v9'"),
        (["--devices-per-host", "0"], "`--devices-per-host` must be an integer from 1 to 65,536, got '0'"),
        (["--budget", "80GiB"], "--budget and --device both give the budget"),
        (["--mesh", "data=2,stage=2"], "1 micro-batch a step on 2 pipeline stages: a schedule needs at least"),
        (["--schedule", "gpipe"], "argument --schedule: invalid choice: 'gpipe' (choose from '1f1b', 'interleaved')"),
        (["--micro-batches", "0"], "`--micro-batches` must be an integer from 1 to 1,048,576, got '0'"),
        (["--virtual-stages", "2"], "virtual stages (2) are the interleaved schedule's model chunks a device"),
        (["--schedule", "interleaved", "--virtual-stages", "2"], "the interleaved schedule interleaves pipeline"),
    ],
)
def test_memory_refuses_bad_time_flags_in_one_line(capsys, flags, message):
    base = ["memory", "--preset", "gpt2-small", "--mesh", "data=2", "--sequence", "512", "--device", "h100-sxm"]
    assert message in refused_in_one_line(capsys, *base, *flags)


def test_a_run_needs_a_step_and_a_device(capsys):
    line = refused_in_one_line(capsys, "memory", "--preset", "gpt2-small", "--mesh", "data=2", "--tokens", "1e9")
    assert "--tokens: for a run's time; give --sequence and --device too" in line


def test_a_device_without_a_link_figure_is_refused_by_name(capsys):
    flags = ("--mesh", "data=2,model=2", "--sequence", "512", "--device", "l4")
    line = refused_in_one_line(capsys, "memory", "--preset", "gpt2-small", *flags)
    assert "the device l4 has no scale up bytes per second figure" in line


def test_serve_writes_the_decode_speed(capsys):
    """Llama 3.1 8B in bfloat16 on one H100 at one sequence: a decode step reads the 16 GB of weights
    and the cache, memory-bound, so the step is at least the weights over 3.35 TB/s."""
    flags = ("--device", "h100-sxm", "--context", "256", "--format", "json")
    record = json.loads(run_cli(capsys, "serve", "--preset", "llama3.1-8b", *flags)[1])
    time = record["time"]
    weights = record["weights_bytes_per_device"]
    assert time["decode_step_seconds"] >= weights / 3.35e12
    assert time["memory_seconds"] > time["compute_seconds"]
    assert time["tokens_per_second_per_sequence"] == pytest.approx(1 / time["decode_step_seconds"], rel=1e-5)
    assert time["time_to_first_token_seconds"] > 0 and time["prompt"] == 128


def test_a_speed_or_a_time_of_a_setup_over_the_device_says_so_on_its_own_line(capsys):
    """Llama 2 70B in bfloat16 on one H100 at 4,096 tokens: 68,976,648,192 x 2 = 137,953,296,384
    bytes of weights, 80 layers x 2 (K and V) x 8 KV heads x 128 x 2 bytes x 4,096 tokens =
    1,342,177,280 of cache and 320 of the step's index, against 80 GiB less a tenth kept free
    (77,309,411,328): over by 61,986,062,656 bytes, 57.73 GiB. Its decode is still estimated, and the
    line says the setup does not fit; the same model's training step on 8 H100s with nothing split
    says so on the time's line too, and GPT-2 small, which fits, says nothing of it."""
    over = 137_953_296_384 + 1_342_177_280 + 320 - 77_309_411_328
    assert over == 61_986_062_656 and f"{over / 2**30:.2f}" == "57.73"
    decode = run_cli(capsys, "serve", "--preset", "llama2-70b", "--device", "h100-sxm")[1].splitlines()[-1]
    assert decode.startswith("decode (estimate) on h100-sxm")
    assert decode.endswith(
        "; this setup does not fit the h100-sxm (over by 57.73 GiB): the speed is of a decode that cannot run as set"
    )
    fits = run_cli(capsys, "serve", "--preset", "llama2-7b", "--device", "h100-sxm")[1].splitlines()[-1]
    assert fits.startswith("decode (estimate) on h100-sxm") and "does not fit" not in fits
    flags = ("--mesh", "data=8", "--zero", "0", "--sequence", "1024", "--device", "h100-sxm")
    for preset, unfit in (("llama2-70b", True), ("gpt2-small", False)):
        out = run_cli(capsys, "memory", "--preset", preset, *flags)[1]
        (line,) = [line for line in out.splitlines() if line.startswith("step time (estimate)")]
        assert line.endswith("the time is of a step that cannot run as set") is unfit
        assert ("this setup does not fit the h100-sxm (over by " in line) is unfit


def test_serve_keeps_a_devices_budget_when_its_speed_lacks_a_figure(capsys):
    """An L4 has no NVLink: serve on model=2 still answers with its memory, as before the speeds, and
    says why there is no decode speed instead of refusing."""
    flags = ("--mesh", "model=2", "--device", "l4", "--format", "json")
    code, out, _ = run_cli(capsys, "serve", "--preset", "llama3.1-8b", *flags)
    record = json.loads(out)
    assert code == 0 and record["budget_bytes"] == catalog.get_accelerator("l4").bytes
    assert record["time"] is None and "l4 has no scale up bytes per second figure" in record["time_note"]


@pytest.mark.parametrize("prompt", [256, 257, 10_000])
def test_serve_refuses_a_prompt_that_fills_the_context_in_one_line(capsys, prompt):
    flags = ("--device", "h100-sxm", "--context", "256", "--prompt", str(prompt))
    line = refused_in_one_line(capsys, "serve", "--preset", "llama3.1-8b", *flags)
    assert line == (
        f"dcsim: error: --prompt: {prompt:,} tokens leave no room for a token in a context of 256 tokens a sequence; "
        "the prompt must be shorter than the context (at most 255 tokens)\n"
    )


@pytest.mark.parametrize(("context", "prompt"), [(64, 63), (129, 128), (4096, 128)])
def test_serve_without_a_prompt_takes_128_tokens_or_the_context_less_one(capsys, context, prompt):
    """A flag left out is never refused: the default prompt is 128 tokens, or context - 1 if shorter."""
    flags = ("--device", "h100-sxm", "--context", str(context), "--format", "json")
    code, out, _ = run_cli(capsys, "serve", "--preset", "llama3.1-8b", *flags)
    assert code == 0 and json.loads(out)["time"]["prompt"] == prompt


def test_the_engine_refuses_a_prompt_as_long_as_the_context_and_takes_one_shorter():
    from dcsim.serving.engine import compute_serving
    from dcsim.serving.request import Serving
    from dcsim.speed import serving as speeds

    config = ModelConfig(preset="gpt2-small")
    params = count_params(config)
    report = compute_serving(config, Serving(mesh=MeshSpec((("data", 1),)), device="h100-sxm", context=1024), params)
    asked = functools.partial(speeds.SpeedRequest, report=report, config=config, params=params, device=H100)
    with pytest.raises(speeds.PromptTooLong, match=r"^1,024 tokens leave no room .* \(at most 1,023 tokens\)$") as err:
        asked(prompt=1024)
    assert err.value.longest == 1023 and isinstance(err.value, ValueError)
    speed = speeds.decode_speed(asked(prompt=1023))  # the longest prompt: its first token is the context's last
    assert speed.prompt == 1023 and speed.time_to_first_token_seconds > 0


def test_the_throughput_latency_curve_up_to_the_memory_limit():
    """Llama 2 7B in bfloat16 on one H100 at 4,096 tokens: doubling sequences up to serve's own most
    (29), each step slower and each device faster; a point at the report's own concurrency reads the
    engine's cache bytes exactly."""
    import dataclasses

    from dcsim.serving.engine import compute_serving
    from dcsim.serving.request import Serving
    from dcsim.speed import serving as speeds

    config = ModelConfig(preset="llama2-7b")
    params = count_params(config)
    request = Serving(mesh=MeshSpec((("data", 1),)), device="h100-sxm", context=4096)
    report = compute_serving(config, request, params)
    asked = functools.partial(speeds.SpeedRequest, config=config, params=params, device=H100, prompt=128)
    curve = speeds.speed_curve(asked(report=report))
    assert [point.concurrency for point in curve] == [1, 2, 4, 8, 16, report.max_concurrency] == [1, 2, 4, 8, 16, 29]
    latencies = [point.inter_token_latency_seconds for point in curve]
    throughputs = [point.tokens_per_second_per_device for point in curve]
    assert latencies == sorted(latencies) and throughputs == sorted(throughputs)
    at_most = compute_serving(config, dataclasses.replace(request, concurrency=29), params)
    engine = speeds.decode_speed(asked(report=at_most))
    scaled = speeds.decode_speed(asked(report=report), sequences=29)
    assert engine.bytes_read_per_device == scaled.bytes_read_per_device
    assert engine.decode_step_seconds == scaled.decode_step_seconds


def test_timing_link_values_read_as_the_flags_do():
    from dcsim.requests.timing import TIMING

    values, problems = TIMING.decode({"tokens": "15.6e12", "price": "2.50", "dph": "4", "prompt": "1e3"})
    assert problems == []
    assert values == {"dph": "4", "tokens": "15600000000000", "price": "2.5", "prompt": "1000"} | {
        "mbs": "1",  # the schedule's keys, absent from the link, read as their defaults
        "sched": "1f1b",
        "vstages": "1",
    }
