"""Every page in Streamlit's AppTest: it runs, shows its numbers and explains bad input."""

import json

import pytest
from hostile import MD_LINK, SCRIPT

from conftest import metrics, open_app, open_views, quick_sample, shown, uploader
from dcsim.model.config import DenseLayer, ModelConfig

PAGES = ["pages/model.py", "pages/shards.py", "pages/bytes.py"]
EDITOR = "w.layers.0"


@pytest.fixture
def app():
    return open_app()


def number_input(at, words):
    return next(widget for widget in at.number_input if words in widget.label)


def all_text(at):
    return " ".join(shown(element) for kind in ("caption", "markdown", "warning", "error") for element in at.get(kind))


def test_landing_page_answers_the_seed_example_without_a_click(app):
    values = metrics(app)
    assert values["Total parameters"] == "20"
    assert values["Ideal share per shard (2 shards)"] == "10"
    assert values["Raw float32 payload"] == "80 bytes"
    assert any("not the checkpoint size" in caption.value for caption in app.caption)
    assert number_input(app, "shards").label == "Number of checkpoint shards"


def test_the_url_carries_the_configuration_from_the_first_run(app):
    assert dict(app.query_params) == {
        "v": "2",
        "input_dim": "4",
        "layers": "4",
        "batch": "1",
        "seed": "0",
        "shards": "2",
        "dtype": "float32",
    }


def test_changing_shards_shows_the_exact_share(app):
    number_input(app, "shards").set_value(3).run()
    share = next(metric for metric in app.metric if metric.label.startswith("Ideal share"))
    assert (share.label, share.value) == ("Ideal share per shard (3 shards)", "6.666…")
    assert "6.666666666666667 (20/3)" in share.proto.help
    assert app.query_params["shards"] == "3"


def test_input_dimension_batch_and_seed(app):
    number_input(app, "Input dimension").set_value(8).run()
    assert metrics(app)["Total parameters"] == "36"
    number_input(app, "Batch").set_value(64).run()
    number_input(app, "Seed").set_value(7).run()
    assert metrics(app)["Total parameters"] == "36"
    assert (app.query_params["batch"], app.query_params["seed"]) == ("64", "7")


def test_editing_adding_and_removing_layer_rows(app):
    app.session_state[EDITOR] = {
        "edited_rows": {0: {"features": 8, "use_bias": False}},
        "added_rows": [{"features": 2}, {"features": 3, "use_bias": False}],
        "deleted_rows": [],
    }
    app.run()
    assert not app.exception
    # 4*8 (no bias) + 8*2+2 + 2*3 (no bias) = 32 + 18 + 6
    assert metrics(app)["Total parameters"] == "56"
    assert app.query_params["layers"] == "8n_2_3n"
    app.session_state[EDITOR] = {"edited_rows": {}, "added_rows": [{"features": 2}], "deleted_rows": [0]}
    app.run()
    assert metrics(app)["Total parameters"] == "10"  # 4*2 + 2


def test_edits_that_do_not_fit_the_table_are_reset_not_raised(app):
    app.session_state[EDITOR] = {"edited_rows": {}, "added_rows": [], "deleted_rows": [5, 9]}
    app.run()
    assert not app.exception
    assert "reset" in shown(app.warning[0])
    assert metrics(app)["Total parameters"] == "20"


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        ({"edited_rows": {0: {"features": 0}}, "added_rows": [], "deleted_rows": []}, "layer 1: `features` must be"),
        ({"edited_rows": {}, "added_rows": [{"use_bias": True}], "deleted_rows": []}, "layer 2 has no width"),
        ({"edited_rows": {}, "added_rows": [], "deleted_rows": [0]}, "at least one Dense layer"),
        ({"edited_rows": {0: {"features": 2**21}}, "added_rows": [], "deleted_rows": []}, "1 to 1,048,576"),
    ],
    ids=["zero-width", "empty-row", "no-rows", "too-wide"],
)
def test_a_bad_edit_explains_the_rule_and_keeps_the_last_valid_answer(app, delta, message):
    app.session_state[EDITOR] = delta
    app.run()
    assert not app.exception
    assert message in shown(app.error[0])
    assert "last valid configuration" in shown(app.error[0])
    assert metrics(app)["Total parameters"] == "20"
    assert app.query_params["layers"] == "4"


