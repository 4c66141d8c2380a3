"""Counting the models of issue 16 stays flat in width and cheap in depth: measure it.

Run: PYTHONPATH=. python bench/bench_moe.py [--repeats 5]

1. ``python -m dcsim count --preset deepseek-v3`` (671,026,404,352 parameters: 61 blocks, 256 routed
   experts, latent attention) in a fresh process, against the same command with every width cut
   to 8 (the same 61 blocks and their kinds, about 2 million parameters) and against a baseline
   command that only imports JAX and Flax: median wall time and each child's peak resident memory
   (``os.wait4``'s ru_maxrss). Ratios in one run, since this machine is shared and noisy.
2. Every Hugging Face config.json in tests/data/hf/ opened and counted by the CLI, one fresh
   process each (``count --config FILE``): the slowest whole-process wall time and the largest peak
   memory, against the 15 s the issue allows.
3. In process: DeepSeek-V3's count the first time (tracing included) and the median after.

Prints Markdown tables; bench/README.md records a run.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import BASELINE, BASELINE_ARGV, DCSIM, ROOT, commands_table, mib, repeats_parser, run_child_measured

TINY = [
    "--set", "vocab_size=8", "--set", "d_model=8", "--set", "num_heads=2", "--set", "q_lora_rank=8",
    "--set", "kv_lora_rank=8", "--set", "qk_nope_head_dim=8", "--set", "qk_rope_head_dim=8",
    "--set", "v_head_dim=8", "--set", "expert_ffn_dim=8", "--set", "shared_ffn_dim=8", "--set", "ffn_dim=8",
]  # fmt: skip
COMMANDS = {
    BASELINE: BASELINE_ARGV,
    "count --preset deepseek-v3 (671B)": [*DCSIM, "count", "--preset", "deepseek-v3"],
    "the same 61 blocks, widths 8": [*DCSIM, "count", "--preset", "deepseek-v3", *TINY],
}


def part_commands(repeats: int) -> None:
    medians = commands_table(COMMANDS, BASELINE, None, repeats)
    full, tiny = medians["count --preset deepseek-v3 (671B)"], medians["the same 61 blocks, widths 8"]
    print(f"\n671B against the same blocks at width 8: {full / tiny:.2f}x\n")


def part_files() -> None:
    print("| config.json | wall s | peak RSS |")
    print("|---|---:|---:|")
    slowest, largest = 0.0, 0
    for path in sorted((ROOT / "tests" / "data" / "hf").glob("*.json")):
        if path.name in ("counts.json", "defaults.json"):
            continue
        wall, rss, _ = run_child_measured([*DCSIM, "count", "--config", str(path)])
        slowest, largest = max(slowest, wall), max(largest, rss)
        print(f"| {path.stem} | {wall:.2f} | {mib(rss)} |")
    print(f"\nslowest file {slowest:.2f} s (allowed 15 s); largest peak {mib(largest)}\n")


def part_in_process(repeats: int) -> None:
    from dcsim.model.config import ModelConfig
    from dcsim.model.count import count_params

    config = ModelConfig(preset="deepseek-v3")
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        total = count_params(config).total_params
        times.append(time.perf_counter() - start)
    print(f"in process: deepseek-v3 {total:,} first {times[0]:.2f} s, then median {statistics.median(times[1:]):.3f} s")


def main() -> None:
    args = repeats_parser(__doc__, repeats=5).parse_args()
    part_commands(args.repeats)
    part_files()
    part_in_process(args.repeats)


if __name__ == "__main__":
    main()
