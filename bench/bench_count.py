"""Counting cost must not grow with parameter count: measure it.

Run: python bench/bench_count.py [--repeats 5]

1. The seed function on a Dense(65,536) over input dimension 65,536 (4,295,032,832 values), in
   process: the first call (tracing included) and the median of the repeats after it.
2. The CLI end to end (``python -m dcsim count``), one fresh process per run: the seed example
   (20 values) against a huge Dense stack (three 65,536-wide layers, 12.9 billion values); the
   median wall time and each child's peak resident memory (``os.wait4``'s ru_maxrss).
3. Counting cost against depth (1 to 256 layers) at a narrow and a huge width, in process.
4. For comparison, a concrete ``nn.Dense(F).init`` on input dimension F in a fresh process at
   sizes this machine can hold, against the abstract count of the same layer: wall time and peak
   memory.

Prints a Markdown table per part; bench/README.md records a run.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

from measure import DCSIM, mib, repeats_parser, run_child_measured

HUGE_CLI = ["--input-dim", "65536", "--features", "65536,65536,65536", "--shards", "4096"]

CHILD_INIT = """
import sys, time
import jax, jax.numpy as jnp, flax.linen as nn
width, mode = int(sys.argv[1]), sys.argv[2]
x = jnp.ones((1, width), jnp.float32)
start = time.perf_counter()
if mode == "concrete":
    params = nn.Dense(width).init(jax.random.PRNGKey(0), x)
    jax.block_until_ready(params)
else:
    params = jax.eval_shape(nn.Dense(width).init, jax.random.PRNGKey(0), x)
total = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
print(total, time.perf_counter() - start)
"""


def bench_seed_function(repeats: int) -> None:
    import jax.numpy as jnp

    from dcsim import distributed_checkpoint_simulate

    x = jnp.ones((1, 65_536), jnp.float32)
    start = time.perf_counter()
    result = distributed_checkpoint_simulate(0, x, 2, 65_536)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        distributed_checkpoint_simulate(0, x, 2, 65_536)
        times.append(time.perf_counter() - start)
    print("\n## Seed function, Dense(65,536) on input dimension 65,536\n")
    print("| result | first call | median of repeats |")
    print("|---|---|---|")
    print(f"| {result.tolist()} | {first:.3f} s | {statistics.median(times):.3f} s |")


def bench_cli(repeats: int) -> None:
    print("\n## CLI `python -m dcsim count`, fresh process per run\n")
    print("| configuration | values | median wall | peak RSS (max of runs) |")
    print("|---|---|---|---|")
    medians = {}
    for name, flags in (("seed example", []), ("3 x Dense(65,536), D=65,536", HUGE_CLI)):
        walls, peaks = [], []
        for _ in range(repeats):
            wall, peak, out = run_child_measured([*DCSIM, "count", "--format", "json", *flags])
            walls.append(wall)
            peaks.append(peak)
        total = json.loads(out)["total_params"]
        medians[name] = statistics.median(walls)
        print(f"| {name} | {total:,} | {medians[name]:.2f} s | {mib(max(peaks))} |")
    ratio = medians["3 x Dense(65,536), D=65,536"] / medians["seed example"]
    print(f"\nHuge / tiny median wall time: {ratio:.2f}x")


def bench_concrete(widths: list[int]) -> None:
    print("\n## Concrete against abstract initialisation of Dense(F) on input dimension F, fresh process\n")
    print("| F | values | raw float32 | concrete init | concrete peak RSS | abstract | abstract peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for width in widths:
        row = [f"{width:,}"]
        for mode in ("concrete", "abstract"):
            _, peak, out = run_child_measured([sys.executable, "-c", CHILD_INIT, str(width), mode])
            total, seconds = out.split()
            if mode == "concrete":
                row += [f"{int(total):,}", mib(int(total) * 4)]
            row += [f"{float(seconds):.3f} s", mib(peak)]
        print("| " + " | ".join(row) + " |")


def bench_depth(repeats: int) -> None:
    from dcsim.model.config import DenseLayer, ModelConfig
    from dcsim.model.count import count_params

    print("\n## Counting cost against depth and width, in process (median of repeats)\n")
    print("| layers | width 8 | width 65,536 |")
    print("|---|---|---|")
    for depth in (1, 16, 64, 256):
        row = [str(depth)]
        for width in (8, 65_536):
            config = ModelConfig(input_dim=width, layers=tuple(DenseLayer(features=width) for _ in range(depth)))
            count_params(config)  # warm the tracing caches once
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                count_params(config)
                times.append(time.perf_counter() - start)
            row.append(f"{statistics.median(times) * 1000:.0f} ms")
        print("| " + " | ".join(row) + " |")


def main() -> None:
    parser = repeats_parser(__doc__, repeats=5)
    parser.add_argument("--widths", default="1024,4096,8192,16384", help="concrete-init widths F")
    args = parser.parse_args()
    machine = f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"# dcsim counting benchmark\n\n{machine}")
    bench_seed_function(args.repeats)
    bench_depth(args.repeats)
    bench_cli(args.repeats)
    bench_concrete([int(width) for width in args.widths.split(",")])


if __name__ == "__main__":
    main()
