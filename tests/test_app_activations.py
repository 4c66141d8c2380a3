"""The Memory page with a training step: the activations beside the state to the byte of the
engine's trace, "fits" counting both, the stacked bar with activations and headroom, the link
carrying every field, and bad step values named and replaced."""

import json

from conftest import SMALL_LLAMA_LINK as SMALL
from conftest import metrics, open_app
from dcsim import links
from dcsim.memory import activations
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.count import count_params
from dcsim.quantities import units
from dcsim.sharding.meshes import parse_mesh
from dcsim.ui import memory as memory_ui

MEMORY = "pages/memory.py"


def open_link(query):
    return open_app(query, MEMORY, editors=False)


def figures(query, step):
    config = links.decode({key: [value] for key, value in query.items()}).config
    mesh = parse_mesh(query["mesh"])
    state = compute_memory(count_params(config), mesh, "fsdp", (), Training.stage(3))
    traced = activations.trace_activations(config, step, "bfloat16", mesh)
    return state, traced


def test_the_step_is_counted_beside_the_state_to_the_byte():
    query = SMALL | {"mesh": "data=2", "seq": "64", "mb": "2", "remat": "full", "attn": "naive", "devmem": "1GiB"}
    at = open_link(query)
    assert not at.exception
    state, traced = figures(query, activations.Step(sequence=64, micro_batch=2, remat="full", attention="naive"))
    shown = metrics(at)
    assert shown["Activations per device"] == units.bytes_exact(traced.bytes_per_device)
    assert shown["State + activations per device"] == units.bytes_exact(
        state.total_bytes_per_device + traced.bytes_per_device
    )
    assert shown["Of which the loss"] == units.bytes_exact(traced.loss_bytes)
    assert shown["Korthikanti et al.'s formula"] == units.bytes_exact(traced.korthikanti_bytes)
    assert {key: at.query_params[key] for key in ("seq", "mb", "remat", "attn", "cdtype", "sp", "cf")} == {
        "seq": "64",
        "mb": "2",
        "remat": "full",
        "attn": "naive",
        "cdtype": "bfloat16",
        "sp": "off",
        "cf": "none",
    }


def test_fits_flips_when_the_sequence_grows():
    base = SMALL | {"mesh": "data=2", "attn": "naive", "devmem": "8MiB"}
    short = metrics(open_link(base | {"seq": "16"}))["Against the budget (8MiB)"]
    long = metrics(open_link(base | {"seq": "2048"}))["Against the budget (8MiB)"]
    assert short.startswith("Fits") and long.startswith("Over by")


def test_a_new_sequence_or_budget_answers_on_the_states_sweep_already_laid_out(monkeypatch):
    """The sweep lays the state out on every candidate mesh (the slow part); only the answer
    depends on the sequence and the budget, so changing them lays nothing out again."""
    from dcsim.memory import search

    calls = []
    sweep = search.sweep
    monkeypatch.setattr(search, "sweep", lambda *args, **kw: calls.append(args) or sweep(*args, **kw))
    memory_ui._cached_sweep.clear()
    at = open_link(SMALL | {"mesh": "data=2", "seq": "16", "devmem": "8MiB"})
    assert len(calls) == 1
    before = metrics(at)["Against the budget (8MiB)"]
    at.text_input(key=memory_ui.seeded("devmem", memory_ui.DEFAULT_BUDGET, memory_ui.parse_budget)).set_value("16MiB")
    at.run()
    at.text_input(key=memory_ui.seeded("seq", memory_ui.NO_SEQUENCE, memory_ui.parse_sequence)).set_value("2048")
    at.run()
    assert not at.exception and len(calls) == 1
    state, traced = figures(SMALL | {"mesh": "data=2"}, activations.Step(sequence=2048))
    assert metrics(at)["State + activations per device"] == units.bytes_exact(
        state.total_bytes_per_device + traced.bytes_per_device
    )
    assert before.startswith("Fits") and at.query_params["seq"] == "2048" and at.query_params["devmem"] == "16MiB"


def test_a_step_setting_reruns_the_step_and_the_link_not_the_settings_above():
    """A new sequence reruns the page's fragment (the step and every figure) and the frame's link,
    not the mesh, ZeRO and dtype settings above it, whose elements are not sent again; the URL and
    the link to copy carry the new sequence all the same."""
    at = open_link(SMALL | {"mesh": "data=2", "seq": "16", "devmem": "8MiB"})
    budget_key = memory_ui.seeded("devmem", memory_ui.DEFAULT_BUDGET, memory_ui.parse_budget)
    assert at.text_input(key=budget_key).value == "8MiB"
    at.text_input(key=memory_ui.seeded("seq", memory_ui.NO_SEQUENCE, memory_ui.parse_sequence)).set_value("2048")
    at.run()
    assert not at.exception
    assert budget_key not in {box.key for box in at.text_input}  # the settings above were not drawn again
    state, traced = figures(SMALL | {"mesh": "data=2"}, activations.Step(sequence=2048))
    assert metrics(at)["Activations per device"] == units.bytes_exact(traced.bytes_per_device)
    assert metrics(at)["State + activations per device"] == units.bytes_exact(
        state.total_bytes_per_device + traced.bytes_per_device
    )
    assert at.query_params["seq"] == "2048" and at.query_params["devmem"] == "8MiB"
    (share,) = [
        text
        for text in (md.value.replace("\\", "") for md in [*at.sidebar.markdown, *at.sidebar.caption])
        if "seq=" in text
    ]
    assert "seq=2048" in share and "devmem=8MiB" in share


