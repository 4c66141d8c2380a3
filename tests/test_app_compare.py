"""The Compare page in AppTest: add, duplicate, rename, remove, baseline, budget answers, links."""

import json

import pytest
from hostile import IMG, MD_LINK, SCRIPT
from streamlit.testing.v1 import AppTest

from conftest import open_app, shown
from dcsim import compare
from dcsim.links import comparisons
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.report import compare_charts

PAGE = "pages/compare.py"


def open_compare(query: dict[str, str | list[str]] | None = None) -> AppTest:
    return open_app(query, PAGE, editors=False)


def click(at, label):
    next(button for button in at.button if button.label == label).click().run()
    assert not at.exception
    return at


def widget(elements, label):
    return next(element for element in elements if element.label == label)


def table(at):
    """The side-by-side table as the person reads it."""
    return next(frame.value for frame in at.dataframe if "total_params" in frame.value.columns)


def answers(at):
    return next(frame.value for frame in at.dataframe if "ideal_shards" in frame.value.columns)


def query(at, key):
    """Every value of ``key`` in the page's URL (AppTest gives one value as a plain string)."""
    values = at.query_params.get(key, [])
    return values if isinstance(values, list) else [values]


def test_an_empty_comparison_invites_an_addition_and_carries_the_budget_in_the_url():
    at = open_compare()
    assert any("No scenarios yet" in info.value for info in at.info)
    assert query(at, "cv") == ["2"] and query(at, "bunit") == ["bytes"]
    assert query(at, "s") == []


def test_adding_the_current_configuration_twice_gives_two_named_scenarios():
    at = click(
        click(open_compare({"input_dim": "8"}), "Add the current configuration"), "Add the current configuration"
    )
    rows = table(at)
    assert list(rows["name"]) == ["Dense 8 → 4", "Dense 8 → 4 (2)"]
    assert list(rows["total_params"]) == ["36", "36"]  # 8x4 + 4
    assert list(rows["ideal_share_text"]) == ["18", "18"]
    assert list(rows["is_baseline"]) == ["baseline", ""]
    assert len(query(at, "s")) == 2
    assert query(at, "s")[1] == "float32~input_dim=8~shards=2~n=Dense 8 → 4 (2)"


def test_rename_change_shards_and_dtype_in_one_save():
    at = click(open_compare(), "Add the current configuration")
    widget(at.text_input, "Name").set_value("small")
    [_, form_dtype] = [box for box in at.selectbox if box.label == "Dtype"]
    form_dtype.set_value("bfloat16")
    widget(at.number_input, "Shards").set_value(3)
    click(at, "Save (rename, dtype, format, shards, step, run)")
    rows = table(at)
    assert list(rows["name"]) == ["small"]
    assert rows["ideal_share_text"][0] == "6.666666666666667 (20/3)" and rows["num_shards"][0] == "3"
    assert rows["dtype"][0] == "bfloat16" and rows["raw_bytes"][0] == "40"
    assert any("Saved small." in shown(success) for success in at.success)


def test_a_bad_name_is_refused_and_the_scenario_kept():
    at = click(open_compare(), "Add the current configuration")
    widget(at.text_input, "Name").set_value("   ")
    click(at, "Save (rename, dtype, format, shards, step, run)")
    assert any("Not saved: a scenario name must not be empty" in shown(error) for error in at.error)
    assert list(table(at)["name"]) == ["Dense 4 → 4"]


def test_duplicate_then_remove_keeps_the_baseline_on_the_same_scenario():
    link = {"s": ["float32~n=a", "float32~input_dim=8~n=b"], "base": "2"}
    at = open_compare(link)
    assert list(table(at)["is_baseline"]) == ["", "baseline"]
    click(at, "Duplicate")  # duplicates scenario 1, placed after it: a, a (2), b
    rows = table(at)
    assert list(rows["name"]) == ["a", "a (2)", "b"] and list(rows["is_baseline"]) == ["", "", "baseline"]
    click(at, "Remove")  # removes scenario 1 (the one chosen)
    rows = table(at)
    assert list(rows["name"]) == ["a (2)", "b"] and list(rows["is_baseline"]) == ["", "baseline"]
    assert list(rows["params_vs_baseline"]) == ["-16", "0"]
    assert query(at, "base") == ["2"]


