"""Whole-process wall of the ``checkpoint`` command against ``count`` (issue 14's target).

Runs, alternating, N rounds of three whole processes:

- ``python -m dcsim count --preset resnet18 --format json`` (the baseline),
- ``python -m dcsim checkpoint --preset resnet18 --format json``,
- ``python -m dcsim checkpoint --preset resnet18 --format json --mesh data=4 --strategy fsdp``,

and prints a Markdown table: median and min wall seconds, the median's ratio to count's median,
whether every run's restore was verified, and the median init/save/restore seconds the
checkpoint's JSON reports. Alternating, in one run, keeps a shared machine's noise in the ratios.

    python bench/bench_checkpoint_cli.py [--repeats 5] [--preset resnet18]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands(preset: str) -> dict[str, list[str]]:
    base = [sys.executable, "-m", "dcsim"]
    flags = ["--preset", preset, "--format", "json"]
    return {
        "count": [*base, "count", *flags],
        "checkpoint": [*base, "checkpoint", *flags],
        "checkpoint --mesh data=4 --strategy fsdp": [
            *base,
            "checkpoint",
            *flags,
            "--mesh",
            "data=4",
            "--strategy",
            "fsdp",
        ],
    }


def run_once(command: list[str]) -> tuple[float, dict]:
    env = dict(os.environ)
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
    for round_ in range(args.repeats):
        for name, command in runs.items():
            wall, record = run_once(command)
            walls[name].append(wall)
            records[name].append(record)
            print(f"round {round_ + 1}: {name}: {wall:.2f} s", file=sys.stderr, flush=True)
    baseline = statistics.median(walls["count"])

    def median_of(name: str, key: str) -> str:
        values = [record[key] for record in records[name] if key in record]
        return f"{statistics.median(values):.2f}" if values else "-"

    print(f"{args.repeats} rounds, alternating; {os.cpu_count()} CPU core(s); load average {os.getloadavg()[0]:.2f}")
    print()
    print("| command | median wall s | min wall s | ratio to count | restore_verified | init s | save s | restore s |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for name in runs:
        median = statistics.median(walls[name])
        verified = "-" if name == "count" else str(all(r["restore_verified"] for r in records[name])).lower()
        print(
            f"| `{name}` | {median:.2f} | {min(walls[name]):.2f} | {median / baseline:.2f}x | {verified} | "
            f"{median_of(name, 'init_seconds')} | {median_of(name, 'save_seconds')} | "
            f"{median_of(name, 'restore_seconds')} |"
        )


if __name__ == "__main__":
    main()
