"""Comparisons: scenarios, the side-by-side table, JSON and the one link that carries them."""

import dataclasses
import json
from pathlib import Path
from urllib.parse import parse_qs

import hypothesis.strategies as hs
import pytest
from hypothesis import HealthCheck, given, settings

from conftest import examples
from dcsim import compare, hf, links
from dcsim.compare import runs, tables
from dcsim.links import comparisons
from dcsim.memory import activations, budget
from dcsim.model.config import DenseLayer, ModelConfig, Origin
from dcsim.model.count import count_params

HF = Path(__file__).parent / "data" / "hf"

SEED = ModelConfig()  # 20 values


def scenario(name, config=SEED, dtype="float32"):
    return compare.Scenario(name=name, config=config, dtype=dtype)


def query(text):
    return parse_qs(text, keep_blank_values=True)


def reopen(comparison):
    return comparisons.decode(query(comparisons.query_string(comparisons.encode(comparison))))


names = hs.text(
    hs.characters(codec="utf-8", exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), min_size=1, max_size=64
).filter(lambda text: text.strip() == text and text.strip() and text.isprintable())
dense = hs.builds(
    ModelConfig,
    input_dim=hs.integers(1, 2**20),
    layers=hs.lists(
        hs.builds(DenseLayer, features=hs.integers(1, 2**20), use_bias=hs.booleans()), min_size=1, max_size=40
    ).map(tuple),
    batch_size=hs.integers(1, 2**20),
    seed=hs.integers(0, 2**32 - 1),
    num_shards=hs.integers(1, 2**20),
)
presets = hs.builds(
    ModelConfig,
    preset=hs.sampled_from(["gpt2-small", "llama2-7b", "resnet50", "bert-base"]),
    num_shards=hs.integers(1, 4096),
)
preset_overrides = hs.sampled_from(
    [
        ModelConfig(preset="gpt2-small", overrides={"num_layers": 6, "tied_embeddings": False}),
        ModelConfig(preset="resnet50", overrides={"stage_blocks": (3, 4, 23, 3)}),
        ModelConfig(preset="llama2-70b", overrides={"num_layers": 40}, num_shards=64),
        # models opened from a config.json, under their own names, one of them edited since
        hf.read_config_file((HF / "mistral-7b.json").read_bytes())[0],
        dataclasses.replace(
            hf.read_config_file((HF / "gemma-2b.json").read_bytes())[0],
            overrides={"num_layers": 9},
            origin=Origin(name="google/gemma-2b", model_type="gemma", family="decoder", edited=True),
        ),
    ]
)
budgets = hs.builds(
    budget.Budget,
    amount=hs.integers(1, 10**18),
    unit=hs.sampled_from(budget.BUDGET_UNITS),
    training=hs.sampled_from([None, "adam", "adafactor"]),
    strategy=hs.sampled_from(budget.BUDGET_STRATEGIES),
)


@hs.composite
def any_comparison(draw):
    count = draw(hs.integers(0, compare.MAX_SCENARIOS))
    chosen = draw(hs.lists(names, min_size=count, max_size=count, unique=True))
    items = tuple(
        compare.Scenario(
            name=name,
            config=draw(hs.one_of(dense, presets, preset_overrides)),
            dtype=draw(hs.sampled_from(["float32", "bfloat16", "float16", "int8", "float64"])),
        )
        for name in chosen
    )
    return compare.Comparison(scenarios=items, baseline=draw(hs.integers(1, max(1, count))), budget=draw(budgets))


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(any_comparison())
def test_every_comparison_survives_the_link_and_the_json(comparison):
    decoded = reopen(comparison)
    assert decoded.problems == ()
    assert decoded.comparison == comparison
    assert compare.Comparison.from_json(comparison.to_json()) == comparison