def test_removing_the_baseline_makes_the_first_scenario_the_baseline():
    at = open_compare({"s": ["float32~n=a", "float32~input_dim=8~n=b"], "base": "1"})
    click(at, "Remove")
    rows = table(at)
    assert list(rows["name"]) == ["b"] and list(rows["is_baseline"]) == ["baseline"]


def test_changing_the_baseline_changes_the_differences():
    at = open_compare({"s": ["float32~n=a", "bfloat16~input_dim=8~n=b"]})
    assert list(table(at)["params_vs_baseline"]) == ["0", "16"]
    widget(at.selectbox, "Baseline (differences are against it)").set_value(2).run()
    rows = table(at)
    assert list(rows["params_vs_baseline"]) == ["-16", "0"]
    assert list(rows["params_ratio_text"]) == ["0.5555555555555556 (5/9)", "1"]
    assert list(rows["raw_bytes_vs_baseline"]) == ["8", "0"]  # 80 float32 bytes against 72 bfloat16
    assert query(at, "base") == ["2"]


def test_budget_answers_by_hand_from_a_link():
    # 20 values under 7 values a device: 3 shards on average; fsdp needs 4 devices (3 replicate).
    at = open_compare({"s": "float32~n=seed", "budget": "7", "bunit": "values"})
    row = answers(at).iloc[0]
    assert row["ideal_shards"] == "3"
    assert row["devices"] == "4 (data=4)" and row["per_device"] == "5"
    assert row["larger_that_fit"] == "0 of 4,092"
    said = next(shown(block) for block in at.markdown if "Fits on" in block.value)
    # the same sentence as python -m dcsim compare: nothing above 4 fits; 6 is the first count bought
    assert said == (
        "- **seed**: Fits on 4 devices (data=4), 5 values each. None of the 4,092 larger counts up to 4,096 fits, "
        "e.g. 6, 8 and 12: fsdp keeps an array whole on every device when the count divides none of its "
        "dimensions, so 6 devices would hold 20 values each."
    )
    assert any("not monotone" in caption.value for caption in at.caption)
    chart = json.loads(at.get("vega_lite_chart")[-1].proto.spec)
    assert chart["title"]["text"] == "Fullest device against the budget (log-log)"  # the counts: tests/test_charts.py


def test_the_budget_form_answers_bytes_with_training_state():
    at = open_compare({"s": "float32~n=seed"})
    widget(at.text_input, "Budget per shard and per device").set_value("100 B")
    widget(at.selectbox, "What must fit").set_value("adam")
    click(at, "Answer")
    row = answers(at).iloc[0]
    # 20 params + 20 gradients + Adam's 40 moments = 80 float32 values (320 bytes) + a 4-byte step count
    assert row["need"] == "324" and row["ideal_shards"] == "4"
    # 1 to 3 devices hold 324, 164 and 324 bytes; 4 hold (5 + 5 + 10) x 4 bytes + the whole step count: 84
    assert row["devices"] == "4 (data=4)" and row["per_device"] == "84"
    assert query(at, "btrain") == ["adam"] and query(at, "budget") == ["100"]


def test_a_bad_budget_is_explained_and_the_last_one_kept():
    at = open_compare({"s": "float32~n=seed"})
    widget(at.text_input, "Budget per shard and per device").set_value("1e400")
    click(at, "Answer")
    assert any("Budget not set: `budget` must be an integer from 1" in shown(error) for error in at.error)
    assert query(at, "budget") == [str(80 * 2**30)]


HOSTILE = [
    f"float32~shards=1e400~n={SCRIPT}",
    f"float32~n={MD_LINK}",
    f"float32~n={IMG}",
    "float32~n=" + "x" * 10_000,
    "float8~shards=nan~n=**bold**",
]


