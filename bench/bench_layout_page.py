"""The Layout page must compute and render a 4,096-device layout of a 70-billion-value model in
under 2 s: measure it in real Chromium, from a widget change to the new numbers on screen.

Run: PYTHONPATH=. python bench/bench_layout_page.py [--repeats 5]

Presets (llama2-70b) are not on this branch yet, so the model is the biggest Dense stack a link
can hold: 80 x Dense(8192) on input dimension 8192 (160 arrays, 5.4 billion values) and 256 x
Dense(8192) (512 arrays, 17.2 billion values; llama2-70b has 723 arrays). Method, per model:

1. Open ``/layout?...&mesh=data=4096,model=1&strategy=tensor`` in a fresh page: time from
   ``goto`` to the script's end with the expected values per device on screen (a cold server
   cache for this model: count, sweep over 1 to 4,096 devices, every strategy on the mesh).
   The seed example's open on the same warm server is printed as the frontend's own start-up.
2. Mesh edits: type ``data=4096/m,model=m`` for m = 2, 4 ... (one a repeat) and press Enter; each mesh is
   new to the server's cache, so every layout on the page (the chosen one and the strategy
   comparison) is computed afresh. Time from the key press until the values per device the
   engine computes in this process for that mesh are on screen, and until the script's run has
   ended (everything rendered: charts, the table).
3. Strategy changes on one mesh (tensor, replicated, fsdp, tensor ...): the layouts were computed
   for the comparison chart, so this is the page's render time with warm caches.

Times are polled in the page on every animation frame (``wait_for_function(polling=POLL_MS)``).
Prints Markdown; bench/README.md records a run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from playwright.sync_api import sync_playwright  # noqa: E402

from conftest import CHROMIUM, CHROMIUM_ARGS, streamlit_server, wait_for_app  # noqa: E402
from dcsim import links  # noqa: E402
from dcsim.model.config import DenseLayer, ModelConfig  # noqa: E402
from dcsim.model.count import count_params  # noqa: E402
from dcsim.sharding import layout, meshes  # noqa: E402

WIDTH = 8192
MODELS = (
    ("80 x Dense(8,192)", ModelConfig(input_dim=WIDTH, layers=(DenseLayer(features=WIDTH),) * 80)),
    ("256 x Dense(8,192)", ModelConfig(input_dim=WIDTH, layers=(DenseLayer(features=WIDTH),) * 256)),
    ("llama2-70b", ModelConfig(preset="llama2-70b")),
)
MESH_SPLITS = (2, 4, 8, 16, 32, 64)
STRATEGY_CYCLE = ("replicated", "fsdp", "tensor")

POLL_MS = 20  # requestAnimationFrame polling stalled in headless Chromium; 20 ms is well below the figures
VALUE_JS = """([label, expected]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    const name = m.querySelector('[data-testid="stMetricLabel"]');
    const value = m.querySelector('[data-testid="stMetricValue"]');
    if (name && value && name.innerText.trim() === label && value.innerText.trim() === expected) return true;
  }
  return false;
}"""
DONE_JS = (
    """() => document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'"""
)


def expected_values(config: ModelConfig, mesh: str, strategy: str) -> str:
    report = count_params(config)
    return f"{layout.compute_layout(report, meshes.parse_mesh(mesh), strategy).values_per_device:,}"


def wait_values(page, expected: str) -> float:
    page.wait_for_function(VALUE_JS, arg=["Values per device", expected], polling=POLL_MS, timeout=120_000)
    return time.perf_counter()


def wait_done(page) -> float:
    page.wait_for_timeout(50)  # let the rerun start before asking whether it has ended
    page.wait_for_function(DONE_JS, polling=POLL_MS, timeout=120_000)
    return time.perf_counter()


def bench_model(browser, url: str, config: ModelConfig, repeats: int) -> dict[str, list[float]]:
    query = "&".join(f"{key}={value}" for key, value in links.encode(config).items())
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    results: dict[str, list[float]] = {"open (cold)": [], "mesh edit: numbers": [], "mesh edit: all rendered": []}
    results["strategy change: numbers"] = []
    try:
        start = time.perf_counter()
        page.goto(f"{url}/layout?{query}&mesh=data%3D4096%2Cmodel%3D1&strategy=tensor")
        wait_values(page, expected_values(config, "data=4096,model=1", "tensor"))
        wait_for_app(page)
        results["open (cold)"].append(time.perf_counter() - start)
        box = page.get_by_role("textbox", name="Mesh: AXIS=SIZE, comma separated")
        mesh = "data=4096,model=1"
        for split in MESH_SPLITS[:repeats]:
            mesh = f"data={4096 // split},model={split}"
            expected = expected_values(config, mesh, "tensor")
            box.fill(mesh)
            start = time.perf_counter()
            box.press("Enter")
            shown = wait_values(page, expected)
            done = wait_done(page)
            results["mesh edit: numbers"].append(shown - start)
            results["mesh edit: all rendered"].append(done - start)
        for index in range(repeats):
            strategy = STRATEGY_CYCLE[index % len(STRATEGY_CYCLE)]
            expected = expected_values(config, mesh, strategy)
            page.get_by_role("combobox", name="Strategy").click()
            option = page.get_by_role("option", name=strategy, exact=True)
            start = time.perf_counter()
            option.click()
            shown = wait_values(page, expected)
            wait_done(page)
            results["strategy change: numbers"].append(shown - start)
    finally:
        page.context.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"Machine: {platform.system()} {platform.machine()}, Python {platform.python_version()}\n")
    with streamlit_server() as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # Warm the server (JAX import, first page) so the first model's figures are its own;
            # then the seed example's open, the frontend's own start-up, as a baseline.
            seed = []
            for _ in range(2):
                warm = browser.new_context().new_page()
                start = time.perf_counter()
                warm.goto(f"{url}/layout")
                wait_values(warm, "5")
                wait_for_app(warm)
                seed.append(time.perf_counter() - start)
                warm.context.close()
            print("| model | arrays | values | step | runs | median | max |")
            print("|---|---|---|---|---|---|---|")
            print(f"| seed example, Dense(4) | 2 | 20 | open (warm server) | 1 | {seed[-1]:.2f} s | {seed[-1]:.2f} s |")
            for label, config in MODELS:
                results = bench_model(browser, url, config, args.repeats)
                report = count_params(config)
                for step, times in results.items():
                    print(
                        f"| {label} | {len(report.arrays)} | {report.total_params:,} | {step} | {len(times)} | "
                        f"{statistics.median(times):.2f} s | {max(times):.2f} s |"
                    )
        finally:
            browser.close()


if __name__ == "__main__":
    main()
