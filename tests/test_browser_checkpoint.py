"""The Checkpoint page in real headless Chromium: a click measures, the report and its chart show,
and a reload shows the kept report without measuring again."""

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from conftest import metric, wait_for_app

pytestmark = pytest.mark.browser

DENSE_1024 = {"v": "1", "input_dim": "1024", "layers": "1024"}


RESULT_METRICS = (
    "On disk",
    "Largest file",
    "Files",
    "Restored bit for bit",
    "Save",
    "Restore",
    "Initialisation",
    "Devices",
)


def value_lines(page) -> dict[str, int]:
    """How many lines each result metric's value takes on screen (a value broken over two or three
    lines, "3,891,587" / "bytes" / "(3.71 MiB)", was the complaint)."""
    return {
        label: metric(page, label).evaluate(
            """value => {
                const text = document.createRange();
                text.selectNodeContents(value);
                return new Set([...text.getClientRects()].map(line => Math.round(line.top))).size;
            }"""
        )
        for label in RESULT_METRICS
    }


def open_checkpoint(page, server, query):
    page.goto(f"{server}/checkpoint?{urlencode(query)}")
    wait_for_app(page)


def test_a_click_measures_dense_1024_and_shows_the_verified_report_and_chart(server, page):
    open_checkpoint(page, server, DENSE_1024)
    expect(metric(page, "Total parameters")).to_have_text("1,049,600")
    expect(metric(page, "Raw payload (float32)")).to_have_text("4,198,400 bytes (4.00 MiB)")
    page.get_by_role("button", name="Save, measure and restore").click()
    expect(metric(page, "Restored bit for bit")).to_have_text("Yes", timeout=120_000)
    wait_for_app(page)
    expect(metric(page, "Devices")).to_have_text("1")
    expect(metric(page, "On disk")).to_have_text(re.compile(r"^\d{1,3}(,\d{3})+ bytes \(\d+\.\d\d MiB\)$"))
    chart = page.locator('[data-testid="stVegaLiteChart"]').first
    expect(chart).to_be_visible()
    expect(chart.locator("canvas, svg").first).to_be_visible()
    expect(page.get_by_text("raw payload of 4,198,400", exact=False)).to_be_visible()
    expect(page.get_by_role("button", name="Measure again")).to_be_visible()
    expect(page.get_by_text("Measured just now", exact=False)).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]mesh=data%3D1(&|$)"))

    assert value_lines(page) == dict.fromkeys(RESULT_METRICS, 1)

    page.set_viewport_size({"width": 390, "height": 844})  # a phone: the kept report, every figure on one line
    page.reload()
    wait_for_app(page)
    expect(metric(page, "Restored bit for bit")).to_have_text("Yes")
    expect(page.get_by_text("cached: nothing was run now", exact=False)).to_be_visible()
    assert value_lines(page) == dict.fromkeys(RESULT_METRICS, 1)


def type_mesh(page, text):
    mesh = page.get_by_role("combobox", name="Virtual devices (mesh)")
    mesh.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Backspace")
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    wait_for_app(page)
    return mesh


def test_a_typed_mesh_is_used_when_it_parses_and_explained_when_not(server, page):
    open_checkpoint(page, server, {"v": "1"})
    mesh = type_mesh(page, "data=2,model=2")
    expect(page.get_by_text("4 virtual devices", exact=False)).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]mesh=data%3D2%2Cmodel%3D2(&|$)"))
    type_mesh(page, "data")
    expect(page.get_by_text("Mesh 'data' was not used", exact=False)).to_be_visible()
    expect(page.get_by_text("AXIS=SIZE", exact=False).first).to_be_visible()
    expect(mesh).to_have_value("data=2,model=2")
    expect(page.get_by_role("button", name="Save, measure and restore")).to_be_enabled()
    expect(page).to_have_url(re.compile(r"[?&]mesh=data%3D2%2Cmodel%3D2(&|$)"))