def test_the_table_is_exact_and_differs_from_the_baseline():
    comparison = compare.Comparison(
        scenarios=(
            scenario("seed"),
            scenario("wider", ModelConfig(layers=(DenseLayer(features=8),), num_shards=3), "bfloat16"),
        ),
        baseline=1,
    )
    reports = [count_params(s.config) for s in comparison.scenarios]
    frame = tables.comparison_frame(comparison, reports)
    wider = frame.iloc[1]
    assert list(frame["total_params"]) == [20, 40]  # 4x8 + 8
    assert wider["ideal_share_text"] == "13.333333333333334 (40/3)"
    assert wider["raw_bytes"] == 80 and wider["raw_float32_bytes"] == 160 and wider["raw_int8_bytes"] == 40
    assert wider["params_vs_baseline"] == 20 and wider["params_ratio_text"] == "2"
    assert wider["raw_bytes_vs_baseline"] == 0 and wider["raw_bytes_ratio_text"] == "1"
    assert wider["ideal_share_vs_baseline_text"] == "3.3333333333333335 (10/3)"
    assert list(frame["is_baseline"]) == [True, False]
    assert frame["total_params"].dtype == "int64"

    other = tables.comparison_frame(compare.Comparison(scenarios=comparison.scenarios, baseline=2), reports)
    assert list(other["params_vs_baseline"]) == [-20, 0]
    assert other.iloc[0]["params_ratio_text"] == "0.5 (1/2)"


def test_an_empty_comparison_has_an_empty_table_with_its_columns():
    frame = tables.comparison_frame(compare.Comparison(), [])
    assert len(frame) == 0 and "params_vs_baseline" in frame.columns


def test_the_sweep_has_every_power_of_two_and_each_scenarios_own_count():
    comparison = compare.Comparison(scenarios=(scenario("a"), scenario("b", ModelConfig(num_shards=3))))
    sweep = tables.sweep_frame(comparison, [count_params(SEED)] * 2)
    b = sweep[sweep["name"] == "b"]
    assert 3 in set(b["num_shards"]) and 4096 in set(b["num_shards"]) and len(b) == 14
    assert b[b["num_shards"] == 3]["ideal_share_text"].item() == "6.666666666666667 (20/3)"


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 65, "at most 64 characters, got 65"),
        ("x" * 10_000, "at most 64 characters, got 10,000"),
        ("tab\there", "printable"),
        ("right\u202eleft", "printable"),
        ("bell\x07", "printable"),
    ],
)
def test_bad_names_are_refused(name, match):
    with pytest.raises(ValueError, match=match):
        compare.check_name(name)


def test_names_are_stripped_and_may_be_any_script_or_markup_which_is_only_ever_text():
    for name in ("  grand modèle ", "<script>alert(1)</script>", "[x](javascript:alert(1))", "模型 70B"):
        assert scenario(name).name == name.strip()


def test_a_comparison_refuses_repeated_names_too_many_scenarios_and_a_missing_baseline():
    with pytest.raises(ValueError, match="appears twice"):
        compare.Comparison(scenarios=(scenario("a"), scenario("a")))
    with pytest.raises(ValueError, match="at most 8 scenarios, got 9"):
        compare.Comparison(scenarios=tuple(scenario(str(n)) for n in range(9)))
    with pytest.raises(ValueError, match="`baseline` must be an integer from 1 to 2, got 3"):
        compare.Comparison(scenarios=(scenario("a"), scenario("b")), baseline=3)


