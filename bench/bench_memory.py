"""Training memory per device (issue 17) is fast whole-process, with and without XLA's check.

Run: PYTHONPATH=. python bench/bench_memory.py [--repeats 3]

1. ``python -m dcsim memory`` for llama2-70b on 4,096 devices (fsdp, adam, ZeRO-3, bfloat16 params,
   float32 master copy), in a fresh process, against a baseline command that only imports JAX and
   Flax and against ``count`` of the same model: median wall time and each child's peak resident
   memory (``os.wait4``'s ru_maxrss). The issue allows 3 s whole process.
2. The same with ``--budget 80GiB`` (the search lays the state out on 13 meshes).
3. ``--verify`` for llama2-7b on 256 virtual devices (adam, ZeRO-3): the child process compiles the
   whole training state with its shardings and reads XLA's memory analysis. The issue allows 10 s.
4. ZeRO stages side by side for llama2-70b on data=64: the JSON's per-device bytes, for the README.

Commands run interleaved, so drift on a shared machine touches each alike; ratios are in one run.
Prints Markdown tables; bench/README.md records a run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import BASELINE, BASELINE_ARGV, DCSIM, ROOT, commands_table, repeats_parser

MEMORY = [*DCSIM, "memory"]
LLAMA70 = ["--preset", "llama2-70b", "--mesh", "data=4096", "--strategy", "fsdp", "--optimizer", "adam", "--zero", "3"]
DTYPES = ["--param-dtype", "bfloat16", "--master-dtype", "float32"]
COMMANDS = {
    BASELINE: BASELINE_ARGV,
    "count --preset llama2-70b": [*DCSIM, "count", "--preset", "llama2-70b"],
    "memory llama2-70b, data=4096": [*MEMORY, *LLAMA70, *DTYPES, "--format", "json"],
    "memory llama2-70b, data=4096, --budget 80GiB": [*MEMORY, *LLAMA70, *DTYPES, "--budget", "80GiB"],
    "memory llama2-7b, data=256, --verify": [
        *MEMORY, "--preset", "llama2-7b", "--mesh", "data=256", "--strategy", "fsdp", "--optimizer", "adam",
        "--zero", "3", "--param-dtype", "bfloat16", "--verify", "--format", "json",
    ],
}  # fmt: skip
LIMITS = {"memory llama2-70b, data=4096": "3 s", "memory llama2-7b, data=256, --verify": "10 s"}


def part_commands(repeats: int) -> None:
    commands_table(COMMANDS, BASELINE, LIMITS, repeats)
    verified = subprocess.run(
        COMMANDS["memory llama2-7b, data=256, --verify"], capture_output=True, text=True, cwd=ROOT
    )
    record = json.loads(verified.stdout)
    xla = record["xla"]
    print(
        f"\nllama2-7b on 256 devices: {len(record['arrays']):,} state arrays; dcsim "
        f"{record['per_device']['total_bytes']:,} bytes a device, XLA {xla['output_bytes_per_device']:,} "
        f"(= dcsim + 8 x {len(record['arrays']):,}: {xla['matches']})\n"
    )


def part_stages() -> None:
    print("| ZeRO stage (llama2-70b, data=64, adam, bf16+fp32) | params | grads | master | optimizer | total |")
    print("|---|---:|---:|---:|---:|---:|")
    for zero in range(4):
        argv = [*MEMORY, *LLAMA70[:2], "--mesh", "data=64", "--strategy", "fsdp", "--optimizer", "adam"]
        argv += ["--zero", str(zero), *DTYPES, "--format", "json"]
        per_device = json.loads(subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=True).stdout)[
            "per_device"
        ]
        cells = [per_device[f"{part}_bytes"] for part in ("params", "grads", "master", "optimizer", "total")]
        print(f"| {zero} | " + " | ".join(f"{value / 2**30:,.2f} GiB" for value in cells) + " |")
    print()


def main() -> None:
    args = repeats_parser(__doc__, repeats=3).parse_args()
    part_commands(args.repeats)
    part_stages()


if __name__ == "__main__":
    main()
