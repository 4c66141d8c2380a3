"""The Memory page's training step in real headless Chromium: typing a longer sequence flips
"fits" to "over", the URL carries the new sequence, and the link reopens the same figures."""

import re

import pytest
from playwright.sync_api import expect

from conftest import fresh_page, open_page, query_of, wait_for_app

pytestmark = pytest.mark.browser

SMALL = "&".join(
    f"h.{name}={value}"
    for name, value in {
        "num_layers": "2",
        "d_model": "64",
        "num_heads": "4",
        "num_kv_heads": "2",
        "ffn_dim": "96",
        "vocab_size": "128",
    }.items()
)
LINK = f"/memory?preset=llama2-7b&{SMALL}&mesh=data%3D2&attn=naive&devmem=8MiB&seq=16"
BUDGET = "Against the budget (8MiB)"


def metric(page, label):
    return (
        page.locator('[data-testid="stMetric"]')
        .filter(has=page.get_by_text(label, exact=True))
        .locator('[data-testid="stMetricValue"]')
    )


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
    with fresh_page(browser, page.url) as fresh:
        expect(metric(fresh, "Activations per device")).to_have_text(longer)
        expect(metric(fresh, BUDGET)).to_have_text(re.compile(r"^Over by"))
        assert query_of(fresh) == query_of(page)