def test_unique_names_count_up():
    assert compare.unique_name("a", ["a", "a (2)"]) == "a (3)"
    assert len(compare.unique_name("x" * 64, ["x" * 64])) == 64


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.update(extra=1), "unknown comparison field 'extra'; valid fields: format"),
        (lambda d: d.update(format="dcsim.config"), "`format` must be 'dcsim.comparison'"),
        (lambda d: d.update(version=3), "version 3, newer than this dcsim"),
        (lambda d: d["scenarios"][0].update(colour="red"), "scenario 1: unknown scenario field 'colour'"),
        (lambda d: d["scenarios"][0].update(num_shards=0), "scenario 1: `num_shards` must be an integer"),
        (lambda d: d["scenarios"][0].update(dtype="float8"), "scenario 1: a scenario's `dtype` must be one of"),
        (lambda d: d["scenarios"][0].pop("name"), "scenario 1: needs a `name`"),
        (lambda d: d["budget"].update(unit="GiB"), "`budget`: the budget unit must be one of"),
        (lambda d: d["budget"].update(amount=0), "`budget` must be an integer from 1"),
        (lambda d: d.update(scenarios=[d["scenarios"][0]] * 9), "at most 8 scenarios, got 9"),
        (lambda d: d.update(baseline=5), "`baseline` must be an integer from 1 to 1, got 5"),
    ],
)
def test_bad_json_names_the_field(change, match):
    data = compare.Comparison(scenarios=(scenario("a"),)).to_dict()
    change(data)
    with pytest.raises((TypeError, ValueError), match=match):
        compare.Comparison.from_json(json.dumps(data))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"format": "dcsim.comparison", "format": "x"}', "repeats the field 'format'"),
        ('{"format": "dcsim.comparison", "baseline": NaN}', "NaN is not a number JSON allows"),
        ('{"format": "dcsim.comparison", "baseline": 1e400}', "`baseline` must be an integer"),
        ("[" * 100_000, "at most 262,144 bytes|nested too deeply"),
        ("{", "not valid JSON"),
        (b"\xff", "must be UTF-8"),
        ("x" * 300_000, "at most 262,144 bytes, got 300,000"),
    ],
)
def test_hostile_json_is_refused_with_a_message(text, match):
    with pytest.raises(ValueError, match=match):
        compare.Comparison.from_json(text)


TWO = compare.Comparison(
    scenarios=(scenario("base"), scenario("big", ModelConfig(preset="gpt2-small", num_shards=8), "bfloat16"))
)
GOOD = comparisons.scenario_token(TWO.scenarios[1])


@pytest.mark.parametrize(
    ("params", "names", "problem"),
    [
        (
            {"s": ["float32~shards=1e400~n=a"]},
            ["a"],
            "`shards` must be an integer from 1 to 1,048,576, got '1e400'; using the default 2",
        ),
        ({"s": ["float32~shards=nan~n=a"]}, ["a"], "got 'nan'"),
        ({"s": ["float32~shards=2~shards=3~n=a"]}, ["a"], "`shards` appears 2 times"),
        ({"s": ["float8~n=a"]}, ["a"], "`dtype` must be one of float32"),
        ({"s": ["float32~n=" + "x" * 10_000]}, [], "more than the 5,120 one may have; dropped"),
        ({"s": ["float32~n=" + "x" * 100]}, ["Scenario 1"], "at most 64 characters, got 100; calling it Scenario 1"),
        ({"s": ["float32~n=bell\x07"]}, ["Scenario 1"], "printable"),
        ({"s": ["float32~n=   "]}, ["Scenario 1"], "must not be empty"),
        ({"s": ["float32~colour=red~n=a"]}, ["a"], "'colour=red' is not a configuration field"),
        ({"s": ["garbage"]}, [], "is not DTYPE~KEY=VALUE~…~n=NAME"),
        ({"s": ["float32~preset=gpt9~n=a"]}, ["a"], "showing the Dense stack instead"),
        ({"s": ["float32~preset=gpt2-small~h.num_layers=0~n=a"]}, ["a"], "`h.num_layers`"),
        ({"s": ["float32~layers=" + "4_" * 3000 + "~n=a"]}, [], "dropped"),
        ({"s": [GOOD] * 9}, ["big", *(f"big ({n})" for n in range(2, 9))], "keeping the first 8"),
        ({"s": [GOOD, GOOD]}, ["big", "big (2)"], "the name 'big' is taken; calling it 'big (2)'"),
        ({"s": [GOOD], "base": ["2"]}, ["big"], "`base` must be an integer from 1 to 1, got 2"),
        ({"s": [GOOD], "base": ["-1"]}, ["big"], "`base` must be a whole number written in digits"),
        ({"s": [GOOD], "base": ["1", "1"]}, ["big"], "`base` appears 2 times"),
        ({"s": [GOOD], "budget": ["1e400"]}, ["big"], "`budget` must be a whole number written in digits, got '1e400'"),
        ({"s": [GOOD], "budget": ["9" * 40]}, ["big"], "`budget` may be at most 32 characters, got 40"),
        ({"s": [GOOD], "budget": ["0"]}, ["big"], "`budget` must be an integer from 1"),
        ({"s": [GOOD], "bunit": ["GiB"]}, ["big"], "`bunit` must be one of bytes, values"),
        ({"s": [GOOD], "btrain": ["rmsprop"]}, ["big"], "`btrain` must be none or an optimizer"),
        ({"s": [GOOD], "bstrat": ["custom"]}, ["big"], "`bstrat` must be one of fsdp, replicated, tensor"),
        ({"cv": ["3"], "s": [GOOD]}, [], "made by a newer dcsim (comparison link version 3"),
        ({"cv": ["x"], "s": [GOOD]}, ["big"], "reading it as version 2"),
        ({"cv": ["9" * 400], "s": [GOOD]}, ["big"], "at most 32 characters"),
    ],
    ids=lambda value: None,
)
def test_hostile_links_keep_what_is_good_and_say_what_is_not(params, names, problem):
    decoded = comparisons.decode(params)
    assert list(decoded.comparison.names) == names
    assert any(problem in text for text in decoded.problems), decoded.problems


