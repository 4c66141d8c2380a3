"""A model opened by its Hub id in real Chromium: the served app, started with ``HF_ENDPOINT`` on a
loopback Hub (tests/fake_hub.py), opens a pasted ``?hf=`` link and rewrites the address bar into a
link that reopens the model without the Hub; the Model page's Hub id box opens a gated model with a
token that never reaches the address bar or the page; a model that cannot be fetched is said plainly."""

import re

import pytest
from fake_hub import LLAMA, running, with_gated
from playwright.sync_api import expect

from conftest import fresh_page, open_page, query_of, share_link, streamlit_server, type_into, wait_for_app

pytestmark = pytest.mark.browser

TOKEN = "hf_BrowserGatedToken5566778899bbcc"
LLAMA_TOTAL = "6,738,415,616"


@pytest.fixture(scope="module")
def fake():
    with running(with_gated(TOKEN)) as server:
        yield server


@pytest.fixture(scope="module")
def hub_server(fake):
    loopback = "127.0.0.1,localhost,::1"
    env = {"HF_ENDPOINT": fake.url, "HF_HUB_OFFLINE": "0", "NO_PROXY": loopback, "no_proxy": loopback}
    with streamlit_server(env=env) as url:
        yield url


def metric(page, label):
    return page.locator('[data-testid="stMetric"]').filter(has_text=label).locator('[data-testid="stMetricValue"]')


def test_a_pasted_hub_link_opens_the_model_and_the_address_bar_reopens_it_without_the_hub(hub_server, browser, fake):
    with fresh_page(browser, f"{hub_server}/?hf={LLAMA}&shards=8") as page:
        expect(metric(page, "Total parameters")).to_have_text(LLAMA_TOTAL)
        expect(page).to_have_url(re.compile(r"[?&]family=decoder(&|$)"))
        query = query_of(page)
        assert (query["hf"], query["shards"], query["model_type"]) == (LLAMA, "8", "llama")
        expect(share_link(page)).to_contain_text("hf=meta-llama%2FLlama-2-7b-hf")
        link, asked = page.url, len(fake.requests)
    with fresh_page(browser, link) as again:
        expect(metric(again, "Total parameters")).to_have_text(LLAMA_TOTAL)
        expect(again.get_by_text(f"{LLAMA} (llama, from the Hub)").first).to_be_visible()
    assert len(fake.requests) == asked  # the link carries the model: the Hub is not asked again


def test_a_link_to_a_model_that_cannot_be_fetched_says_why(hub_server, page):
    open_page(page, f"{hub_server}/?hf=nobody/missing")
    expect(page.get_by_text("nobody/missing could not be opened from the Hugging Face Hub")).to_be_visible()
    expect(page.get_by_text("The figures shown are the Dense stack's, not nobody/missing's")).to_be_visible()
    expect(metric(page, "Total parameters")).to_have_text("20")
    assert "hf" not in query_of(page)
    expect(page.get_by_role("textbox", name="Hub id")).to_have_value("nobody/missing")


def test_the_hub_box_opens_a_gated_model_whose_token_stays_out_of_the_link(hub_server, page, fake):
    open_page(page, hub_server)
    page.get_by_text("Open a model by its Hugging Face Hub id").click()
    wait_for_app(page)
    type_into(page, page.get_by_role("textbox", name="Hub id"), "gated/model")
    page.get_by_role("button", name="Open from the Hub").click()
    wait_for_app(page)
    expect(page.get_by_text("gated/model is a gated model: accept its licence", exact=False)).to_be_visible()
    expect(metric(page, "Total parameters")).to_have_text("20")
    token_box = page.get_by_role("textbox", name="Token (optional)")
    expect(token_box).to_have_attribute("type", "password")
    type_into(page, token_box, TOKEN)
    page.get_by_role("button", name="Open from the Hub").click()
    wait_for_app(page)
    expect(metric(page, "Total parameters")).to_have_text(LLAMA_TOTAL)
    expect(page).to_have_url(re.compile(r"[?&]hf=gated%2Fmodel(&|$)"))
    assert TOKEN not in page.url
    assert TOKEN not in page.locator('[data-testid="stApp"]').inner_text()
    assert fake.requests[-1][2] == f"Bearer {TOKEN}"
