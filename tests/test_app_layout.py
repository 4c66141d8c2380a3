"""The Layout page in Streamlit's AppTest: golden layouts, impossible requests, hostile links,
settings that survive page switches, and no exception anywhere."""

import json
from urllib.parse import parse_qs

import pytest
import streamlit as st
from arrays import param_report
from hostile import MD_LINK, SCRIPT
from streamlit.testing.v1 import AppTest

from conftest import metrics, open_app, quick_sample, shown
from dcsim.ui import cache

LAYOUT = "pages/layout.py"
GOLDEN = {"input_dim": "8", "layers": "8"}


def open_link(query: dict[str, str]) -> AppTest:
    """Open ``/layout?<query>`` as a browser does: the first run is already the Layout page."""
    return open_app(query, LAYOUT, editors=False)


def mesh_input(at):
    return at.text_input(key="w.layout.mesh")


def strategy_select(at):
    return at.selectbox(key="w.layout.strategy")


def arrays(at):
    """The per-array table (the last dataframe on the page)."""
    return at.dataframe[-1].value


def downloads(at):
    return {button.label: button for button in at.get("download_button")}


@pytest.mark.parametrize(
    "mesh, strategy, total, per_device, ideal, stored, replication, gap",
    [
        # kernel 8x4 + bias 4 on each device
        ("model=2", "tensor", "72", "36", "36", "72", "1x", "0"),
        ("data=4", "replicated", "72", "72", "18", "288", "4x", "54"),
        # kernel rows 8/4 = 2 (16 values) + bias 2
        ("data=4", "fsdp", "72", "18", "18", "72", "1x", "0"),
        # split over model, copied over data
        ("data=2,model=2", "tensor", "72", "36", "18", "144", "2x", "18"),
    ],
    ids=["model2-tensor", "data4-replicated", "data4-fsdp", "data2-model2-tensor"],
)
def test_golden_layouts_of_dense8_on_input8(mesh, strategy, total, per_device, ideal, stored, replication, gap):
    at = open_link({**GOLDEN, "mesh": mesh, "strategy": strategy})
    values = metrics(at)
    assert values["Total parameters"] == total
    assert values["Values per device"] == per_device
    assert values["Ideal share (total / devices)"] == ideal
    assert values["Total stored values"] == stored
    assert values["Replication factor"] == replication
    assert values["Ratio to the ideal share"] == replication
    assert values["Gap to the ideal share"] == gap
    assert not at.error and not at.warning
    assert any("not copies on disk" in caption.value for caption in at.caption)


def test_the_link_reopens_exactly_and_is_written_back():
    at = open_link({**GOLDEN, "mesh": "data=4", "strategy": "fsdp"})
    assert mesh_input(at).value == "data=4"
    assert strategy_select(at).value == "fsdp"
    assert metrics(at)["Devices"] == "4"
    assert at.query_params["mesh"] == "data=4" and at.query_params["strategy"] == "fsdp"
    assert (at.query_params["input_dim"], at.query_params["layers"]) == ("8", "8")
    table = arrays(at)
    assert list(table["partition_spec"]) == ["P('data',)", "P('data',)"]
    assert list(table["shard_shape"]) == ["2x8", "2"]
    assert list(table["values_per_shard"]) == ["16", "2"]


def test_widgets_change_the_numbers_and_the_url():
    at = open_link(GOLDEN)
    assert at.query_params["mesh"] == "data=2,model=2"  # the default mesh and strategy are in the link too
    mesh_input(at).set_value(" data = 4 ").run()
    assert metrics(at)["Values per device"] == "18"
    assert at.query_params["mesh"] == "data=4"  # written as parse_mesh reads it
    strategy_select(at).set_value("replicated").run()
    assert metrics(at)["Values per device"] == "72"
    assert at.query_params["strategy"] == "replicated"
    assert "rules" not in at.query_params


def test_custom_rules_travel_one_per_line():
    at = open_link({**GOLDEN, "mesh": "data=2,model=2", "strategy": "custom"})
    rules = at.text_area(key="w.layout.rules")
    rules.set_value("*/kernel=data,model\n\n  */bias=None  \n").run()
    assert not at.exception and not at.error
    # kernel 8x8 over data x model: 4x4 = 16; the bias is replicated by its rule: 8
    assert metrics(at)["Values per device"] == "24"
    assert at.query_params["rules"] == "*/kernel=data,model\n*/bias=None"
    reopened = open_link(dict(at.query_params))
    assert metrics(reopened)["Values per device"] == "24"
    assert reopened.text_area(key="w.layout.rules").value == "*/kernel=data,model\n*/bias=None"