def test_a_bad_field_in_one_scenario_keeps_the_others_and_its_good_fields():
    decoded = comparisons.decode({"s": [GOOD, "int8~shards=0~layers=8_2~n=<img src=x onerror=alert(1)>"]})
    second = decoded.comparison.scenarios[1]
    assert decoded.comparison.scenarios[0] == TWO.scenarios[1]
    assert second.name == "<img src=x onerror=alert(1)>" and second.dtype == "int8"
    assert [layer.features for layer in second.config.layers] == [8, 2] and second.num_shards == 2
    assert len(decoded.problems) == 1 and "scenario 2 (<img src=x onerror=alert(1)>): `shards`" in decoded.problems[0]


def test_decoding_never_raises_on_junk():
    junk = ["", "~", "~~~", "n=", "float32~n=", "float32~=~n=a", "float32~h.=1~n=a", "\x00~n=a", "float32~v=9~n=a"]
    for token in junk:
        comparisons.decode({"s": [token], "base": [token], "budget": [token], "cv": [token]})


def test_a_link_is_compact_and_the_token_reuses_the_configuration_link():
    assert GOOD == "bfloat16~shards=8~preset=gpt2-small~n=big"
    text = comparisons.query_string(comparisons.encode(TWO))
    assert text.startswith("cv=2&s=float32~shards%3D2~n%3Dbase&s=bfloat16")
    assert comparisons.fits_in_link(text)
    dtype, *fields = GOOD.split("~")[:-1]
    params = {key: [value] for key, value in (field.split("=", 1) for field in fields)} | {"dtype": [dtype]}
    assert links.decode(params).config == TWO.scenarios[1].config


def test_three_deep_distinct_stacks_do_not_fit_in_a_link_but_do_in_json():
    layers = tuple(DenseLayer(features=1_000_000 + n) for n in range(256))
    big = compare.Comparison(
        scenarios=tuple(scenario(f"deep {n}", ModelConfig(input_dim=8, layers=layers)) for n in range(3))
    )
    assert not comparisons.fits_in_link(comparisons.query_string(comparisons.encode(big)))
    assert compare.Comparison.from_json(big.to_json()) == big


def test_the_budget_tables_say_how_many_larger_counts_fit_and_show_the_counts_bought():
    comparison = compare.Comparison(
        scenarios=(compare.Scenario(name="seed", config=ModelConfig()),), budget=budget.Budget(amount=10, unit="values")
    )
    answers = [budget.answer(budget.demand(count_params(ModelConfig()), "float32"), comparison.budget, up_to=64)]
    table = tables.budget_frame(comparison, answers)
    row = table.iloc[0]
    assert (row["devices"], row["larger_searched"], row["larger_that_fit"], row["larger_that_fail"]) == (2, 62, 1, 61)
    assert row["summary"] == budget.summary(answers[0], comparison.budget)
    held = tables.held_frame(comparison, answers)
    assert list(held["devices"]) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    two, three = held.iloc[1], held.iloc[2]
    assert (two["mesh"], two["held_text"], two["verdict"], two["is_answer"]) == (
        "data=2",
        "10 values",
        "Fits the budget",
        True,
    )
    assert two["note"] == "the fewest devices that fit; the ideal share's shard count"  # 20 / 10 = 2 as well
    assert (three["verdict"], three["on_trend"], three["is_answer"]) == ("Over the budget", False, False)


