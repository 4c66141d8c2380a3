"""Whole-process wall of the ``checkpoint`` command against ``count`` (issue 14's target).

Runs, alternating, N rounds of five whole processes:

- ``python -m dcsim count --preset resnet18 --format json`` (the baseline),
- ``python -m dcsim checkpoint --preset resnet18 --format json``, cold and warm,
- the same with ``--mesh data=4 --strategy fsdp``, cold and warm,

and prints a Markdown table: median and min wall seconds, the median's ratio to count's median,
whether every run's restore was verified, what XLA's compilation cache did for the init program,
and the median init/save/restore seconds the checkpoint's JSON reports. Cold: every run gets a
fresh, empty compilation cache folder (``DCSIM_COMPILATION_CACHE``), as on a new machine or for a
model never measured here. Warm: one folder kept for the whole run, as for a model measured
before (the first round's warm run fills it, so the rounds after it are hits). Alternating, in one
run, keeps a shared machine's noise in the ratios.

    python bench/bench_checkpoint_cli.py [--repeats 5] [--preset resnet18]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands(preset: str) -> dict[str, list[str]]:
    base = [sys.executable, "-m", "dcsim"]
    flags = ["--preset", preset, "--format", "json"]
    fsdp = ["--mesh", "data=4", "--strategy", "fsdp"]
    return {
        "count": [*base, "count", *flags],
        "checkpoint (cold cache)": [*base, "checkpoint", *flags],
        "checkpoint (warm cache)": [*base, "checkpoint", *flags],
        "checkpoint --mesh data=4 --strategy fsdp (cold cache)": [*base, "checkpoint", *flags, *fsdp],
        "checkpoint --mesh data=4 --strategy fsdp (warm cache)": [*base, "checkpoint", *flags, *fsdp],
    }


def run_once(command: list[str], cache: Path) -> tuple[float, dict]:
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["DCSIM_COMPILATION_CACHE"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return wall, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--preset", default="resnet18")
    args = parser.parse_args()
    runs = commands(args.preset)
    walls: dict[str, list[float]] = {name: [] for name in runs}
    records: dict[str, list[dict]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory(prefix="dcsim-bench-cache-") as caches:
        warm = Path(caches) / "warm"
        for round_ in range(args.repeats):
            for name, command in runs.items():
                cache = warm if "warm" in name else Path(tempfile.mkdtemp(prefix="cold-", dir=caches))
                wall, record = run_once(command, cache)
                walls[name].append(wall)
                records[name].append(record)
                print(f"round {round_ + 1}: {name}: {wall:.2f} s", file=sys.stderr, flush=True)
    baseline = statistics.median(walls["count"])

    def median_of(name: str, key: str) -> str:
        values = [record[key] for record in records[name] if key in record]
        return f"{statistics.median(values):.2f}" if values else "-"

    print(f"{args.repeats} rounds, alternating; {os.cpu_count()} CPU core(s); load average {os.getloadavg()[0]:.2f}")
    print()
    print(
        "| command | median wall s | min wall s | ratio to count | restore_verified | compilation cache "
        "| init s | save s | restore s |"
    )
    print("|---|---:|---:|---:|---|---|---:|---:|---:|")
    for name in runs:
        median = statistics.median(walls[name])
        verified = "-" if name == "count" else str(all(r["restore_verified"] for r in records[name])).lower()
        caching = "-" if name == "count" else ", ".join(r["compilation_cache"] for r in records[name])
        print(
            f"| `{name}` | {median:.2f} | {min(walls[name]):.2f} | {median / baseline:.2f}x | {verified} | {caching} | "
            f"{median_of(name, 'init_seconds')} | {median_of(name, 'save_seconds')} | "
            f"{median_of(name, 'restore_seconds')} |"
        )


if __name__ == "__main__":
    main()
