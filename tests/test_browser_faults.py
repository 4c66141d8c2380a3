"""Faults against a real server, driven from the Checkpoint page in Chromium: a child killed from
outside while it saves, a time limit passed, a temporary disk that fills up. Each shows its message,
leaves nothing in the server's temporary folder, and the same server then measures normally. And a
restart loses nothing: a link taken before it reopens the same numbers after it.

The server gets its own ``TMPDIR`` (so "nothing left behind" is checkable) and its children read
their fault from a file (``tests/faults.py``), so one server can fail and then succeed.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from urllib.parse import urlencode

import faults
import pytest
from playwright.sync_api import expect

from conftest import _free_port, metric, share_link, streamlit_server, type_into, wait_for_app
from dcsim.checkpoint.measurement import TIMEOUT_ENV

pytestmark = pytest.mark.browser

TIME_LIMIT = "12"  # seconds from the child's start: a hang is cut off at this; a normal measurement takes 1-3 s
# Each fault its own model: a model measured once is kept, and its button then says "Measure again".
DENSE_1024 = {"v": "2", "input_dim": "1024", "layers": "1024"}
DENSE_512 = {"v": "2", "input_dim": "1024", "layers": "512"}
DENSE_256 = {"v": "2", "input_dim": "1024", "layers": "256"}  # 1 MB: past the 64 KiB file limit below
RUN = "Save, measure and restore"


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """A server with its own temporary folder and a fault file the tests write."""
    server_tmp = tmp_path_factory.mktemp("server-tmp")
    own = tmp_path_factory.mktemp("faults")
    fault_file, paused = own / "fault.txt", own / "paused-pid"
    fault_file.write_text("")
    env = {"TMPDIR": str(server_tmp), TIMEOUT_ENV: TIME_LIMIT}
    with streamlit_server(env=env | faults.environment(fault_file=fault_file, paused=paused)) as url:
        yield url, server_tmp, fault_file, paused


def leftovers(server_tmp: Path) -> list[str]:
    return sorted(path.name for path in server_tmp.iterdir())


@pytest.mark.parametrize(
    ("fault", "query", "message"),
    [
        (
            "writing:pause",
            DENSE_1024,
            r"The measurement failed: the checkpoint measurement was killed by SIGKILL \(from outside",
        ),
        ("measuring:hang", DENSE_512, rf"The measurement was stopped: the time limit of {TIME_LIMIT} s passed"),
        (
            "fsize:65536",
            DENSE_256,
            r"The measurement failed: .*the temporary disk filled up while saving the checkpoint \([\d,]+ bytes free",
        ),
    ],
    ids=["killed-mid-save", "timeout", "temporary-disk-full"],
)
def test_a_fault_shows_its_message_leaves_nothing_and_the_server_measures_next(faulty, page, fault, query, message):
    url, server_tmp, fault_file, paused = faulty
    paused.unlink(missing_ok=True)
    fault_file.write_text(fault)
    page.goto(f"{url}/checkpoint?{urlencode(query)}")
    wait_for_app(page)
    page.get_by_role("button", name=RUN).click()
    if fault == "writing:pause":  # the child paused once its save began: killed from outside there
        os.kill(faults.wait_until_paused(paused), signal.SIGKILL)
    expect(page.get_by_text(re.compile(message))).to_be_visible(timeout=120_000)
    expect(page.get_by_text("temporary checkpoint was removed", exact=False)).to_be_visible()
    wait_for_app(page)
    assert leftovers(server_tmp) == []
    expect(metric(page, "On disk")).to_have_count(0)  # a failure is never kept

    # The same server, the same page: the fault gone, a measurement runs to the end.
    fault_file.write_text("")
    page.get_by_role("button", name=RUN).click()
    expect(metric(page, "Restored bit for bit")).to_have_text("Yes", timeout=120_000)
    wait_for_app(page)
    assert leftovers(server_tmp) == []


def test_a_restart_loses_nothing_a_link_holds(browser):
    """Configure on two pages, take the link from the copy box, restart the server on its port,
    open the link in a fresh browser context: the same numbers and settings come back."""
    port = _free_port()
    before = {}
    with streamlit_server(port=port) as url:
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.goto(url)
        wait_for_app(page)
        for label, value in (("Input dimension D", "300"), ("Number of checkpoint shards", "7")):
            # A change of the model remounts the form's inputs under new keys just after the run ends:
            # until the old one is gone the label names two boxes (seen in CI), which type_into waits out.
            type_into(page, page.get_by_role("spinbutton", name=label), value, then="Enter")
            wait_for_app(page)
        expect(metric(page, "Total parameters")).to_have_text("1,204")  # (300 + 1) x 4
        page.get_by_role("link", name="Checkpoint", exact=True).click()
        wait_for_app(page)
        dtype = page.get_by_role("combobox", name="Storage dtype")
        dtype.click()
        page.get_by_role("option", name="bfloat16").click()
        wait_for_app(page)
        expect(metric(page, "Raw payload (bfloat16)")).to_have_text("2,408 bytes (2.35 KiB)")
        for label in ("Total parameters", "Raw payload (bfloat16)"):
            before[label] = metric(page, label).inner_text()
        code = share_link(page)
        expect(code).to_contain_text("dtype=bfloat16")
        link = code.inner_text().strip()
        page.context.close()
    assert link.startswith(f"{url}/checkpoint?") and "input_dim=300" in link and "shards=7" in link

    with streamlit_server(port=port) as again:
        assert again == url
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        try:
            page.goto(link)
            wait_for_app(page)
            for label, value in before.items():
                expect(metric(page, label)).to_have_text(value)
            expect(share_link(page)).to_have_text(link)
            page.get_by_role("link", name="Model", exact=True).click()
            wait_for_app(page)
            expect(metric(page, "Ideal share per shard (7 shards)")).to_have_text("172")  # 1,204 / 7
        finally:
            page.context.close()