def test_a_scenario_naming_a_hub_model_alone_says_a_comparison_does_not_fetch():
    decoded = comparisons.decode({"s": ["float32~hf=mistralai/Mixtral-8x7B-v0.1~n=Mixtral"]})
    (scenario,) = decoded.comparison.scenarios
    assert scenario.config.is_dense
    assert any(
        "names the Hub model 'mistralai/Mixtral-8x7B-v0.1' without its hyperparameters" in problem
        and "does not fetch" in problem
        for problem in decoded.problems
    )


# --- a scenario's training step (issue 29) ------------------------------------------------------------

steps = hs.builds(
    activations.Step,
    sequence=hs.integers(1, 1024),
    micro_batch=hs.integers(1, activations.MAX_MICRO_BATCH),
    remat=hs.sampled_from(tuple(activations.POLICIES)),
    attention=hs.sampled_from(activations.ATTENTION_KINDS),
)


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.one_of(hs.none(), steps), min_size=1, max_size=4), budgets)
def test_scenarios_with_steps_survive_the_link_and_the_json(chosen, spec):
    scenarios = tuple(
        compare.Scenario(name=f"s{n}", config=ModelConfig(preset="gpt2-small"), dtype="bfloat16", step=step)
        for n, step in enumerate(chosen)
    )
    comparison = compare.Comparison(scenarios=scenarios, budget=spec)
    decoded = reopen(comparison)
    assert decoded.problems == ()
    assert decoded.comparison == comparison
    assert compare.Comparison.from_json(comparison.to_json()) == comparison


def test_a_scenario_without_a_step_writes_the_json_and_the_link_it_always_did():
    plain = compare.Scenario(name="g", config=ModelConfig(preset="gpt2-small"))
    assert set(plain.to_dict()) == {"name", "dtype", "batch_size", "seed", "num_shards", "preset", "overrides"}
    assert comparisons.scenario_token(plain) == "float32~shards=2~preset=gpt2-small~n=g"
    frame = tables.comparison_frame(compare.Comparison(scenarios=(plain,)), [count_params(plain.config)])
    assert "step" not in frame and "sequence" not in frame
    stepped = dataclasses.replace(plain, step=activations.Step(sequence=512, attention="naive"))
    assert comparisons.scenario_token(stepped) == "float32~shards=2~preset=gpt2-small~seq=512~attn=naive~n=g"
    assert stepped.to_dict() == {
        **plain.to_dict(),
        "sequence": 512,
        "micro_batch": 1,
        "remat": "none",
        "attention": "naive",
    }


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            {"sequence": 0},
            r"scenario 1: `sequence` must be an integer from 1 to 1,048,576 \(tokens a sequence\), got 0",
        ),
        ({"sequence": "4096"}, r"scenario 1: `sequence` must be an integer"),
        ({"sequence": 128, "micro_batch": 0}, r"`micro_batch` must be an integer from 1 to 65,536"),
        ({"sequence": 128, "remat": "most"}, r"`remat` must be one of none, full, dots, dots-no-batch, minimal"),
        ({"sequence": 128, "attention": "ring"}, r"`attention` must be one of naive, flash, got 'ring'"),
        ({"micro_batch": 2}, r"`micro_batch`: for a training step's activations; give `sequence` too"),
        ({"sequence": 2048}, r"the sequence \(2,048 tokens\) must be at most the model's positions"),
        ({"preset": "bert-base", "sequence": 128}, r"the bert family has no training forward here"),
        ({"preset": None, "sequence": 128}, r"the Dense stack has no training forward here"),
    ],
)
def test_a_bad_step_in_json_names_the_field(change, match):
    scenario = {"name": "g", "preset": "gpt2-small", **change}
    if scenario["preset"] is None:
        del scenario["preset"]
    document = {"format": "dcsim.comparison", "version": 2, "scenarios": [scenario]}
    with pytest.raises((TypeError, ValueError), match=match):
        compare.Comparison.from_dict(document)


