"""What only a browser shows: the served app in real headless Chromium.

URL sync, reopening a link in a fresh page, grid edits, downloads, uploads, hostile links and a
base URL path behind a proxy: each needs the real frontend, so each is checked here.
"""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import (
    download_from,
    fresh_page,
    open_editor,
    open_page,
    query_of,
    share_link,
    streamlit_server,
    wait_for_app,
)
from dcsim.model.config import DenseLayer, ModelConfig

pytestmark = pytest.mark.browser

ROW_HEIGHT = 35  # the data editor's header and row height in pixels (Streamlit's default)


def metric(page, label):
    return page.locator('[data-testid="stMetric"]').filter(has_text=label).locator('[data-testid="stMetricValue"]')


def shards_input(page):
    return page.get_by_role("spinbutton", name="Number of checkpoint shards")


def test_landing_page_shows_the_seed_answer(server, page):
    open_page(page, server)
    expect(metric(page, "Total parameters")).to_have_text("20")
    expect(metric(page, "Ideal share per shard")).to_have_text("10")
    expect(metric(page, "Raw float32 payload")).to_have_text("80 bytes")
    expect(page.get_by_text("not the checkpoint size").first).to_be_visible()
    expect(page).to_have_url(re.compile(r"shards=2"))


def test_changing_shards_updates_the_share_and_the_url_which_reopens_it(server, browser, page):
    open_page(page, server)
    shards_input(page).fill("3")
    shards_input(page).press("Enter")
    expect(metric(page, "Ideal share per shard")).to_have_text("6.666…")
    expect(page).to_have_url(re.compile(r"[?&]shards=3(&|$)"))
    link = page.url

    with fresh_page(browser, link) as fresh:
        expect(metric(fresh, "Ideal share per shard")).to_have_text("6.666…")
        expect(metric(fresh, "Total parameters")).to_have_text("20")
        expect(shards_input(fresh)).to_have_value("3")


def test_the_copy_box_holds_the_link_of_this_view(server, page):
    open_page(page, f"{server}/shards?input_dim=784&layers=512x2_10&shards=8")
    code = share_link(page)
    expect(code).to_contain_text("/shards?v=2&input_dim=784&layers=512x2_10&batch=1&seed=0&shards=8")


def test_editing_a_layer_row_changes_the_count_and_the_link(server, page):
    open_page(page, server)
    open_editor(page)
    grid = page.locator('[data-testid="stDataFrame"]').first
    expect(grid.locator('[role="gridcell"]').first).to_be_attached()
    grid.scroll_into_view_if_needed()  # mouse clicks land on the viewport, and the grid sits below the answer
    box = grid.bounding_box()
    cell_editor = page.locator("input.gdg-input")  # the grid's overlay editor for one cell
    for _attempt in range(3):  # on a loaded machine the first double-click can land before the grid listens
        page.mouse.dblclick(box["x"] + box["width"] * 0.5, box["y"] + ROW_HEIGHT * 1.5)
        try:
            expect(cell_editor).to_be_focused(timeout=5_000)
            break
        except AssertionError:
            page.keyboard.press("Escape")
    cell_editor.fill("8")
    cell_editor.press("Enter")
    expect(metric(page, "Total parameters")).to_have_text("40")  # 4*8 + 8
    expect(page).to_have_url(re.compile(r"[?&]layers=8(&|$)"))


def test_switching_pages_keeps_the_configuration(server, page):
    open_page(page, f"{server}/?input_dim=784&layers=512x2_10&shards=3")
    page.get_by_role("link", name="Shards", exact=True).click()
    expect(page).to_have_url(re.compile(r"/shards\?"))
    expect(metric(page, "Total parameters")).to_have_text("669,706")
    expect(metric(page, "Ideal share per shard")).to_have_text("223,235.333…")
    page.get_by_role("link", name="Bytes", exact=True).click()
    expect(metric(page, "Raw float32 payload").first).to_have_text("2,678,824 bytes (2.55 MiB)")
    expect(page).to_have_url(re.compile(r"/bytes\?.*layers=512x2_10"))


def test_configuration_download_reopens_through_upload(server, page, tmp_path):
    open_page(page, f"{server}/?input_dim=784&layers=512x2_10&shards=8")
    download = download_from(page, "Download configuration (JSON)")
    saved_file = tmp_path / download.suggested_filename
    download.save_as(saved_file)
    assert saved_file.name == "dcsim-config.json"
    saved = ModelConfig.from_json(saved_file.read_bytes())
    assert saved == ModelConfig(
        input_dim=784, layers=(DenseLayer(features=512),) * 2 + (DenseLayer(features=10),), num_shards=8
    )

    open_page(page, server)
    expect(metric(page, "Total parameters")).to_have_text("20")
    page.get_by_text("Open a configuration file").click()
    page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(saved_file)
    expect(metric(page, "Total parameters")).to_have_text("669,706")
    expect(page).to_have_url(re.compile(r"layers=512x2_10"))


