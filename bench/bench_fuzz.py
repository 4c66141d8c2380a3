"""The full hostile-link sweep: seeded hostile query strings through every page with AppTest.

Each case is a fresh session that opens one generated link on one page (``tests/hostile.py``
generates the links and judges each run); pages come from app.py's router, in turn. Prints
Markdown: cases, cases per second, failures (with the first few), and what the links held.

    python bench/bench_fuzz.py --cases 1200 --seed 8
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import hostile  # noqa: E402
from streamlit.testing.v1 import app_test  # noqa: E402

from dcsim.ui import router  # noqa: E402  (its AppTest patch: the router runs on every rerun, as on a server)


def traits(query: str) -> set[str]:
    """What made a link hostile, for the summary table."""
    found = set()
    params = hostile.as_lists(hostile.as_params(query))
    values = [value for values in params.values() for value in values]
    if any(len(values) > 1 for values in params.values()):
        found.add("repeated key")
    if len(query) > 10_000:
        found.add("over 10 kB")
    if any(value.lower().lstrip("+-") in ("nan", "inf", "infinity", "1e400") for value in values):
        found.add("NaN / inf / 1e400")
    if any(value.startswith("-") for value in values):
        found.add("negative")
    if any(any(ord(char) < 32 or ord(char) == 127 for char in value) for value in values):
        found.add("control character")
    if any(not value.isascii() for value in values):
        found.add("non-ASCII")
    if any(marker in value for value in values for marker in ("<script", "<img", "javascript:", "**")):
        found.add("markup")
    if "%" in query.replace("%25", "") and any("\ufffd" in value or "%" in value for value in values):
        found.add("junk percent-encoding")
    if any(key not in hostile.CONFIG_KEYS and not key.startswith("h.") for key in params):
        found.add("page-setting or unknown key")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    app_test.PagesManager = router.NavigationPagesManager

    pages = hostile.pages_from_app()
    page_keys = hostile.discover_page_keys(pages)
    rng = random.Random(args.seed)
    failures: list[tuple[str, str, str]] = []
    per_page = collections.Counter()
    seen = collections.Counter()
    slowest = (0.0, "", "")
    load_before = os.getloadavg()
    start = time.perf_counter()
    for index in range(args.cases):
        page = pages[index % len(pages)]
        query = hostile.hostile_query(rng, page_keys[page])
        began = time.perf_counter()
        at, read = hostile.open_page(page, query)
        took = time.perf_counter() - began
        slowest = max(slowest, (took, page, query[:120]))
        per_page[page] += 1
        seen.update(traits(query))
        failures += [(page, query, failure) for failure in hostile.check_run(at, query, read, page_keys[page])]
    elapsed = time.perf_counter() - start

    print(f"## Hostile-link sweep: {args.cases:,} cases, seed {args.seed}\n")
    print(
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}\n"
    )
    print("| cases | pages | failures | wall time | cases/s | slowest case |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.cases:,} | {len(pages)} | {len(failures)} | {elapsed:.0f} s | {args.cases / elapsed:.2f} | "
        f"{slowest[0]:.2f} s ({slowest[1]}) |\n"
    )
    print("| page | cases | setting keys attacked (besides the codec's) |")
    print("|---|---|---|")
    for page in pages:
        print(f"| `{page}` | {per_page[page]:,} | {', '.join(f'`{key}`' for key in page_keys[page])} |")
    print("\n| the link held | cases |")
    print("|---|---|")
    for trait, count in seen.most_common():
        print(f"| {trait} | {count:,} |")
    if failures:
        print("\nFirst failures:\n")
        for page, query, failure in failures[:10]:
            print(f"- `{page}` `?{query[:160]!r}`: {failure[:300]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
