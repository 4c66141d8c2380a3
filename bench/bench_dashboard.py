"""Dashboard speed in real headless Chromium: first render after server start, and the time from
a changed shard count to the new numbers on screen.

    python bench/bench_dashboard.py --starts 3 --changes 15

Each start is a fresh ``streamlit run app.py`` on a loopback port; the clock runs from launching
the server process to the landing page's three numbers being visible (the server's own import
of Streamlit, the first script run with its JAX import, and the browser's render all count).
Changes type a new shard count into the Model page and stop the clock when the ideal-share metric
shows the expected exact text. Everything talks to 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from conftest import CHROMIUM, CHROMIUM_ARGS, _free_port, _healthy  # noqa: E402
from dcsim.quantities import units  # noqa: E402

TOTAL = 20  # the seed example's parameter count: the landing page's default


def metric(page, label):
    return page.locator('[data-testid="stMetric"]').filter(has_text=label).locator('[data-testid="stMetricValue"]')


def first_render(browser, limit: float = 120.0) -> tuple[float, float]:
    """Seconds from launching the server to the landing numbers on screen, and to health."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while not _healthy(url, timeout=1):
            if time.perf_counter() - started > limit or server.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        healthy = time.perf_counter() - started
        page = browser.new_page()
        page.goto(url)
        expect(metric(page, "Total parameters")).to_have_text("20", timeout=limit * 1000)
        expect(metric(page, "Raw float32 payload")).to_have_text("80 bytes")
        shown = time.perf_counter() - started
        page.close()
        return healthy, shown
    finally:
        server.terminate()
        server.wait(timeout=30)


def shard_changes(browser, url: str, count: int) -> list[float]:
    """Seconds from typing a shard count (Enter) to the exact new share on screen."""
    page = browser.new_page()
    page.goto(url)
    expect(metric(page, "Total parameters")).to_have_text("20", timeout=120_000)
    field = page.get_by_role("spinbutton", name="Number of checkpoint shards")
    times = []
    for index in range(count):
        shards = 3 + index % 7 + (index // 7) * 10
        expected = units.share_short(Fraction(TOTAL, shards))
        field.fill(str(shards))
        started = time.perf_counter()
        field.press("Enter")
        expect(metric(page, f"Ideal share per shard ({shards:,} shards)")).to_have_text(expected, timeout=30_000)
        times.append(time.perf_counter() - started)
    page.close()
    return times


PRESETS = ("gpt2-small", "llama2-70b", "resnet152", "bert-large", "vit-l16", "llama3-8b", "mlp-mnist", "gpt2-xl")


def preset_switches(browser, url: str) -> list[tuple[str, float]]:
    """Seconds from choosing a preset in the Model select box to its published count on screen
    (each preset's first visit: nothing cached)."""
    from dcsim.model.presets import PRESETS as TABLE

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    expect(metric(page, "Total parameters")).to_have_text("20", timeout=120_000)
    times = []
    for name in PRESETS:
        row = TABLE[name]
        select = page.get_by_role("combobox", name="Model")
        select.click()
        started = time.perf_counter()
        page.get_by_role("option", name=row.title, exact=False).first.click()
        expect(metric(page, "Total parameters")).to_have_text(f"{row.reference_params:,}", timeout=30_000)
        times.append((name, time.perf_counter() - started))
    page.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3, help="fresh server starts to time (default 3)")
    parser.add_argument("--changes", type=int, default=15, help="shard changes to time (default 15)")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        starts = [first_render(browser) for _ in range(args.starts)]
        from conftest import streamlit_server

        with streamlit_server() as url:
            shard_changes(browser, url, 2)  # warm: the first run imports JAX and fills the cache
            changes = shard_changes(browser, url, args.changes)
            switches = preset_switches(browser, url)
        browser.close()

    print("| start | server healthy | landing numbers visible |")
    print("|---|---|---|")
    for index, (healthy, shown) in enumerate(starts, 1):
        print(f"| {index} | {healthy:.2f} s | {shown:.2f} s |")
    print(f"\nMedian first render: {statistics.median(shown for _, shown in starts):.2f} s (target: within 4 s)\n")
    ordered = sorted(changes)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(
        f"Shard change to new numbers, {len(changes)} changes: median {statistics.median(changes) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms (target: median within 0.5 s)"
    )
    print("\n| preset chosen | to its published count on screen (uncached) |")
    print("|---|---|")
    for name, seconds in switches:
        print(f"| {name} | {seconds * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
