"""The Model page's everyday journey in AppTest: bytes per shard in the team's dtype, a model opened
from a file shown under its own name, derived hyperparameters that follow, and what a refused
upload says where a phone's reader sees it."""

import json
from pathlib import Path

import pytest

from conftest import metrics, open_app, open_views, shown, uploader

HF = Path(__file__).parent / "data" / "hf"


def number_input(at, label):
    return next(widget for widget in at.number_input if widget.label == label)


def every_text(at) -> str:
    """Everything a person reads on the page and in its sidebar, markdown escapes removed."""
    kinds = ("caption", "markdown", "warning", "error", "info", "success", "subheader", "header", "code")
    texts = [shown(element) for kind in kinds for element in at.get(kind)]
    texts += [shown(element) for kind in kinds for element in at.sidebar.get(kind)]
    texts += [f"{metric.label} {metric.value}" for metric in at.metric]
    texts += [box.label for box in at.selectbox] + [str(box.value) for box in at.selectbox]
    texts += [option for widget in at.selectbox for option in widget.options]  # the labels a person reads
    return " ".join(texts)


def upload(at, name: str, content: bytes):
    uploader(at).set_value((name, content, "application/json")).run()
    assert not at.exception
    return at


def test_bytes_per_shard_in_the_chosen_dtype_for_llama_2_70b():
    at = open_app({"preset": "llama2-70b", "shards": "64", "dtype": "bfloat16"})
    values = metrics(at)
    assert values["Bytes per shard (bfloat16)"] == "2,155,520,256 bytes (2.01 GiB)"
    assert values["Raw float32 payload"] == "275,906,592,768 bytes (256.96 GiB)"
    captions = [caption.value for caption in at.caption]
    assert any(
        "An average" in text and "not a layout" in text and "not the checkpoint size" in text for text in captions
    )
    assert any("Raw float32 estimate" in text and "not the checkpoint size" in text for text in captions)
    assert at.query_params["dtype"] == "bfloat16"


def test_choosing_a_dtype_changes_the_bytes_and_the_link():
    at = open_app({"shards": "3"})
    assert metrics(at)["Bytes per shard (float32)"] == "26.666… bytes"  # 20 x 4 / 3
    next(box for box in at.selectbox if box.label == "Storage dtype").set_value("float64").run()
    assert metrics(at)["Bytes per shard (float64)"] == "53.333… bytes"
    assert "Bytes per shard (float32)" not in metrics(at)
    assert at.query_params["dtype"] == "float64"


@pytest.mark.parametrize("page", ["pages/shards.py", "pages/bytes.py", "pages/layout.py", "pages/checkpoint.py"])
def test_every_page_that_shows_bytes_uses_the_links_dtype(page):
    at = open_app({"preset": "llama2-70b", "shards": "64", "dtype": "bfloat16"}, page)
    labels = [metric.label for metric in at.metric]
    assert any("bfloat16" in label for label in labels), labels
    assert next(box for box in at.selectbox if box.label == "Storage dtype").value == "bfloat16"
    assert at.query_params["dtype"] == "bfloat16"


def test_the_shards_sweep_shows_bytes_per_shard():
    at = open_app({"preset": "llama2-70b", "shards": "64", "dtype": "bfloat16"}, "pages/shards.py")
    sweep = at.dataframe[0].value
    row = sweep[sweep["num_shards"] == "64"].iloc[0]
    assert row["bytes_per_shard_text"] == "2,155,520,256 bytes (2.01 GiB)"


def test_a_hugging_face_file_is_shown_under_its_own_name_and_its_link_reopens_it():
    at = upload(open_app({"shards": "8"}), "config.json", (HF / "gemma-7b.json").read_bytes())
    title = "GemmaForCausalLM (gemma, from config.json)"
    assert metrics(at)["Total parameters"] == "8,537,680,896"
    text = every_text(at)
    assert title in text
    assert title in next(box for box in at.selectbox if box.label == "Model").options
    for preset_name in ("Llama", "llama2", "reference count"):
        assert preset_name not in " ".join(
            [shown(element) for kind in ("caption", "markdown", "subheader") for element in at.get(kind)]
            + [shown(element) for kind in ("caption", "markdown") for element in at.sidebar.get(kind)]
        ), preset_name
    assert "matches the reference count" not in text
    link = dict(at.query_params)
    assert (link["model_type"], link["name"], link["family"]) == ("gemma", "GemmaForCausalLM", "decoder")
    assert "preset" not in link

    again = open_app(link)
    assert metrics(again)["Total parameters"] == "8,537,680,896"
    assert title in every_text(again)
    assert next(box for box in again.selectbox if box.label == "Model").value == "opened"


def test_editing_a_files_model_keeps_its_name_and_says_it_was_edited():
    at = upload(open_app(), "config.json", (HF / "mistral-7b.json").read_bytes())
    number_input(at, "num_layers").set_value(16).run()
    assert not at.exception
    assert "MistralForCausalLM (mistral, from config.json), edited" in every_text(at)
    assert at.query_params["edited"] == "true" and at.query_params["h.num_layers"] == "16"
    at.selectbox[0].set_value("gpt2-small").run()
    assert metrics(at)["Total parameters"] == "124,439,808"
    at.selectbox[0].set_value("opened").run()  # the opened model stays on offer in this session
    assert metrics(at)["Total parameters"] != "124,439,808"
    assert "MistralForCausalLM (mistral, from config.json), edited" in every_text(at)