def test_a_training_budget_counts_the_steps_activations_as_the_memory_command_traces_them():
    config = ModelConfig(preset="gpt2-small")
    step = activations.Step(sequence=256, micro_batch=2, remat="full")
    scenario = compare.Scenario(name="g", config=config, dtype="bfloat16", step=step)
    report = count_params(config)
    spec = budget.Budget(amount=2 * 10**9, training="adam")
    found = tables.scenario_answer(scenario, report, spec, up_to=16)
    traced = activations.trace_activations(config, step, "bfloat16").bytes_per_device
    state = tables.scenario_answer(dataclasses.replace(scenario, step=None), report, spec, up_to=16)
    assert found.activations == (traced,) * 16  # fsdp over data=N: the same replica's activations on every N
    assert found.held == tuple(held + traced for held in state.held)
    assert found.need == state.need and found.ideal_shards == state.ideal_shards  # the ideal share: the state's
    assert found.shown_activations == traced
    assert tables.budget_counts(scenario, spec).startswith("Counts the state and the step's activations; not XLA's")
    # a budget that cannot count them says so, and counts what it always did
    for other, said in (
        (budget.Budget(amount=10**9), "Counts the parameters only"),
        (budget.Budget(amount=10**9, unit="values", training="adam"), "not counted in a budget of values"),
    ):
        answer = tables.scenario_answer(scenario, report, other, up_to=8)
        assert not answer.counts_activations and answer.activations == ()
        assert said in tables.budget_counts(scenario, other)


def test_under_tensor_parallelism_a_mesh_the_heads_do_not_divide_cannot_hold_the_step():
    config = ModelConfig(preset="gpt2-small")  # 12 heads
    scenario = compare.Scenario(name="g", config=config, dtype="bfloat16", step=activations.Step(sequence=128))
    spec = budget.Budget(training="adam", strategy="tensor")
    found = tables.scenario_answer(scenario, count_params(config), spec, up_to=8)
    assert found.activations[0] > found.activations[1] > found.activations[3]  # model=1, 2, 4 split the heads
    assert found.held[7] is None and found.activations[7] is None  # 8 does not divide 12 heads
    assert "(and, for the step's activations, the heads and widths, as Megatron does)" in budget.summary(found, spec)


# --- a scenario's run on an accelerator (issue 45, item 7) ------------------------------------------

timings = hs.builds(
    compare.Timing,
    device=hs.sampled_from(["h100-sxm", "a100-80gb", "tpu-v5p"]),
    devices_per_host=hs.integers(1, 2**16),
    tokens=hs.one_of(hs.none(), hs.integers(1, 10**18)),
    price_per_device_hour=hs.one_of(hs.none(), hs.floats(0, 1e6, allow_nan=False, allow_infinity=False)),
    micro_batches=hs.integers(1, 2**20),
)


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.one_of(hs.none(), timings), min_size=1, max_size=4))
def test_scenarios_with_runs_survive_the_link_and_the_json(chosen):
    scenarios = tuple(
        compare.Scenario(
            name=f"s{n}",
            config=ModelConfig(preset="gpt2-small"),
            dtype="bfloat16",
            step=activations.Step(sequence=256),
            time=time,
        )
        for n, time in enumerate(chosen)
    )
    comparison = compare.Comparison(scenarios=scenarios)
    decoded = reopen(comparison)
    assert decoded.problems == ()
    assert decoded.comparison == comparison
    assert compare.Comparison.from_json(comparison.to_json()) == comparison