def test_an_unmatched_array_is_flagged_as_a_replicated_fallback():
    at = open_link({**GOLDEN, "mesh": "data=2", "strategy": "custom", "rules": "*/kernel=data"})
    assert metrics(at)["Values per device"] == "40"  # kernel 4x8 + the whole bias 8
    table = arrays(at)
    assert list(table["status"]) == ["split", "⚠ replicated (fallback)"]
    assert list(table["note"])[1] == "replicated: no rule matched"
    assert "1 of 2 arrays" in shown(at.warning[0])


def test_fsdp_fallback_rows_are_flagged_and_explained():
    at = open_link({**GOLDEN, "mesh": "data=3", "strategy": "fsdp"})
    assert metrics(at)["Values per device"] == "72"
    assert metrics(at)["Ideal share (total / devices)"] == "24"
    table = arrays(at)
    assert set(table["status"]) == {"⚠ replicated (fallback)"}
    assert "no dimension of 8x8 splits evenly into 3 parts" in table["note"].iloc[0]
    assert "2 of 2 arrays" in shown(at.warning[0])


def test_an_impossible_layout_names_the_parameter_and_flags_every_row():
    at = open_link({"input_dim": "8", "layers": "5", "mesh": "model=2", "strategy": "tensor"})
    error = shown(at.error[0])
    assert "`Dense_0/kernel` (shape 8x5)" in error
    assert "dimension 1 has size 5" in error
    assert "mesh axis `model` (size 2)" in error
    assert "1 more array cannot be placed either (`Dense_0/bias`)" in error
    values = metrics(at)
    assert values["Values per device"] == "n/a"
    assert values["Ideal share (total / devices)"] == "22.5"
    table = arrays(at)
    assert list(table["status"]) == ["✖ cannot be placed"] * 2
    assert "`Dense_0/bias` (shape 5)" in list(table["note"])[1]
    assert len(at.get("vega_lite_chart")) == 2  # the strategies that can lay it out are still shown
    assert "Download the per-array table (CSV)" in downloads(at)
    assert "Download the layout (JSON)" not in downloads(at)


def test_the_reasons_are_written_out_under_the_table_and_status_and_why_come_first():
    at = open_link({**GOLDEN, "mesh": "data=3", "strategy": "fsdp"})
    reasons = next(shown(block) for block in at.markdown if "Why arrays are flagged" in block.value)
    assert "⚠ Replicated (fallback), 1 of 2 arrays (Dense_0/kernel): No dimension of 8x8 splits evenly" in reasons
    table = at.dataframe[-1].proto
    assert list(table.column_order)[:3] == ["path", "status", "note"]  # no scrolling sideways for the why
    columns = json.loads(table.columns)
    assert columns["status"]["width"] >= 180  # "⚠ replicated (fallback)" whole, never "not la…"
    split = open_link({**GOLDEN, "mesh": "data=2", "strategy": "fsdp"})
    assert not any("Why arrays are flagged" in block.value for block in split.markdown)


def test_only_the_arrays_that_cannot_be_placed_are_flagged():
    at = open_link({"input_dim": "8", "layers": "8_5", "mesh": "model=2", "strategy": "tensor"})
    assert "`Dense_1/kernel` (shape 8x5)" in shown(at.error[0])
    table = arrays(at)
    assert list(table["status"]) == ["split", "split", "✖ cannot be placed", "✖ cannot be placed"]
    assert list(table["values_per_shard"]) == ["32", "4", "", ""]


def test_a_request_refused_as_a_whole_shows_every_array_unplaced():
    at = open_link({**GOLDEN, "mesh": "data=4", "strategy": "tensor"})
    assert "has none; add one, e.g. data=4,model=2" in shown(at.error[0])
    assert set(arrays(at)["status"]) == {"✖ not laid out"}
    assert metrics(at)["Ideal share (total / devices)"] == "18"


def test_a_bad_mesh_edit_keeps_the_last_valid_mesh():
    at = open_link({**GOLDEN, "mesh": "data=4", "strategy": "fsdp"})
    mesh_input(at).set_value("data=0").run()
    assert not at.exception
    error = shown(at.error[0])
    assert "mesh axis `data` needs a size that is a whole number" in error
    assert "Showing the last valid mesh: data=4" in error
    assert metrics(at)["Values per device"] == "18"
    assert at.query_params["mesh"] == "data=4"


def test_a_bad_rule_edit_keeps_the_last_valid_rules():
    at = open_link({**GOLDEN, "mesh": "data=2", "strategy": "custom", "rules": "*/kernel=data"})
    at.text_area(key="w.layout.rules").set_value("*/kernel=None,nope").run()
    assert not at.exception
    assert "names mesh axis `nope`" in shown(at.error[0])  # parses, but the engine refuses it
    at.text_area(key="w.layout.rules").set_value("*/kernel").run()
    assert "Showing the last valid rules: */kernel=None,nope" in shown(at.error[0])
    assert at.query_params["rules"] == "*/kernel=None,nope"