def test_a_hugging_face_config_opens_and_its_link_reopens_it(server, browser, page):
    hf_config = Path(__file__).parent / "data" / "hf" / "tinyllama-1.1b.json"
    open_page(page, f"{server}/?shards=4")
    page.get_by_text("Open a configuration file").click()
    page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(hf_config)
    expect(metric(page, "Total parameters")).to_have_text("1,100,048,384")  # transformers' num_parameters()
    expect(metric(page, "Ideal share per shard")).to_have_text("275,012,096")
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text("Counted as LlamaForCausalLM")).to_be_visible()
    expect(page).to_have_url(re.compile(r"model_type=llama&name=LlamaForCausalLM.*h\.num_kv_heads=4"))
    expect(page.get_by_role("combobox", name="Model")).to_have_value("LlamaForCausalLM (llama, from config.json)")

    with fresh_page(browser, page.url) as fresh:
        expect(metric(fresh, "Total parameters")).to_have_text("1,100,048,384")
        expect(metric(fresh, "Ideal share per shard")).to_have_text("275,012,096")


def test_per_layer_csv_download(server, page):
    open_page(page, f"{server}/?input_dim=784&layers=512x2_10")
    page.get_by_text("Parameters per layer (3)").click()  # the view is drawn when opened
    wait_for_app(page)  # a click on a button the run is still drawing can be lost on a loaded machine
    download = download_from(page, "Download per-layer table (CSV)")
    lines = Path(download.path()).read_text().splitlines()
    assert lines[0] == "path,num_arrays,num_params,percent_of_total"
    assert [line.split(",")[2] for line in lines[1:]] == ["401920", "262656", "5130"]


HOSTILE = [
    "?shards=1e400",
    "?shards=-1&input_dim=NaN&seed=99999999999999999999",
    "?layers=" + "9" * 20_000,
    "?layers=%3Cscript%3Ealert(1)%3C/script%3E",
    "?input_dim=[x](javascript:alert(1))",
    "?v=999",
    "?" + "&".join(f"k{index}=x" for index in range(900)),
    "?shards=%00%FF",
]


@pytest.mark.parametrize(
    "query", HOSTILE, ids=["1e400", "negative-nan", "20k-digits", "script", "md", "v999", "900-keys", "bytes"]
)
def test_hostile_links_warn_and_show_the_defaults(server, page, query):
    open_page(page, f"{server}/shards{query}")
    expect(metric(page, "Total parameters")).to_have_text("20")
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    if "k0=" not in query:
        expect(page.locator('[data-testid="stAlertContentWarning"]').first).to_be_visible()
    assert "k0" not in query_of(page) and query_of(page)["shards"] == "2"


def test_links_work_under_a_base_url_path(browser):
    with streamlit_server(base_path="dcsim") as url:
        page = browser.new_context().new_page()
        try:
            open_page(page, f"{url}/dcsim/shards?input_dim=8&layers=8&shards=3")
            expect(metric(page, "Total parameters")).to_have_text("72")
            expect(metric(page, "Ideal share per shard")).to_have_text("24")
            code = share_link(page)
            expect(code).to_contain_text("/dcsim/shards?v=2&input_dim=8&layers=8")
            # The landing page's questions are relative links: under the base path they stay under it.
            open_page(page, f"{url}/dcsim/")
            with page.context.expect_page() as opened:
                page.get_by_role("link", name=re.compile("How big is DeepSeek-V3")).click()
            answer = opened.value
            wait_for_app(answer)
            expect(answer).to_have_url(re.compile(r"/dcsim/\?.*preset=deepseek-v3"))
            expect(metric(answer, "Total parameters")).to_have_text("671,026,404,352")  # its model card's 671B
            expect(metric(answer, "Ideal share per shard")).to_contain_text("10,484,787,568")
        finally:
            page.context.close()


def test_a_preset_link_opens_and_a_hyperparameter_change_updates_count_and_link(server, page):
    open_page(page, f"{server}/?preset=gpt2-small")
    expect(metric(page, "Total parameters")).to_have_text("124,439,808")
    expect(metric(page, "Non-embedding parameters")).to_have_text("85,056,000")
    open_editor(page)
    layers = page.get_by_role("spinbutton", name="num_layers")
    layers.fill("6")
    layers.press("Enter")
    expect(metric(page, "Total parameters")).to_have_text("81,912,576")
    expect(page).to_have_url(re.compile(r"[?&]h\.num_layers=6(&|$)"))
