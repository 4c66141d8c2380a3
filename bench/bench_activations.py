"""Training activations (issue 29) cost little beside the state, whole process.

Run: PYTHONPATH=. python bench/bench_activations.py [--repeats 5]

1. ``python -m dcsim memory`` for llama2-70b on 64 devices (data=8,model=8, megatron, adam, ZeRO-1,
   bfloat16 params, float32 master copy) in a fresh process: the state alone, then with
   ``--sequence 4096`` (the residuals traced from JAX's autodiff: two blocks, outside the blocks
   and the loss), with sequence parallelism, and with the budget search (each candidate mesh's
   activations, cached by its model axis). Median wall time and peak RSS; the goal is the state
   alone's time within 1.5x.
2. ``--sequence 1024 --verify`` for GPT-2 small over 2 devices: XLA compiles the whole step in a
   child (the issue allows 30 s whole process).
3. Llama 2 7B and 70B at 4,096 tokens, micro-batch 1, per policy and attention kind, in process:
   dcsim's figure against Korthikanti et al.'s formula, and the trace's time.

Commands run interleaved, so drift on a shared machine touches each alike; ratios are in one run.
Prints Markdown tables; bench/README.md records a run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import DCSIM, commands_table, repeats_parser

MEMORY = [*DCSIM, "memory"]
LLAMA70 = [
    *("--preset", "llama2-70b", "--mesh", "data=8,model=8", "--strategy", "megatron", "--optimizer", "adam"),
    *("--zero", "1", "--param-dtype", "bfloat16", "--master-dtype", "float32", "--format", "json"),
]
STATE = "memory llama2-70b, 64 devices (state alone)"
COMMANDS = {
    STATE: [*MEMORY, *LLAMA70],
    "... --sequence 4096": [*MEMORY, *LLAMA70, "--sequence", "4096"],
    "... --sequence 4096 --sequence-parallel": [*MEMORY, *LLAMA70, "--sequence", "4096", "--sequence-parallel"],
    "... --sequence 4096 --budget 80GiB": [*MEMORY, *LLAMA70, "--sequence", "4096", "--budget", "80GiB"],
}
LIMITS = {"... --sequence 4096": "1.5x the state alone"}
VERIFY_NAME = "memory gpt2-small, data=2, --sequence 1024 --verify"
VERIFY = [
    *MEMORY, "--preset", "gpt2-small", "--mesh", "data=2", "--zero", "1", "--master-dtype", "float32",
    "--sequence", "1024", "--verify", "--format", "json",
]  # fmt: skip


def part_policies() -> None:
    from dcsim.memory import activations
    from dcsim.model.config import ModelConfig

    print("\n| model | attention | remat | dcsim bytes a device | formula | dcsim / formula | loss | trace |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    gib = 2**30
    for name in ("llama2-7b", "llama2-70b"):
        for attention in ("flash", "naive"):
            for policy in activations.POLICIES:
                start = time.perf_counter()
                report = activations.trace_activations(
                    ModelConfig(preset=name), activations.Step(sequence=4096, remat=policy, attention=attention)
                )
                took = time.perf_counter() - start
                formula = report.korthikanti_bytes
                print(
                    f"| {name} | {attention} | {policy} | {report.bytes_per_device:,} "
                    f"({report.bytes_per_device / gib:.2f} GiB) | "
                    + (
                        "no counterpart | |"
                        if formula is None
                        else f"{formula / gib:.2f} GiB | {report.bytes_per_device / formula:.2f}x |"
                    )
                    + f" {report.loss_bytes / gib:.2f} GiB | {took:.2f} s |"
                )


def main() -> None:
    args = repeats_parser(__doc__, repeats=5).parse_args()
    medians = commands_table(COMMANDS, STATE, LIMITS, args.repeats)
    print(f"\nwith --sequence 4096: {medians['... --sequence 4096'] / medians[STATE]:.2f}x the state alone")
    print()
    commands_table({VERIFY_NAME: VERIFY}, VERIFY_NAME, {VERIFY_NAME: "30 s"}, 1)
    part_policies()


if __name__ == "__main__":
    main()