def test_hostile_links_keep_good_scenarios_and_show_every_name_as_text():
    at = open_compare({"s": HOSTILE, "base": "99", "budget": "NaN"})
    rows = table(at)
    assert list(rows["name"]) == [SCRIPT, MD_LINK, IMG, "**bold**"]
    warnings = [warning.value for warning in at.warning]
    assert any("\\<script\\>alert\\(1\\)\\</script\\>" in text and "shards" in text for text in warnings)
    assert any("scenario 4 is 10,010 characters, more than the 5,120" in text.replace("\\", "") for text in warnings)
    assert any("`base` must be an integer from 1 to 4, got 99" in text.replace("\\", "") for text in warnings)
    assert any("`budget` must be a whole number" in text.replace("\\", "") for text in warnings)
    # nothing a person sees in markdown carries a raw tag or link
    for element in (*at.markdown, *at.caption, *at.warning, *at.success):
        assert "<script>" not in element.value and "](javascript" not in element.value


def test_a_comparison_too_large_for_a_link_says_so_and_offers_json():
    # 256 seven-digit widths make a long token; two alternating widths keep the trace to three kernel
    # shapes (a width per layer made JAX trace 256 initialisers: 15 s of the quick loop).
    layers = tuple(DenseLayer(features=1_000_000 + n % 2) for n in range(256))
    deep = compare.Scenario(name="deep", config=ModelConfig(input_dim=8, layers=layers))
    tokens = [comparisons.scenario_token(deep).replace("n=deep", f"n=deep {n}") for n in range(3)]
    at = open_compare({"s": tokens})
    assert len(table(at)) == 3
    assert any("too large for a link" in warning.value for warning in at.warning)
    assert query(at, "s") == [] and query(at, "cv") == ["2"]
    labels = [button.proto.label for button in at.get("download_button")]
    assert "Download the comparison (JSON) to share" in labels


def test_the_comparison_survives_a_page_switch():
    at = click(open_compare(), "Add the current configuration")
    at.switch_page("pages/shards.py").run()
    assert query(at, "s") == []
    at.switch_page(PAGE).run()
    assert list(table(at)["name"]) == ["Dense 4 → 4"] and len(query(at, "s")) == 1


def test_the_add_and_duplicate_buttons_are_disabled_when_full():
    at = open_compare({"s": [f"float32~n=s{n}" for n in range(compare.MAX_SCENARIOS)]})
    assert widget(at.button, "Add the current configuration").disabled
    assert widget(at.button, "Duplicate").disabled


# --- a scenario's training step (issue 29: the training budget counts state + activations) -----------


def boxes(at, label):
    return [box for box in (*at.text_input, *at.selectbox) if box.label == label]


def test_a_scenario_with_a_sequence_counts_its_activations_as_the_memory_command_does():
    # Llama 2 13B, AdamW ZeRO-3 in bfloat16, 80 GiB a device, sequence 4,096, micro-batch 1: the figures of
    # `dcsim memory --preset llama2-13b --optimizer adamw --zero 3 --mesh data=8 --sequence 4096 --budget 80GiB`.
    link = {
        "s": ["bfloat16~shards=8~preset=llama2-13b~n=state", "bfloat16~shards=8~preset=llama2-13b~seq=4096~n=step"],
        "btrain": "adamw",
    }
    at = open_compare(link)
    assert list(table(at)["step"]) == ["", "sequence 4,096, micro-batch 1, remat none, flash attention"]
    rows = answers(at)
    assert list(rows["devices"]) == ["2 (data=2)", "4 (data=4)"]
    assert list(rows["per_device"]) == ["52,063,457,284", "84,256,618,500"]
    assert list(rows["activations"]) == ["", "58,224,889,856"]
    lines = next(shown(block) for block in at.markdown if "Fits on" in block.value).splitlines()
    assert lines[0].endswith(
        "*Counts the training state only: a step's activations are not counted (give a sequence to add them).*"
    )
    assert "Fits on 4 devices (data=4), 84,256,618,500 bytes (78.47 GiB) each." in lines[1]
    assert "*Of it, the step's activations: 58,224,889,856 bytes (54.23 GiB) a device. Counts the state" in lines[1]
    assert lines[1].endswith(
        " Counts the state and the step's activations; not XLA's temporaries, communication buffers or fragmentation.*"
    )


