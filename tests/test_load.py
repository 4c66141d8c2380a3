"""A small load test against one real server: 6 protocol-level sessions and 1 Chromium page at once,
each on its own configuration, each changing its shard count: no errors, and every number each one
sees is its own. The full run (20 + 3, with latency and memory) is ``python bench/bench_load.py``.
No latency is asserted here: two shared cores make wall-clock figures a bench's business.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from pathlib import Path

import pytest

from conftest import CHROMIUM, _missing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_load

CLIENTS, PAGES, CHANGES = 6, 1, 3
DEADLINE_SECONDS = 120  # the run gives up by itself; on an idle machine it takes about 10 s


def test_plans_differ_and_know_their_exact_answers():
    plans = bench_load.plans(4, 2)
    assert [plan.total for plan in plans] == [
        (16 + 1) * 32 + (32 + 1) * 10,
        (19 + 1) * 33 + (33 + 1) * 11,
        (22 + 1) * 34 + (34 + 1) * 12,
        (25 + 1) * 35 + (35 + 1) * 13,
    ]
    assert plans[0].changes == (1_001, 1_002) and plans[3].changes == (1_301, 1_302)
    assert plans[0].share_label(1_001) == "Ideal share per shard (1,001 shards)"
    assert plans[0].share_text(4) == "218.5"  # 874 / 4
    assert "input_dim=16&layers=32_10" in plans[0].query()


def _metric(label: str, body: str) -> bench_load.ForwardMsg:
    msg = bench_load.ForwardMsg()
    msg.delta.new_element.metric.label = label
    msg.delta.new_element.metric.body = body
    return msg


def test_the_checker_flags_another_sessions_numbers_and_errors():
    """The load test is only as good as its checker: feed it what cross-talk would look like."""
    mine, theirs = bench_load.plans(2, 1)
    outcome = bench_load.Outcome(name=mine.name, kind="protocol")
    session = bench_load.ProtocolSession("http://127.0.0.1:1", mine, outcome)
    metrics = {}
    session._check(_metric("Total parameters", f"{mine.total:,}"), metrics)
    session._check(_metric(mine.share_label(2), mine.share_text(2)), metrics)
    assert outcome.cross_talk == [] and outcome.errors == []
    session._check(_metric("Total parameters", f"{theirs.total:,}"), metrics)
    session._check(_metric(theirs.share_label(3), theirs.share_text(3)), metrics)  # a count it never chose
    link = bench_load.ForwardMsg()
    link.page_info_changed.query_string = theirs.query()
    session._check(link, metrics)
    assert len(outcome.cross_talk) == 3
    alert = bench_load.ForwardMsg()
    alert.delta.new_element.alert.body = "boom"
    alert.delta.new_element.alert.format = bench_load.Alert.ERROR
    session._check(alert, metrics)
    assert outcome.errors == ["error alert: boom"]


@pytest.mark.browser
def test_concurrent_sessions_get_their_own_numbers_and_no_errors(server):
    if not Path(CHROMIUM).exists():
        _missing(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    # A thread of its own: the async Playwright run must not share a thread with the sync browser fixture.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(
            asyncio.run,
            bench_load.run_load(server, clients=CLIENTS, pages=PAGES, changes=CHANGES, deadline=DEADLINE_SECONDS),
        ).result(timeout=DEADLINE_SECONDS + 30)
    assert result.errors == []
    assert result.cross_talk == []
    assert len(result.latencies("protocol")) == CLIENTS * CHANGES
    assert len(result.latencies("chromium")) == PAGES * CHANGES
    # Every protocol session ran its first page load and each change to the end.
    assert sum(o.runs for o in result.outcomes if o.kind == "protocol") == CLIENTS * (1 + CHANGES)
    assert result.memory["VmHWM"] > 0


@pytest.mark.browser
def test_a_meeting_opening_its_memory_and_serving_links_at_once_sees_each_its_own(server):
    """bench_crowd's visitors, four at once on the shared server (Memory and Serving links, each
    with its own sequence or context, none opened before): every run ends, with no exception, no
    error and each link rewritten to its own value, while the runs take turns (dcsim.ui.turns)."""
    import bench_crowd

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        times, problems = pool.submit(
            asyncio.run, asyncio.wait_for(bench_crowd.crowd([server], 4, 1, 3_000), DEADLINE_SECONDS)
        ).result(timeout=DEADLINE_SECONDS + 30)
    assert problems == []
    assert len(times) == 4
