"""A bounded load test on loopback: many concurrent sessions against one dashboard server, each with
its own configuration, each changing its shard count and checking that the numbers it gets back are
its own.

    python bench/bench_load.py --clients 20 --pages 3 --changes 5

Most sessions are protocol-level clients: they speak Streamlit's own WebSocket protocol
(``ws://127.0.0.1:PORT/_stcore/stream``, protobufs from ``streamlit.proto``) as the browser does,
with the ``websockets`` package Streamlit itself depends on. Each opens the Model page on its own
link (``BackMsg.rerun_script`` with the link's query string), finds the shard number input by its
label in the deltas, then sets it (a ``WidgetState`` with the input's id) and times the rerun until
the ideal-share metric for the new count arrives. The rest are real headless Chromium pages that
type the new count and wait for the metric on screen. Twenty browsers on two cores would mostly
measure the browsers: a protocol client costs the server the same script run for a fraction of the
client-side CPU.

Every number a session sees is checked against ``dcsim.count_params`` for its own configuration:
a total, a share or a rewritten link from another session is cross-talk, and an exception, an
error alert, a wrong figure or a timeout is an error. The server's peak resident memory is its
``VmHWM`` from ``/proc``. Everything talks to 127.0.0.1 and stops by itself (``--deadline``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path
from urllib.parse import parse_qs, urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import websockets  # noqa: E402  (a dependency of Streamlit 1.67 itself)
from streamlit.proto.Alert_pb2 import Alert  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

from conftest import CHROMIUM, CHROMIUM_ARGS, command_lines  # noqa: E402
from dcsim import links  # noqa: E402
from dcsim.model.config import DenseLayer, ModelConfig  # noqa: E402
from dcsim.model.count import count_params  # noqa: E402
from dcsim.quantities import units  # noqa: E402

SHARDS_LABEL = "Number of checkpoint shards"
TOTAL_LABEL = "Total parameters"
SHARE_PREFIX = "Ideal share per shard ("
STEP_SECONDS = 60.0  # one page load or one change, at most
KINDS = ("protocol", "chromium")


class LoadError(RuntimeError):
    """A session saw something it must not: an error, a wrong number or another session's number."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """One session's configuration and the shard counts it will change to, with the exact answers."""

    name: str
    config: ModelConfig
    changes: tuple[int, ...]

    @property
    def total(self) -> int:
        return count_params(self.config).total_params

    def query(self, shards: int | None = None) -> str:
        params = links.encode(self.config)
        if shards is not None:
            params["shards"] = str(shards)
        return urlencode(params)

    def share_label(self, shards: int) -> str:
        return f"{SHARE_PREFIX}{shards:,} shards)"

    def share_text(self, shards: int) -> str:
        return units.share_short(Fraction(self.total, shards))


def plans(count: int, changes: int) -> list[Plan]:
    """``count`` different configurations: every total, input width and shard count is unique."""
    made = []
    for index in range(count):
        config = ModelConfig(
            input_dim=16 + 3 * index,
            layers=(DenseLayer(features=32 + index), DenseLayer(features=10 + index)),
            num_shards=2 + index,
        )
        shards = tuple(1_000 + 100 * index + step for step in range(1, changes + 1))
        made.append(Plan(name=f"session {index + 1}", config=config, changes=shards))
    assert len({plan.total for plan in made}) == count, "the totals must differ to show cross-talk"
    return made


@dataclasses.dataclass
class Outcome:
    """What one session measured and saw."""

    name: str
    kind: str  # "protocol" or "chromium"
    latencies: list[float] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    cross_talk: list[str] = dataclasses.field(default_factory=list)
    runs: int = 0


# --- protocol-level client -----------------------------------------------------------------------------


def _rerun(query: str, widgets: list[WidgetState] = ()) -> bytes:
    msg = BackMsg()
    msg.rerun_script.query_string = query
    msg.rerun_script.page_script_hash = ""  # the default page: Model
    msg.rerun_script.widget_states.widgets.extend(widgets)
    return msg.SerializeToString()


class ProtocolSession:
    """One browser tab's worth of Streamlit protocol over one WebSocket."""

    def __init__(self, url: str, plan: Plan, outcome: Outcome) -> None:
        self.ws_url = url.replace("http://", "ws://", 1) + "/_stcore/stream"
        self.plan = plan
        self.outcome = outcome
        self.query = plan.query()
        self.shards_id: str | None = None
        self.seen_shards = {plan.config.num_shards}

    def _check(self, msg: ForwardMsg, metrics: dict[str, str]) -> None:
        """Record errors and anything that is not this session's own."""
        plan, outcome = self.plan, self.outcome
        kind = msg.WhichOneof("type")
        if kind == "ref_hash":
            outcome.errors.append("a cached-message reference this client cannot resolve")
        elif kind == "page_info_changed":
            query = msg.page_info_changed.query_string
            got = parse_qs(query)
            if got.get("input_dim") != [str(plan.config.input_dim)] or got.get("layers") != [
                links.encode_layers(plan.config.layers)
            ]:
                outcome.cross_talk.append(f"link rewritten to {query!r}")
            self.query = query
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            element = msg.delta.new_element
            which = element.WhichOneof("type")
            if which == "exception":
                outcome.errors.append(f"exception: {element.exception.type}: {element.exception.message}")
            elif which == "alert" and element.alert.format == Alert.ERROR:
                outcome.errors.append(f"error alert: {element.alert.body}")
            elif which == "number_input" and element.number_input.label == SHARDS_LABEL:
                self.shards_id = element.number_input.id
            elif which == "metric":
                label, body = element.metric.label, element.metric.body
                metrics[label] = body
                if label == TOTAL_LABEL and body != units.count(plan.total):
                    outcome.cross_talk.append(f"total {body} where {plan.total:,} is this session's")
                if label.startswith(SHARE_PREFIX):
                    shards = int(label[len(SHARE_PREFIX) :].split()[0].replace(",", ""))
                    if shards not in self.seen_shards or body != plan.share_text(shards):
                        outcome.cross_talk.append(f"{label}: {body}")

    async def _run(self, ws, payload: bytes, want_label: str, want_text: str) -> float:
        """Send one rerun; return the seconds until the wanted metric arrives, after the run ends."""
        started = time.perf_counter()
        await ws.send(payload)
        arrived = None
        metrics: dict[str, str] = {}
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(await asyncio.wait_for(ws.recv(), STEP_SECONDS))
            self._check(msg, metrics)
            if arrived is None and metrics.get(want_label) == want_text:
                arrived = time.perf_counter() - started
            if msg.WhichOneof("type") == "script_finished":
                break
        self.outcome.runs += 1
        if arrived is None:
            raise LoadError(f"{want_label} never showed {want_text} (last seen: {metrics.get(want_label)!r})")
        return arrived

    async def run(self) -> None:
        plan = self.plan
        async with websockets.connect(self.ws_url, subprotocols=["streamlit"], max_size=None) as ws:
            shards = plan.config.num_shards
            await self._run(ws, _rerun(self.query), plan.share_label(shards), plan.share_text(shards))
            if self.shards_id is None:
                raise LoadError(f"no number input labelled {SHARDS_LABEL!r} in the deltas")
            for shards in plan.changes:
                self.seen_shards.add(shards)
                change = WidgetState(id=self.shards_id, int_value=shards)
                latency = await self._run(
                    ws, _rerun(self.query, [change]), plan.share_label(shards), plan.share_text(shards)
                )
                self.outcome.latencies.append(latency)
            if f"shards={plan.changes[-1]}" not in self.query.split("&"):
                self.outcome.errors.append(f"the link was not rewritten to the last shard count: {self.query!r}")


