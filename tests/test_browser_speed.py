"""Time on the pages in real headless Chromium: the Memory page's step-time bars and the Serving
page's throughput-against-latency curve are painted (their colours on screen, not an axis alone)."""

import io
import re

import pytest
from playwright.sync_api import expect

from conftest import metric, open_page, wait_for_app
from dcsim.report.speed_charts import CHOSEN, LINE, TIME_COLOURS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def painted(chart, colour: str) -> int:
    """The pixels of ``colour`` (#rrggbb, within 8 a channel) in the chart's screenshot."""
    from PIL import Image

    expect(chart.locator("canvas, svg").first).to_be_visible()
    chart.page.wait_for_timeout(500)  # vega paints after the element appears
    image = Image.open(io.BytesIO(chart.screenshot())).convert("RGB")
    wanted = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        1 for pixel in image.get_flattened_data() if max(abs(a - b) for a, b in zip(pixel, wanted, strict=True)) <= 8
    )


def test_the_step_time_bars_and_the_speed_curve_are_drawn(server, page):
    open_page(page, server + "/memory?preset=llama2-7b&mesh=data%3D8&seq=4096&device=h100-sxm&tokens=2e12")
    expect(metric(page, "Step (estimate)")).to_have_text(re.compile(r"^[0-9.]+ s$"))  # its figure: test_app_speed.py
    wait_for_app(page)  # the run has ended: its last chart, the step's time, is on the page
    chart = page.get_by_test_id("stVegaLiteChart").last  # the stages, the sweep, then the step's time
    assert painted(chart, TIME_COLOURS["Compute"]) > 2000  # three bars hold compute
    assert painted(chart, TIME_COLOURS["Communication"]) > 200  # the no-overlap bar's communication

    open_page(page, server + "/serving?preset=llama2-7b&mesh=model%3D2&device=h100-sxm&concurrency=32")
    expect(metric(page, "Decode step (estimate)")).to_be_visible()
    wait_for_app(page)
    curve = page.get_by_test_id("stVegaLiteChart").last
    assert painted(curve, CHOSEN) > 50  # the chosen concurrency's point
    assert painted(curve, LINE) > 200  # the line and its points
