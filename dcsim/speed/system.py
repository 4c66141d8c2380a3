"""The efficiencies and latencies that turn exact counts into seconds, each with its published
source, and which link a mesh axis runs over.

Nothing here is tuned to a measurement dcsim is checked against (docs/time.md): the figures are
Calculon's system files (Isaev et al., "Calculon: a methodology and tool for high-level co-design
of systems and large language models", SC'23; ``systems/a100_80g.json`` and
``systems/h100_80g_nvl8.json`` in github.com/calculon-ai/calculon), which were set from NVIDIA's
microbenchmarks:

- a matmul's efficiency by its size in GFLOP: at least 128: 0.95; 16: 0.90; 1: 0.60; less: 0.10
  (``matrix.gflops_efficiency``);
- HBM's efficiency by the bytes a pass moves, in MB: at least 100: 0.90; 10: 0.75; 1: 0.60; less:
  0.30 (``mem1.MB_efficiency``);
- the scale-up network (NVLink inside an 8-GPU host): efficiency 0.6, latency 1 us a collective
  step; the scale-out network (InfiniBand): efficiency 0.9, latency 2 us (``networks``).

A ring collective of n devices runs n - 1 steps (an all-reduce 2(n - 1)), each paying the latency
(NCCL's ring algorithm; nccl-tests' ``doc/PERFORMANCE.md`` defines the bus bandwidth by the same
(n - 1)/n factors dcsim's bytes use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dcsim.inputs import as_int, show
from dcsim.model import presets
from dcsim.model.config import ModelConfig

CALCULON = "Calculon's system files (calculon-ai/calculon systems/a100_80g.json, h100_80g_nvl8.json)"
MATMUL_EFFICIENCY: tuple[tuple[int, float], ...] = ((128, 0.95), (16, 0.90), (1, 0.60), (0, 0.10))  # GFLOP
HBM_EFFICIENCY: tuple[tuple[int, float], ...] = ((100, 0.90), (10, 0.75), (1, 0.60), (0, 0.30))  # MB
SCALE_UP_EFFICIENCY = 0.6
SCALE_UP_LATENCY_SECONDS = 1e-6
SCALE_OUT_EFFICIENCY = 0.9
SCALE_OUT_LATENCY_SECONDS = 2e-6
DEFAULT_DEVICES_PER_HOST = 8  # an HGX/DGX host's GPUs; a TPU v5e or v6e host's chips
MAX_DEVICES_PER_HOST = 1 << 16


def _stepped(table: Sequence[tuple[int, float]], size: float) -> float:
    for floor, efficiency in table:
        if size >= floor:
            return efficiency
    return table[-1][1]


def matmul_efficiency(flops: int) -> float:
    """Calculon's efficiency of a matmul of ``flops`` operations."""
    return _stepped(MATMUL_EFFICIENCY, flops / 1e9)


def hbm_efficiency(num_bytes: int) -> float:
    """Calculon's HBM efficiency of a pass over ``num_bytes`` bytes."""
    return _stepped(HBM_EFFICIENCY, num_bytes / 1e6)


TRANSFORMER_SIZES = ("num_layers", "num_heads", "d_model")  # what the time rules read of a model


def transformer_hparams(config: ModelConfig) -> dict[str, Any]:
    """``config``'s hyperparameters, once they hold a transformer's sizes the time rules read (its
    blocks, heads and width); a ValueError naming what is missing for any other model (the Dense
    stack, a ResNet), which the faces show as "no time estimate" beside the memory answer."""
    hparams = presets.resolved_hparams(config)
    missing = [name for name in TRANSFORMER_SIZES if not hparams.get(name)]
    if missing:
        raise ValueError(
            f"a time estimate reads a transformer's {', '.join(TRANSFORMER_SIZES)}; {presets.model_title(config)} "
            f"has no {' or '.join(missing)}"
        )
    return hparams


def json_seconds(value: float) -> float:
    """A time as the JSON writes it: six significant figures, as much as an estimate carries."""
    return float(f"{value:.6g}")


def check_devices_per_host(value: object, label: str = "--devices-per-host") -> int:
    return as_int(value, label, minimum=1, maximum=MAX_DEVICES_PER_HOST, why="devices a host")


def inside_host(axes: Sequence[tuple[str, int]], names: Sequence[str], devices_per_host: int) -> bool:
    """Whether the mesh axes ``names`` run inside one host: a mesh's devices are numbered with its
    last axis fastest (as ``jax.make_mesh`` and the checkpoint plan lay them), so a set of axes stays
    inside a host when the devices from the first of them to the mesh's end fit in one host."""
    order = [name for name, _ in axes]
    first = min(order.index(name) for name in names)
    return math.prod(size for _, size in axes[first:]) <= devices_per_host


MAX_RUN_TOKENS = 10**18  # past any run's data, small enough for exact steps
MAX_PROMPT = 1 << 24  # dcsim.serving.request.MAX_CONTEXT: a prompt fits a context


def check_tokens(value: Any, label: str = "--tokens") -> int:
    """A run's tokens: a positive whole number (``15.6e12`` reads as 15,600,000,000,000)."""
    return as_int(value, label, minimum=1, maximum=MAX_RUN_TOKENS, why="tokens a run trains on")


def check_price(value: Any, label: str = "--price") -> float:
    """A price a device-hour: a finite number at least 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"`{label}` must be a price a device-hour, a number at least 0, got {show(value)}")
    return float(value)
