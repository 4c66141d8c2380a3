"""The Memory page in Streamlit's AppTest: figures that are the engine's exactly, pickers that change
the numbers and the link, links that reopen exactly, bad link values and edits explained, layout
refusals shown, and XLA's check."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from conftest import metrics, open_app, run_cli, shown
from dcsim import links
from dcsim.memory import search
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.quantities import units
from dcsim.report import memory_charts
from dcsim.sharding.meshes import parse_mesh
from dcsim.ui import layout, memory_view
from dcsim.ui import memory as memory_ui

MEMORY = "pages/memory.py"
DENSE = {"input_dim": "8", "layers": "8"}  # Dense(8) on width 8: kernel 8x8 + bias 8 = 72 parameters
PART_LABELS = {
    "params": "Parameters per device",
    "grads": "Gradients per device",
    "master": "Master copy per device",
    "optimizer": "Optimizer state per device",
}


def open_link(query: dict[str, str]) -> AppTest:
    """Open ``/memory?<query>`` as a browser does: the first run is already the Memory page."""
    return open_app(query, MEMORY, editors=False)


def alerts(at):
    return [shown(alert) for alert in (*at.warning, *at.error, *at.info)]


def model(query: dict[str, str]) -> ModelConfig:
    """The model a link names, as the page decodes it."""
    decoded = links.decode({key: [value] for key, value in query.items()})
    assert not decoded.problems
    return decoded.config


def engine(query: dict[str, str], training: Training, rules=()):
    """``compute_memory`` of the link's model, mesh and strategy under ``training``."""
    report = count_params(model(query))
    return compute_memory(report, parse_mesh(query["mesh"]), query.get("strategy", "fsdp"), rules, training)


def assert_shows(at, memory):
    """The page's figures are ``memory``'s, to the byte."""
    values = metrics(at)
    assert values["Total per device"] == units.bytes_exact(memory.total_bytes_per_device)
    assert values["Ideal share (total state / devices)"] == units.bytes_share(memory.ideal_bytes_per_device)
    assert values["Devices"] == units.count(memory.num_devices)
    for part in memory.training.parts:
        assert values[PART_LABELS[part]] == units.bytes_exact(memory.part_bytes(part))
    assert {label for label in values if label.endswith(" per device")} - {"Total per device"} == {
        PART_LABELS[part] for part in memory.training.parts
    }


# --- the figures are the engine's ------------------------------------------------------------------


def test_golden_figures_of_dense8_by_hand():
    at = open_link({**DENSE, "mesh": "data=4", "strategy": "fsdp", "zero": "3", "optim": "adam"})
    assert not at.exception and not at.error and not at.warning
    values = metrics(at)
    # kernel 2x8 + bias 2 = 18 bfloat16 values a device: 36 bytes; grads alike; Adam's two moments
    # 72 and its int32 step count 4. Once: 144 + 144 + 288 + 4 = 580 bytes over 4 devices: 145.
    assert values["Parameters per device"] == "36 bytes"
    assert values["Gradients per device"] == "36 bytes"
    assert values["Optimizer state per device"] == "76 bytes"
    assert values["Total per device"] == "148 bytes"
    assert values["Ideal share (total state / devices)"] == "145 bytes"
    assert "Master copy per device" not in values
    assert any("most-loaded device holds exactly what every other one does" in c.value for c in at.caption)
    assert any("not a checkpoint size" in c.value and "No activations" in c.value for c in at.caption)


