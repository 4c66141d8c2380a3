"""The Checkpoint page's processes setting and sweep in real headless Chromium: the setting goes into
the link, a click measures with 2 processes, a sweep draws its charts."""

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from conftest import choose, metric, wait_for_app
from dcsim.ui import checkpoint as measuring

pytestmark = pytest.mark.browser


def test_two_processes_from_the_select_measure_and_stay_in_the_link(server, page):
    query = {"v": "1", "input_dim": "1024", "layers": "1024", "mesh": "data=4", "strategy": "fsdp"}
    page.goto(f"{server}/checkpoint?{urlencode(query)}")
    wait_for_app(page)
    choose(page, "Processes (simulated hosts)", "2")
    expect(page).to_have_url(re.compile(r"[?&]processes=2(&|$)"))
    expect(page.get_by_text("2 processes of 2 devices each", exact=False)).to_be_visible()
    page.get_by_role("button", name="Save, measure and restore").click()
    expect(metric(page, "Restored bit for bit")).to_have_text("Yes", timeout=120_000)
    wait_for_app(page)
    expect(page.get_by_role("heading", name="Across 2 processes")).to_be_visible()
    expect(page.get_by_text("2 ocdbt.process_* folders for 2 processes", exact=False)).to_be_visible()

    page.reload()  # the link reopens the same settings and the kept report
    wait_for_app(page)
    expect(page.get_by_role("combobox", name="Processes (simulated hosts)")).to_have_value("2")
    expect(page.get_by_role("heading", name="Across 2 processes")).to_be_visible()


# The sweep's own bound: three groups one after the other, each with its start-up allowance and its
# time limit (dcsim.runtime.workers), then a rerun to draw. A healthy sweep that is slow on a busy machine
# ends well inside it; a failing one shows its message, which the wait below stops at.
SWEEP_SECONDS = len(measuring.SWEEP_PROCESSES) * 2 * measuring.TIMEOUT_SECONDS + 60
SWEEP_FAILED = re.compile(r"The sweep (was stopped|failed|was refused)|Busy: ")


def test_a_sweep_draws_three_charts(server, page):
    query = {"v": "1", "input_dim": "256", "layers": "256", "mesh": "data=4", "strategy": "fsdp"}
    page.goto(f"{server}/checkpoint?{urlencode(query)}")
    wait_for_app(page)
    page.get_by_role("button", name="Sweep 1, 2 and 4 processes").click()
    done = page.get_by_role("button", name="Sweep again")
    # The click started a sweep: its box shows at once (a lost click must not cost the long wait).
    expect(page.get_by_text("Sweeping", exact=False).first.or_(done)).to_be_visible()
    # Then wait for the outcome, either one: seven processes that each import JAX share two cores,
    # minutes on a busy machine, and a failure says why at once instead of being waited out.
    failed = page.locator('[data-testid="stAlert"]').filter(has_text=SWEEP_FAILED)
    expect(done.or_(failed).first).to_be_visible(timeout=SWEEP_SECONDS * 1000)
    assert not failed.count(), failed.first.inner_text()
    wait_for_app(page)
    charts = page.locator('[data-testid="stVegaLiteChart"]')
    expect(charts).to_have_count(6)  # the sweep's three, then the plan at cluster scale's three
    for index in range(3):
        expect(charts.nth(index).locator("canvas, svg").first).to_be_visible()
    expect(page.get_by_text("What it cannot show", exact=False)).to_be_visible()
