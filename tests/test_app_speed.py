"""Time on the Memory and Serving pages in Streamlit's AppTest: the step's time and the decode speed
equal the command line's JSON (the same engine, asked through ``memory``/``serve --device``), the
link keeps the time's keys, an old link keeps its meaning, and a bad link value is named."""

import json

from conftest import metrics, open_app, run_cli
from dcsim.report.speed_charts import CURVE_TITLE, STEP_TITLE
from dcsim.serving import catalog
from dcsim.ui.speed import figure

MEMORY = "pages/memory.py"
SERVING = "pages/serving.py"
TRAIN = {"preset": "llama2-7b", "mesh": "data=8", "seq": "4096", "device": "h100-sxm"}
RUN = {"tokens": "2000000000000", "price": "2"}
SERVE = {"preset": "llama2-7b", "mesh": "model=2", "device": "h100-sxm", "concurrency": "32", "prompt": "512"}


def cli_time(capsys, *argv) -> dict:
    code, out, err = run_cli(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)["time"]


# Each metric the pages show, and how the command line's JSON figure reads when shown there.
METRICS = {
    "Step (estimate)": lambda time: f"{time['step_seconds']:.3g} s",
    "Band: full to no overlap": lambda time: f"{time['step_seconds_low']:.3g}–{time['step_seconds_high']:.3g} s",
    "Roofline": lambda time: f"{time['roofline_seconds']:.3g} s",
    "MFU (estimate)": lambda time: f"{100 * time['mfu']:.1f}%",
    "Tokens/s (estimate)": lambda time: f"{time['tokens_per_second']:,.0f}",
    "Run's days (estimate)": lambda time: figure(time["run_days"]),
    "Device-hours (estimate)": lambda time: figure(time["device_hours"]),
    "Cost (estimate)": lambda time: figure(time["cost"]),
    "Decode step (estimate)": lambda time: f"{1000 * time['decode_step_seconds']:.3g} ms",
    "Inter-token latency (estimate)": lambda time: f"{1000 * time['inter_token_latency_seconds']:.3g} ms",
    "Tokens/s a sequence (estimate)": lambda time: f"{time['tokens_per_second_per_sequence']:,.1f}",
    "Tokens/s a device (estimate)": lambda time: f"{time['tokens_per_second_per_device']:,.0f}",
    "First token (estimate)": lambda time: f"{1000 * time['time_to_first_token_seconds']:.3g} ms",
}
TRAINING_METRICS = tuple(METRICS)[:8]
SERVING_METRICS = tuple(METRICS)[8:]


def assert_shown(shown: dict[str, str], time: dict, labels: tuple[str, ...]) -> None:
    """Every metric named in ``labels`` is on the page, reading as the command line's figure does."""
    assert {label: shown.get(label) for label in labels} == {label: METRICS[label](time) for label in labels}


def warnings_of(at) -> str:
    return " ".join(warning.value.replace("\\", "") for warning in at.warning)


def test_the_memory_pages_step_time_is_the_command_lines(capsys):
    at = open_app(TRAIN | RUN, MEMORY, editors=False)
    assert not at.exception
    time = cli_time(
        capsys,
        *("memory", "--preset", "llama2-7b", "--mesh", "data=8", "--sequence", "4096", "--param-dtype", "bfloat16"),
        *("--device", "h100-sxm", "--tokens", "2e12", "--price", "2"),
    )
    shown = metrics(at)
    assert_shown(shown, time, TRAINING_METRICS)
    # the device's memory is the budget, as memory --device makes it (80 GiB: the H100's "80GB")
    budget = next(label for label in shown if label.startswith("Against the budget"))
    assert "h100-sxm" in budget and catalog.ACCELERATORS["h100-sxm"].bytes == 80 * 2**30
    charts = at.get("vega_lite_chart")
    assert len(charts) == 3 and json.loads(charts[2].proto.spec)["title"]["text"] == STEP_TITLE
    assert {key: at.query_params[key] for key in ("device", "dph", "tokens", "price")} == {
        "device": "h100-sxm",
        "dph": "8",
        "tokens": "2000000000000",
        "price": "2",
    }
    leaves_out = " ".join(caption.value for caption in at.caption)
    assert "leaves out kernel launch gaps and stragglers" in leaves_out
    assert at.query_params["mbs"] == "1" and at.query_params["sched"] == "1f1b"  # the schedule's defaults


def test_a_pipelined_step_on_the_memory_page_is_the_command_lines(capsys):
    """A link with a stage axis and the schedule's keys times the step as memory --micro-batches
    does, and shows the bubble; a schedule the mesh cannot run is said in one line."""
    link = {"preset": "gpt2-small", "mesh": "data=2,stage=2", "seq": "1024", "device": "h100-sxm", "mbs": "4"}
    at = open_app(link, MEMORY, editors=False)
    assert not at.exception
    time = cli_time(
        capsys,
        *("memory", "--preset", "gpt2-small", "--mesh", "data=2,stage=2", "--sequence", "1024"),
        *("--device", "h100-sxm", "--micro-batches", "4"),
    )
    assert metrics(at)["Step (estimate)"] == f"{time['step_seconds']:.3g} s"
    assert any("bubble 25% of the ideal time" in caption.value for caption in at.caption)
    assert at.query_params["mbs"] == "4"
    refused = open_app(link | {"mbs": "1"}, MEMORY, editors=False)
    assert not refused.exception
    assert any("1 micro-batch a step on 2 pipeline stages" in error.value.replace("\\", "") for error in refused.error)


def test_an_old_memory_link_keeps_its_budget_and_has_no_time():
    at = open_app({"preset": "llama2-7b", "mesh": "data=8", "devmem": "40GiB"}, MEMORY, editors=False)
    shown = metrics(at)
    assert "Against the budget (40GiB)" in shown and "Step (estimate)" not in shown
    assert not {"device", "dph", "tokens", "price"} & set(at.query_params)  # rewritten as it always was
    assert any("Pick a device to time the step" in caption.value for caption in at.caption)


def test_a_device_without_a_sequence_asks_for_one():
    at = open_app({"preset": "llama2-7b", "mesh": "data=8", "device": "a100-80gb"}, MEMORY, editors=False)
    assert "Step (estimate)" not in metrics(at)
    assert any("Give a sequence to time a step" in caption.value for caption in at.caption)


def test_bad_time_values_in_a_memory_link_are_named_and_their_defaults_used():
    at = open_app(TRAIN | {"device": "tpu-v9", "tokens": "0", "price": "-1", "dph": "0"}, MEMORY, editors=False)
    assert not at.exception
    words = warnings_of(at)
    for key in ("device", "tokens", "price", "dph"):
        assert f"`{key}`" in words, key
    assert "tpu-v9" in words
    assert "device" not in at.query_params and "Step (estimate)" not in metrics(at)


def test_the_serving_pages_decode_speed_is_the_command_lines(capsys):
    at = open_app(SERVE, SERVING, editors=False)
    assert not at.exception
    time = cli_time(
        capsys,
        *("serve", "--preset", "llama2-7b", "--mesh", "model=2", "--device", "h100-sxm"),
        *("--concurrency", "32", "--prompt", "512"),
    )
    assert_shown(metrics(at), time, SERVING_METRICS)
    charts = at.get("vega_lite_chart")
    assert len(charts) == 3  # the device bar, the capacity curve, the speed curve
    spec = json.loads(charts[2].proto.spec)  # its points: tests/test_speed_charts.py
    assert spec["title"]["text"] == CURVE_TITLE and spec["layer"][0]["encoding"]["y"]["field"] == "per_device"
    assert at.query_params["prompt"] == "512" and at.query_params["dph"] == "8"


def test_serving_without_a_device_says_so_in_one_line_and_a_bad_prompt_is_named():
    at = open_app({**SERVE, "device": "none", "devmem": "80GiB", "prompt": "0"}, SERVING, editors=False)
    assert not at.exception
    assert "Decode step (estimate)" not in metrics(at)
    assert any("Pick a device above for the decode speed" in caption.value for caption in at.caption)
    assert "`prompt`" in warnings_of(at)
    assert "prompt" not in at.query_params


def test_picking_another_device_changes_the_budget_the_time_and_the_link(capsys):
    at = open_app(TRAIN, MEMORY, editors=False)
    picker = next(box for box in at.selectbox if box.label.startswith("Device"))
    picker.set_value("a100-40gb").run()
    assert not at.exception
    time = cli_time(
        capsys,
        *("memory", "--preset", "llama2-7b", "--mesh", "data=8", "--sequence", "4096", "--param-dtype", "bfloat16"),
        *("--device", "a100-40gb"),
    )
    shown = metrics(at)
    assert shown["Step (estimate)"] == f"{time['step_seconds']:.3g} s"
    assert "Against the budget (40GB, a100-40gb)" in shown
    assert any(f"{catalog.ACCELERATORS['a100-40gb'].bytes:,} bytes" in caption.value for caption in at.caption)
    assert at.query_params["device"] == "a100-40gb"