@pytest.mark.parametrize(
    "query, training",
    [
        ({"mesh": "data=4", "zero": "0", "optim": "adam"}, Training.stage(0, optimizer="adam")),
        (
            {"mesh": "data=4", "zero": "1", "optim": "adam", "master": "float32"},
            Training.stage(1, master_dtype="float32"),
        ),
        (
            {"mesh": "data=2,model=2", "strategy": "tensor", "zero": "2", "optim": "lion", "param": "float32"},
            Training.stage(2, optimizer="lion", param_dtype="float32"),
        ),
        (
            {"mesh": "data=2", "parts": "grads,optimizer", "optim": "adafactor", "grad": "float32"},
            Training.sharding(frozenset({"grads", "optimizer"}), optimizer="adafactor", grad_dtype="float32"),
        ),
        (
            {"mesh": "data=3", "zero": "3", "optim": "sgd", "param": "float16"},
            Training.stage(3, optimizer="sgd", param_dtype="float16"),
        ),
    ],
    ids=["zero0", "zero1-master", "tensor-zero2-lion", "parts-adafactor", "fallback-sgd"],
)
def test_figures_equal_the_engine_exactly(query, training):
    query = {**DENSE, **query}
    at = open_link(query)
    assert not at.exception and not at.error
    assert_shows(at, engine(query, training))


def test_a_preset_with_a_master_copy_is_the_engines_to_the_byte():
    query = {"preset": "gpt2-small", "mesh": "data=8", "zero": "3", "optim": "adamw", "master": "float32"}
    at = open_link(query)
    assert not at.exception and not at.error
    memory = engine(query, Training.stage(3, optimizer="adamw", master_dtype="float32"))
    assert_shows(at, memory)
    largest = memory.largest
    assert any(f"Largest array on a device: {largest.path}" in shown(block) for block in at.markdown)


# --- pickers change the numbers and the link; links reopen exactly ----------------------------------


def test_each_picker_changes_the_numbers_and_the_url():
    query = {**DENSE, "mesh": "data=4"}
    at = open_link(query)
    assert {key: at.query_params[key] for key in ("zero", "optim", "param", "grad", "master", "devmem")} == {
        "zero": "3", "optim": "adam", "param": "bfloat16", "grad": "same", "master": "none", "devmem": "80GiB",
    }  # fmt: skip
    # Each picker in turn, with every earlier change kept: (widget, value, its link, Training's fields).
    steps = [
        ("zero", "1", {}),
        ("optim", "lion", {"optimizer": "lion"}),
        ("param", "float32", {"param_dtype": "float32"}),
        ("grad", "float16", {"grad_dtype": "float16"}),
        ("master", "float32", {"master_dtype": "float32"}),
    ]
    fields: dict[str, str] = {}
    before = metrics(at)["Total per device"]
    for key, value, changed in steps:
        at.selectbox(key=f"w.memory.{key}").set_value(value).run()
        assert not at.exception and not at.error
        fields |= changed
        assert_shows(at, engine(query, Training.stage(1, **fields)))
        assert metrics(at)["Total per device"] != before, key
        before = metrics(at)["Total per device"]
        assert at.query_params[key] == value


def test_naming_the_parts_writes_parts_instead_of_zero():
    query = {**DENSE, "mesh": "data=4"}
    at = open_link(query)
    at.selectbox(key="w.memory.zero").set_value("parts").run()
    at.multiselect(key="w.memory.parts").set_value(["params", "optimizer"]).run()
    assert not at.exception
    assert at.query_params["parts"] == "params,optimizer" and "zero" not in at.query_params
    assert_shows(at, engine(query, Training.sharding(frozenset({"params", "optimizer"}))))
    at.multiselect(key="w.memory.parts").set_value([]).run()
    assert at.query_params["parts"] == "none"
    assert_shows(at, engine(query, Training.sharding(frozenset())))


def test_the_mesh_strategy_and_budget_change_the_numbers_and_the_url():
    at = open_link({**DENSE, "mesh": "data=4"})
    at.text_input(key="w.memory.mesh").set_value(" data = 2 ").run()
    assert at.query_params["mesh"] == "data=2"
    assert metrics(at)["Devices"] == "2"
    at.selectbox(key="w.memory.strategy").set_value("replicated").run()
    assert at.query_params["strategy"] == "replicated"
    assert_shows(at, engine({**DENSE, "mesh": "data=2", "strategy": "replicated"}, Training.stage(3)))
    at.text_input(key="w.memory.devmem").set_value("200 B").run()
    assert at.query_params["devmem"] == "200 B"
    # replicated: everything whole, 144 + 144 + 292 = 580 bytes a device
    assert metrics(at)["Against the budget (200 B)"] == "Over by 380 bytes"