def test_reset_returns_to_the_seed_example():
    at = open_app({"layers": "512x2_10", "input_dim": "784", "shards": "8"})
    assert metrics(at)["Total parameters"] == "669,706"
    next(button for button in at.button if "Reset" in button.label).click().run()
    assert metrics(at)["Total parameters"] == "20"
    assert number_input(at, "Input dimension").value == 4


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_a_link_exactly(page):
    at = open_app({"v": "1", "input_dim": "784", "layers": "512x2_10", "shards": "3"}, page)
    values = metrics(at)
    assert values["Total parameters"] == "669,706"
    assert not at.warning
    assert at.query_params["layers"] == "512x2_10"


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize(
    "query",
    quick_sample(
        {
            "1e400": {"shards": "1e400"},
            "negative-nan": {"shards": "-5", "input_dim": "nan"},
            "20k-chars": {"layers": "x" * 20_000},
            "too-many-layers": {"layers": "4x9999"},
            "seed-2^64": {"seed": "18446744073709551616"},
            "newer-version": {"v": "99"},
            "script": {"input_dim": SCRIPT},
            "md-link": {"layers": MD_LINK},
        },
        keep=("1e400", "20k-chars", "script"),
    ),
)
def test_hostile_links_warn_and_fall_back_on_every_page(page, query):
    at = open_app(query, page)
    assert at.warning, "a rejected field must be explained"
    assert metrics(at)["Total parameters"] == "20"
    for warning in at.warning:
        assert "(" not in warning.value.replace("\\(", "")  # every markdown character arrives escaped
    # The URL is rewritten to what is shown: the hostile value is gone.
    assert at.query_params["shards"] == "2"


def test_a_bad_field_keeps_the_good_ones():
    at = open_app({"input_dim": "784", "layers": "512x2_10", "shards": "1e400"})
    assert metrics(at)["Total parameters"] == "669,706"
    assert "got '1e400'" in shown(at.warning[0])


def test_switching_pages_keeps_the_configuration(app):
    number_input(app, "shards").set_value(5).run()
    for page in PAGES[1:]:
        app.switch_page(page).run()
        assert not app.exception
        assert app.query_params["shards"] == "5"
    app.switch_page("pages/shards.py").run()
    assert metrics(app)["Ideal share per shard (5 shards)"] == "4"
    number_input(app, "shards").set_value(8).run()
    app.switch_page("pages/model.py").run()
    assert number_input(app, "shards").value == 8
    assert metrics(app)["Ideal share per shard (8 shards)"] == "2.5"


def test_shards_page_sweeps_to_4096_with_exact_shares():
    at = open_app({"shards": "3"}, "pages/shards.py")
    assert metrics(at)["Ideal share per shard (3 shards)"] == "6.666…"
    sweep = at.dataframe[0].value
    assert list(sweep["num_shards"])[:4] == ["1", "2", "3", "4"]
    assert list(sweep["num_shards"])[-1] == "4,096"
    assert "6.666666666666667 (20/3)" in list(sweep["ideal_share_text"])
    assert at.get("vega_lite_chart")
    assert "Why an average is not a layout" in [header.value for header in at.subheader]
    assert "7 values" in all_text(at)


def test_bytes_page_labels_every_view_not_the_checkpoint_size():
    at = open_app({"input_dim": "1024", "layers": "1024"}, "pages/bytes.py")
    values = metrics(at)
    assert values["Raw float32 payload"] == "4,198,400 bytes (4.00 MiB)"
    assert values["Raw float32 payload, decimal units"] == "4.20 MB"
    captions = [caption.value for caption in at.caption if "not the checkpoint size" in caption.value.lower()]
    assert len(captions) >= 3
    assert len(at.get("vega_lite_chart")) == 2
    dtypes = at.dataframe[0].value
    assert list(dtypes["exact"])[:2] == ["4,198,400", "2,099,200"]
    assert list(dtypes["binary"])[:2] == ["4.00 MiB", "2.00 MiB"]
    assert "What a real checkpoint adds or removes" in [header.value for header in at.subheader]


def test_downloads_are_offered_on_every_page():
    for page in PAGES:
        at = open_app(page=page)
        if page == "pages/model.py":  # its per-layer table is drawn when its view is opened
            open_views(at, "model.layers_open")
        labels = [button.label for button in at.get("download_button")]
        assert "Download configuration (JSON)" in labels
        assert any("CSV" in label for label in labels)


def test_uploading_a_configuration_restores_it(app):
    config = ModelConfig(input_dim=784, layers=(DenseLayer(features=512),) * 2 + (DenseLayer(features=10),))
    uploader(app).set_value(("model.json", config.to_json().encode(), "application/json"))
    app.run()
    assert not app.exception
    assert metrics(app)["Total parameters"] == "669,706"
    assert number_input(app, "Input dimension").value == 784
    assert app.query_params["layers"] == "512x2_10"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (json.dumps({"layers": [{"features": 0}]}).encode(), "`features` must be"),
        (json.dumps({"shards": 2}).encode(), "unknown configuration field 'shards'"),
        (json.dumps({"version": 99}).encode(), "newer than this dcsim reads"),
        (b" " * (70 * 1024), "at most 65,536 bytes"),
        (b"\xff\xfe", "UTF-8"),
    ],
    ids=["junk", "zero-width", "unknown-key", "newer", "oversized", "not-utf8"],
)
def test_a_bad_upload_is_refused_with_the_reason(app, content, message):
    uploader(app).set_value(("bad.json", content, "application/json"))
    app.run()
    assert not app.exception
    error = shown(app.sidebar.get("error")[0])
    assert "This file was not opened" in error
    assert message in error
    assert metrics(app)["Total parameters"] == "20"