def test_adding_a_scenario_with_a_step_puts_it_in_the_table_and_the_link():
    at = open_compare({"preset": "gpt2-small"})
    [sequence] = boxes(at, "Sequence")
    sequence.set_value("512")
    widget(at.selectbox, "Remat").set_value("full")
    click(at, "Add the current configuration")
    assert list(table(at)["step"]) == ["sequence 512, micro-batch 1, remat full, flash attention"]
    assert query(at, "s")[0].endswith("~seq=512~remat=full~n=gpt2-small")
    # the edit form holds the step; a sequence past GPT-2's 1,024 positions is refused by name
    boxes(at, "Sequence")[1].set_value("2048")
    click(at, "Save (rename, dtype, format, shards, step, run)")
    assert any("Not saved: the sequence (2,048 tokens) must be at most" in shown(error) for error in at.error)
    boxes(at, "Sequence")[1].set_value("none")
    click(at, "Save (rename, dtype, format, shards, step, run)")
    assert "step" not in table(at) and "seq=" not in query(at, "s")[0]


def test_a_family_without_a_training_forward_is_refused_a_sequence_with_a_clear_message():
    at = open_compare({"preset": "bert-base"})
    boxes(at, "Sequence")[0].set_value("128")
    click(at, "Add the current configuration")
    assert any(
        "Not added: activations are traced for decoder-only language models" in shown(error)
        and "the bert family has no training forward here" in shown(error)
        for error in at.error
    )
    at = open_compare({"s": "float32~preset=bert-base~seq=128~n=b", "btrain": "adam"})
    assert "step" not in table(at)
    assert any("bert family has no training forward here; showing it without a step" in shown(w) for w in at.warning)


def test_a_bad_step_value_in_a_link_is_named_and_its_default_used():
    at = open_compare({"s": "float32~preset=gpt2-small~seq=128~mb=0~remat=most~n=g", "btrain": "adam"})
    warnings = [shown(warning) for warning in at.warning]
    assert any(
        "`mb` must be an integer from 1 to 65,536" in text and "using the default 1" in text for text in warnings
    )
    assert any("`remat` must be one of none, full" in text and "using the default none" in text for text in warnings)
    assert list(table(at)["step"]) == ["sequence 128, micro-batch 1, remat none, flash attention"]
    assert answers(at)["activations"][0] != ""


# --- runs by time and money (issue 45, item 7: Compare compares runs by days and cost) ---------------

TIMED = "bfloat16~shards=8~preset=gpt2-small~seq=1024~device=h100-sxm~tokens=1000000000~price=2.5~n=timed"
TIME_LINK = {
    "s": [
        TIMED,
        "bfloat16~shards=8~preset=gpt2-small~seq=1024~n=plain",
        "bfloat16~shards=8~preset=gpt2-small~device=h100-sxm~tokens=1000000000~n=no step",
        "bfloat16~shards=8~preset=gpt2-small~seq=1024~device=h200~n=no run",
    ]
}


def form_box(at, label):
    """The edit form's box (the new scenario's boxes, with the same labels, come first)."""
    [_, box] = [box for box in at.text_input if box.label == label]
    return box


def times(at):
    """The time-and-money table as the page holds it."""
    return next(frame.value for frame in at.dataframe if "days_text" in frame.value.columns)