def test_a_link_reopens_exactly_what_is_shown():
    at = open_link({**DENSE, "mesh": "data=2,model=2", "strategy": "custom", "rules": "*/kernel=data,model"})
    at.selectbox(key="w.memory.zero").set_value("2").run()
    at.selectbox(key="w.memory.optim").set_value("adafactor").run()
    at.selectbox(key="w.memory.master").set_value("float32").run()
    at.text_input(key="w.memory.devmem").set_value("1 KiB").run()
    link = dict(at.query_params)
    assert link["rules"] == "*/kernel=data,model" and link["devmem"] == "1 KiB"
    reopened = open_link(link)
    assert not reopened.warning and not reopened.error
    assert dict(reopened.query_params) == link
    assert metrics(reopened) == metrics(at)
    for key in ("zero", "optim", "param", "grad", "master", "strategy"):
        assert reopened.selectbox(key=f"w.memory.{key}").value == at.selectbox(key=f"w.memory.{key}").value
    assert reopened.text_area(key="w.memory.rules").value == "*/kernel=data,model"


def test_switching_pages_keeps_the_settings_and_the_layout_pages_mesh_carries_over():
    at = open_app({**DENSE, "mesh": "data=4", "strategy": "replicated"}, "pages/layout.py", editors=False)
    at.switch_page(MEMORY).run()
    assert not at.exception
    assert at.text_input(key="w.memory.mesh").value == "data=4"  # the Layout page's mesh and strategy
    assert at.selectbox(key="w.memory.strategy").value == "replicated"
    at.selectbox(key="w.memory.zero").set_value("parts").run()
    at.multiselect(key="w.memory.parts").set_value(["grads"]).run()
    at.selectbox(key="w.memory.optim").set_value("momentum").run()
    shown_before = metrics(at)
    at.switch_page("pages/model.py").run()
    assert "parts" not in at.query_params and "optim" not in at.query_params
    at.switch_page(MEMORY).run()
    assert not at.exception and not at.warning
    assert metrics(at) == shown_before
    assert at.query_params["parts"] == "grads" and at.query_params["optim"] == "momentum"


# --- bad input: a message naming the rule, never a traceback ----------------------------------------


@pytest.mark.parametrize(
    "query, words, key, used",
    [
        ({"zero": "5"}, "the ZeRO stage must be 0, 1, 2 or 3", "zero", "3"),
        ({"parts": "params,nope"}, "unknown part 'nope' to shard", "zero", "3"),
        ({"zero": "1", "parts": "grads"}, "Link: `parts` is ignored: the link also gives `zero`", "zero", "1"),
        ({"optim": "adamx"}, "unknown optimizer 'adamx'; optimizers: sgd, momentum", "optim", "adam"),
        ({"param": "int4"}, "the param dtype must be one of", "param", "bfloat16"),
        ({"grad": "int4"}, "or same (the params' dtype)", "grad", "same"),
        ({"master": "fp32"}, "or none (no master copy)", "master", "none"),
        ({"devmem": "80"}, "the budget needs a unit", "devmem", "80GiB"),
        ({"devmem": "x" * 100}, "`devmem` may be at most 64 characters", "devmem", "80GiB"),
        ({"mesh": "data=0"}, "Link: `mesh`", "mesh", "data=2,model=2"),
        (
            {"strategy": "(.*)*z"},
            "strategy must be one of replicated, fsdp, tensor, megatron, custom",
            "strategy",
            "fsdp",
        ),
    ],
    ids=[
        "zero",
        "parts",
        "zero-and-parts",
        "optim",
        "param",
        "grad",
        "master",
        "devmem-no-unit",
        "devmem-long",
        "mesh",
        "strategy",
    ],
)
def test_a_bad_link_value_is_named_and_replaced_by_its_default(query, words, key, used):
    at = open_link({**DENSE, **query})
    assert not at.exception
    warnings = [shown(warning) for warning in at.warning]
    assert any(words in warning and warning.startswith("Link:") for warning in warnings), warnings
    assert at.query_params[key] == used
    assert "Total per device" in metrics(at)


