"""The capacity planner's journey on the Model page, in real headless Chromium: pick a real model,
switch between models, make a bad edit and a good one; after every interaction every figure on
screen belongs to the configuration in the URL, each figure once.

The oracle is the link itself: what the page shows after an interaction must be exactly what a
fresh browser shows when it opens the address bar's link. Streamlit removes what a run did not
draw only when the run ends, so these tests read the whole page after the run, not only the
figure that changed.
"""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import choose, fresh_page, open_editor, open_page, pick_model, type_into, wait_for_app

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
LLAMA2_70B = "68,976,648,192"
LLAMA2_7B = "6,738,415,616"
GPT2_SMALL = "124,439,808"


def answer_on_screen(page) -> list[tuple[str, str]]:
    """Every metric in the main area as (label, value), in page order, after the run has ended."""
    wait_for_app(page)
    cards = page.locator('[data-testid="stMain"] [data-testid="stMetric"]')
    return [
        (
            card.locator('[data-testid="stMetricLabel"]').inner_text().strip(),
            card.locator('[data-testid="stMetricValue"]').inner_text().strip(),
        )
        for card in cards.all()
    ]


def captions(page) -> list[str]:
    """The main area's captions outside expanders: an open editor is this visit's, not the link's."""
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stCaptionContainer"]')]
            .filter(caption => !caption.closest('[data-testid="stExpander"]'))
            .map(caption => caption.innerText)"""
    )


def shows_total(page, total: str) -> None:
    card = page.get_by_test_id("stMain").locator('[data-testid="stMetric"]').filter(has_text="Total parameters")
    expect(card.first.locator('[data-testid="stMetricValue"]')).to_have_text(total)


def assert_belongs_to_the_link(browser, page, total: str) -> list[tuple[str, str]]:
    """The page shows ``total``, each metric label once, and exactly the figures and captions a
    fresh browser shows for the address bar's link."""
    shows_total(page, total)
    shown = answer_on_screen(page)
    labels = [label for label, _ in shown]
    assert len(labels) == len(set(labels)), f"a figure is on screen twice: {shown}"
    with fresh_page(browser, page.url) as fresh:
        shows_total(fresh, total)
        # The page draws its list of arrays last: once it is there, the answer above it is complete.
        expect(fresh.get_by_text("Every parameter array")).to_be_visible()
        wait_for_app(fresh)
        assert shown == answer_on_screen(fresh), "the figures on screen are not the link's"
        assert captions(page) == captions(fresh), "the captions on screen are not the link's"
    return shown


def set_number(page, name: str, value: str) -> None:
    type_into(page, page.get_by_role("spinbutton", name=name), value, then="Enter")
    wait_for_app(page)


def test_dense_to_a_preset_and_back_leaves_no_figure_of_the_other_model(server, browser, page):
    open_page(page, server)
    dense = dict(assert_belongs_to_the_link(browser, page, "20"))
    assert dense["Raw float32 payload"] == "80 bytes"

    pick_model(page, "Llama 2 70B")
    expect(page).to_have_url(re.compile(r"[?&]preset=llama2-70b(&|$)"))
    llama = dict(assert_belongs_to_the_link(browser, page, LLAMA2_70B))
    assert "80 bytes" not in llama.values()
    assert llama["Raw float32 payload"] == "275,906,592,768 bytes (256.96 GiB)"
    assert any(f"matches the reference count {LLAMA2_70B}" in text for text in captions(page))

    pick_model(page, "Dense stack")
    back = dict(assert_belongs_to_the_link(browser, page, "20"))
    assert back == dense, "a figure of Llama 2 70B stayed on screen"
    assert not any("reference count" in text for text in captions(page))
    # One under the bytes per shard, one under the raw float32 payload: no stray third.
    assert sum("not the checkpoint size" in text for text in captions(page)) == 2


def test_one_preset_to_another_shows_only_the_second(server, browser, page):
    open_page(page, f"{server}/?preset=llama2-7b&shards=64")
    first = dict(assert_belongs_to_the_link(browser, page, LLAMA2_7B))
    assert first["Ideal share per shard (64 shards)"] == "105,287,744"

    pick_model(page, "GPT-2 small")
    second = dict(assert_belongs_to_the_link(browser, page, GPT2_SMALL))
    assert second["Ideal share per shard (64 shards)"] == "1,944,372"
    assert LLAMA2_7B not in page.get_by_test_id("stMain").inner_text()


def test_an_invalid_edit_then_a_valid_one_leaves_one_answer(server, browser, page):
    open_page(page, f"{server}/?preset=gpt2-small")
    open_editor(page)
    set_number(page, "num_heads", "7")  # 7 does not divide d_model 768
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("last valid configuration")).to_be_visible()
    shown = answer_on_screen(page)
    assert [label for label, _ in shown].count("Total parameters") == 1
    assert dict(shown)["Total parameters"] == GPT2_SMALL
    assert sum("not the checkpoint size" in text for text in captions(page)) == 2

    set_number(page, "num_heads", "12")
    set_number(page, "num_layers", "6")
    expect(main.get_by_text("last valid configuration")).to_have_count(0)
    assert_belongs_to_the_link(browser, page, "81,912,576")

    set_number(page, "Number of checkpoint shards", "4")
    shown = dict(assert_belongs_to_the_link(browser, page, "81,912,576"))
    assert shown["Ideal share per shard (4 shards)"] == "20,478,144"


