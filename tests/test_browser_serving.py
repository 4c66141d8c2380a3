"""The Serving page in real headless Chromium: a Llama 2 70B link opens with the engine's figures,
a context change shows the new figure and writes the URL, which reopens it in a fresh page, and
switching the model shows no number of the other model."""

import re

import pytest
from playwright.sync_api import expect

from conftest import choose, fresh_page, go_to, metric, open_page, pick_model, query_of, type_into
from dcsim.model.config import ModelConfig
from dcsim.quant import formats
from dcsim.quantities import units
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import parse_mesh

pytestmark = pytest.mark.browser

LINK = "/serving?preset=llama2-70b&mesh=model%3D4&device=h100-sxm&concurrency=32"


def engine(preset: str, **settings):
    return compute_serving(
        ModelConfig(preset=preset), Serving(mesh=parse_mesh("model=4"), device="h100-sxm", concurrency=32, **settings)
    )


def test_a_context_change_shows_the_new_figure_and_the_link_reopens_it(server, browser, page):
    open_page(page, server + LINK)
    expect(metric(page, "KV cache")).to_have_text(units.bytes_exact(engine("llama2-70b").kv_bytes_per_device))
    page.screenshot(path="/tmp/serving-llama2-70b.png", full_page=True)
    type_into(page, page.get_by_label("Context (tokens a sequence)"), "2048")
    expected = units.bytes_exact(engine("llama2-70b", context=2048).kv_bytes_per_device)
    expect(metric(page, "KV cache")).to_have_text(expected)
    expect(page).to_have_url(re.compile(r"[?&]context=2048(&|$)"))
    assert query_of(page)["device"] == "h100-sxm"
    with fresh_page(browser, page.url) as fresh:
        expect(metric(fresh, "KV cache")).to_have_text(expected)


def test_a_link_to_another_model_shows_only_that_models_numbers(server, browser, page):
    open_page(page, server + LINK)
    expect(metric(page, "KV cache")).to_have_text(units.bytes_exact(engine("llama2-70b").kv_bytes_per_device))
    gemma = LINK.replace("llama2-70b", "gemma2-2b").replace("model%3D4", "model%3D4")
    open_page(page, server + gemma)
    expect(metric(page, "KV cache")).to_have_text(units.bytes_exact(engine("gemma2-2b").kv_bytes_per_device))
    expect(metric(page, "Weights")).to_have_text(units.bytes_exact(engine("gemma2-2b").weights_bytes_per_device))
    page.screenshot(path="/tmp/serving-gemma2-2b.png", full_page=True)


def test_choosing_a_format_changes_every_byte_figure_and_the_link_keeps_it(server, browser, page):
    open_page(page, server + LINK)
    plain = engine("llama2-70b")
    expect(metric(page, "Weights")).to_have_text(units.bytes_exact(plain.weights_bytes_per_device))
    choose(page, "Weights format", "gptq-int4: " + formats.SUMMARIES["gptq-int4"])
    quantized = engine("llama2-70b", weights="gptq-int4")
    expect(metric(page, "Weights")).to_have_text(units.bytes_exact(quantized.weights_bytes_per_device))
    expect(metric(page, "Total")).to_have_text(units.bytes_exact(quantized.total_bytes_per_device))
    expect(metric(page, "Max concurrency at the context")).to_have_text(f"{quantized.max_concurrency:,} sequences")
    assert quantized.max_concurrency > plain.max_concurrency
    expect(page).to_have_url(re.compile(r"[?&]weights=gptq-int4(&|$)"))
    type_into(page, page.get_by_label("Group (input features a scale)"), "64")
    grouped = engine("llama2-70b", weights="gptq-int4", group=64)
    expect(metric(page, "Weights")).to_have_text(units.bytes_exact(grouped.weights_bytes_per_device))
    expect(page).to_have_url(re.compile(r"[?&]group=64(&|$)"))
    page.get_by_text("Every array in gptq-int4").click()
    page.screenshot(path="/tmp/serving-llama2-70b-gptq.png", full_page=True)
    with fresh_page(browser, page.url) as fresh:
        expect(metric(fresh, "Weights")).to_have_text(units.bytes_exact(grouped.weights_bytes_per_device))


def test_the_device_bar_draws_its_parts(server, page):
    """The stacked bar of one device is painted, not only its axis: the weights' colour covers about
    the weights' share of the bar (16.06 GiB of 80 GiB here). Fitting the chart's height to 70 px
    (Streamlit's default autosize) once left the bar no room under its axis and legend."""
    import io

    from PIL import Image

    from dcsim.report.serving_charts import PART_COLOURS

    open_page(page, server + LINK.replace("model%3D4", "model%3D8").replace("&concurrency=32", ""))
    chart = page.get_by_test_id("stVegaLiteChart").first
    expect(chart.locator("canvas, svg").first).to_be_visible()
    page.wait_for_timeout(500)  # vega paints after the element appears
    image = Image.open(io.BytesIO(chart.screenshot())).convert("RGB")
    weights = tuple(int(PART_COLOURS["Weights"][i : i + 2], 16) for i in (1, 3, 5))
    near = sum(
        1 for pixel in image.get_flattened_data() if max(abs(a - b) for a, b in zip(pixel, weights, strict=True)) <= 8
    )
    assert near >= 0.1 * image.width * 20, f"{near} pixels of the weights' colour in a {image.size} chart"


def _pick_preset_on_the_model_page(page, title: str) -> None:
    go_to(page, "Model")
    pick_model(page, title)
    go_to(page, "Serving")


def test_the_default_context_follows_the_model_both_ways(server, page):
    open_page(page, server + "/serving?preset=llama2-70b")
    context = page.get_by_label("Context (tokens a sequence)")
    expect(context).to_have_value("4096")
    for title, expected in (("GPT-2 xl", "1024"), ("Llama 2 70B", "4096")):
        _pick_preset_on_the_model_page(page, title)
        expect(page.get_by_text(f"Model: {title}")).to_have_count(1)
        expect(context).to_have_value(expected)  # GPT-2's 1,024 positions, then Llama's 4,096 again
        expect(page).to_have_url(re.compile(rf"[?&]context={expected}(&|$)"))
        expect(page.get_by_text("cannot be served as asked")).to_have_count(0)