def test_a_budget_typed_without_a_unit_is_explained_and_the_last_one_kept():
    at = open_link({**DENSE, "mesh": "data=4", "devmem": "96 GB"})
    at.text_input(key="w.memory.devmem").set_value("80").run()
    assert not at.exception
    error = shown(at.error[0])
    assert "Budget: the budget needs a unit" in error and "e.g. 80GiB; got '80'" in error
    assert "Showing the last valid budget: 96 GB" in error
    assert at.query_params["devmem"] == "96 GB"
    assert "Against the budget (96 GB)" in metrics(at)


def test_a_tensor_strategy_without_a_model_axis_shows_the_layout_refusal():
    at = open_link({**DENSE, "mesh": "data=4", "strategy": "tensor"})
    assert not at.exception
    error = shown(at.error[0])
    assert error.startswith("This layout is impossible:")
    assert "has none; add one, e.g. data=4,model=2" in error
    assert "Total per device" not in metrics(at)
    assert at.query_params["strategy"] == "tensor"  # what is shown, refusal included, is what the link reopens
    zero0 = open_link({**DENSE, "mesh": "data=4", "strategy": "tensor", "zero": "0"})
    assert "has none; add one" in shown(zero0.error[0])  # nothing split: still refused, by the same rule


def test_a_bad_mesh_edit_keeps_the_last_valid_mesh():
    at = open_link({**DENSE, "mesh": "data=4"})
    at.text_input(key="w.memory.mesh").set_value("data=0").run()
    assert not at.exception
    assert "Showing the last valid mesh: data=4" in shown(at.error[0])
    assert metrics(at)["Devices"] == "4" and at.query_params["mesh"] == "data=4"


def test_past_the_verify_bound_the_button_is_off_and_the_bound_named():
    at = open_link({**DENSE, "mesh": "data=4096"})
    assert not at.exception
    button = at.button(key="memory.verify")
    assert button.disabled
    info = next(text for text in alerts(at) if text.startswith("XLA's check is not offered"))
    assert "at most 2,048 virtual CPU devices" in info and "got a mesh of 4,096" in info


# --- charts, tables, the sweep and the download -----------------------------------------------------


def test_the_charts_tables_and_download():
    query = {**DENSE, "mesh": "data=4", "zero": "1", "devmem": "200B"}
    at = open_link(query)
    specs = [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]
    assert [spec["title"]["text"] for spec in specs] == [
        "What one device holds, by ZeRO stage",
        "Per device as the mesh grows (log-log)",
    ]
    assert specs[0]["title"]["subtitle"][-1] == "Chosen: ▶ ZeRO-1"
    assert "Red diamond: this mesh (4 devices)" in specs[1]["title"]["subtitle"]
    memory = engine(query, Training.stage(1))
    sentences = next(shown(block) for block in at.markdown if "By the real layout" in block.value)
    # ZeRO-1 keeps params and grads whole: 144 + 144 bytes on every device, past 200 on any mesh. The
    # state once is 580 bytes: 3 devices by the ideal share, the smallest searched data=4.
    assert "needs at least 3 devices of 200B; the smallest mesh searched that reaches it is data=4 (4 devices)" in (
        sentences
    )
    assert "**By the real layout**: no mesh searched, up to 4,096 devices, fits 200B a device" in sentences
    by_part = at.dataframe[0].value
    assert list(by_part["title"]) == ["Parameters", "Gradients", "Optimizer state"]
    assert list(by_part["bytes_per_device"]) == [units.bytes_exact(memory.part_bytes(p)) for p in memory.training.parts]
    rows = at.dataframe[-1].value
    assert len(rows) == memory.num_arrays
    at.selectbox(key="memory.part_filter").set_value("optimizer").run()
    assert set(at.dataframe[-1].value["part"]) == {"optimizer"}
    assert at.get("download_button")[0].label == "Download every array (CSV)"