def test_a_refused_upload_is_explained_in_the_main_area_too():
    at = upload(open_app(), "config.json", b'{"model_type": "mamba2"}')
    assert "This file was not opened" in shown(at.sidebar.get("error")[0])
    assert any("This file was not opened" in shown(error) for error in at.main.get("error"))


def test_gpt2_small_widened_takes_its_mlp_along():
    # The journey of the issue: 24 layers, d_model 2048. ffn_dim follows d_model (GPT-2's MLP is 4x as
    # wide), the head count that no longer divides is named with the field to change with it, and
    # the count is what the person meant: 1,313,626,112, not 810,186,752 with ffn_dim left at 3072.
    at = open_app({"preset": "gpt2-small"})
    number_input(at, "num_layers").set_value(24).run()
    number_input(at, "d_model").set_value(2048).run()
    assert number_input(at, "ffn_dim").value == 8192
    error = shown(at.error[0])
    assert (
        "`num_heads` (12) must divide `d_model` (2,048)" in error and "change d_model and num_heads together" in error
    )
    number_input(at, "num_heads").set_value(16).run()
    assert not at.error
    assert metrics(at)["Total parameters"] == "1,313,626,112"
    assert number_input(at, "num_kv_heads").value == 16  # tied to num_heads in GPT-2


def test_a_value_the_person_set_no_longer_follows():
    at = open_app({"preset": "gpt2-small"})
    number_input(at, "ffn_dim").set_value(5000).run()
    number_input(at, "d_model").set_value(1536).run()
    assert number_input(at, "ffn_dim").value == 5000
    assert metrics(at)["Total parameters"] != "124,439,808"


def test_fields_that_do_not_apply_are_hidden():
    llama = open_app({"preset": "llama2-7b"})
    labels = {widget.label for kind in ("number_input", "checkbox", "selectbox") for widget in llama.get(kind)}
    assert "max_positions" not in labels  # rotary positions: no table
    assert "qkv_bias" in labels
    gpt2 = open_app({"preset": "gpt2-small"})
    labels = {widget.label for kind in ("number_input", "checkbox", "selectbox") for widget in gpt2.get(kind)}
    assert "max_positions" in labels
    assert "qkv_bias" not in labels  # use_bias already puts a bias on every projection


def test_the_dense_stack_comes_back_after_a_look_at_a_preset():
    at = open_app({"input_dim": "784", "layers": "512x2_10"})
    at.selectbox[0].set_value("gpt2-small").run()
    assert "layers" not in at.query_params  # a preset's link carries no Dense stack
    at.selectbox[0].set_value("dense").run()
    assert metrics(at)["Total parameters"] == "669,706"
    assert at.query_params["layers"] == "512x2_10"


def test_a_shard_change_with_a_refused_hyperparameter_still_applies():
    at = open_app({"preset": "gpt2-small"})
    number_input(at, "num_heads").set_value(7).run()
    assert "must divide" in shown(at.error[0])
    number_input(at, "Number of checkpoint shards").set_value(4).run()
    assert metrics(at)["Ideal share per shard (4 shards)"] == "31,109,952"


@pytest.mark.parametrize(
    ("query", "views", "tables", "charts"),
    [
        ({}, ("model.layers_open", "model.arrays_open"), 3, 1),  # the layer editor is a grid too
        (
            {"preset": "llama2-70b"},
            ("model.groups_open", "model.depth_open", "model.layers_open", "model.arrays_open"),
            4,
            2,
        ),
    ],
    ids=["dense", "llama2-70b"],
)
def test_the_views_below_the_form_are_drawn_when_opened(query, views, tables, charts):
    at = open_app(query)
    assert len(at.dataframe) == (1 if not query else 0)  # the Dense stack's layer editor only
    assert not at.get("vega_lite_chart")
    labels = [box.label for box in at.expander]
    assert any(label.startswith("Every parameter array") for label in labels)
    open_views(at, *views)
    assert len(at.dataframe) == tables
    assert len(at.get("vega_lite_chart")) == charts  # Llama 2 70B's 723 layers get a table, not 723 bars


@pytest.mark.parametrize(
    ("query", "label", "field"),
    [
        ({}, "Edit the Dense layers (1)", None),
        ({"preset": "llama2-70b"}, "Llama 2 70B (8 KV heads): edit its 16 hyperparameters", "num_kv_heads"),
    ],
    ids=["dense", "llama2-70b"],
)
def test_the_editors_are_closed_on_a_first_visit_and_open_on_a_click(query, label, field):
    """A first view is the answer and the settings; the layer grid and the hyperparameter fields are
    drawn once their expander is opened (their scripts would delay the first figures)."""
    at = open_app(query, editors=False)
    assert "Total parameters" in metrics(at)
    assert label in [expander.label.replace("\\", "") for expander in at.expander]  # markdown escapes removed
    assert not at.dataframe
    widgets = {widget.label for widget in at.number_input}
    assert "Number of checkpoint shards" in widgets
    assert field is None or field not in widgets
    open_views(at, "model.edit_layers" if field is None else "model.edit_hparams")
    if field is None:
        assert len(at.dataframe) == 1
    else:
        assert field in {widget.label for widget in at.number_input}
    assert metrics(at) == metrics(open_app(query, editors=False))  # opening changes no figure