def test_a_link_of_the_older_version_still_opens():
    at = open_app({"v": "1", "input_dim": "784", "layers": "512x2_10", "shards": "3"})
    assert not at.warning
    assert metrics(at)["Total parameters"] == "669,706"
    assert at.query_params["v"] == "2"


@pytest.mark.parametrize(
    ("preset", "total", "non_embedding"),
    [("gpt2-small", "124,439,808", "85,056,000"), ("llama2-70b", "68,976,648,192", "68,452,360,192")],
)
def test_a_preset_link_shows_the_reference_count_and_the_non_embedding_count(preset, total, non_embedding):
    at = open_app({"preset": preset})
    assert not at.dataframe  # the views below the form are drawn when opened
    open_views(at, "model.groups_open")
    values = metrics(at)
    assert (values["Total parameters"], values["Non-embedding parameters"]) == (total, non_embedding)
    assert "matches the reference count" in all_text(at)
    assert "Pythia" in next(metric for metric in at.metric if metric.label.startswith("Non-embedding")).proto.help
    groups = at.dataframe[0].value
    assert list(groups["group"]) == ["embeddings", "blocks", "norms", "head"][: len(groups)]


def test_choosing_a_preset_and_changing_a_hyperparameter(app):
    app.selectbox[0].set_value("gpt2-small").run()
    assert metrics(app)["Total parameters"] == "124,439,808"
    assert app.query_params["preset"] == "gpt2-small"
    number_input(app, "num_layers").set_value(6).run()
    # six blocks of 7,087,872 fewer: 124,439,808 - 6 * 7,087,872
    assert metrics(app)["Total parameters"] == "81,912,576"
    assert app.query_params["h.num_layers"] == "6"
    assert "with num_layers=6" in all_text(app)
    app.selectbox[0].set_value("dense").run()
    assert metrics(app)["Total parameters"] == "20"
    assert "preset" not in app.query_params


def test_a_bad_hyperparameter_explains_the_rule_and_keeps_the_last_answer():
    at = open_app({"preset": "llama2-70b"})
    number_input(at, "num_kv_heads").set_value(3).run()
    assert "must divide `num_heads` (64)" in shown(at.error[0])
    assert metrics(at)["Total parameters"] == "68,976,648,192"


def test_resnet_batchnorm_statistics_are_shown_apart():
    at = open_views(open_app({"preset": "resnet50"}), "model.groups_open")
    assert metrics(at)["Total parameters"] == "25,557,032"
    assert "not parameters, not in the total" in all_text(at)
    other = next(frame.value for frame in at.dataframe if "collection" in frame.value.columns)
    assert set(other["collection"]) == {"batch_stats"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"preset": "gpt9"}, "unknown preset 'gpt9'"),
        ({"preset": "gpt2-small", "h.num_heads": "5"}, "must divide `d_model` (768)"),
        ({"preset": "gpt2-small", "h.nope": "1"}, "has no hyperparameter 'nope'"),
        ({"h.num_layers": "3"}, "without a `preset`"),
    ],
    ids=["unknown-preset", "bad-heads", "unknown-hparam", "no-preset"],
)
def test_hostile_preset_links_warn_and_fall_back(query, message):
    at = open_app(query)
    assert message in shown(at.warning[0])


def test_bytes_page_shows_optimizer_state_apart_from_the_parameters():
    at = open_app({"input_dim": "784", "layers": "512x2_10", "opt": "adam,momentum,sgd"}, "pages/bytes.py")
    table = next(frame.value for frame in at.dataframe if "optimizer" in frame.value.columns)
    # Adam: two moments per parameter and one int32 step count; momentum: one buffer; plain SGD: none.
    assert dict(zip(table["optimizer"], table["num_values"], strict=True)) == {
        "adam": "1,339,413",
        "momentum": "669,706",
        "sgd": "0",
    }
    assert "not part of the parameter total" in all_text(at)
    assert at.query_params["opt"] == "adam,momentum,sgd"
    # The Memory page's recipe too (issue 46): 669,706 bfloat16 parameters (1,339,412 bytes), their
    # float32 master copy (2,678,824) and the float32 state (Adam 1,339,412 x 4 + a 4-byte count).
    assert dict(zip(table["optimizer"], table["with_recipe"], strict=True)) == {
        "adam": "9,375,888 bytes (8.94 MiB)",
        "momentum": "6,697,060 bytes (6.39 MiB)",
        "sgd": "4,018,236 bytes (3.83 MiB)",
    }


def test_bytes_page_layer_chart_follows_the_dtype():
    at = open_app({"input_dim": "1024", "layers": "1024", "dtype": "bfloat16"}, "pages/bytes.py")
    titles = [chart.proto.spec for chart in at.get("vega_lite_chart")]
    assert any('"Raw bfloat16 payload per layer (bytes)"' in spec for spec in titles)
    assert not any("Raw float32 payload per layer" in spec for spec in titles)


def test_links_between_pages_carry_the_configuration():
    at = open_app({"input_dim": "784", "layers": "512x2_10"}, "pages/shards.py")
    (link,) = [link.proto for link in at.get("page_link") if "layout" in link.proto.page]
    assert "layers=512x2_10" in link.query_string
