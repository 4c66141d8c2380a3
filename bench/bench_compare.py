"""The budget question for llama2-70b must be answered in under 2 s: measure it.

Run: python bench/bench_compare.py [--repeats 5]

The real answer searches every device count N from 1 to 4,096 (it is not monotone), so it lays
the model out 4,096 times. ``compute_layout`` places all 723 arrays each time; the search uses
``layout.shard_values_by_shape``, which asks JAX once per distinct dimension size and mesh entry.
For each strategy and what must fit: the first call and the median of the repeats of the whole
answer (count, demand, search), with the load average beside it; then ``compute_layout`` on 64
device counts, scaled to 4,096, for the naive cost. Prints Markdown; bench/README.md records a run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax

from dcsim.memory import budget
from dcsim.model.config import ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding import layout, meshes

CONFIG = ModelConfig(preset="llama2-70b")


def whole_answer(spec: budget.Budget) -> budget.Answer:
    report = count_params(CONFIG)
    return budget.answer(budget.demand(report, "bfloat16", spec.training), spec)


def timed(function, repeats: int) -> tuple[float, float, object]:
    start = time.perf_counter()
    result = function()
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        runs.append(time.perf_counter() - start)
    return first, statistics.median(runs), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"jax {jax.__version__}; load average before: {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print("| strategy | must fit | answer: devices | first call | median | load average |")
    print("|---|---|---|---|---|---|")
    for strategy in budget.BUDGET_STRATEGIES:
        for training in (None, "adam"):
            spec = budget.Budget(amount=80 * 2**30, unit="bytes", training=training, strategy=strategy)
            first, median, found = timed(lambda spec=spec: whole_answer(spec), args.repeats)
            devices = "none" if found.devices is None else f"{found.devices:,}"
            print(
                f"| {strategy} | {spec.holds.split(' + ')[0] if training is None else 'params + grads + adam'} "
                f"| {devices} | {first:.2f} s | {median:.2f} s | {os.getloadavg()[0]:.2f} |"
            )
    report = count_params(CONFIG)
    sample = range(1, 65)
    start = time.perf_counter()
    for count in sample:
        layout.compute_layout(report, meshes.MeshSpec((("data", count),)), "fsdp")
    naive = (time.perf_counter() - start) / len(sample) * budget.MAX_SEARCH_DEVICES
    print(
        f"\nNaive: compute_layout (723 arrays) on data=1..64, fsdp, scaled to 4,096 meshes: {naive:.0f} s "
        f"(load average {os.getloadavg()[0]:.2f})."
    )


if __name__ == "__main__":
    main()