def downloaded(monkeypatch) -> dict[str, str]:
    """Every file the page offers for download, by its button's label, as handed to
    ``st.download_button`` (AppTest keeps a button's file only in its mock runtime)."""
    import streamlit as st

    files: dict[str, str] = {}
    offer = st.download_button

    def download_button(label, data, *args, **kwargs):
        files[label] = data
        return offer(label, data, *args, **kwargs)

    monkeypatch.setattr(st, "download_button", download_button)
    return files


def test_the_pages_csv_is_the_command_lines(monkeypatch, capsys):
    files = downloaded(monkeypatch)
    at = open_link({**DENSE, "mesh": "data=4", "zero": "1", "optim": "adafactor", "master": "float32"})
    assert "Download every array (CSV)" in [button.label for button in at.get("download_button")]
    page_csv = files["Download every array (CSV)"]
    argv = ("memory", "--input-dim", "8", "--features", "8", "--mesh", "data=4", "--zero", "1")
    code, cli_csv, err = run_cli(
        capsys, *argv, "--optimizer", "adafactor", "--master-dtype", "float32", "--format", "csv"
    )
    assert code == 0, err
    assert page_csv == cli_csv
    lines = cli_csv.splitlines()
    assert lines[0] == "path,part,shape,dtype,partition_spec,shard_shape,bytes_per_device,note"
    # ZeRO-1 keeps the 8x8 bfloat16 kernel whole (128 bytes) and splits its float32 master copy four ways.
    assert lines[1].startswith("Dense_0/kernel,params,8x8,bfloat16,P(),8x8,128,whole on every device")
    assert "Dense_0/kernel,master,8x8,float32,\"P('data',)\",2x8,64," in cli_csv
    assert (
        len(lines)
        == 1
        + engine(
            {**DENSE, "mesh": "data=4"}, Training.stage(1, optimizer="adafactor", master_dtype="float32")
        ).num_arrays
    )


def test_every_mesh_searched_is_listed_on_request():
    at = open_link({**DENSE, "mesh": "data=4", "strategy": "custom", "rules": "*/kernel=data"})
    at.session_state["memory.candidates_open"] = True
    at.run()
    table = at.dataframe[0].value
    assert list(table["mesh"])[:3] == ["data=1", "data=2", "data=4"]
    assert set(table["fits"]) <= {"yes", "no"}


def test_custom_rules_the_mesh_cannot_follow_are_refused_by_name():
    at = open_link({**DENSE, "mesh": "data=2", "strategy": "custom", "rules": layout.DEFAULT_RULES})
    assert not at.exception
    assert shown(at.error[0]) == (
        "This layout is impossible: rule '*/kernel=data,model' names mesh axis `model`, which the mesh data=2 "
        "does not have (its axes: data)"
    )


def test_the_stage_bars_hold_each_stage_part_by_part_against_the_budget():
    query = {**DENSE, "mesh": "data=4"}
    config = model(query)
    setup = memory_ui.Setup(
        mesh=parse_mesh("data=4"), strategy="fsdp", rules=(), training=Training.stage(2), budget=300, budget_text="300B"
    )
    stages = memory_view.stage_frame(config, setup)
    assert list(dict.fromkeys(stages["setup"])) == ["ZeRO-0", "ZeRO-1", "▶ ZeRO-2", "ZeRO-3"]
    for stage in range(4):
        rows = stages[stages["setup"].str.endswith(f"ZeRO-{stage}")]
        held = engine(query, Training.stage(stage))
        assert list(rows["part"]) == list(held.training.parts)
        assert list(rows["bytes_text"]) == [units.bytes_exact(held.part_bytes(part)) for part in held.training.parts]
        assert set(rows["total_text"]) == {units.bytes_exact(held.total_bytes_per_device)}
    spec = memory_charts.stage_bars(stages, 300, "300B").to_dict()
    rule = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "rule")
    budget = spec["datasets"][rule["data"]["name"]][0]
    assert budget["gib"] == 300 / 2**30 and budget["label"] == "Budget 300B"