class FakeBrowser:
    """The Model page's hyperparameter form driven as Streamlit drives it, with a server that can be
    interrupted: the browser sends every widget's value with each edit; the server writes the ones
    that differ into the session, calls their callbacks, and the browser learns a value only when a
    run draws the form. Streamlit's own runs cannot be interrupted on demand in AppTest."""

    def __init__(self, monkeypatch, preset: str):
        import streamlit

        from dcsim.model.config import ModelConfig
        from dcsim.ui import model, state

        self.model, self.session = model, {}
        monkeypatch.setattr(streamlit, "session_state", self.session)
        self.base = ModelConfig(preset=preset)
        self.session.update({state.CONFIG: self.base, state.PROBLEMS: (), state.GENERATION: 0, model.MODEL_KEY: preset})
        self.prefix = model.form_prefix(self.base)
        self.shows: dict[str, object] = {}
        self.draw()

    def key(self, name: str) -> str:
        return self.model.hparam_key(self.prefix, name)

    def draw(self) -> None:
        """A run that reaches the form: every widget drawn, its value now the browser's."""
        for spec in self.model.form_fields(self.base):
            self.shows[self.key(spec.name)] = self.session[self.key(spec.name)]

    def edit(self, name: str, value: object, *, then_draw: bool) -> None:
        sent = {**self.shows, self.key(name): value}
        self.shows[self.key(name)] = value
        changed = [key for key, shown in sent.items() if self.session.get(key) != shown]
        for key in changed:
            self.session[key] = sent[key]
        for key in changed:
            self.model.hparam_edited(self.base.family, self.prefix, key.removeprefix(self.key("")))
        if then_draw:
            self.draw()

    def config(self):
        from dcsim.ui import state

        return state.config()


def test_an_edit_while_a_moved_value_is_on_its_way_to_the_browser_keeps_the_moved_value(monkeypatch):
    # Seen in CI on a busy machine: num_heads 7 (num_kv_heads follows to 7), then 12 (follows to
    # 12, but the edit that comes next crosses the run that draws it), then num_layers 6: the
    # browser's rerun still carries num_kv_heads 7, which must not be taken as the person's edit.
    browser = FakeBrowser(monkeypatch, "gpt2-small")
    browser.edit("num_heads", 7, then_draw=True)
    assert browser.shows[browser.key("num_kv_heads")] == 7
    assert browser.session.get(browser.model.state.EDIT_ERROR)  # 7 heads do not divide d_model 768
    browser.edit("num_heads", 12, then_draw=False)
    browser.edit("num_layers", 6, then_draw=True)
    assert browser.shows[browser.key("num_kv_heads")] == 12
    assert browser.session.get(browser.model.state.EDIT_ERROR) is None
    assert dict(browser.config().overrides) == {"num_layers": 6}


def test_twice_edited_before_a_draw_the_derived_value_follows_the_last_edit(monkeypatch):
    browser = FakeBrowser(monkeypatch, "gpt2-small")
    browser.edit("num_heads", 7, then_draw=False)  # num_kv_heads follows to 7, not yet drawn
    browser.edit("num_heads", 12, then_draw=True)  # and back to 12 with it
    assert browser.shows[browser.key("num_kv_heads")] == 12
    assert browser.config().overrides == ()  # GPT-2 small as it was


def test_a_value_typed_over_a_drawn_moved_value_is_the_persons(monkeypatch):
    browser = FakeBrowser(monkeypatch, "gpt2-small")
    browser.edit("num_heads", 12 * 2, then_draw=True)
    browser.edit("num_kv_heads", 12, then_draw=True)  # seen as 24, set to 12 on purpose: kept
    browser.edit("num_heads", 48, then_draw=True)
    assert browser.shows[browser.key("num_kv_heads")] == 12  # set by the person: it follows no more


def test_an_opened_bfloat16_model_stores_its_bytes_in_bfloat16():
    data = json.loads((HF / "mistral-7b.json").read_bytes()) | {"torch_dtype": "bfloat16"}
    at = upload(open_app({"shards": "8"}), "config.json", json.dumps(data).encode())
    assert next(box for box in at.selectbox if box.label == "Storage dtype").value == "bfloat16"
    total = 7_241_732_096  # Mistral 7B v0.1, transformers' count (tests/data/hf/counts.json)
    assert metrics(at)["Total parameters"] == f"{total:,}"
    assert metrics(at)["Bytes per shard (bfloat16)"].startswith(f"{total * 2 // 8:,} bytes")
    assert not any(label.startswith("Bytes per shard (float32") for label in metrics(at))
    assert at.query_params["dtype"] == "bfloat16"