HOSTILE = {
    "mesh-10k": {"mesh": "data=4," * 1700},
    "mesh-zero": {"mesh": "data=0"},
    "mesh-1e400": {"mesh": "data=1e400"},
    "mesh-too-many-devices": {"mesh": "a=1024,b=1024,c=2"},
    "mesh-script": {"mesh": f"{SCRIPT}=2"},
    "mesh-md-link": {"mesh": MD_LINK},
    "mesh-nul": {"mesh": "data=\x00"},
    "strategy-regex": {"strategy": "(.*)*z"},
    "strategy-10k": {"strategy": "f" * 10_000},
    "rules-10k": {"strategy": "custom", "rules": "*/kernel=data\n" * 800},
    "rules-hostile-glob": {"strategy": "custom", "rules": "(.*)*z=data"},
    "rules-star-glob": {"strategy": "custom", "rules": "*" * 200 + "[!a]=data"},
    "rules-too-many": {"strategy": "custom", "rules": "\n".join(["*=data"] * 65)},
    "rules-no-spec": {"strategy": "custom", "rules": "*/kernel"},
    "rules-md": {"strategy": "custom", "rules": "[a](javascript:x)=**b**"},
}


@pytest.mark.parametrize(
    "query", quick_sample(HOSTILE, keep=("mesh-1e400", "mesh-script", "rules-hostile-glob", "rules-md"))
)
def test_hostile_settings_in_a_link_never_raise(query):
    at = open_link(query)
    assert not at.exception
    for alert in (*at.warning, *at.error):
        assert "(" not in alert.value.replace("\\(", "")  # every markdown character arrives escaped
        assert "[" not in alert.value.replace("\\[", "")
    assert "Total parameters" in metrics(at)
    assert len(at.query_params.get("mesh", "")) <= 512
    assert len(at.query_params.get("rules", "")) <= 4096


@pytest.mark.parametrize(
    "query, words",
    [
        ({"mesh": "data=0"}, "Link: `mesh`"),
        ({"mesh": "x" * 10_000}, "may be at most 512 characters, got 10,000"),
        ({"strategy": "(.*)*z"}, "strategy must be one of replicated, fsdp, tensor, megatron, custom"),
        ({"strategy": "custom", "rules": "(.*)*z"}, "a rule must be PATTERN=SPEC"),
        ({"strategy": "custom", "rules": "x" * 10_000}, "may be at most 4,096 characters"),
    ],
    ids=["mesh", "mesh-10k", "strategy", "rules", "rules-10k"],
)
def test_a_bad_link_setting_warns_and_falls_back_to_the_default(query, words):
    at = open_link(query)
    assert any(words in shown(warning) for warning in at.warning)
    assert at.query_params["mesh"] == ("data=2,model=2" if "mesh" in query else at.query_params["mesh"])
    if "strategy" in query and query["strategy"] != "custom":
        assert at.query_params["strategy"] == "fsdp"
    if "rules" in query:
        assert at.query_params["rules"] == "*/kernel=data,model\n*/bias=model"


def test_a_glob_that_would_hang_a_regex_runs_at_once():
    rules = "*" * 100 + "a" * 100 + "*=data"
    at = open_link({"input_dim": "8", "layers": "8x200", "mesh": "data=2", "strategy": "custom", "rules": rules})
    assert not at.exception
    assert set(arrays(at)["status"]) == {"⚠ replicated (fallback)"}


def test_switching_pages_keeps_the_settings():
    at = open_link({**GOLDEN, "mesh": "data=4", "strategy": "fsdp"})
    strategy_select(at).set_value("replicated").run()
    at.switch_page("pages/model.py").run()
    assert not at.exception
    assert "mesh" not in at.query_params  # another page's link carries only its own settings
    at.switch_page("pages/shards.py").run()
    at.switch_page(LAYOUT).run()
    assert not at.exception
    assert mesh_input(at).value == "data=4"
    assert strategy_select(at).value == "replicated"
    assert metrics(at)["Values per device"] == "72"
    assert (at.query_params["mesh"], at.query_params["strategy"]) == ("data=4", "replicated")


def test_the_model_page_is_linked():
    at = open_link({**GOLDEN, "mesh": "data=4,model=2", "strategy": "tensor"})
    links = at.get("page_link")
    assert links[0].proto.label == "Edit its hyperparameters"
    assert links[0].proto.page_script_hash


def test_the_memory_page_is_linked_with_this_mesh():
    at = open_link({**GOLDEN, "mesh": "data=4,model=2", "strategy": "tensor"})
    (memory,) = [link for link in at.get("page_link") if "Training memory" in link.proto.label]
    assert memory.proto.page_script_hash
    query = parse_qs(memory.proto.query_string)
    assert query["mesh"] == ["data=4,model=2"] and query["strategy"] == ["tensor"]