def test_bytes_per_shard_in_the_teams_dtype_reopen_from_the_link(server, browser, page):
    open_page(page, f"{server}/?preset=llama2-70b&shards=64")
    choose(page, "Storage dtype", "bfloat16")
    expect(page).to_have_url(re.compile(r"[?&]dtype=bfloat16(&|$)"))
    shown = dict(assert_belongs_to_the_link(browser, page, LLAMA2_70B))
    assert shown["Bytes per shard (bfloat16)"] == "2,155,520,256 bytes (2.01 GiB)"
    assert "Bytes per shard (float32)" not in shown


def test_a_config_json_is_shown_under_its_own_name_and_its_link_reopens_it(server, browser, page):
    gemma = ROOT / "tests" / "data" / "hf" / "gemma-7b.json"
    open_page(page, f"{server}/?shards=8")
    page.get_by_text("Open a configuration file").click()
    page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(gemma)
    shows_total(page, "8,537,680,896")
    wait_for_app(page)
    title = "GemmaForCausalLM (gemma, from config.json)"
    expect(page.get_by_role("combobox", name="Model")).to_have_value(title)
    every_word = page.locator("body").inner_text()
    assert "Llama" not in every_word and "llama2" not in every_word, "a preset's name is on the page"
    assert "matches the reference count" not in every_word
    expect(page).to_have_url(re.compile(r"[?&]model_type=gemma(&|$)"))
    assert_belongs_to_the_link(browser, page, "8,537,680,896")
    with fresh_page(browser, page.url) as fresh:
        expect(fresh.get_by_role("combobox", name="Model")).to_have_value(title)


def test_a_refused_file_is_explained_where_a_phone_shows_it(server, browser, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "mamba2", "hidden_size": 2304}')
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True).new_page()
    try:
        open_page(phone, server)
        phone.get_by_role("button", name="Expand sidebar").click()
        phone.get_by_text("Open a configuration file").click()
        phone.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(bad)
        wait_for_app(phone)
        phone.get_by_role("button", name="Collapse sidebar").click()  # as a phone's reader reads on
        error = phone.get_by_test_id("stMain").get_by_text("This file was not opened")
        expect(error).to_be_visible()
        expect(error).to_contain_text("mamba")
    finally:
        phone.context.close()


def test_widening_gpt2_small_takes_its_mlp_along(server, browser, page):
    open_page(page, f"{server}/?preset=gpt2-small")
    open_editor(page)
    set_number(page, "num_layers", "24")
    set_number(page, "d_model", "2048")
    expect(page.get_by_role("spinbutton", name="ffn_dim")).to_have_value("8192")
    error = page.get_by_test_id("stMain").get_by_text("change d_model and num_heads together")
    expect(error).to_be_visible()
    set_number(page, "num_heads", "16")
    expect(error).to_have_count(0)
    assert_belongs_to_the_link(browser, page, "1,313,626,112")
    assert re.search(r"[?&]h\.ffn_dim=8192(&|$)", page.url)


def test_a_model_picked_on_the_serving_page_and_back_leaves_only_that_models_figures(server, browser, page):
    """Issue 46, item 4: the model is picked on the page that asks the question, and what the page
    then shows is exactly what its link shows in a fresh browser, both ways."""

    def drawn(view) -> list[tuple[str, str]]:
        """The figures once the run has drawn them: a page is "not running" before its first run
        starts, so wait for a figure and for the device bar, which comes after the figures."""
        expect(view.get_by_test_id("stMain").locator('[data-testid="stMetric"]').first).to_be_visible()
        expect(view.locator('[data-testid="stVegaLiteChart"]').first).to_be_visible()
        return answer_on_screen(view)

    def belongs_to_the_link() -> list[tuple[str, str]]:
        shown = drawn(page)
        with fresh_page(browser, page.url) as fresh:
            assert shown == drawn(fresh), "the figures on screen are not the link's"
            assert captions(page) == captions(fresh), "the captions on screen are not the link's"
        return shown

    open_page(page, f"{server}/serving?preset=gpt2-small&mesh=model%3D2&context=512&device=h100-sxm")
    small = belongs_to_the_link()
    pick_model(page, "Llama 2 7B")
    expect(page).to_have_url(re.compile(r"[?&]preset=llama2-7b(&|$)"))
    expect(page).to_have_url(re.compile(r"[?&]context=512(&|$)"))  # the page's own settings stay
    expect(page.get_by_text(f"Model: Llama 2 7B · {LLAMA2_7B} parameters", exact=False)).to_be_visible()
    llama = belongs_to_the_link()
    assert llama != small
    pick_model(page, "GPT-2 small")
    expect(page.get_by_text(f"Model: GPT-2 small · {GPT2_SMALL} parameters", exact=False)).to_be_visible()
    assert belongs_to_the_link() == small, "a figure of Llama 2 7B stayed on screen"
