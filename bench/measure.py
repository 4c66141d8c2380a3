"""What the whole-process benchmarks share: a command timed in a fresh child with its own peak memory,
commands run interleaved into one Markdown table, and the command line every script takes.

Not a benchmark itself: ``bench_count.py``, ``bench_memory.py`` and the others import it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DCSIM = [sys.executable, "-m", "dcsim"]
# What every whole-process figure is set against: the interpreter, JAX and Flax imported, nothing else.
BASELINE = "baseline: import jax, flax"
BASELINE_ARGV = [sys.executable, "-c", "import jax, flax.linen"]


def run_child_measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Run a child (with ``env`` added to this process's environment); return its wall seconds, peak
    RSS in bytes and stdout.

    The child is reaped with ``os.wait4`` (not ``Popen.wait``) for its own ``ru_maxrss``.
    """
    start = time.perf_counter()
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=None if env is None else os.environ | env,
    )
    out = process.stdout.read()
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{argv[:4]} exited with {process.returncode}")
    return wall, usage.ru_maxrss * 1024, out  # ru_maxrss is in KiB on Linux


def commands_table(
    commands: dict[str, list[str]], baseline: str, limits: dict[str, str] | None, repeats: int
) -> dict[str, float]:
    """Run ``commands`` interleaved ``repeats`` times (drift on a shared machine touches each alike)
    and print a Markdown table: median wall, peak RSS, wall over ``baseline``'s, and the allowance
    in ``limits`` (no such column when ``limits`` is None). Returns each command's median wall."""
    columns = ["command", "median wall s", "peak RSS", "wall / baseline", *([] if limits is None else ["allowed"])]
    print("| " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
    results: dict[str, list[tuple[float, int]]] = {}
    for _ in range(repeats):
        for name, argv in commands.items():
            wall, rss, _ = run_child_measured(argv)  # raises if the command fails
            results.setdefault(name, []).append((wall, rss))
    medians = {name: statistics.median(wall for wall, _ in runs) for name, runs in results.items()}
    for name, runs in results.items():
        cells = [
            name,
            f"{medians[name]:.2f}",
            mib(max(rss for _, rss in runs)),
            f"{medians[name] / medians[baseline]:.2f}x",
        ]
        cells += [] if limits is None else [limits.get(name, "")]
        print("| " + " | ".join(cells) + " |")
    return medians


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def repeats_parser(doc: str, repeats: int) -> argparse.ArgumentParser:
    """The command line of a script whose docstring is ``doc``: its first line as the description,
    and ``--repeats`` (``repeats`` unless given). A script adds its own flags to it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser
