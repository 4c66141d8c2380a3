"""Benchmark checkpoints across processes: save and restore time and per-process memory at P = 1, 2, 4.

Run from the repository root (prints Markdown; the recorded figures are in bench/README.md):

    PYTHONPATH=. python bench/bench_multiprocess.py --repeats 3

Each run is one full ``dcsim.checkpoint.multiprocess.measure_multiprocess``: P fresh processes join JAX's
distributed runtime on 127.0.0.1 (gloo collectives), initialise a Dense(10,240) on input dimension
1,024 (10,496,000 values, 41,984,000 raw float32 bytes) born sharded on a mesh of 4 virtual CPU
devices, save it with Orbax into one folder, restore and compare. The single-process measurement
(``dcsim.checkpoint.measure_checkpoint``, no distributed runtime) on the same mesh is the first row.

Times are the group's wall time (first process starting to last finishing, CLOCK_MONOTONIC); memory
is each process's own peak (``VmHWM``); "whole run" is the parent's clock around everything,
process start-up and JAX imports included (median). The run with the median save time is reported; the peak is
the largest seen over the repeats. ``os.cpu_count()`` and the 1-minute load average are printed on
every row: on a machine with fewer cores than processes, the processes compete for the same CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from dcsim.checkpoint.measurement import MeasurementOptions, measure_checkpoint
from dcsim.checkpoint.multiprocess import measure_multiprocess
from dcsim.model.config import DenseLayer, ModelConfig

MiB = 2**20
CONFIG = ModelConfig(input_dim=1024, layers=(DenseLayer(features=10_240),))  # 10,496,000 values
MESH = "data=4"


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def single(repeats: int, strategy: str) -> str:
    runs, walls = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        runs.append(
            measure_checkpoint(
                CONFIG, MeasurementOptions(mesh=MESH, strategy=strategy, max_params=10**9, timeout_seconds=600)
            )
        )
        walls.append(time.perf_counter() - started)
        assert runs[-1].restore_verified
    runs.sort(key=lambda r: r.save_seconds)
    r = runs[len(runs) // 2]
    peak = max(run.peak_rss_bytes for run in runs)
    return (
        f"| 1 (no jax.distributed) | 4 | {r.disk_bytes / MiB:,.1f} MiB | {r.num_files} | {r.save_seconds:.2f} s "
        f"| {r.restore_seconds:.2f} s | {r.init_seconds:.2f} s | {r.disk_bytes / MiB:,.1f} MiB "
        f"| {peak / MiB:,.0f} MiB | {peak / MiB:,.0f} MiB | {statistics.median(walls):.1f} s | {load()} |"
    )


def group(processes: int, repeats: int, strategy: str) -> str:
    runs, walls = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        report = measure_multiprocess(
            CONFIG,
            MeasurementOptions(mesh=MESH, strategy=strategy, max_params=10**9, timeout_seconds=600),
            processes=processes,
        )
        walls.append(time.perf_counter() - started)
        assert report.checkpoint.restore_verified
        runs.append(report)
    runs.sort(key=lambda r: r.checkpoint.save_seconds)
    r = runs[len(runs) // 2]
    c = r.checkpoint
    peak = max(p.peak_rss_bytes for run in runs for p in run.processes)
    together = max(run.total_peak_rss_bytes for run in runs)
    written = max(p.num_bytes for p in r.processes)
    return (
        f"| {processes} | {r.devices_per_process} | {c.disk_bytes / MiB:,.1f} MiB | {c.num_files} "
        f"| {c.save_seconds:.2f} s | {c.restore_seconds:.2f} s | {c.init_seconds:.2f} s "
        f"| {written / MiB:,.1f} MiB | {peak / MiB:,.0f} MiB | {together / MiB:,.0f} MiB "
        f"| {statistics.median(walls):.1f} s | {load()} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strategy", choices=("fsdp", "replicated"), action="append")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, os.cpu_count() = {os.cpu_count()}, load average at start {load()}\n")
    for strategy in args.strategy or ["fsdp", "replicated"]:
        print(f"### {strategy}, 10,496,000 values (41,984,000 raw bytes) on {MESH}; median of {args.repeats}\n")
        print(
            "| processes | devices each | disk | files | save (wall) | restore (wall) | init (slowest) "
            "| most bytes by one process | peak RSS, one process | peak RSS, all together | whole run | load avg |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        print(single(args.repeats, strategy), flush=True)
        for processes in (1, 2, 4):
            print(group(processes, args.repeats, strategy), flush=True)
        print()


if __name__ == "__main__":
    main()