def test_a_refused_edit_of_the_runs_tokens_is_named_and_the_last_valid_value_stays_shown_and_linked():
    at = open_app(TRAIN | RUN, MEMORY, editors=False)
    days = metrics(at)["Run's days (estimate)"]
    box = next(box for box in at.text_input if box.label.startswith("Run's tokens"))
    box.set_value("-5").run()
    assert not at.exception
    errors = " ".join(error.value.replace("\\", "") for error in at.error)
    assert "Run's tokens: `tokens` must be an integer from 1" in errors and "got -5" in errors
    assert metrics(at)["Run's days (estimate)"] == days
    assert at.query_params["tokens"] == "2000000000000"


def test_a_model_without_a_transformers_sizes_has_memory_and_no_time_on_the_serving_page():
    """The Dense stack a visitor lands on serves (weights, no cache) on the default H100; its decode
    speed cannot be estimated (no blocks, heads or width), and the page says so instead of failing."""
    at = open_app({}, "pages/serving.py", editors=False)
    assert not at.exception
    said = " ".join(info.value for info in at.info).replace("\\", "")
    assert "No decode speed on the NVIDIA H100 SXM5 80GB: a time estimate reads a transformer's" in said
    assert "Dense stack has no num_layers or num_heads or d_model" in said


def test_a_setup_over_the_devices_memory_is_timed_with_that_said_on_the_same_line():
    """Llama 2 70B's whole state on 8 H100s does not fit: its step is still timed, and the line under
    the figures says the setup does not fit and by how much."""
    at = open_app(
        {"preset": "llama2-70b", "mesh": "data=8", "zero": "0", "seq": "1024", "device": "h100-sxm"},
        "pages/memory.py",
        editors=False,
    )
    assert not at.exception
    (line,) = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("Every figure is an estimate")]
    assert "This setup does not fit the NVIDIA H100 SXM5 80GB (over by " in line
    assert line.endswith("the time is of a step that cannot run as set.")


def test_a_decode_speed_of_a_setup_over_the_device_says_so_under_its_figures():
    """Llama 2 70B in bfloat16 on one H100 does not fit (over by 57.73 GiB: tests/test_speed.py
    works it out): the decode is still estimated, and the line under its figures says the setup
    does not fit, as the Memory page says of a step."""
    at = open_app({"preset": "llama2-70b", "device": "h100-sxm"}, SERVING, editors=False)
    assert not at.exception
    (line,) = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("Estimates, matmuls in")]
    assert line.endswith(
        "This setup does not fit the NVIDIA H100 SXM5 80GB (over by 57.73 GiB): the speed is of a decode that cannot "
        "run as set."
    )
    assert "Decode step (estimate)" in metrics(at)


def test_a_pipelined_setup_over_the_device_is_over_by_the_answers_own_figure(capsys):
    """Llama 2 7B on data=2,stage=2 with 4 micro-batches: a device of the busiest stage holds its
    stage's micro-batches in flight, not the whole step's residuals. The line under the time and
    the answer above it name one overage, the command line's (its footprint's headroom)."""
    query = {"preset": "llama2-7b", "mesh": "data=2,stage=2", "zero": "0", "seq": "4096", "mb": "2"}
    at = open_app({**query, "device": "h100-sxm", "mbs": "4"}, MEMORY, editors=False)
    assert not at.exception
    flags = ("--mesh", "data=2,stage=2", "--zero", "0", "--sequence", "4096", "--micro-batch", "2")
    out = run_cli(capsys, "memory", "--preset", "llama2-7b", *flags, "--device", "h100-sxm", "--micro-batches", "4")[1]
    (line,) = [line for line in out.splitlines() if line.startswith("step time (estimate)")]
    over = line.split("(over by ")[1].split(")")[0]
    verdict = at.error[0].value.replace("\\", "")
    assert f"over by {over}, " in verdict
    (caption,) = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("Every figure is an estimate")]
    assert f"This setup does not fit the NVIDIA H100 SXM5 80GB (over by {over}): " in caption
