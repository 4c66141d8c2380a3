"""What only a browser shows: the served app, rendered in real headless Chromium."""

import re

import pytest
from playwright.sync_api import expect

from conftest import wait_for_app

pytestmark = pytest.mark.browser


def metric(page, label):
    return page.locator('[data-testid="stMetric"]').filter(has_text=label).locator('[data-testid="stMetricValue"]')


def test_landing_page_shows_the_seed_answer(server, page):
    page.goto(server)
    wait_for_app(page)
    expect(metric(page, "Total parameters")).to_have_text("20")
    expect(metric(page, "Ideal share per shard")).to_have_text("10")
    expect(metric(page, "Raw float32 payload")).to_have_text("80 bytes")
    expect(page.get_by_text("not the checkpoint size")).to_be_visible()


def test_changing_shards_updates_the_share(server, page):
    page.goto(server)
    wait_for_app(page)
    shards = page.get_by_label("Number of checkpoint shards")
    shards.fill("3")
    shards.press("Enter")
    expect(metric(page, "Ideal share per shard")).to_have_text(re.compile(r"6\.666666666666667 \(20/3\)"))
