"""A capacity meeting opening its links at once: N sessions, each on its own Memory or Serving link,
against one dashboard server, as a ratio to one visitor alone (issue 46, item 10).

    python bench/bench_crowd.py --visitors 8 --rounds 3 [--chromium]

Each visitor is a protocol-level client (``bench_load.py``'s method: Streamlit's own WebSocket
protocol and protobufs, so the clock measures the server, not eight Chromium tabs on two cores). A
visit sends the page's first run with its link (``page_name`` memory or serving, the link's query
string) and ends at ``script_finished``; it fails on an exception, an error alert, or a figure
another visitor's settings would give (each link's sequence or context is its own, and the page
must rewrite the link to it). First one visitor alone opens ``--rounds`` links of its own (the
uncontended time, after a warm-up visit that imports everything); then the crowd: ``--visitors``
sessions at once, ``--rounds`` times, every visit on a configuration no one opened before, so each
does the engine's work (a trace, a layout, a serving report) rather than reading a cache.

``--chromium`` makes every visitor a real headless Chromium page instead (Debian's, at
/usr/bin/chromium), as the issue's repro did: a visit then ends when the page's first chart is drawn
and its run has ended, and the server's CPU seconds beside the wall show how much of the crowd's
time is the server's and how much the browsers' own, which share the same two cores here.

``--servers N`` starts N server processes and spreads the visitors over them, as a proxy with sticky
sessions in front of one process a core does (docs/hosting.md).

The ratio is the crowd's median visit over the lone visitor's median visit. Everything talks to
127.0.0.1 and stops by itself (``--deadline``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import websockets  # noqa: E402  (a dependency of Streamlit 1.67 itself)
from bench_load import cpu_seconds, memory, server_pid  # noqa: E402
from streamlit.proto.Alert_pb2 import Alert  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from conftest import streamlit_server  # noqa: E402

VISIT_SECONDS = 180


def link(index: int) -> tuple[str, dict[str, str], str]:
    """The ``index``-th visitor's page, link and own setting (key): Memory and Serving alternate,
    each with a sequence or context (512 to 3,704 tokens, within Llama 2 7B's 4,096) nobody else
    in the run opens."""
    if index % 2 == 0:
        query = {"preset": "llama2-7b", "mesh": "data=8", "seq": str(512 + 8 * (index % 400)), "mb": "1"}
        return "memory", query, "seq"
    query = {"preset": "llama2-7b", "mesh": "model=2", "context": str(512 + 8 * (index % 400)), "device": "h100-sxm"}
    return "serving", query, "context"


async def visit(url: str, index: int) -> tuple[float, list[str]]:
    """One visitor's first run of its link: seconds until the run ended, and what went wrong."""
    page, query, own = link(index)
    message = BackMsg()
    message.rerun_script.query_string = urlencode(query)
    message.rerun_script.page_name = page
    problems: list[str] = []
    started = time.perf_counter()
    ws_url = url.replace("http://", "ws://", 1) + "/_stcore/stream"
    try:
        async with websockets.connect(ws_url, subprotocols=["streamlit"], max_size=None) as ws:
            await ws.send(message.SerializeToString())
            while True:
                forward = ForwardMsg()
                forward.ParseFromString(await asyncio.wait_for(ws.recv(), VISIT_SECONDS))
                kind = forward.WhichOneof("type")
                if kind == "page_info_changed":
                    got = parse_qs(forward.page_info_changed.query_string).get(own)
                    if got != [query[own]]:
                        problems.append(f"{own} rewritten to {got} where {query[own]} is this visitor's")
                elif kind == "delta" and forward.delta.WhichOneof("type") == "new_element":
                    element = forward.delta.new_element
                    if element.WhichOneof("type") == "exception":
                        problems.append(f"exception: {element.exception.message}")
                    elif element.WhichOneof("type") == "alert" and element.alert.format == Alert.ERROR:
                        problems.append(f"error: {element.alert.body[:120]}")
                elif kind == "script_finished":
                    break
    except (OSError, TimeoutError, websockets.WebSocketException) as err:
        problems.append(f"{type(err).__name__}: {err}")
    return time.perf_counter() - started, problems


async def chromium_visit(browser, url: str, index: int) -> tuple[float, list[str]]:
    """One visitor in a real Chromium page: seconds until its first chart is drawn and the run has
    ended, and what went wrong."""
    page_name, query, own = link(index)
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    problems: list[str] = []
    started = time.perf_counter()
    try:
        await page.goto(f"{url}/{page_name}?{urlencode(query)}")
        await page.wait_for_selector('[data-testid="stVegaLiteChart"]', timeout=VISIT_SECONDS * 1000)
        await page.wait_for_selector(
            '[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=VISIT_SECONDS * 1000
        )
        seconds = time.perf_counter() - started
        if parse_qs(page.url.partition("?")[2]).get(own) != [query[own]]:
            problems.append(f"address bar {page.url} lost {own}={query[own]}")
        for test_id in ("stException", "stAlertContentError"):
            problems += [
                f"{test_id}: {text[:120]}"
                for text in await page.locator(f'[data-testid="{test_id}"]').all_inner_texts()
            ]
    finally:
        await context.close()
    return seconds, problems


async def crowd(urls: list[str], visitors: int, rounds: int, first: int, browser=None) -> tuple[list[float], list[str]]:
    """``visitors`` at once, ``rounds`` times; visitor i on server i mod len(urls), as a proxy with
    sticky sessions spreads them."""
    times, problems = [], []
    for round_ in range(rounds):
        base = first + round_ * visitors
        if browser is None:
            done = await asyncio.gather(*(visit(urls[i % len(urls)], base + i) for i in range(visitors)))
        else:
            done = await asyncio.gather(
                *(chromium_visit(browser, urls[i % len(urls)], base + i) for i in range(visitors))
            )
        times += [seconds for seconds, _ in done]
        problems += [problem for _, found in done for problem in found]
    return times, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--visitors", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chromium", action="store_true", help="every visitor a real headless Chromium page")
    parser.add_argument("--servers", type=int, default=1, help="server processes, visitors spread over them")
    parser.add_argument("--deadline", type=float, default=600)
    args = parser.parse_args()

    async def measure(urls: list[str], browser=None) -> None:
        for url in urls:  # warm-up: imports and page compilation
            await visit(url, 10_000)
            await visit(url, 10_001)
        pids = [server_pid(url) for url in urls]
        alone, problems = await crowd(urls[:1], 1, 2 * args.rounds, 0, browser)
        cpu_before, wall_before = sum(map(cpu_seconds, pids)), time.perf_counter()
        crowded, more = await crowd(urls, args.visitors, args.rounds, 1_000, browser)
        cpu, wall = sum(map(cpu_seconds, pids)) - cpu_before, time.perf_counter() - wall_before
        problems += more
        solo, median = statistics.median(alone), statistics.median(crowded)
        kind = "Chromium pages" if browser is not None else "protocol clients"
        print(f"{kind}: alone median {solo:.2f} s ({min(alone):.2f}-{max(alone):.2f})")
        print(
            f"{args.visitors} at once x {args.rounds}: median {median:.2f} s, max {max(crowded):.2f} s, "
            f"ratio {median / solo:.2f}x; crowd wall {wall:.1f} s, server processes' CPU {cpu:.1f} s"
        )
        print(f"servers: {len(urls)}; memory: {[memory(pid) for pid in pids]}")
        print(f"problems: {len(problems)}" + "".join(f"\n  {p}" for p in problems[:10]))

    async def run(urls: list[str]) -> None:
        if not args.chromium:
            await measure(urls)
            return
        from playwright.async_api import async_playwright

        from conftest import CHROMIUM, CHROMIUM_ARGS

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            await measure(urls, browser)
            await browser.close()

    with contextlib.ExitStack() as servers:
        urls = [servers.enter_context(streamlit_server()) for _ in range(args.servers)]
        asyncio.run(asyncio.wait_for(run(urls), args.deadline))


if __name__ == "__main__":
    main()