def test_the_time_table_times_each_scenario_with_a_device_and_says_why_not_for_the_others():
    at = open_compare(TIME_LINK)
    rows = times(at).set_index("name")
    for column in ("step_text", "tokens_per_second_text", "days_text", "device_hours_text", "cost_text"):
        assert rows.loc["plain", column].startswith("no device")  # never a blank or a zero
        assert rows.loc["no step", column].startswith("no sequence")
    assert rows.loc["no run", "days_text"].startswith("no run") and rows.loc["no run", "cost_text"].startswith("no run")
    assert rows.loc["no run", "step_text"].endswith(" s)")  # timed: a step, with its band

    # The timed row against the engine's own call on the same inputs (the Memory page's), and the
    # run's arithmetic redone by hand: 8 data-parallel replicas x 1 sequence x 1,024 tokens a step.
    from dcsim.memory import activations
    from dcsim.memory.state import compute_memory
    from dcsim.memory.step import Step
    from dcsim.memory.training import Training
    from dcsim.model.count import count_params
    from dcsim.serving import catalog
    from dcsim.sharding.meshes import MeshSpec
    from dcsim.speed import estimate

    config = ModelConfig(preset="gpt2-small", num_shards=8, dtype="bfloat16")
    report, mesh, step = count_params(config), MeshSpec((("data", 8),)), Step(sequence=1024)
    held = compute_memory(report, mesh, "fsdp", (), Training.stage(3, optimizer="adam", param_dtype="bfloat16"))
    traced = activations.cached_trace(config.architecture(), step, "bfloat16", mesh, with_recompute=True)
    engine = estimate.training_time(config, report, held, traced, catalog.get_accelerator("h100-sxm"))
    timed = rows.loc["timed"]
    assert timed["step_seconds"] == engine.step_seconds
    assert timed["step_seconds_low"] <= timed["step_seconds"] <= timed["step_seconds_high"]
    steps = -(-1_000_000_000 // (8 * 1 * 1024))
    assert steps == 122_071 and timed["steps"] == steps
    assert timed["days"] == pytest.approx(steps * engine.step_seconds / 86_400, rel=1e-12)
    assert timed["days_high"] == pytest.approx(steps * engine.step_seconds_high / 86_400, rel=1e-12)
    assert timed["device_hours"] == pytest.approx(timed["days"] * 24 * 8, rel=1e-12)
    assert timed["cost"] == pytest.approx(timed["device_hours"] * 2.5, rel=1e-12)
    assert timed["tokens_per_second"] == pytest.approx(8 * 1024 / engine.step_seconds, rel=1e-12)
    point, band = timed["days_text"].split(" (")
    assert float(point) == pytest.approx(timed["days"], rel=1e-3) and "–" in band
    # the chart: the band as a bar from its low end to its high end, the estimate as a point
    [chart] = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart") if "Run's days" in c.proto.spec]
    band, point = chart["layer"]
    assert band["mark"]["type"] == "bar" and band["encoding"]["x"]["field"] == "days_low"
    assert band["encoding"]["x2"]["field"] == "days_high" and point["encoding"]["x"]["field"] == "days"
    drawn = compare_charts.run_days(times(at)).to_dict()
    [rows_drawn] = drawn["datasets"].values()
    assert [row["scenario"] for row in rows_drawn] == ["timed"]  # only a scenario with days
    assert rows_drawn[0]["days_low"] <= rows_drawn[0]["days"] <= rows_drawn[0]["days_high"]


def test_a_scenario_s_run_round_trips_through_the_link_and_the_edit_form():
    at = open_compare({"s": TIMED})
    assert query(at, "s") == [TIMED]  # the link writes the run as it came
    # the edit form holds the run; change the tokens and the devices a host, save, and the link carries them
    form_box(at, "Run's tokens").set_value("2e9")
    form_box(at, "Devices a host").set_value("4")
    click(at, "Save (rename, dtype, format, shards, step, run)")
    [token] = query(at, "s")
    assert "~device=h100-sxm~dph=4~tokens=2000000000~price=2.5~n=timed" in token
    reopened = open_compare({"s": token})
    assert not reopened.warning
    assert times(reopened).loc[0, "steps"] == -(-2_000_000_000 // 8192)
    # no device: the run leaves the link, and the time section says how to add one
    [_, device] = [box for box in at.selectbox if box.label == "Device (times the step)"]
    device.set_value("none")
    click(at, "Save (rename, dtype, format, shards, step, run)")
    assert "device=" not in query(at, "s")[0]
    assert any("No scenario has a device" in caption.value for caption in at.caption)


def test_a_bad_run_value_is_refused_by_name_in_a_link_and_in_the_form():
    at = open_compare({"s": TIMED.replace("tokens=1000000000", "tokens=-5")})
    assert any(
        "`tokens` must be an integer from 1 to" in shown(w) and "got -5; leaving it out" in shown(w) for w in at.warning
    )
    assert times(at).loc[0, "days_text"].startswith("no run")  # the step is still timed
    form_box(at, "Price").set_value("cheap")
    click(at, "Save (rename, dtype, format, shards, step, run)")
    assert any("Not saved: Price: `price` must be a price a device-hour" in shown(e) for e in at.error)