def test_the_sweep_draws_every_mesh_searched_and_the_budget():
    query = {**DENSE, "mesh": "data=4"}
    answer = search.fit(count_params(model(query)), parse_mesh("data=4"), "fsdp", (), Training.stage(3), 200)
    sweep = memory_charts.sweep_frame(answer, parse_mesh("data=4"))
    real = sweep[sweep["series"] == memory_charts.REAL_SERIES]
    assert list(real["devices"]) == [c.mesh.num_devices for c in answer.candidates]
    assert list(real["bytes_text"]) == [units.bytes_exact(c.total_bytes_per_device) for c in answer.candidates]
    assert list(real["current"]) == [c.mesh.text == "data=4" for c in answer.candidates]
    spec = memory_charts.device_sweep(sweep, 200, "200B", 4).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["line", "point", "rule", "point"]  # the two series, the budget, this mesh
    assert spec["layer"][0]["encoding"]["y"]["scale"]["type"] == "log"  # points and lines: no baseline needed


# --- XLA's own figure --------------------------------------------------------------------------------


@pytest.mark.slow  # starts a child process that compiles
def test_verify_with_xla_shows_the_match():
    query = {**DENSE, "mesh": "data=4", "zero": "3", "master": "float32"}
    at = open_link(query)
    at.button(key="memory.verify").click().run()
    assert not at.exception and not at.error
    memory = engine(query, Training.stage(3, master_dtype="float32"))
    values = metrics(at)
    expected = memory.total_bytes_per_device + 8 * memory.num_arrays
    assert values["XLA: output bytes per device"] == units.bytes_exact(expected)
    assert values["Expected by dcsim"] == units.bytes_exact(expected)
    assert values["Match"] == "yes, to the byte"
    at.selectbox(key="w.memory.optim").set_value("sgd").run()
    assert "Match" not in metrics(at)  # another setup: not checked yet
    at.selectbox(key="w.memory.optim").set_value("adam").run()
    assert metrics(at)["Match"] == "yes, to the byte"  # kept for this setup in the session


def test_a_budget_the_whole_parts_alone_pass_says_why_no_mesh_fits():
    # ZeRO-0 keeps everything whole: bfloat16 params 144 + grads 144 + adam's moments 288 + a 4-byte count.
    at = open_link({**DENSE, "mesh": "data=4", "zero": "0", "devmem": "500B"})
    text = " ".join(block.value for block in at.markdown)
    assert "alone take 580 bytes a device, over the budget of 500 bytes on any number of devices" in text


def test_the_heap_is_settled_once_after_jax_has_loaded(monkeypatch):
    """``frame.settle_heap`` freezes the objects alive after the first run that loaded JAX, once
    a process, so that a full garbage collection no longer walks the imported modules."""
    import sys

    from dcsim.ui import frame

    calls = []
    monkeypatch.setattr(frame.gc, "freeze", lambda: calls.append(1))
    monkeypatch.setattr(frame, "_heap_settled", False)
    with monkeypatch.context() as without_jax:
        without_jax.delitem(sys.modules, "jax")
        frame.settle_heap()
    assert calls == []
    frame.settle_heap()
    frame.settle_heap()
    assert calls == [1]


def test_an_old_megatron_link_below_zero_3_opens_with_the_new_composition_and_says_what_changed():
    """Issue 45: a link from before (megatron, ZeRO-1) still opens; its figures now split every part
    over `model`, and a caption says what changed. By hand, llama2-7b's 6,738,415,616 bfloat16 params
    (13,476,831,232 bytes) over model=2: 6,738,415,616 bytes, plus half of its 65 RMSNorm scales
    (65 x 4,096 = 266,240 values, 532,480 bytes) kept whole: 6,738,681,856 bytes a device; earlier
    dcsim held all 13,476,831,232. ZeRO-3 holds the same (megatron splits over `model` only) and
    says nothing."""
    base = {"preset": "llama2-7b", "mesh": "data=2,model=2", "strategy": "megatron"}
    at = open_app(base | {"zero": "1"}, MEMORY)
    captions = " ".join(caption.value.replace("\\", "") for caption in at.caption)
    assert "Since this release the megatron strategy's splits over the model-parallel axes" in captions
    assert "Earlier dcsim kept them whole on every device" in captions
    shown = [metric.value for metric in at.metric]
    assert "6,738,681,856 bytes (6.28 GiB)" in shown
    zero3 = open_app(base | {"zero": "3"}, MEMORY)
    assert "Since this release" not in " ".join(caption.value for caption in zero3.caption)
    assert "6,738,681,856 bytes (6.28 GiB)" in [metric.value for metric in zero3.metric]


