"""The Memory page's training step in real headless Chromium: typing a longer sequence flips
"fits" to "over", the URL and the sidebar's link to copy carry the new sequence (the change reruns
only the page's fragment and the link; the settings above and the tables below stay on screen),
and the link reopens the same figures."""

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from conftest import SMALL_LLAMA_LINK, fresh_page, metric, open_page, query_of, wait_for_app

pytestmark = pytest.mark.browser

LINK = "/memory?" + urlencode(SMALL_LLAMA_LINK | {"mesh": "data=2", "attn": "naive", "devmem": "8MiB", "seq": "16"})
BUDGET = "Against the budget (8MiB)"


def test_fits_flips_when_the_sequence_grows_and_the_link_reproduces(server, browser, page):
    open_page(page, server + LINK)
    expect(metric(page, BUDGET)).to_have_text(re.compile(r"^Fits"))
    short = metric(page, "Activations per device").inner_text()
    box = page.get_by_role("textbox", name="Sequence (tokens)")
    box.fill("2048")
    box.press("Enter")
    wait_for_app(page)
    expect(metric(page, BUDGET)).to_have_text(re.compile(r"^Over by"))
    expect(page).to_have_url(re.compile(r"[?&]seq=2048(&|$)"))
    longer = metric(page, "Activations per device").inner_text()
    assert longer != short
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    share = page.locator('[data-testid="stSidebar"] a[href*="seq=2048"]')
    expect(share).to_have_count(1)
    expect(page.get_by_role("textbox", name="Budget per device")).to_have_value("8MiB")
    expect(page.get_by_role("heading", name="Every array of the state")).to_be_visible()
    with fresh_page(browser, share.get_attribute("href")) as fresh:
        expect(metric(fresh, "Activations per device")).to_have_text(longer)
        expect(metric(fresh, BUDGET)).to_have_text(re.compile(r"^Over by"))
        assert query_of(fresh) == query_of(page)
