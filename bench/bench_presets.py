"""Presets: counting cost follows the number of blocks, never their width. Measure it.

Run: PYTHONPATH=. python bench/bench_presets.py [--repeats 5] [--hf-python /tmp/hfvenv/bin/python
[--accelerate-only]]

1. In process: ``count_params`` of ``llama2-70b`` against the same preset shrunk to tiny widths
   (same 80 blocks; d_model 64, 8 heads over 1 KV head, FFN 224): the first call and the median
   of the repeats. Target: within 25 %.
2. The CLI end to end, one fresh ``python -m dcsim count --preset ... --format json`` process per
   run: median wall time and each child's peak resident memory (``os.wait4``'s ru_maxrss).
   Target: under 1 GB.
3. Switching presets: every preset counted in turn in one process, first round and second round.
4. Optional (``--hf-python``, an interpreter with torch, transformers and accelerate, see
   bench/requirements.txt): Hugging Face Accelerate's meta-device count of the same model, the
   code path of ``accelerate estimate-memory`` after its Hub look-up (``init_empty_weights`` +
   ``AutoModelForCausalLM.from_config(LlamaConfig(...))`` + ``calculate_maximum_sizes``), in a
   fresh process, against dcsim's CLI on the same model: Llama 2 70B and GPT-2 XL, runs
   interleaved, with the ratio of the median walls (the goal of issue 30: 0.3x).

Prints Markdown; bench/README.md records a run.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import measure
from measure import DCSIM, ROOT, mib

sys.path.insert(0, str(ROOT))

TINY = {"d_model": 64, "num_heads": 8, "num_kv_heads": 1, "ffn_dim": 224}
TINY_SET = [item for name, value in TINY.items() for item in ("--set", f"{name}={value}")]

HF_CHILD = """
import sys, time
start = time.perf_counter()
import torch
from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes
import json, transformers
from transformers import AutoModelForCausalLM
config_class = getattr(transformers, sys.argv[1])
imported = time.perf_counter()
config = config_class(**json.loads(sys.argv[2]))
with init_empty_weights():
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
num_params = sum(p.numel() for p in model.parameters())
total_size, _ = calculate_maximum_sizes(model)
done = time.perf_counter()
print(num_params, total_size, imported - start, done - imported)
"""

# The same model on both sides: a preset, and transformers' config of it (its published sizes).
HF_MODELS = {
    "llama2-70b": (
        "LlamaConfig",
        {
            "vocab_size": 32000,
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": False,
        },
    ),
    "gpt2-xl": ("GPT2Config", {"n_embd": 1600, "n_layer": 48, "n_head": 25}),
}


def run_child_measured(argv: list[str]) -> tuple[float, int, str]:
    """``measure.run_child_measured`` with this checkout importable in the child."""
    return measure.run_child_measured(argv, env={"PYTHONPATH": str(ROOT)})


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def in_process(repeats: int) -> None:
    from dcsim.model import modules
    from dcsim.model.config import ModelConfig
    from dcsim.model.count import count_module, count_params

    def full_unrolled(config: ModelConfig) -> object:
        module, inputs = modules.build(config)
        return count_module(module, *inputs)

    print("### In process: llama2-70b against the same 80 blocks at tiny widths\n")
    print("`count_params` traces two blocks a run and repeats their rows; `full unrolled` initialises all 80")
    print(f"blocks abstractly (what `models.build` returns). {repeats} repeats after a first call.\n")
    print("| configuration | method | parameters | first call | median | fastest |")
    print("|---|---|---|---|---|---|")
    medians: dict[tuple[str, str], float] = {}
    for method, count in (("count_params", count_params), ("full unrolled", full_unrolled)):
        for label, config in (
            ("llama2-70b", ModelConfig(preset="llama2-70b")),
            ("llama2-70b, d_model 64", ModelConfig(preset="llama2-70b", overrides=TINY)),
        ):
            first, report = timed(lambda config=config, count=count: count(config))
            runs = repeats if method == "count_params" else max(3, repeats // 4)
            times = [timed(lambda config=config, count=count: count(config))[0] for _ in range(runs)]
            medians[method, label] = statistics.median(times)
            print(
                f"| {label} | {method} | {report.total_params:,} | {first:.3f} s | {medians[method, label]:.3f} s"
                f" | {min(times):.3f} s |"
            )
    for method in ("count_params", "full unrolled"):
        huge, tiny = medians[method, "llama2-70b"], medians[method, "llama2-70b, d_model 64"]
        print(f"\n{method}: huge / tiny median {huge / tiny:.2f}x (target: within 25 %)", end="")
    print("\n")


def cli(repeats: int) -> None:
    print("### CLI end to end (fresh process per run)\n")
    print("| configuration | parameters | median wall | peak RSS (max of runs) |")
    print("|---|---|---|---|")
    base = [*DCSIM, "count", "--preset", "llama2-70b", "--format", "json"]
    medians = []
    for label, argv in (("llama2-70b", base), ("llama2-70b, d_model 64", base + TINY_SET)):
        walls, peaks, total = [], [], 0
        for _ in range(repeats):
            wall, peak, out = run_child_measured(argv)
            walls.append(wall)
            peaks.append(peak)
            total = json.loads(out)["total_params"]
        medians.append(statistics.median(walls))
        print(f"| {label} | {total:,} | {medians[-1]:.2f} s | {mib(max(peaks))} |")
    print(f"\nHuge / tiny median wall: {medians[0] / medians[1]:.2f}x (target: within 25 %, under 1 GB)\n")


def switching() -> None:
    from dcsim.model.config import ModelConfig
    from dcsim.model.count import count_params
    from dcsim.model.presets import PRESETS

    print("### Switching presets in one process (each counted in turn, two rounds)\n")
    print("| preset | blocks | first round | second round |")
    print("|---|---|---|---|")
    rounds: dict[str, list[float]] = {name: [] for name in PRESETS}
    for _ in range(2):
        for name in PRESETS:
            rounds[name].append(timed(lambda name=name: count_params(ModelConfig(preset=name)))[0])
    for name, (first, second) in rounds.items():
        hparams = PRESETS[name].hparams
        blocks = hparams.get("num_layers") or sum(hparams.get("stage_blocks", ()))
        print(f"| {name} | {blocks} | {first:.2f} s | {second:.2f} s |")
    print()


def hugging_face(hf_python: str, repeats: int) -> None:
    print("### Against Hugging Face Accelerate's meta-device count (fresh process each, runs interleaved)\n")
    print("| model | tool | parameters | import | build + count | median wall | peak RSS (max) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for preset, (config_class, fields) in HF_MODELS.items():
        theirs, ours = [], []
        for _ in range(repeats):  # interleaved, so that the machine's load falls on both alike
            theirs.append(run_child_measured([hf_python, "-c", HF_CHILD, config_class, json.dumps(fields)]))
            ours.append(run_child_measured([*DCSIM, "count", "--preset", preset, "--format", "json"]))
        num_params, total_size, *_ = theirs[0][2].split()
        imported = statistics.median(float(run[2].split()[2]) for run in theirs)
        counted = statistics.median(float(run[2].split()[3]) for run in theirs)
        their_wall = statistics.median(run[0] for run in theirs)
        our_wall = statistics.median(run[0] for run in ours)
        print(
            f"| {preset} | accelerate (init_empty_weights + from_config) | {int(num_params):,} ({int(total_size):,}"
            f" bytes incl. buffers) | {imported:.2f} s | {counted:.2f} s | {their_wall:.2f} s"
            f" | {mib(max(run[1] for run in theirs))} | |"
        )
        total = json.loads(ours[0][2])["total_params"]
        print(
            f"| {preset} | dcsim count --preset {preset} --format json | {total:,} | | | {our_wall:.2f} s"
            f" | {mib(max(run[1] for run in ours))} | **{our_wall / their_wall:.2f}x** |"
        )
    print()


def main() -> None:
    parser = measure.repeats_parser(__doc__, repeats=5)
    parser.add_argument("--hf-python", help="a Python with torch, transformers and accelerate (optional)")
    parser.add_argument("--accelerate-only", action="store_true", help="with --hf-python: only part 4")
    args = parser.parse_args()
    import flax
    import jax

    print(
        f"Machine: {platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, jax {jax.__version__}, flax {flax.__version__}\n"
    )
    if not (args.accelerate_only and args.hf_python):
        in_process(max(args.repeats, 20))
        cli(args.repeats)
        switching()
    if args.hf_python:
        hugging_face(args.hf_python, args.repeats)


if __name__ == "__main__":
    main()