def test_a_run_uses_the_timing_requests_link_keys_and_the_memory_commands_json_keys():
    from dcsim.requests.timing import TIMING

    for key, link in compare.TIME_FIELDS.items():
        if key != "device":  # the Serving page's key; the others are the timing request's
            assert TIMING[link].json == f"time.{key}"
    plain = compare.Scenario(name="g", config=ModelConfig(preset="gpt2-small"), step=activations.Step(sequence=512))
    run = dataclasses.replace(plain, time=compare.Timing(device="h100-sxm", tokens=2 * 10**12))
    assert comparisons.scenario_token(run) == comparisons.scenario_token(plain).replace(
        "~n=g", "~device=h100-sxm~tokens=2000000000000~n=g"
    )
    assert run.to_dict() == {
        **plain.to_dict(),
        "time": {
            "device": "h100-sxm",
            "devices_per_host": 8,
            "tokens": 2_000_000_000_000,
            "price_per_device_hour": None,
            "micro_batches": 1,
        },
    }


@pytest.mark.parametrize(
    ("time", "match"),
    [
        ({"tokens": 10**9}, r"scenario 1: `time` needs a `device` \(h100-sxm, "),
        ({"device": "h100"}, r"scenario 1: `time`: unknown device 'h100'; devices: h100-sxm"),
        ({"device": "h100-sxm", "tokens": 0}, r"`tokens` must be an integer from 1 to 1,000,000,000,000,000,000"),
        ({"device": "h100-sxm", "price_per_device_hour": -1}, r"`price` must be a price a device-hour, a number at"),
        ({"device": "h100-sxm", "devices_per_host": True}, r"`dph` must be an integer"),
        (
            {"device": "h100-sxm", "sched": "interleaved"},
            r"unknown time field 'sched'; valid fields: device, devices_per_host",
        ),
        ("h100-sxm", r'scenario 1: `time` must be an object like \{"device": "h100-sxm"'),
    ],
)
def test_a_bad_run_in_json_names_the_field(time, match):
    document = {
        "format": "dcsim.comparison",
        "version": 2,
        "scenarios": [{"name": "g", "preset": "gpt2-small", "time": time}],
    }
    with pytest.raises((TypeError, ValueError), match=match):
        compare.Comparison.from_dict(document)


def test_a_run_in_a_link_without_a_device_or_with_a_bad_value_is_named():
    decoded = comparisons.decode({"s": ["float32~preset=gpt2-small~seq=128~tokens=5~n=g"]})
    assert decoded.problems == ("Link: scenario 1 (g): `tokens` without a `device`; showing it without a time.",)
    assert decoded.comparison.scenarios[0].time is None
    decoded = comparisons.decode({"s": ["float32~preset=gpt2-small~seq=128~device=h200~dph=0~mbs=2~n=g"]})
    assert decoded.problems == (
        "Link: scenario 1 (g): `dph` must be an integer from 1 to 65,536, got '0'; using the default 8.",
    )
    assert decoded.comparison.scenarios[0].time == compare.Timing(device="h200", micro_batches=2)


