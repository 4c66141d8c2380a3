"""The everyday journey's speed against Streamlit's own floor, in one run, in real Chromium.

    python bench/bench_journey.py --rounds 7 --changes 12

Two servers run side by side on loopback, both warmed by one visit first: dcsim (``app.py``) and
``bench/hello_app.py`` (a number input and one metric: the least a Streamlit page does). Rounds
interleave the targets so a shared machine's swings fall on all of them alike:

- first number: a new visitor (a fresh browser context: empty cache, new session) opens the
  landing page, a Llama 2 70B preset link, and the hello-world app; the clock is the page's own
  ``performance.now()`` (from navigation start) when the ideal share first shows its expected
  exact text, read by a MutationObserver installed before any page script runs, so Playwright's
  polling does not round the figure;
- shard change: on an open page, from the Enter key's keydown (in the page's clock) to the new
  share's exact text in the DOM, alternating between the Llama 2 70B page and the hello-world app.

It prints the medians, each ratio to the hello-world app, and the load average, as markdown.
Everything talks to 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from playwright.sync_api import sync_playwright  # noqa: E402

from conftest import CHROMIUM, CHROMIUM_ARGS, streamlit_server, wait_for_app  # noqa: E402
from dcsim.model.config import ModelConfig  # noqa: E402
from dcsim.model.count import count_params  # noqa: E402
from dcsim.quantities import units  # noqa: E402

LLAMA2_70B = count_params(ModelConfig(preset="llama2-70b")).total_params
SHARE = "Ideal share per shard"

# Marks, in the page's clock, the first moment the share metric reads ``window.__want``; and the
# keydown of Enter, where a shard change starts.
PROBE = """
window.__marks = {};
window.__want = null;
window.__check = function () {
  const want = window.__want;
  if (!want || window.__marks[want.key] !== undefined) return;
  for (const card of document.querySelectorAll('[data-testid="stMetric"]')) {
    const label = card.querySelector('[data-testid="stMetricLabel"]');
    const value = card.querySelector('[data-testid="stMetricValue"]');
    if (label && value && label.textContent.trim() === want.label && value.textContent.trim() === want.value) {
      window.__marks[want.key] = performance.now();
      return;
    }
  }
};
new MutationObserver(window.__check).observe(document, {subtree: true, childList: true, characterData: true});
document.addEventListener('keydown', (event) => {
  if (event.key === 'Enter') window.__marks['enter'] = performance.now();
}, true);
"""


@contextlib.contextmanager
def beside_the_floor():
    """dcsim (``app.py``) and ``bench/hello_app.py`` served side by side on loopback, and headless
    Chromium: the two URLs and the browser, all stopped when the block ends."""
    with (
        streamlit_server() as dcsim_url,
        streamlit_server(script="bench/hello_app.py") as hello_url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield dcsim_url, hello_url, browser
        finally:
            browser.close()


def share_text(total: int, shards: int, hello: bool) -> str:
    exact = Fraction(total, shards)
    return f"{float(exact):g}" if hello else units.share_short(exact)


def want(page, key: str, label: str, value: str) -> None:
    script = "([key, label, value]) => { window.__want = {key, label, value}; window.__check(); }"
    page.evaluate(script, [key, label, value])


def wait_mark(page, key: str, limit: float = 60.0) -> float:
    page.wait_for_function(f"window.__marks[{key!r}] !== undefined", timeout=limit * 1000, polling=50)
    return page.evaluate(f"window.__marks[{key!r}]")


def first_number(browser, url: str, total: int, hello: bool) -> float:
    """Milliseconds from navigation start to the ideal share of 2 shards on screen, new visitor."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(f"{PROBE}\nwindow.__want = {{key: 'first', label: '{SHARE} (2 shards)', "
                            f"value: '{share_text(total, 2, hello)}'}};")  # fmt: skip
    page = context.new_page()
    try:
        page.goto(url, wait_until="commit")
        return wait_mark(page, "first")
    finally:
        context.close()


def open_for_changes(browser, url: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(PROBE)
    page = context.new_page()
    page.goto(url)
    wait_for_app(page)
    return page


def timed_enter(page, field, value: str, key: str, label: str, text: str, limit: float = 60.0) -> float:
    """Milliseconds from the Enter keydown in ``field``, given ``value``, to the metric ``label``
    reading ``text`` (the mark ``key``); then the run is waited out."""
    field.fill(value)
    page.evaluate("delete window.__marks['enter']")
    want(page, key, label, text)
    field.press("Enter")
    done = wait_mark(page, key, limit)
    started = page.evaluate("window.__marks['enter']")
    wait_for_app(page)
    return done - started


def shard_change(page, shards: int, total: int, hello: bool) -> float:
    """Milliseconds from the Enter keydown to the new share's exact text."""
    field = page.get_by_role("spinbutton", name="Number of checkpoint shards")
    label = f"{SHARE} ({shards:,} shards)"
    return timed_enter(page, field, str(shards), f"change{shards}", label, share_text(total, shards, hello))


def summary(name: str, values: list[float], floor: list[float] | None) -> str:
    median = statistics.median(values)
    ratio = f"{median / statistics.median(floor):.2f}x" if floor else "1.00x (the floor)"
    spread = f"{min(values):.0f}-{max(values):.0f}"
    return f"| {name} | {median:.0f} ms | {spread} ms | {ratio} |"


def print_summaries(times: dict[str, list[float]], floor: str) -> None:
    """``times`` by target as a Markdown table, each median against ``floor``'s (the hello-world app)."""
    print("| target | median | range | ratio to the hello-world app |")
    print("|---|---|---|---|")
    for name, values in times.items():
        print(summary(name, values, None if name == floor else times[floor]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="new visitors per target (default 7)")
    parser.add_argument("--changes", type=int, default=12, help="shard changes per app (default 12)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with beside_the_floor() as (dcsim_url, hello_url, browser):
        targets = {
            "hello-world app": (hello_url, 20, True),
            "dcsim landing page (/)": (dcsim_url, 20, False),
            "dcsim Llama 2 70B link (/?preset=llama2-70b)": (f"{dcsim_url}/?preset=llama2-70b", LLAMA2_70B, False),
        }
        for url, total, hello in targets.values():  # warm: imports, caches, the frontend's first load
            first_number(browser, url, total, hello)
        firsts: dict[str, list[float]] = {name: [] for name in targets}
        for _ in range(args.rounds):
            for name, (url, total, hello) in targets.items():
                firsts[name].append(first_number(browser, url, total, hello))

        llama = open_for_changes(browser, f"{dcsim_url}/?preset=llama2-70b")
        hello_page = open_for_changes(browser, hello_url)
        shard_change(llama, 3, LLAMA2_70B, False)  # warm
        shard_change(hello_page, 3, 20, True)
        changes: dict[str, list[float]] = {"hello-world app": [], "dcsim Llama 2 70B": []}
        for index in range(args.changes):
            shards = 4 + index % 9 + (index // 9) * 16
            changes["hello-world app"].append(shard_change(hello_page, shards, 20, True))
            changes["dcsim Llama 2 70B"].append(shard_change(llama, shards, LLAMA2_70B, False))
    load_after = os.getloadavg()[0]

    print(f"Load average (1 min): {load_before:.2f} before, {load_after:.2f} after; {os.cpu_count()} CPUs.\n")
    print("First number for a new visitor on a warm server (navigation start to the exact share on screen):\n")
    print_summaries(firsts, "hello-world app")
    print(f"\nShard change to the new share on screen ({args.changes} changes each, Enter keydown to text):\n")
    print_summaries(changes, "hello-world app")
    floor_median = statistics.median(changes["hello-world app"])
    gap = statistics.median(changes["dcsim Llama 2 70B"]) - floor_median
    print(f"\ndcsim's shard change is {gap:.0f} ms over the floor's median ({floor_median:.0f} ms).")


if __name__ == "__main__":
    main()
