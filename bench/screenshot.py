"""Screenshots of the served app, as README.md and docs/ show them: ``python bench/screenshot.py
URL OUT.png [WIDTH HEIGHT]`` opens URL in headless Chromium (Debian's, at /usr/bin/chromium),
waits until the app's run has ended and its charts have drawn, and writes OUT.png.

docs/landing.png is ``python bench/screenshot.py "http://localhost:8501/?preset=llama2-70b&shards=64&dtype=bfloat16"
docs/landing.png`` against ``streamlit run app.py``."""

import sys

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    url, out = argv[:2]
    width, height = (int(argv[2]), int(argv[3])) if len(argv) == 4 else (1280, 900)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(url)
        page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=120_000)
        page.wait_for_timeout(1_500)  # Vega-Lite draws its charts after the run
        page.screenshot(path=out)
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
