"""The Layout page in real headless Chromium: links that reopen exactly, widgets that rewrite the
URL, downloads, impossible and hostile requests, and settings kept across page switches."""

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import download_from, fresh_page, metric, open_page, query_of, wait_for_app

pytestmark = pytest.mark.browser

GOLDEN_LINK = "/layout?input_dim=8&layers=8&mesh=data%3D4&strategy=fsdp"


def choose_strategy(page, name):
    page.get_by_role("combobox", name="Strategy").click()
    page.get_by_role("option", name=name, exact=True).click()
    wait_for_app(page)


def mesh_box(page):
    return page.get_by_role("textbox", name="Mesh: AXIS=SIZE, comma separated")


def test_a_layout_link_opens_with_its_numbers(server, page):
    open_page(page, server + GOLDEN_LINK)
    expect(metric(page, "Values per device")).to_have_text("18")
    expect(metric(page, "Ideal share (total / devices)")).to_have_text("18")
    expect(metric(page, "Devices")).to_have_text("4")
    expect(mesh_box(page)).to_have_value("data=4")
    assert query_of(page)["mesh"] == "data=4" and query_of(page)["strategy"] == "fsdp"


def test_changing_the_strategy_changes_numbers_and_url_which_reopen(server, browser, page):
    open_page(page, server + GOLDEN_LINK)
    choose_strategy(page, "replicated")
    expect(metric(page, "Values per device")).to_have_text("72")
    expect(metric(page, "Replication factor")).to_have_text("4x")
    expect(page).to_have_url(re.compile(r"[?&]strategy=replicated(&|$)"))
    link = page.url

    with fresh_page(browser, link) as fresh:
        expect(metric(fresh, "Values per device")).to_have_text("72")
        expect(fresh.get_by_role("combobox", name="Strategy")).to_have_value("replicated")
        expect(mesh_box(fresh)).to_have_value("data=4")
        assert query_of(fresh) == query_of(page)


def test_editing_the_mesh_and_rules(server, page):
    open_page(page, server + GOLDEN_LINK)
    mesh_box(page).fill("data=2,model=2")
    mesh_box(page).press("Enter")
    expect(metric(page, "Devices")).to_have_text("4")
    expect(page).to_have_url(re.compile(r"mesh=data%3D2%2Cmodel%3D2"))
    choose_strategy(page, "tensor")
    expect(metric(page, "Values per device")).to_have_text("36")
    expect(metric(page, "Total stored values")).to_have_text("144")
    choose_strategy(page, "custom")
    rules = page.get_by_role("textbox", name="Custom rules: one PATTERN=SPEC a line, first match wins")
    rules.fill("*/kernel=data,model\n*/bias=None")
    rules.press("Control+Enter")
    expect(metric(page, "Values per device")).to_have_text("24")  # 8x8 / 4 + the whole bias
    # one rule a line: the newline travels as %0A
    expect(page).to_have_url(re.compile(r"rules=%2A%2Fkernel%3Ddata%2Cmodel%0A%2A%2Fbias%3DNone(&|$)"))
    assert query_of(page)["rules"] == "*/kernel=data,model\n*/bias=None"


def test_an_impossible_layout_explains_itself(server, page):
    open_page(page, f"{server}/layout?input_dim=8&layers=5&mesh=model%3D2&strategy=tensor")
    error = page.locator('[data-testid="stAlertContentError"]').first
    expect(error).to_contain_text("`Dense_0/kernel` (shape 8x5) cannot be split")
    expect(error).to_contain_text("mesh axis `model` (size 2) does not divide evenly")
    expect(metric(page, "Values per device")).to_have_text("n/a")
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    expect(page.locator('[data-testid="stVegaLiteChart"]')).to_have_count(2)


def test_csv_and_json_downloads(server, page):
    open_page(page, f"{server}/layout?input_dim=8&layers=8&mesh=data%3D2%2Cmodel%3D2&strategy=tensor")
    download = download_from(page, "Download the per-array table (CSV)")
    lines = Path(download.path()).read_text().splitlines()
    assert lines[0].startswith("path,status,shape,partition_spec,shard_shape,values_per_shard")
    assert lines[1].startswith("Dense_0/kernel,split,8x8,\"P(None, 'model')\",8x4,32,2,128,")
    download = download_from(page, "Download the layout (JSON)")
    record = json.loads(Path(download.path()).read_text())
    assert (record["values_per_device"], record["total_stored_values"], record["num_devices"]) == (36, 144, 4)
    assert record["mesh_text"] == "data=2,model=2"


@pytest.mark.parametrize(
    "query",
    [
        "mesh=" + "data%3D4%2C" * 1000,
        "mesh=%3Cscript%3Ealert(1)%3C/script%3E",
        "strategy=(.*)*z",
        "strategy=custom&rules=" + "x" * 10_000,
        "strategy=custom&rules=%5Bx%5D(javascript:alert(1))%3D**b**",
        "mesh=data%3D1e400&strategy=custom&rules=*%3Dnope",
    ],
    ids=["mesh-10k", "mesh-script", "strategy-regex", "rules-10k", "rules-md", "mixed"],
)
def test_hostile_layout_links_warn_and_fall_back(server, page, query):
    open_page(page, f"{server}/layout?{query}")
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    expect(page.locator('[data-testid="stAlertContentWarning"]').first).to_be_visible()
    expect(metric(page, "Total parameters")).to_have_text("20")
    assert len(page.url) < 2000


def test_switching_pages_keeps_the_layout_settings(server, page):
    open_page(page, server + GOLDEN_LINK)
    choose_strategy(page, "replicated")
    page.get_by_role("link", name="Model", exact=True).click()
    expect(page).to_have_url(re.compile(r"/model\?|/\?"))
    wait_for_app(page)
    assert "mesh" not in query_of(page)
    page.get_by_role("link", name="Layout", exact=True).click()
    expect(page).to_have_url(re.compile(r"/layout\?.*strategy=replicated"))
    expect(metric(page, "Values per device")).to_have_text("72")
    expect(mesh_box(page)).to_have_value("data=4")
