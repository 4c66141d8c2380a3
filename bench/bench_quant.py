"""Weight formats (issue 28): fast whole-process, and the bytes of Llama 2 7B and 13B in every format.

Run: PYTHONPATH=. python bench/bench_quant.py [--repeats 3]

1. ``python -m dcsim serve --weights gguf-q4_k_m`` for Llama 2 70B against ``serve`` in bfloat16
   (the issue allows 1.5x), and ``count --weights int4`` (qwix's own quantization of the real
   Flax model, traced abstractly) for Llama 2 70B, whole process (the issue allows 3 s), each in
   a fresh process against a baseline that only imports JAX and Flax.
2. The table of docs/quantized.md: Llama 2 7B and 13B in every format, dcsim's payload and its
   prediction of the whole file (the safetensors or GGUF header included), in bytes.

Median wall time and each child's peak resident memory; commands run interleaved, so drift on a
shared machine touches each alike. Prints Markdown tables; bench/README.md records a run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import BASELINE, BASELINE_ARGV, DCSIM, commands_table, repeats_parser

SERVE_70B = [*DCSIM, "serve", "--preset", "llama2-70b", "--mesh", "model=4", "--device", "h100-sxm"]
COMMANDS = {
    BASELINE: BASELINE_ARGV,
    "serve llama2-70b (bfloat16)": SERVE_70B,
    "serve llama2-70b --weights gguf-q4_k_m": [*SERVE_70B, "--weights", "gguf-q4_k_m"],
    "serve llama2-70b --weights gptq-int4": [*SERVE_70B, "--weights", "gptq-int4"],
    "count llama2-70b --weights int4 (qwix)": [*DCSIM, "count", "--preset", "llama2-70b", "--weights", "int4"],
}
LIMITS = {"serve llama2-70b --weights gguf-q4_k_m": "1.5x bfloat16", "count llama2-70b --weights int4 (qwix)": "3 s"}
FORMATS_SHOWN = (
    "bfloat16",
    "int8",
    "int4",
    "fp8",
    "nf4",
    "gptq-int4",
    "awq-int4",
    "gguf-q8_0",
    "gguf-q6_k",
    "gguf-q5_k_m",
    "gguf-q4_k_m",
    "gguf-q4_0",
)


def formats_table() -> None:
    from dcsim.model.config import ModelConfig
    from dcsim.model.count import count_params
    from dcsim.quant import layouts, write
    from dcsim.quant.formats import FORMATS, check_format

    print("\n| format | Llama 2 7B payload | 7B file | 13B payload | 13B file | bits a weight (7B) |")
    print("|---|---:|---:|---:|---:|---:|")
    models = [ModelConfig(preset=name) for name in ("llama2-7b", "llama2-13b")]
    reports = [count_params(config) for config in models]
    for name in (name for name in FORMATS if name in FORMATS_SHOWN or name.startswith(("bnb", "fp8-"))):
        cells = []
        bits = ""
        for config, report in zip(models, reports, strict=True):
            table = layouts.weight_table(config, report, check_format(name))
            whole = write.predicted_file_bytes(table) if table.format.kind not in ("plain", "qwix") else None
            cells += [f"{table.payload_bytes:,}", "-" if whole is None else f"{whole:,}"]
            bits = bits or f"{float(table.bits_per_weight):.3f}"
        print(f"| {name} | {' | '.join(cells)} | {bits} |")


def main() -> None:
    args = repeats_parser(__doc__, repeats=3).parse_args()
    medians = commands_table(COMMANDS, BASELINE, LIMITS, args.repeats)
    ratio = medians["serve llama2-70b --weights gguf-q4_k_m"] / medians["serve llama2-70b (bfloat16)"]
    print(f"\nserve in gguf-q4_k_m / serve in bfloat16 on llama2-70b: {ratio:.2f}x (allowed 1.5x)")
    print(
        f"count --weights int4 on llama2-70b: {medians['count llama2-70b --weights int4 (qwix)']:.2f} s (allowed 3 s)"
    )
    formats_table()


if __name__ == "__main__":
    main()
