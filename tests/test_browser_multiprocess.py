"""The Checkpoint page's processes setting and sweep in real headless Chromium: the setting goes into
the link, a click measures with 2 processes, a sweep draws its charts."""

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from conftest import wait_for_app

pytestmark = pytest.mark.browser


def metric(page, label):
    return (
        page.locator('[data-testid="stMetric"]')
        .filter(has=page.get_by_text(label, exact=True))
        .locator('[data-testid="stMetricValue"]')
    )


def choose(page, label, option):
    page.get_by_role("combobox", name=label).click()
    page.get_by_role("option", name=option, exact=True).click()
    wait_for_app(page)


def test_two_processes_from_the_select_measure_and_stay_in_the_link(server, page):
    query = {"v": "1", "input_dim": "1024", "layers": "1024", "mesh": "data=4", "strategy": "fsdp"}
    page.goto(f"{server}/checkpoint?{urlencode(query)}")
    wait_for_app(page)
    choose(page, "Processes (simulated hosts)", "2")
    expect(page).to_have_url(re.compile(r"[?&]processes=2(&|$)"))
    expect(page.get_by_text("2 processes of 2 device(s) each", exact=False)).to_be_visible()
    page.get_by_role("button", name="Save, measure and restore").click()
    expect(metric(page, "Restored bit for bit")).to_have_text("Yes", timeout=120_000)
    wait_for_app(page)
    expect(page.get_by_role("heading", name="Across 2 processes")).to_be_visible()
    expect(page.get_by_text("2 ocdbt.process_* folder(s) for 2 process(es)", exact=False)).to_be_visible()

    page.reload()  # the link reopens the same settings and the kept report
    wait_for_app(page)
    expect(page.get_by_role("combobox", name="Processes (simulated hosts)")).to_have_value("2")
    expect(page.get_by_role("heading", name="Across 2 processes")).to_be_visible()


def test_a_sweep_draws_three_charts(server, page):
    query = {"v": "1", "input_dim": "256", "layers": "256", "mesh": "data=4", "strategy": "fsdp"}
    page.goto(f"{server}/checkpoint?{urlencode(query)}")
    wait_for_app(page)
    page.get_by_role("button", name="Sweep 1, 2 and 4 processes").click()
    expect(page.get_by_role("button", name="Sweep again")).to_be_visible(timeout=240_000)
    wait_for_app(page)
    charts = page.locator('[data-testid="stVegaLiteChart"]')
    expect(charts).to_have_count(3)
    for index in range(3):
        expect(charts.nth(index).locator("canvas, svg").first).to_be_visible()
    expect(page.get_by_text("What it cannot show", exact=False)).to_be_visible()