def test_the_time_table_redoes_the_run_by_hand_and_says_why_a_scenario_is_not_timed():
    """The table's run from the engine's step, checked with arithmetic: steps = ceil(tokens / tokens a
    step), days = steps x seconds / 86,400, device-hours = days x 24 x devices, cost = device-hours x price."""
    config = ModelConfig(preset="gpt2-small", num_shards=4, overrides={"num_layers": 2})
    step = activations.Step(sequence=512, micro_batch=2)
    run = compare.Timing(device="a100-80gb", tokens=10**8, price_per_device_hour=3.0, micro_batches=2)
    timed = compare.Scenario(name="timed", config=config, dtype="bfloat16", step=step, time=run)
    comparison = compare.Comparison(
        scenarios=(
            timed,
            compare.Scenario(name="plain", config=config, dtype="bfloat16", step=step),
            compare.Scenario(name="stepless", config=config, dtype="bfloat16", time=run),
        )
    )
    report = count_params(config)
    times = [runs.scenario_time(s, report, comparison.budget) for s in comparison.scenarios]
    frame = runs.time_frame(comparison, times).set_index("name")
    row = frame.loc["timed"]
    per_step = 4 * 2 * 512 * 2  # replicas (data=4) x micro-batch x sequence x micro-batches
    assert row["global_tokens"] == per_step and row["num_devices"] == 4
    steps = -(-(10**8) // per_step)
    assert row["steps"] == steps == 12_208
    for end in ("", "_low", "_high"):
        seconds = steps * row[f"step_seconds{end}"]
        assert row[f"days{end}"] == pytest.approx(seconds / 86_400, rel=1e-12)
        assert row[f"device_hours{end}"] == pytest.approx(row[f"days{end}"] * 24 * 4, rel=1e-12)
        assert row[f"cost{end}"] == pytest.approx(row[f"device_hours{end}"] * 3.0, rel=1e-12)
    assert row["step_seconds_low"] <= row["step_seconds"] <= row["step_seconds_high"]
    assert row["tokens_per_second"] == pytest.approx(per_step / row["step_seconds"], rel=1e-12)
    assert row["note"].startswith("Estimate; leaves out ")
    assert set(frame.loc["plain", ["step_text", "days_text", "cost_text"]]) == {runs.NO_DEVICE_TEXT}
    assert set(frame.loc["stepless", ["step_text", "days_text", "cost_text"]]) == {runs.NO_SEQUENCE_TEXT}
    assert frame.loc["plain"][["steps", "days", "cost"]].isna().all()  # missing, never a zero


def test_a_layout_the_strategy_cannot_make_says_so_in_the_cell():
    config = ModelConfig(preset="gpt2-small", num_shards=5, overrides={"num_layers": 2})
    scenario = compare.Scenario(
        name="t",
        config=config,
        step=activations.Step(sequence=128),
        time=compare.Timing(device="h100-sxm"),
    )
    tensor = budget.Budget(strategy="tensor")  # 12 heads do not split over model=5
    said = runs.scenario_time(scenario, count_params(config), tensor)
    assert isinstance(said, str) and said.startswith("cannot be timed: ")


def test_the_run_docs_compare_md_quotes_is_the_tables():
    """docs/compare.md's Llama 2 7B run, as the page's table writes it (the figures are the engine's
    estimates: a change to the engine shows here first)."""
    config = ModelConfig(preset="llama2-7b", num_shards=64)
    run = compare.Timing(device="h100-sxm", tokens=2 * 10**12, price_per_device_hour=2.0)
    scenario = compare.Scenario(
        name="7b", config=config, dtype="bfloat16", step=activations.Step(sequence=4096), time=run
    )
    comparison = compare.Comparison(scenarios=(scenario,))
    [row] = runs.time_frame(
        comparison, [runs.scenario_time(scenario, count_params(config), comparison.budget)]
    ).to_dict(orient="records")
    docs = " ".join((Path(__file__).parent.parent / "docs" / "compare.md").read_text().split())
    days, dh, cost = (row[key].split(" (") for key in ("days_text", "device_hours_text", "cost_text"))
    quoted = (
        f"{row['step_text'].split(' (')[0]} a step ({row['step_text'].split(' (')[1]}, "
        f"{row['tokens_per_second_text']} tokens a second, {days[0]} days ({days[1]}, {dh[0]} device-hours ({dh[1]} "
        f"and a cost of {cost[0]} ({cost[1]}"
    )
    assert quoted in docs


def test_a_run_whose_setup_overflows_its_device_says_so_beside_its_time():
    """Llama 2 13B's state on one A100 80GB (85.9 GB): its 13.0 billion parameters, gradients and two
    Adam moments in bfloat16 are 8 bytes a parameter, 104 GB: timed, and the same cell says it cannot run."""
    config = ModelConfig(preset="llama2-13b", num_shards=1)
    run = compare.Timing(device="a100-80gb")
    scenario = compare.Scenario(
        name="7b", config=config, dtype="bfloat16", step=activations.Step(sequence=1024), time=run
    )
    comparison = compare.Comparison(scenarios=(scenario,))
    timed = runs.scenario_time(scenario, count_params(config), comparison.budget)
    assert not isinstance(timed, str) and timed.over_bytes is not None and timed.over_bytes > 0
    [row] = runs.time_frame(comparison, [timed]).to_dict(orient="records")
    assert row["fits_text"].startswith("no: over the NVIDIA A100 80GB's memory by ")
    assert row["fits_text"].endswith(" GiB, so the time is of a step that cannot run as set")
    assert row["step_text"].endswith(" s)")  # still timed
