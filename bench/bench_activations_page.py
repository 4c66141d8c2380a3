"""A sequence change on the Memory page for Llama 2 70B, against Streamlit's floor, in Chromium.

    python bench/bench_activations_page.py --changes 7

Two servers side by side on loopback (dcsim's ``app.py`` and ``bench/hello_app.py``, a number
input and one metric), both warmed first. On an open Memory page for Llama 2 70B (data=8,model=8,
megatron, ZeRO-1, bfloat16 with a float32 master copy), a new sequence is typed and Enter pressed;
the clock runs from the keydown to the exact activations figure on screen (the page's own
``performance.now()``, read by bench_journey's MutationObserver), alternating with a number change
on the hello-world app. Each sequence is new to the server, so every change traces the step and
lays the budget sweep out again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_journey import beside_the_floor, open_for_changes, print_summaries, share_text, timed_enter  # noqa: E402

from dcsim.memory import activations  # noqa: E402
from dcsim.model.config import ModelConfig  # noqa: E402
from dcsim.quantities import units  # noqa: E402
from dcsim.sharding.meshes import parse_mesh  # noqa: E402

MESH = "data=8,model=8"
LINK = "/memory?preset=llama2-70b&mesh=data%3D8%2Cmodel%3D8&strategy=megatron&zero=1&master=float32&seq=4096"
LABEL = "Activations per device"


def expected(sequence: int) -> str:
    report = activations.trace_activations(
        ModelConfig(preset="llama2-70b"), activations.Step(sequence=sequence), "bfloat16", parse_mesh(MESH)
    )
    return units.bytes_exact(report.bytes_per_device)


def change(page, field, value: str, key: str, label: str, text: str) -> float:
    """``timed_enter`` with room for a trace and a budget sweep on a loaded machine."""
    return timed_enter(page, field, value, key, label, text, limit=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=7)
    args = parser.parse_args()
    sequences = [1024 + 256 * index for index in range(args.changes + 1)]
    texts = {sequence: expected(sequence) for sequence in sequences}
    load_before = os.getloadavg()[0]
    with beside_the_floor() as (dcsim_url, hello_url, browser):
        memory_page, hello_page = open_for_changes(browser, dcsim_url + LINK), open_for_changes(browser, hello_url)
        sequence_box = memory_page.get_by_role("textbox", name="Sequence (tokens)")
        hello_box = hello_page.get_by_role("spinbutton", name="Number of checkpoint shards")
        times: dict[str, list[float]] = {"hello-world app": [], "dcsim Memory page, Llama 2 70B": []}
        change(memory_page, sequence_box, str(sequences[0]), "warm", LABEL, texts[sequences[0]])
        for index, sequence in enumerate(sequences[1:]):
            shards = 4 + index
            times["hello-world app"].append(
                change(hello_page, hello_box, str(shards), f"h{index}", f"Ideal share per shard ({shards:,} shards)",
                       share_text(20, shards, True))
            )  # fmt: skip
            times["dcsim Memory page, Llama 2 70B"].append(
                change(memory_page, sequence_box, str(sequence), f"m{index}", LABEL, texts[sequence])
            )
    print(f"Load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after.\n")
    print_summaries(times, "hello-world app")
    gap = statistics.median(times["dcsim Memory page, Llama 2 70B"]) - statistics.median(times["hello-world app"])
    print(f"\nA sequence change is {gap:.0f} ms over the floor's median.")


if __name__ == "__main__":
    main()