def test_downloads_are_offered_and_the_json_only_for_a_layout():
    at = open_link({**GOLDEN, "mesh": "data=2,model=2", "strategy": "tensor"})
    assert {"Download the per-array table (CSV)", "Download the layout (JSON)"} <= set(downloads(at))
    # the files' contents are checked in Chromium (tests/test_browser_layout.py)


def test_charts_compare_strategies_and_device_counts():
    at = open_link({**GOLDEN, "mesh": "data=4", "strategy": "fsdp"})
    specs = [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]
    titles = [spec["title"]["text"] for spec in specs]
    assert titles == [
        "Values per device by strategy (values, log)",
        "Values per device by device count (log-log)",
    ]
    # tensor cannot use a mesh without `model`: said beside the chart
    assert any("The tensor strategy cannot lay this model out" in shown(caption) for caption in at.caption)


# --- an `expert` axis ------------------------------------------------------------------------------


def test_an_expert_axis_on_a_dense_model_is_one_more_data_axis():
    at = open_link({**GOLDEN, "mesh": "data=2,expert=2", "strategy": "fsdp"})
    assert metrics(at)["Values per device"] == "18"  # kernel 2x8 + bias 2: split over all 4 devices
    assert any("This model has no experts" in shown(caption) for caption in at.caption)
    assert "`expert`" in mesh_input(at).proto.help
    plain = open_link({**GOLDEN, "mesh": "data=4", "strategy": "fsdp"})
    assert not any("no experts" in shown(caption) for caption in plain.caption)


def _expert_rows():
    """2 blocks of a dense 16x48 kernel and 8 stacked experts (gate, up 8x16x32; down 8x32x16)."""
    block = {
        "attn/qkv/kernel": (16, 48),
        "moe/experts/gate": (8, 16, 32),
        "moe/experts/up": (8, 16, 32),
        "moe/experts/down": (8, 32, 16),
    }
    return param_report({f"block_{index}/{path}": shape for index in range(2) for path, shape in block.items()})


@pytest.fixture
def moe_model(monkeypatch):
    """The page's model counted as a synthetic MoE model (no MoE family is relied on): the Dense stack
    ``input_dim=7, layers=3``, which no other test opens, stands for it; the caches are emptied after."""
    real = cache.count
    moe = _expert_rows()
    monkeypatch.setattr(cache, "count", lambda config: moe if config.input_dim == 7 else real(config))
    st.cache_data.clear()
    yield {"input_dim": "7", "layers": "3"}
    st.cache_data.clear()


def test_expert_rows_show_what_each_device_holds(moe_model):
    at = open_link({**moe_model, "mesh": "data=2,expert=8", "strategy": "fsdp"})
    assert not at.error
    values = metrics(at)
    # 16 devices. qkv 16x48 over all 16: 16x3 = 48; each expert array 1 expert, its 32 over data: 256;
    # 2 x (48 + 3 x 256) = 1,632, the ideal share (2 x (768 + 3 x 4,096) = 26,112 over 16).
    assert values["Total parameters"] == "26,112"
    assert values["Values per device"] == "1,632"
    assert values["Total stored values"] == "26,112"
    table = arrays(at).set_index("path")
    assert table.loc["block_1/moe/experts/gate", "shard_shape"] == "1x16x16"
    assert table.loc["block_1/moe/experts/down", "partition_spec"] == "P('expert', 'data')"
    assert table.loc["block_0/attn/qkv/kernel", "shard_shape"] == "16x3"
    assert any("6 expert arrays" in shown(caption) for caption in at.caption)
    replicated = open_link({**moe_model, "mesh": "data=2,expert=8", "strategy": "replicated"})
    gate = arrays(replicated).set_index("path").loc["block_0/moe/experts/gate"]
    assert (gate["status"], gate["shard_shape"], gate["replication_factor"]) == ("split", "1x16x32", "2")
    assert "except num_experts (dimension 0) over `expert`" in gate["note"]


def test_experts_the_axis_does_not_divide_are_named_on_the_page(moe_model):
    at = open_link({**moe_model, "mesh": "expert=3", "strategy": "fsdp"})
    error = shown(at.error[0])
    assert "`block_0/moe/experts/gate` (shape 8x16x32)" in error
    assert "num_experts (dimension 0) is 8, which mesh axis `expert` (size 3) does not divide evenly" in error
    assert "an axis `expert` of size 1, 2, 4 or 8 would divide it" in error
    statuses = list(arrays(at)["status"])
    assert statuses.count("✖ cannot be placed") == 6 and statuses.count("split") == 2