async def protocol_session(url: str, plan: Plan) -> Outcome:
    outcome = Outcome(name=plan.name, kind="protocol")
    try:
        await ProtocolSession(url, plan, outcome).run()
    except (LoadError, OSError, TimeoutError, websockets.WebSocketException) as err:
        outcome.errors.append(f"{type(err).__name__}: {err}")
    return outcome


# --- real Chromium page ----------------------------------------------------------------------------------


async def chromium_session(browser, url: str, plan: Plan) -> Outcome:
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import expect

    outcome = Outcome(name=plan.name, kind="chromium")
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()

    def metric(label: str):
        return (
            page.locator('[data-testid="stMetric"]')
            .filter(has=page.get_by_text(label, exact=True))
            .locator('[data-testid="stMetricValue"]')
        )

    try:
        await page.goto(f"{url}/?{plan.query()}", timeout=STEP_SECONDS * 1000)
        await expect(metric(TOTAL_LABEL)).to_have_text(units.count(plan.total), timeout=STEP_SECONDS * 1000)
        field = page.get_by_role("spinbutton", name=SHARDS_LABEL)
        for shards in plan.changes:
            await field.fill(str(shards))
            started = time.perf_counter()
            await field.press("Enter")
            await expect(metric(plan.share_label(shards))).to_have_text(
                plan.share_text(shards), timeout=STEP_SECONDS * 1000
            )
            outcome.latencies.append(time.perf_counter() - started)
            outcome.runs += 1
            await expect(metric(TOTAL_LABEL)).to_have_text(units.count(plan.total))
            query = parse_qs(page.url.partition("?")[2])
            if query.get("input_dim") != [str(plan.config.input_dim)]:
                outcome.cross_talk.append(f"address bar shows {page.url}")
        await page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]')
        for test_id in ("stException", "stAlertContentError"):
            found = await page.locator(f'[data-testid="{test_id}"]').all_inner_texts()
            outcome.errors.extend(f"{test_id}: {text}" for text in found)
    except (AssertionError, PlaywrightError) as err:
        outcome.errors.append(f"{type(err).__name__}: {str(err).splitlines()[0]}")
    finally:
        await context.close()
    return outcome


# --- the whole run ---------------------------------------------------------------------------------------


def server_pid(url: str) -> int | None:
    """The process serving ``url``: the ``streamlit run`` whose command line names its port."""
    port = url.rsplit(":", 1)[1]
    for pid, argv in command_lines():
        if (
            b"streamlit" in b" ".join(argv)
            and b"--server.port" in argv
            and argv[argv.index(b"--server.port") + 1].decode() == port
        ):
            return pid
    return None


def memory(pid: int | None) -> dict[str, int]:
    """``VmHWM`` (peak) and ``VmRSS`` (now) of a process, in bytes."""
    found = {}
    if pid is not None:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmHWM", "VmRSS"):
                    found[name] = int(value.split()[0]) * 1024
    return found


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time a process has used (``/proc/PID/stat``, fields 14 and 15)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def solo(url: str, changes: int) -> Outcome:
    """One protocol session alone on the server: the latency without a crowd, for comparison."""
    (plan,) = plans(1, changes)
    return await asyncio.wait_for(protocol_session(url, dataclasses.replace(plan, name="alone")), STEP_SECONDS * 3)


@dataclasses.dataclass
class LoadResult:
    outcomes: list[Outcome]
    seconds: float
    memory: dict[str, int]

    @property
    def errors(self) -> list[str]:
        return [f"{o.name} ({o.kind}): {e}" for o in self.outcomes for e in o.errors]

    @property
    def cross_talk(self) -> list[str]:
        return [f"{o.name} ({o.kind}): {e}" for o in self.outcomes for e in o.cross_talk]

    def latencies(self, kind: str) -> list[float]:
        return sorted(value for o in self.outcomes if o.kind == kind for value in o.latencies)


async def run_load(url: str, *, clients: int, pages: int, changes: int, deadline: float) -> LoadResult:
    """Run ``clients`` protocol sessions and ``pages`` Chromium pages at once against ``url``."""
    from playwright.async_api import async_playwright

    every = plans(clients + pages, changes)
    started = time.perf_counter()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:

            async def bounded(session, plan: Plan, kind: str) -> Outcome:
                try:
                    return await asyncio.wait_for(session, deadline)
                except TimeoutError:
                    return Outcome(name=plan.name, kind=kind, errors=[f"not finished within {deadline:g} s"])

            tasks = [bounded(protocol_session(url, plan), plan, "protocol") for plan in every[:clients]]
            tasks += [bounded(chromium_session(browser, url, plan), plan, "chromium") for plan in every[clients:]]
            outcomes = await asyncio.gather(*tasks)
        finally:
            await browser.close()
    return LoadResult(outcomes=list(outcomes), seconds=time.perf_counter() - started, memory=memory(server_pid(url)))


def percentile(ordered: list[float], share: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20, help="protocol-level sessions (default 20)")
    parser.add_argument("--pages", type=int, default=3, help="real Chromium pages (default 3)")
    parser.add_argument("--changes", type=int, default=5, help="shard changes per session (default 5)")
    parser.add_argument("--deadline", type=float, default=240.0, help="seconds before the run gives up")
    args = parser.parse_args()
    from conftest import streamlit_server

    with streamlit_server() as url:
        pid = server_pid(url)
        idle = memory(pid).get("VmRSS", 0)
        alone = asyncio.run(solo(url, args.changes * 2))  # also warms the server: JAX imported, pages compiled
        load_before, cpu_before = os.getloadavg(), cpu_seconds(pid)
        result = asyncio.run(
            run_load(url, clients=args.clients, pages=args.pages, changes=args.changes, deadline=args.deadline)
        )
        load_after, server_cpu = os.getloadavg(), cpu_seconds(pid) - cpu_before

    print(
        f"{args.clients} protocol sessions + {args.pages} Chromium pages at once, {args.changes} shard changes each, "
        f"{result.seconds:.1f} s in all; os.cpu_count() = {os.cpu_count()}, load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after (1 min)\n"
    )
    print("| sessions | changes timed | median | p95 | max |")
    print("|---|---|---|---|---|")
    for kind, times in (("protocol, alone", sorted(alone.latencies)), *((k, result.latencies(k)) for k in KINDS)):
        if times:
            print(
                f"| {kind} | {len(times)} | {statistics.median(times) * 1000:.0f} ms | "
                f"{percentile(times, 0.95) * 1000:.0f} ms | {times[-1] * 1000:.0f} ms |"
            )
    runs = sum(o.runs for o in result.outcomes)
    peak = result.memory.get("VmHWM", 0)
    print(
        f"\nServer CPU during the crowd: {server_cpu:.1f} s in {result.seconds:.1f} s of wall time "
        f"({server_cpu / result.seconds:.2f} cores busy), about {server_cpu / max(runs, 1) * 1000:.0f} ms "
        "per script run."
    )
    errors = alone.errors + result.errors
    print(
        f"Script runs checked: {runs}. Errors: {len(errors)}. Cross-talk: {len(result.cross_talk)}. "
        f"Server peak memory (VmHWM): {peak:,} bytes ({units.binary_bytes(peak)}; goal under 1 GB), "
        f"resident at the end {result.memory.get('VmRSS', 0):,} bytes (idle before the first session: {idle:,})."
    )
    for line in (errors + result.cross_talk)[:20]:
        print(f"- {line}")
    if errors or result.cross_talk:
        sys.exit(1)


if __name__ == "__main__":
    main()
