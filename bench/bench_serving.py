"""Serving memory per device (issue 27) is fast whole-process, with and without XLA's check.

Run: PYTHONPATH=. python bench/bench_serving.py [--repeats 3]

1. ``python -m dcsim serve`` for DeepSeek-V3 (671B, 61 blocks, latent attention) on its default
   one-device mesh, in a fresh process, against ``count`` of the same model (the issue allows 1.5x)
   and against a baseline that only imports JAX and Flax; also with a budget (the answers and the
   smallest-mesh search) and for Llama 2 70B on four H100s.
2. ``serve --verify`` for Llama 2 7B over four virtual devices (megatron on model=4): the child
   compiles one decoding step with the weights and the cache sharded. The issue allows 15 s.

Median wall time and each child's peak resident memory (``os.wait4``'s ru_maxrss); commands run
interleaved, so drift on a shared machine touches each alike. Prints Markdown tables;
bench/README.md records a run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import BASELINE, BASELINE_ARGV, DCSIM, ROOT, commands_table, repeats_parser

VERIFY = [*DCSIM, "serve", "--preset", "llama2-7b", "--mesh", "model=4", "--concurrency", "8", "--verify"]
COMMANDS = {
    BASELINE: BASELINE_ARGV,
    "count --preset deepseek-v3": [*DCSIM, "count", "--preset", "deepseek-v3"],
    "serve --preset deepseek-v3": [*DCSIM, "serve", "--preset", "deepseek-v3", "--format", "json"],
    "serve deepseek-v3, data=8, --budget 141GiB": [
        *DCSIM, "serve", "--preset", "deepseek-v3", "--mesh", "data=8", "--budget", "141GiB", "--format", "json",
    ],
    "serve llama2-70b, model=4, --device h100-sxm": [
        *DCSIM, "serve", "--preset", "llama2-70b", "--mesh", "model=4", "--device", "h100-sxm", "--concurrency", "64",
    ],
    "serve llama2-7b, model=4, --verify": [*VERIFY, "--format", "json"],
}  # fmt: skip
LIMITS = {"serve --preset deepseek-v3": "1.5x count", "serve llama2-7b, model=4, --verify": "15 s"}


def main() -> None:
    args = repeats_parser(__doc__, repeats=3).parse_args()
    medians = commands_table(COMMANDS, BASELINE, LIMITS, args.repeats)
    ratio = medians["serve --preset deepseek-v3"] / medians["count --preset deepseek-v3"]
    print(f"\nserve / count on deepseek-v3: {ratio:.2f}x (allowed 1.5x)")
    record = json.loads(subprocess.run([*VERIFY, "--format", "json"], capture_output=True, text=True, cwd=ROOT).stdout)
    xla = record["xla"]
    print(
        f"llama2-7b on model=4, 8 sequences at 4,096: dcsim {record['total_bytes_per_device']:,} bytes a device, "
        f"XLA's arguments {xla['argument_bytes_per_device']:,} (= dcsim + {xla['token_bytes_per_device']} bytes of "
        f"tokens: {xla['matches']}); XLA's CPU temporaries {xla['temp_bytes_per_device']:,}\n"
    )


if __name__ == "__main__":
    main()
