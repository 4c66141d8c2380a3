"""The Memory page in real headless Chromium: a link opens with the engine's figures, the ZeRO stage
picker changes the figure on screen and the URL (which reopens it), a budget without a unit is
explained, and XLA's check on a small mesh shows the match."""

import re

import pytest
from playwright.sync_api import expect

from conftest import choose, fresh_page, go_to, metric, open_page, pick_model, query_of, wait_for_app
from dcsim import links
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.count import count_params
from dcsim.quantities import units
from dcsim.sharding.meshes import parse_mesh

pytestmark = pytest.mark.browser

LINK = "/memory?input_dim=8&layers=8&mesh=data%3D4&strategy=fsdp&zero=3&optim=adam&devmem=1KiB"


def engine(zero: int):
    """The engine's answer for the link's model and mesh under ZeRO ``zero``."""
    report = count_params(links.decode({"input_dim": ["8"], "layers": ["8"]}).config)
    return compute_memory(report, parse_mesh("data=4"), "fsdp", (), Training.stage(zero))


def engine_total(zero: int) -> str:
    """What the page must show as the total per device: the engine's answer, formatted."""
    return units.bytes_exact(engine(zero).total_bytes_per_device)


def test_the_zero_stage_changes_the_figure_and_the_url_which_reopen(server, browser, page):
    open_page(page, server + LINK)
    expect(metric(page, "Total per device")).to_have_text(engine_total(3))
    assert query_of(page)["zero"] == "3" and query_of(page)["devmem"] == "1KiB"
    choose(page, "ZeRO stage: which parts are split over the mesh", "ZeRO-0: nothing split")
    expect(metric(page, "Total per device")).to_have_text(engine_total(0))
    expect(page).to_have_url(re.compile(r"[?&]zero=0(&|$)"))
    expect(metric(page, "Against the budget (1KiB)")).to_have_text("Fits: 444 bytes left")  # 1,024 - 580
    with fresh_page(browser, page.url) as fresh:
        expect(metric(fresh, "Total per device")).to_have_text(engine_total(0))
        expect(fresh.get_by_role("combobox", name="ZeRO stage: which parts are split over the mesh")).to_have_value(
            "ZeRO-0: nothing split"
        )
        assert query_of(fresh) == query_of(page)


def test_a_budget_without_a_unit_is_explained(server, page):
    open_page(page, server + LINK)
    box = page.get_by_role("textbox", name="Budget per device")
    box.fill("80")
    box.press("Enter")
    wait_for_app(page)
    error = page.locator('[data-testid="stAlertContentError"]').first
    expect(error).to_contain_text("Budget: the budget needs a unit")
    expect(error).to_contain_text("Showing the last valid budget: 1KiB")
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    assert query_of(page)["devmem"] == "1KiB"


def test_verify_with_xla_on_a_small_mesh_shows_the_match(server, page):
    open_page(page, server + LINK)
    page.get_by_role("button", name="Verify with XLA").click()
    expect(metric(page, "Match")).to_have_text("yes, to the byte", timeout=60_000)
    memory = engine(3)
    expected = units.bytes_exact(memory.total_bytes_per_device + 8 * memory.num_arrays)  # XLA's tuple table
    expect(metric(page, "XLA: output bytes per device")).to_have_text(expected)
    expect(metric(page, "Expected by dcsim")).to_have_text(expected)
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)


def test_after_a_switch_to_gpt2_the_refused_sequence_gives_no_verdict_and_comes_back_at_its_limit(server, page):
    """Issue 46's switch: Llama 3 8B at 8,192 tokens, then GPT-2 small (1,024 positions) on the Model
    page, then back to Memory: no "fits" while the sequence is refused; one click takes 1,024 tokens,
    and the verdict and the link follow."""
    open_page(page, f"{server}/memory?preset=llama3-8b&mesh=data%3D8&optim=adamw&master=float32&seq=8192&remat=full")
    expect(page.get_by_text("Mesh data=8 fits:", exact=False)).to_be_visible()
    go_to(page, "Model")
    pick_model(page, "GPT-2 small")
    go_to(page, "Memory")
    expect(page.get_by_text("No verdict for data=8: the step cannot be counted", exact=False)).to_be_visible()
    expect(page.get_by_text("Mesh data=8 fits:", exact=False)).to_have_count(0)
    page.get_by_role("button", name="Use 1,024 tokens, this model's positions").click()
    expect(page.get_by_text("Mesh data=8 fits:", exact=False)).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]seq=1024(&|$)"))
    # the box says what the figures are for (a fragment-keyed rerun once left it at 8192 in Chromium)
    expect(page.get_by_role("textbox", name="Sequence (tokens)")).to_have_value("1024")