def test_the_stacked_bar_holds_activations_and_headroom():
    at = open_link(SMALL | {"mesh": "data=2", "seq": "32", "devmem": "1GiB"})
    charts = [chart.spec for chart in at.get("vega_lite_chart")]
    text = " ".join(str(spec) for spec in charts)
    assert "Activations" in text and "Headroom to the budget" in text


def test_without_a_sequence_the_page_is_the_states_alone():
    at = open_link(SMALL | {"mesh": "data=2"})
    assert "Activations per device" not in metrics(at) and "Total per device" in metrics(at)
    assert at.query_params["seq"] == "none"


def test_a_bad_step_value_is_named_and_replaced():
    at = open_link(SMALL | {"mesh": "data=2", "seq": "0", "mb": "-1", "remat": "most", "cf": "lots"})
    assert not at.exception
    words = " ".join(alert.value.replace("\\", "") for alert in at.warning)
    for key in ("seq", "mb", "remat", "cf"):
        assert f"Link: `{key}`" in words, words
    assert at.query_params["seq"] == "none" and at.query_params["mb"] == "1" and at.query_params["remat"] == "none"


def test_a_step_the_model_cannot_trace_is_refused_in_words():
    at = open_link({"preset": "bert-base", "mesh": "data=2", "seq": "8"})
    assert not at.exception
    assert any("activations are traced for decoder-only" in error.value.replace("\\", "") for error in at.error)


def test_a_moe_model_offers_the_capacity_factor_and_says_how_it_routes():
    query = {"preset": "mixtral-8x7b", "mesh": "data=2", "seq": "16", "cf": "1.25"} | {
        f"h.{name}": value
        for name, value in {"num_layers": "2", "d_model": "64", "num_heads": "4", "num_kv_heads": "2"}.items()
    }
    at = open_link(query | {"h.expert_ffn_dim": "96", "h.vocab_size": "128"})
    assert at.text_input(key="w.memory.cf").value == "1.25"
    assert any("GShard capacity, factor 1.25" in caption.value.replace("\\", "") for caption in at.caption)
    assert at.query_params["cf"] == "1.25"


def test_activations_against_the_sequence_are_drawn_on_request():
    at = open_link(SMALL | {"mesh": "data=2", "seq": "32", "attn": "naive"})
    at.session_state["memory.sequence_open"] = True
    at.run()
    assert not at.exception
    specs = [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]
    (spec,) = [spec for spec in specs if "Sequence (tokens" in json.dumps(spec)]
    # state + activations against the budget (issue 46): the curves, then the budget's line and its name
    curves, budget, label = spec["layer"]
    assert curves["encoding"]["y"]["scale"]["type"] == "log" and budget["mark"]["type"] == "rule"
    assert label["mark"]["type"] == "text"
    config = links.decode({key: [value] for key, value in SMALL.items()}).config
    rows = memory_ui.sequence_frame(
        config, activations.Step(sequence=32, attention="naive"), "bfloat16", parse_mesh("data=2")
    )
    points = set(zip(rows["policy"], rows["sequence"], strict=True))
    assert points == {(policy, s) for policy in memory_ui.REMATS for s in (8, 16, 32, 64)}
    by = {(policy, s): gib for policy, s, gib in zip(rows["policy"], rows["sequence"], rows["gib"], strict=True)}
    assert by[("full", 64)] < by[("dots", 64)] < by[("none", 64)]


def test_the_recipe_is_one_click_and_no_master_copy_is_said():
    at = open_link(SMALL | {"mesh": "data=2"})
    assert any("No master copy is kept" in caption.value for caption in at.caption)
    at.button(key="memory.recipe").click().run()
    assert at.query_params["param"] == "bfloat16" and at.query_params["master"] == "float32"
    assert not any("No master copy is kept" in caption.value for caption in at.caption)


def test_a_stage_axis_shows_the_stage_that_holds_the_most():
    """On data=2,stage=2 the first stage keeps two micro-batches of block 0's residuals (1F1B), the
    last one of block 1's with those outside the blocks and the loss's; the page shows the stage
    whose device holds the most, state and activations together, and names it."""
    query = SMALL | {"mesh": "data=2,stage=2", "seq": "64", "mb": "2", "devmem": "1GiB"}
    at = open_link(query)
    assert not at.exception
    config = links.decode({key: [value] for key, value in query.items()}).config
    mesh = parse_mesh(query["mesh"])
    state = compute_memory(count_params(config), mesh, "fsdp", (), Training.stage(3)).pipeline.state_bytes
    traced = activations.trace_activations(config, activations.Step(sequence=64, micro_batch=2), "bfloat16", mesh)
    held = (2 * traced.blocks[0].bytes, traced.blocks[1].bytes + traced.outside.bytes + traced.loss_bytes)
    totals = [state[0] + held[0], state[1] + held[1]]
    stage = totals.index(max(totals))
    shown = metrics(at)
    assert shown["Activations per device"] == units.bytes_exact(held[stage])
    assert shown["State + activations per device"] == units.bytes_exact(totals[stage])
    assert any(f"stage {stage} of 2" in caption.value for caption in at.caption)
