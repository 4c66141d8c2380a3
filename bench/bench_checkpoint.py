"""Benchmark the checkpoint measurement: time and child memory against size, devices and dtype.

Run from the repository root (prints Markdown; the recorded figures are in bench/README.md):

    PYTHONPATH=. python bench/bench_checkpoint.py --repeats 3

Each run is one full ``dcsim.checkpoint.measure_checkpoint`` (a fresh child process: imports,
concrete init, Orbax save, file walk, restore, bit comparison), with the parameter ceiling raised
by argument where needed. Figures are the child's own: its phase timings (``time.perf_counter``)
and its peak resident memory (``VmHWM``) against its idle baseline (JAX, Flax and Orbax imported,
CPU backend up). Wall time is the parent's, child start-up included. The median run is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from dcsim.checkpoint.measurement import MeasurementOptions, measure_checkpoint
from dcsim.model.config import DenseLayer, ModelConfig

MiB = 2**20
INPUT_DIM = 1024
# Output widths on input dimension 1,024: (1024 + 1) x F values.
SIZES = {"1M": 1024, "10M": 10_240, "30M": 29_268, "50M": 48_800}


def config(features: int) -> ModelConfig:
    return ModelConfig(input_dim=INPUT_DIM, layers=(DenseLayer(features=features),))


def run(features: int, repeats: int, **kwargs):
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        options = MeasurementOptions(max_params=10**9, timeout_seconds=600, **kwargs)
        report = measure_checkpoint(config(features), options)
        runs.append((time.perf_counter() - started, report))
        assert report.restore_verified
    runs.sort(key=lambda pair: pair[1].save_seconds + pair[1].restore_seconds)
    return runs[len(runs) // 2], max(report.peak_rss_bytes for _, report in runs)


def size_table(repeats: int) -> None:
    print("### Size (float32, one device; median of", repeats, "runs, peak = max of runs)\n")
    print(
        "| model | values | raw payload | disk | files | init | save | restore | "
        "save+restore | wall | baseline RSS | peak RSS | growth / raw |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, features in SIZES.items():
        (wall, r), peak = run(features, repeats)
        growth = (peak - r.baseline_rss_bytes) / r.raw_payload_bytes
        print(
            f"| {name} | {r.total_params:,} | {r.raw_payload_bytes / MiB:,.1f} MiB | {r.disk_bytes / MiB:,.1f} MiB "
            f"| {r.num_files} | {r.init_seconds:.2f} s | {r.save_seconds:.2f} s | {r.restore_seconds:.2f} s "
            f"| {r.save_seconds + r.restore_seconds:.2f} s | {wall:.2f} s | {r.baseline_rss_bytes / MiB:,.0f} MiB "
            f"| {peak / MiB:,.0f} MiB | {growth:.2f}x |"
        )
    print()


def device_table(repeats: int, size: str) -> None:
    features = SIZES[size]
    print(f"### Devices ({size}, float32; median of {repeats} runs)\n")
    print(
        "| devices | strategy | device bytes | disk | files | init | save | restore | peak RSS "
        "| growth / raw | growth / device bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for strategy in ("fsdp", "replicated"):
        for devices in (1, 2, 4, 8):
            (_, r), peak = run(features, repeats, mesh=f"data={devices}", strategy=strategy)
            growth = peak - r.baseline_rss_bytes
            print(
                f"| {devices} | {strategy} | {r.device_bytes / MiB:,.0f} MiB | {r.disk_bytes / MiB:,.1f} MiB "
                f"| {r.num_files} | {r.init_seconds:.2f} s | {r.save_seconds:.2f} s | {r.restore_seconds:.2f} s "
                f"| {peak / MiB:,.0f} MiB | {growth / r.raw_payload_bytes:.2f}x | {growth / r.device_bytes:.2f}x |"
            )
    print()


def dtype_table(repeats: int, size: str) -> None:
    print(f"### Storage dtype ({size}, one device; median of {repeats} runs)\n")
    print("| dtype | raw payload | disk | disk / raw | save | restore | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for dtype in ("float32", "bfloat16"):
        (_, r), peak = run(SIZES[size], repeats, dtype=dtype)
        print(
            f"| {dtype} | {r.raw_payload_bytes / MiB:,.1f} MiB | {r.disk_bytes / MiB:,.1f} MiB "
            f"| {r.disk_bytes / r.raw_payload_bytes:.3f} | {r.save_seconds:.2f} s | {r.restore_seconds:.2f} s "
            f"| {peak / MiB:,.0f} MiB |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("size", "devices", "dtype"))
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores\n")
    if args.only in (None, "size"):
        size_table(args.repeats)
    if args.only in (None, "devices"):
        device_table(args.repeats, "10M")
    if args.only in (None, "dtype"):
        dtype_table(args.repeats, "10M")


if __name__ == "__main__":
    main()
