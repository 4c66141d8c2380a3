"""Shared fixtures: a real Streamlit server on loopback and headless Chromium for browser tests.

Under CI (``CI=true``) a missing browser or Playwright is a failure, never a skip: a green run
must mean the browser tests ran.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import compile_flags  # noqa: F401  (first: XLA's flags for this process's compiles, before dcsim's imports)
import fake_hub
import faults
import pytest
from hypothesis import settings
from streamlit.components.v2 import manifest_scanner
from streamlit.testing.v1 import AppTest

from dcsim.model.config import ModelConfig
from dcsim.ui import router

# Two shared cores make wall-clock deadlines flaky; properties are about values, not speed.
# Two profiles (issue 42): the quick loop tries each property on a tenth of its examples (at least
# three; ten where a property names no count), and CI=true, which .ci/run sets, on all of them, as
# many as the suite always ran.
# Each new AppTest scans every installed distribution for Streamlit component manifests (about
# 0.4 s of a 0.5 s hostile-link case, by cProfile: 966 distributions read). The installed packages
# do not change within a test session, so each worker scans once and every AppTest reads that
# answer; a page's own runs are untouched (bench/README.md, "The test suite").
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
# Python's young generation is collected every 700 new objects by default, and every hundredth time
# the collector walks every object the process holds: JAX, Flax, pandas, Streamlit and what the tests
# keep, about 800,000 objects by the end of the quick loop. That took 15-16 s of each worker's 100 s
# there (12-13 s of it full collections; timed with gc.callbacks, 2026-12-07). Collected every 10,000
# new objects, the same three generations cost 4.7 s, full collections 1.6 s, and the quick loop's
# wall time fell from 111 s to 97 s (bench/README.md, "The test suite"). This is the tests' own
# processes (and the pages AppTest runs in them); a server and every child a test starts keep
# Python's default.
gc.set_threshold(10_000)
FULL_PROPERTIES = os.environ.get("CI") == "true"
settings.register_profile("ci", deadline=None)
settings.register_profile("quick", deadline=None, max_examples=10)
settings.load_profile("ci" if FULL_PROPERTIES else "quick")


def examples(full: int) -> int:
    """A property's example count: ``full`` under CI=true, a tenth of it (at least 3) otherwise."""
    return full if FULL_PROPERTIES else min(full, max(3, full // 10))


ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("DCSIM_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 900}
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# XLA's compilation cache for the checkpoint workers (``dcsim.runtime.workers.compilation_cache_env``):
# one folder for the run, removed after it, instead of the user's own ~/.cache.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ and "DCSIM_COMPILATION_CACHE" not in os.environ:
    _XLA_CACHE = tempfile.mkdtemp(prefix="dcsim-test-xla-")
    os.environ["DCSIM_COMPILATION_CACHE"] = _XLA_CACHE
    atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
# No test reaches the Hub: a link naming a model by `hf=` alone (the hostile-link sweep sends them)
# makes a page fetch from HF_ENDPOINT, so by default that is a closed loopback port. Tests of the Hub
# fetcher start their own loopback Hub (tests/fake_hub.py) and pass its address.
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
SERVER_START_SECONDS = 90
# Playwright's 5 s default for `expect` is tight on two shared cores under a full test run; a
# waiting expect costs nothing when the page is quick, so leave a busy CI machine room.
EXPECT_SECONDS = 30


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: browser tests must run here)")
    pytest.skip(reason)


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _healthy(url: str, timeout: float = 2) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def streamlit_server(
    extra_args: tuple[str, ...] = (),
    base_path: str = "",
    env: dict[str, str] | None = None,
    port: int | None = None,
    script: str = "app.py",
):
    """Run ``streamlit run app.py`` (or ``script``) on a free loopback port until the block ends.

    ``base_path`` serves the app under a prefix (``--server.baseUrlPath``), as behind a proxy;
    the URL yielded is the server's root, without it. ``env`` is added to the server's environment
    (e.g. its own ``TMPDIR``); ``port`` asks for that port, as a restarted server would take.
    """
    if base_path:
        extra_args = (*extra_args, "--server.baseUrlPath", base_path)
    wanted = port
    for _attempt in range(1 if wanted else 3):  # a port taken between probing and binding makes Streamlit exit
        port = wanted or _free_port()
        url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                script,
                "--server.headless",
                "true",
                "--server.address",
                "127.0.0.1",
                "--server.port",
                str(port),
                "--browser.gatherUsageStats",
                "false",
                *extra_args,
            ],
            cwd=ROOT,
            env=None if env is None else os.environ | env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + SERVER_START_SECONDS
        health = f"{url}/{base_path}" if base_path else url
        while time.monotonic() < deadline and process.poll() is None and not _healthy(health):
            time.sleep(0.2)
        if process.poll() is None and _healthy(health):
            try:
                yield url
            finally:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            return
        process.kill()
        process.wait()
    raise RuntimeError("streamlit did not start within its time limit")


class LineChild:
    """A child interpreter running ``tests/children/NAME.py`` for the whole session: each request is
    one JSON line on its stdin, each answer one JSON line on its stdout. One start serves every test
    that asks, instead of an interpreter (and a JAX import) a test."""

    def __init__(self, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "children" / f"{name}.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=os.environ | {"PYTHONPATH": str(ROOT)} | (env or {}),
        )

    def ask(self, request):
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the {self.name} child ended (exit {self.process.wait()})"
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # a child that already ended: ask() said why
                self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def real_mesh():
    """Ask JAX, in one child with eight virtual CPU devices, how it places arrays: a list of cases
    (``tests/children/real_mesh.py``) in, what real devices hold out."""
    child = LineChild("real_mesh", {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"})
    yield child.ask
    child.close()


def check_on_real_devices(real_mesh, layouts) -> int:
    """Each array of each ``(mesh, layout)`` placed by JAX on the ``real_mesh`` child's devices: the
    devices holding it, its shard shape (as placed and as the sharding says) and the copies of each
    distinct shard must be dcsim's. The number of arrays checked."""
    cases, expected = [], []
    for mesh, layout in layouts:
        for row in layout.arrays:
            spec = [None if entry is None else [entry] if isinstance(entry, str) else list(entry) for entry in row.spec]
            cases.append({"mesh": [list(axis) for axis in mesh.axes], "spec": spec, "shape": list(row.shape)})
            expected.append((mesh.num_devices, row.shard_shape, row.replication_factor))
    real = real_mesh(cases)
    assert len(real) == len(expected)
    for case, got, (devices, shard_shape, replication) in zip(cases, real, expected, strict=True):
        assert got["num_devices"] == devices, case
        assert got["shard_shapes"] == [list(shard_shape)], case
        assert got["sharding_shard_shape"] == list(shard_shape), case
        assert got["copies"] == [replication], case
    return len(cases)


@pytest.fixture(scope="session")
def imports_probe():
    """Which heavy packages a command imports, as a fresh ``python -m dcsim`` would: one child that
    forks a command (``tests/children/imports.py``). ``{"argv": [...]}`` or ``{"modules": [...]}`` in;
    its exit code, output and heavy packages out."""
    child = LineChild("imports")
    yield child.ask
    child.close()


@pytest.fixture(scope="session")
def server():
    with streamlit_server() as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -r requirements-dev.txt)")
    if not Path(CHROMIUM).exists():
        _missing(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import expect

    expect.set_options(timeout=EXPECT_SECONDS * 1000)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def tabs(browser):
    """One browser context for the tests' pages, as one person's browser (its tab: ``page``). The app's
    JavaScript is fetched and compiled once: a page in a fresh context took 1.3-1.6 s to load where
    a new tab took 0.8 s (tests/conftest.py's server, GPT-2 small's link, measured 2026-12-07). Each
    link opened is its own Streamlit session (the server keys a session by its websocket, and dcsim
    reads no cookie); a link opened "in another browser" gets a context of its own (``fresh_page``)."""
    context = browser.new_context(viewport=VIEWPORT)
    yield context
    context.close()


# The browser tests' tab, kept from one test to the next (``page``).
_TAB: dict[str, object] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on its test (``item.failed_phases``), for fixtures that tidy up after
    a failure (``page``)."""
    report = yield
    if report.failed:
        item.failed_phases = {*getattr(item, "failed_phases", ()), report.when}
    return report


@pytest.fixture
def page(tabs, request):
    """A tab of ``tabs``, the same one from test to test, as a person goes from link to link in one
    tab: each test opens its own link, which starts a new Streamlit session (the page it replaces
    closes its session with it). A new tab a test cost Chromium 1.0-1.2 s more CPU a test than a
    link opened in the tab already there, which keeps its renderer process and the app's compiled
    JavaScript (tests/conftest.py's server, measured 2026-12-07; bench/README.md, "The test suite").

    A test starts on a blank page with the default viewport, whatever the one before did. After a
    test that failed, or that closed the tab, the next gets a new tab, and a rerun starts clean."""
    page = _TAB.get("page")
    if page is None or page.is_closed():
        page = _TAB["page"] = tabs.new_page()
    page.set_default_timeout(30_000)
    page.set_viewport_size(VIEWPORT)
    page.goto("about:blank")
    yield page
    for opened in tabs.pages:  # any tab the test opened
        if opened is not page:
            opened.close()
    if getattr(request.node, "failed_phases", None) and not page.is_closed():
        page.close()


def wait_for_app(page) -> None:
    """Wait until the Streamlit script has finished its run, and the browser has drawn two frames
    since: widgets whose keys changed in the run are remounted just after the state flips."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=60_000)
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def open_page(page, url: str) -> None:
    """Go to ``url`` in the browser and wait until the app has finished its run."""
    page.goto(url)
    wait_for_app(page)


# The second browser of the browser tests, by the browser it runs in (``fresh_page``).
_ELSEWHERE: dict[object, object] = {}


@contextlib.contextmanager
def fresh_page(browser, url: str):
    """``url`` opened as a link pasted into another browser: a new tab of a second context, which
    shares no cookie, storage or Streamlit session with ``tabs``. The page, its tab closed when the
    block ends. The context lasts the session, as ``tabs`` does: a new context a link fetched and
    compiled the app's JavaScript again (1.3-1.6 s to load GPT-2 small's link, against 0.8 s in a
    new tab of a used context; bench/README.md, "The test suite")."""
    context = _ELSEWHERE.get(browser)
    if context is None:
        context = _ELSEWHERE[browser] = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        open_page(page, url)
        yield page
    finally:
        page.close()


def query_of(page) -> dict[str, str]:
    """The address bar's query, one value a key."""
    return {key: values[0] for key, values in parse_qs(urlsplit(page.url).query).items()}


def open_editor(page) -> None:
    """Open the Model page's editor, the Dense layers or a family's hyperparameters, as a person does
    before editing: it is drawn only when open."""
    from playwright.sync_api import expect

    label = re.compile(r"^Edit the Dense layers \(|: edit its \d+ hyperparameters$")
    summary = page.get_by_test_id("stMain").get_by_text(label)
    summary.click()
    wait_for_app(page)
    editor = page.get_by_test_id("stMain").get_by_test_id("stExpander").filter(has=page.get_by_text(label))
    expect(editor.get_by_test_id("stExpanderDetails").first).to_be_visible()


def share_link(page):
    """The sidebar's link to this view (a markdown link showing the whole address)."""
    return page.locator('[data-testid="stSidebar"] [data-testid="stMarkdownContainer"] a[href^="http"]')


def metric(page, label: str):
    """The value of the metric labelled exactly ``label``."""
    return (
        page.locator('[data-testid="stMetric"]')
        .filter(has=page.get_by_text(label, exact=True))
        .locator('[data-testid="stMetricValue"]')
    )


def choose(page, label: str, option: str) -> None:
    """Pick ``option`` from the select box labelled ``label``, as a person does, and wait for the run."""
    box = page.get_by_role("combobox", name=label)
    # A click that first scrolls the box into view can close its list as it opens: scroll, then click.
    box.scroll_into_view_if_needed()
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    wait_for_app(page)


def type_into(page, box, text: str, then: str = "Tab"):
    """Type ``text`` into ``box``, press ``then`` to commit it, and check the box holds exactly it.

    A widget whose key changes after a rerun is remounted by the frontend after the script reports
    it has finished; a fill that lands during the swap is lost, appended to the new box's default, or
    refused because the label then names two boxes (all seen in CI on busy machines). So check, and
    retype after the page has settled."""
    from playwright.sync_api import Error, expect

    for _ in range(5):
        try:
            box.fill(text)
            box.press(then)
            expect(box).to_have_value(text, timeout=3_000)
            return box
        except AssertionError:
            wait_for_app(page)
        except Error as error:
            # Mid-swap the label names both the old box and its remounted successor: wait the swap out.
            if "strict mode violation" not in str(error):
                raise
            wait_for_app(page)
    expect(box).to_have_value(text)
    return box


def download_from(page, button: str):
    """Click the download button named ``button`` and return Playwright's ``Download``. A click that
    lands while the run that drew the button is still replacing it is lost on a loaded machine (seen
    in the whole suite: 30 s with no download): wait for the run, and click again, at most 3 times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(3):
        wait_for_app(page)
        try:
            with page.expect_download(timeout=15_000 if attempt < 2 else 30_000) as started:
                page.get_by_role("button", name=button).click()
            return started.value
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def go_to(page, name: str) -> None:
    """Click the sidebar's link to the page ``name`` and wait until that page has finished its run.
    The click's run starts a moment after the click, so waiting only for "not running" can return on
    the old page: wait for the address to change first."""
    link = page.get_by_test_id("stSidebarNavItems").get_by_role("link", name=name)
    target = urlsplit(link.get_attribute("href") or "").path
    link.click()
    if target:
        page.wait_for_url(lambda url: urlsplit(url).path == target, timeout=30_000)
    wait_for_app(page)


def pick_model(page, title: str, label: str = "Model") -> None:
    """Pick ``title`` in the model list labelled ``label`` as a person does in a long list: open it,
    type part of the name (the list is drawn lazily), click the option. A click on a list that a
    rerun replaces closes it with nothing picked (seen in CI: 30 s waiting for the option): close it,
    wait for the run, and open it again, at most 3 times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(3):
        wait_for_app(page)
        box = page.get_by_role("combobox", name=label)
        box.scroll_into_view_if_needed()
        page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        box.click()
        page.keyboard.type(title)
        try:
            page.get_by_role("option").filter(has_text=title).first.click(timeout=10_000 if attempt < 2 else 30_000)
        except PlaywrightTimeout:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            continue
        wait_for_app(page)
        return


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    """Every browser test runs on one xdist worker (``--dist loadgroup``): one Streamlit server and
    one Chromium serve them all, and two browsers never compete for the two cores a busy run has.
    The hook runs first: xdist's own, which reads the ``xdist_group`` marks into the test ids that
    its scheduler groups by, runs after it (without ``tryfirst`` it ran before, saw no mark, and the
    browser tests were spread over both workers, each starting its own server and Chromium).

    A browser test that fails is run once more (pytest-rerunfailures), as Playwright's own CI default
    does: a click that a loaded machine delivers to a widget mid-remount is a race of the test's
    driving, not of the app, and the helpers above wait out every one seen so far. The rerun is
    reported (a RERUN line in the summary: ``-raR`` in pyproject.toml), so a test that needs it is
    seen and its wait fixed; a test that fails twice fails the run. No other test is rerun.

    ``DCSIM_BROWSER_GROUPS=N`` spreads the browser tests over N groups (N servers and browsers, one
    a worker that takes a group), for measuring; one is the default (bench/README.md, "The test
    suite", has the runs)."""
    groups = int(os.environ.get("DCSIM_BROWSER_GROUPS", "1"))
    browser_items = [item for item in items if item.get_closest_marker("browser")]
    for number, item in enumerate(browser_items):
        item.add_marker(pytest.mark.xdist_group(f"browser-{number % groups}"))
        item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))


SLOW = pytest.mark.slow


def quick_sample(cases, keep) -> list:
    """Test parameters, each case not in ``keep`` marked slow: the quick loop runs a representative
    few, the whole suite (CI=true) every one. ``cases`` is a list of values, or a dict of values by
    test id (``keep`` then names ids)."""
    missing = set(keep) - set(cases)  # a dict's ids, or the values themselves
    assert not missing, f"quick_sample keeps cases that are not swept: {sorted(missing)}"
    if isinstance(cases, dict):
        return [pytest.param(value, id=name, marks=() if name in keep else SLOW) for name, value in cases.items()]
    return [case if case in keep else pytest.param(case, marks=SLOW) for case in cases]


_CHILD_PROGRAMS = ("python", "streamlit", "chromium")


@pytest.fixture(autouse=True)
def _the_quick_loop_starts_no_child(request, monkeypatch):
    """The quick loop (``-m "not slow and not browser"``) starts no interpreter, server or browser:
    a test that does must say so with its marker, or it fails here, naming what it started."""
    if request.node.get_closest_marker("slow") or request.node.get_closest_marker("browser"):
        return
    spawn = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def refuse(self, args, *rest, **kwargs):
        program = os.path.basename(str(args[0] if isinstance(args, list | tuple) else args).split()[0])
        if any(name in program for name in _CHILD_PROGRAMS):
            raise AssertionError(
                f"a test of the quick loop started {program}: mark it @pytest.mark.slow (a child interpreter or "
                "server) or @pytest.mark.browser"
            )
        return spawn(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


@pytest.fixture(autouse=True)
def _apptest_runs_the_router(monkeypatch):
    router.route_apptest(monkeypatch)


APP = str(ROOT / "app.py")


# Llama 2 7B cut to 2 blocks of width 64 (4 heads over 2 KV heads, FFN 96, vocabulary 128), as a
# link's query: a decoder whose training step the activation tests trace in a fraction of a second.
SMALL_LLAMA_LINK = {"preset": "llama2-7b"} | {
    f"h.{name}": value
    for name, value in {
        "num_layers": "2",
        "d_model": "64",
        "num_heads": "4",
        "num_kv_heads": "2",
        "ffn_dim": "96",
        "vocab_size": "128",
    }.items()
}

# The Model page's editors, each in an expander drawn only when open (dcsim.ui.model).
EDITORS = ("model.edit_layers", "model.edit_hparams")


def open_app(
    query: dict[str, str | list[str]] | None = None,
    page: str | None = None,
    *,
    editors: bool = True,
    timeout: float = 60,
) -> AppTest:
    """Run the app in AppTest as a link opens it: ``query`` in the URL, ``page`` first (a deep link).

    ``editors`` opens the Model page's editors (the Dense layers, a family's hyperparameters), as a
    person does before editing; a visitor's first view has them closed (``editors=False``).
    ``timeout`` is each run's limit in seconds (AppTest's ``default_timeout``)."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    for key in EDITORS if editors else ():
        at.session_state[key] = True
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception
    return at


def uploader(at: AppTest):
    """The sidebar's file picker, its box opened first (it is drawn only while open)."""
    if not at.sidebar.get("file_uploader"):
        at.session_state["frame.upload_open"] = True
        at.run()
        assert not at.exception
    return at.sidebar.get("file_uploader")[0]


def open_views(at: AppTest, *keys: str) -> AppTest:
    """Open the Model page's views drawn only when open (``model.groups_open``...) and run."""
    for key in keys:
        at.session_state[key] = True
    at.run()
    assert not at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    """Every metric on the page: its value by its label."""
    return {metric.label: metric.value for metric in at.metric}


def shown(element) -> str:
    """An alert's text as the person reads it: dcsim escapes markdown in anything it echoes."""
    return element.value.replace("\\", "")


def command_lines() -> Iterator[tuple[int, list[bytes]]]:
    """Each live process's id and argv (``/proc/<pid>/cmdline``); one that ends while read is passed over."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), argv


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (a worker's argv names its folder)."""
    return [pid for pid, argv in command_lines() if text in b"\0".join(argv).decode(errors="replace")]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``python -m dcsim ARGV`` in process: its exit code, stdout and stderr."""
    from dcsim.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused_in_one_line(capsys, *argv) -> str:
    """The error line of a command line the CLI refuses: exit 2, nothing on stdout, one line on stderr."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dcsim: error: ")
    return err


@pytest.fixture
def gated_hub(monkeypatch):
    """A loopback Hub (tests/fake_hub.py) as the process's HF_ENDPOINT, holding Llama 2 7B and
    ``gated/model``, which only ``fake_hub.GATED_TOKEN`` opens; a fresh fetcher, no token unless a
    test sets one."""
    with fake_hub.endpoint(monkeypatch, fake_hub.with_gated(fake_hub.GATED_TOKEN)) as server:
        yield server


def small_preset(preset: str, **sizes) -> ModelConfig:
    """``preset`` cut to two blocks 64 wide with four heads, ``sizes`` setting the rest: the preset's
    shape at a size a test counts, lays out or compiles in moments."""
    return ModelConfig(preset=preset, overrides={"num_layers": 2, "d_model": 64, "num_heads": 4} | sizes)


def hand_run_figures() -> dict:
    """What a measurement written by hand spent (``RunFigures``' fields): half a second to
    initialise, a tenth to save and to restore, restored bit for bit, peak memory 1 then 2 bytes;
    for tests of what is built from its bytes, where the times do not matter."""
    return {
        "init_seconds": 0.5,
        "save_seconds": 0.1,
        "restore_seconds": 0.1,
        "restore_verified": True,
        "baseline_rss_bytes": 1,
        "peak_rss_bytes": 2,
    }


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """Point tempfile at an empty folder, so "nothing left behind" is checkable, with no fault
    injected into the children (tests/faults.py) unless the test sets one."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(faults.FAULT_ENV, raising=False)
    monkeypatch.delenv(faults.PROCESS_ENV, raising=False)
    return tmp_path


def hand_checkpoint_report(dtype: str, disk_bytes: int):
    """A checkpoint measurement written by hand, no child process: Dense(1024) on 1024 (1,049,600
    values) replicated on one device, saved in ``dtype`` as ``disk_bytes`` in two files (300 bytes
    of metadata, the rest array data)."""
    from dcsim.checkpoint.results import CheckpointFile, CheckpointReport
    from dcsim.model.config import DenseLayer

    values = 1024 * 1024 + 1024
    files = (
        CheckpointFile(path="ocdbt.process_0/d/abc", kind="array data", num_bytes=disk_bytes - 300),
        CheckpointFile(path="_METADATA", kind="metadata", num_bytes=300),
    )
    return CheckpointReport(
        config=ModelConfig(input_dim=1024, layers=(DenseLayer(features=1024),)),
        total_params=values,
        dtype=dtype,
        strategy="replicated",
        mesh="data=1",
        num_devices=1,
        partition_specs=(("Dense_0/bias", ""), ("Dense_0/kernel", "")),
        raw_payload_bytes=values * (2 if dtype == "bfloat16" else 4),
        raw_float32_bytes=values * 4,
        device_bytes=values * 4,
        disk_bytes=disk_bytes,
        num_files=len(files),
        largest_file_bytes=disk_bytes - 300,
        files=files,
        **hand_run_figures(),
        peak_rss_before_stage=(),
        jax_version="x",
        orbax_version="y",
    )