# --- the answer first (issue 46) -------------------------------------------------------------------


def test_the_page_opens_with_the_verdict_for_its_mesh():
    # ZeRO-1 on data=4: params 144 + grads 144 whole, Adam's moments 288 / 4 + a 4-byte count whole:
    # 364 bytes a device, over 200. ZeRO-3 splits all of it: 148 bytes (the golden figures above).
    at = open_link({**DENSE, "mesh": "data=4", "zero": "1", "devmem": "200B"})
    first = shown(at.error[0])
    assert first.startswith("Mesh data=4 does not fit: 364 bytes a device (the training state; no step's activations")
    assert first.endswith("Fits with ZeRO-3 (148 bytes).")
    order = [node.type for node in _in_order(at.main)]
    assert order.index("error") < order.index("subheader")  # the verdict comes before the settings
    at = open_link({**DENSE, "mesh": "data=4", "zero": "3", "devmem": "200B"})
    assert shown(at.success[0]) == (
        "Mesh data=4 fits: 148 bytes a device (the training state; no step's activations counted) of a budget of "
        "200 bytes, 52 bytes left; not counted: XLA's temporaries, communication buffers and fragmentation."
    )


def _in_order(node):
    """Every element under ``node``, in the order the page draws them."""
    children = getattr(node, "children", None)
    if children is None:
        yield node
        return
    for key in sorted(children):
        yield from _in_order(children[key])


GPT2_PAST_ITS_POSITIONS = {
    "preset": "gpt2-small",
    "mesh": "data=8",
    "optim": "adamw",
    "master": "float32",
    "seq": "8192",
    "remat": "full",
}  # issue 46's Llama 3 8B link, its model switched to GPT-2 small (1,024 positions)


def test_a_sequence_the_model_refuses_gives_no_verdict_and_is_offered_back_at_its_limit():
    at = open_link(GPT2_PAST_ITS_POSITIONS)
    said = " ".join(alerts(at))
    assert "fits" not in said.lower()
    assert "No verdict for data=8: the step cannot be counted (the sequence (8,192 tokens) must be at most the " in said
    assert metrics(at)["Against the budget (80GiB)"] == "No verdict"
    assert "blames" not in said and not any("ZeRO" in line for line in said.split(". ") if "search" in line)
    button = next(b for b in at.button if b.label == "Use 1,024 tokens, this model's positions")
    button.click().run()
    assert not at.exception
    assert at.session_state["w.memory.seq"] == "1024"
    verdict = shown((at.success or at.error)[0])
    assert verdict.startswith("Mesh data=8 fits: ") or verdict.startswith("Mesh data=8 does not fit: ")
    assert not any(b.label.startswith("Use 1,024 tokens") for b in at.button)


@pytest.mark.slow  # traces Llama 3 8B's step under every remat policy and tensor size
def test_a_search_no_data_axis_can_satisfy_says_why_and_what_would():
    # issue 46 at 72 GiB: the activations (79.39 GiB a device) alone pass it on any number of devices
    at = open_link(
        {
            "preset": "llama3-8b",
            "mesh": "data=8",
            "optim": "adamw",
            "master": "float32",
            "seq": "8192",
            "remat": "none",
            "devmem": "72GiB",
        }
    )
    text = " ".join(block.value for block in at.markdown).replace("\\", "")
    assert "the step's activations (79.39 GiB a device) do not shrink with data parallelism" in text
    assert "On data=8 it fits with remat dots, dots-no-batch or minimal (40.31 GiB) or full (21.31 GiB)" in text
    assert "higher ZeRO stage" not in text
