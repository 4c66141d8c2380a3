"""A serving request: the mesh and how the weights are laid out on it, the weights' and the cache's
dtypes, the context and the concurrency, and the budget a device has, each checked once here.

Every rejection is a ``ValueError`` (``TypeError`` for the wrong kind of thing) naming the setting,
the rule and the value, so the CLI names its flag and the page its field. The reserve is an exact
``Fraction`` read from its text (``0.1`` is 1/10, never the float 0.1000000000000000055...), and
``usable_bytes = floor(budget x (1 - reserve))`` is exact: vLLM's ``gpu_memory_utilization`` 0.9 is
a reserve of 0.1.
"""

from __future__ import annotations

import dataclasses
import math
import re
from fractions import Fraction
from typing import Any

from dcsim.inputs import as_bool, as_int, show
from dcsim.model.cache import KV_DTYPE_ALIASES, KV_DTYPES
from dcsim.quant.formats import FORMATS, WeightFormat, check_format
from dcsim.serving.catalog import get_accelerator
from dcsim.sharding.meshes import MeshSpec, Rule
from dcsim.sharding.placement import STRATEGIES, check_strategy

# Limits: a request that arrives in a link is cheap to refuse; none is a limit of JAX.
MAX_CONTEXT = 1 << 24  # 16,777,216 tokens: past every published context (Llama 4 Scout's 10M)
MAX_CONCURRENCY = 1 << 20  # sequences at once over the whole mesh
MAX_RESERVE_CHARS = 32

WEIGHT_FORMATS = FORMATS  # plain dtypes, qwix, GPTQ, AWQ, bitsandbytes, FP8 and GGUF (dcsim.quant.formats)
DEFAULT_WEIGHTS = "bfloat16"
DEFAULT_KV_DTYPE = "bfloat16"
DEFAULT_STRATEGY = "megatron"
DEFAULT_CONTEXT = 4096
DEFAULT_CONCURRENCY = 1
DEFAULT_RESERVE = Fraction(1, 10)  # vLLM's gpu_memory_utilization 0.9
KV_DTYPE_NAMES = (*KV_DTYPES, *KV_DTYPE_ALIASES)

DATA_AXIS, TENSOR_AXIS, EXPERT_AXIS, STAGE_AXIS = "data", "model", "expert", "stage"
SERVING_AXES = (DATA_AXIS, TENSOR_AXIS, EXPERT_AXIS, STAGE_AXIS)
# The axes whose devices each hold their own sequences: replicas, and the expert axis, which serves
# attention data-parallel (vLLM's data-parallel attention with expert parallelism).
REPLICA_AXES = (DATA_AXIS, EXPERT_AXIS)

_RESERVE_TEXT = re.compile(r"(?:0|[1-9][0-9]*)?(?:\.[0-9]+)?%?")


def check_kv_dtype(value: Any, name: str = "kv_dtype") -> str:
    """A KV dtype's canonical name (``fp8`` is ``float8_e4m3fn``)."""
    if not isinstance(value, str) or value not in KV_DTYPE_NAMES:
        raise ValueError(f"`{name}` must be one of {', '.join(KV_DTYPE_NAMES)}, got {show(value)}")
    return KV_DTYPE_ALIASES.get(value, value)


def check_weights(value: Any, name: str = "weights") -> str:
    """A weight format's name (``dcsim.quant.formats.FORMATS``)."""
    return check_format(value, names=(name, "group", "bits", "tile", "quantize_head")).name


def parse_reserve(text: Any, name: str = "reserve") -> Fraction:
    """The fraction of a device kept free, exactly, from ``0.1``, ``.25``, ``10%`` or ``0``: at
    least 0 and below 1."""
    if isinstance(text, Fraction):
        value = text
    else:
        if not isinstance(text, str):
            raise TypeError(f"`{name}` must be text such as '0.1' or '10%', got {type(text).__name__} {show(text)}")
        stripped = text.strip()
        if len(stripped) > MAX_RESERVE_CHARS or not stripped or not _RESERVE_TEXT.fullmatch(stripped):
            raise ValueError(
                f"`{name}` must be a fraction of the device from 0 to below 1, written 0.1, .25 or 10%; "
                f"got {show(text)}"
            )
        percent = stripped.endswith("%")
        value = Fraction(stripped.rstrip("%") or "0") / (100 if percent else 1)
    if not 0 <= value < 1:
        raise ValueError(
            f"`{name}` must be at least 0 and below 1 (the fraction of each device kept free; 0.1 keeps 10%), "
            f"got {show(text)}"
        )
    return value


def reserve_text(value: Fraction) -> str:
    """A reserve as a person writes it: ``0.1``; a fraction with no short decimal as ``1/3``."""
    for digits in range(1, 7):
        scaled = value * 10**digits
        if scaled.denominator == 1:
            return f"{value.numerator / value.denominator:.{digits}f}".rstrip("0").rstrip(".") or "0"
    return str(value) if value else "0"


def usable_bytes(budget: int, reserve: Fraction) -> int:
    """``floor(budget x (1 - reserve))``, exactly."""
    return math.floor(budget * (1 - reserve))


def check_serving_mesh(mesh: MeshSpec) -> MeshSpec:
    """A serving mesh names only the serving axes: data, model, expert, stage."""
    if not isinstance(mesh, MeshSpec):
        raise TypeError(f"a mesh must be a MeshSpec (see parse_mesh), got {type(mesh).__name__}")
    unknown = [name for name in mesh.names if name not in SERVING_AXES]
    if unknown:
        raise ValueError(
            f"a serving mesh's axes are {', '.join(SERVING_AXES)} (replicas, tensor parallel, experts, pipeline "
            f"stages); the mesh {mesh.text} names `{unknown[0]}`"
        )
    return mesh


@dataclasses.dataclass(frozen=True, kw_only=True)
class Serving:
    """How a model is served, checked.

    Attributes:
      mesh: the devices, named by the serving axes: ``data`` (replicas, each holding its share of
        the sequences), ``model`` (tensor parallel), ``expert`` (routed experts split; attention
        data-parallel across it), ``stage`` (pipeline: contiguous blocks a stage).
      strategy, rules: how the weights are laid out (``dcsim.sharding.placement``); ``megatron`` by
        default, as Megatron-LM and vLLM lay a tensor-parallel model out.
      weights: the weights' serving format (``WEIGHT_FORMATS``), with its options ``group``,
        ``bits``, ``tile`` and ``quantize_head`` (``dcsim.quant.formats.check_format``; None: the
        format's default); or a ``WeightFormat``, whose options are taken.
      kv_dtype: the cache's dtype (``KV_DTYPE_NAMES``; ``fp8`` is ``float8_e4m3fn``).
      context: tokens a sequence's cache holds (a sliding window's layer at most its window).
      concurrency: sequences at once over the whole mesh.
      source_length: an encoder-decoder's encoder tokens a sequence (None: the context).
      budget_bytes: bytes a device has (from ``--budget`` or a catalog ``device``), or None.
      device: the catalog row the budget came from, or None.
      reserve: the fraction of a device kept free, exactly.
      full_windows: allocate every layer's cache in full, as engines without window-aware
        allocation do.
    """

    mesh: MeshSpec
    strategy: str = DEFAULT_STRATEGY
    rules: tuple[Rule, ...] = ()
    weights: str | WeightFormat = DEFAULT_WEIGHTS
    group: int | None = None
    bits: int | None = None
    tile: int | None = None
    quantize_head: bool = False
    kv_dtype: str = DEFAULT_KV_DTYPE
    context: int = DEFAULT_CONTEXT
    concurrency: int = DEFAULT_CONCURRENCY
    source_length: int | None = None
    budget_bytes: int | None = None
    device: str | None = None
    reserve: Fraction = DEFAULT_RESERVE
    full_windows: bool = False

    def __post_init__(self) -> None:
        check_serving_mesh(self.mesh)
        if self.strategy not in STRATEGIES:
            raise ValueError(f"`strategy` must be one of {', '.join(STRATEGIES)}, got {show(self.strategy)}")
        object.__setattr__(self, "rules", check_strategy(self.layout_mesh, self.strategy, self.rules))
        if isinstance(self.weights, WeightFormat):  # a format with its options, checked again here
            given = self.weights
            object.__setattr__(self, "weights", given.name)
            for field in ("group", "bits", "tile", "quantize_head"):
                if getattr(self, field) in (None, False):
                    object.__setattr__(self, field, getattr(given, field))
        fmt = check_format(
            self.weights, group=self.group, bits=self.bits, tile=self.tile, quantize_head=self.quantize_head
        )
        for field in ("group", "bits", "tile", "quantize_head"):
            object.__setattr__(self, field, getattr(fmt, field))
        object.__setattr__(self, "kv_dtype", check_kv_dtype(self.kv_dtype))
        object.__setattr__(self, "context", as_int(self.context, "context", maximum=MAX_CONTEXT))
        object.__setattr__(self, "concurrency", as_int(self.concurrency, "concurrency", maximum=MAX_CONCURRENCY))
        if self.source_length is not None:
            object.__setattr__(self, "source_length", as_int(self.source_length, "source_length", maximum=MAX_CONTEXT))
        if self.device is not None:
            row = get_accelerator(self.device)
            if self.budget_bytes is not None and self.budget_bytes != row.bytes:
                raise ValueError("give a budget or a device, not both: the device's memory is the budget")
            object.__setattr__(self, "budget_bytes", row.bytes)
        if self.budget_bytes is not None:
            object.__setattr__(self, "budget_bytes", as_int(self.budget_bytes, "budget"))
        object.__setattr__(self, "reserve", parse_reserve(self.reserve))
        object.__setattr__(self, "full_windows", as_bool(self.full_windows, "full_windows"))

    @property
    def weight_format(self) -> WeightFormat:
        """The weights' format with its options."""
        assert isinstance(self.weights, str)  # a WeightFormat given is unpacked on creation
        return WeightFormat(self.weights, self.group, self.bits, self.tile, self.quantize_head)

    @property
    def layout_mesh(self) -> MeshSpec:
        """The mesh one pipeline stage lays its arrays out on: every axis but ``stage``, and a
        ``model`` axis of size 1 when the mesh names none (no tensor parallelism is a tensor size
        of 1, so ``megatron`` lays out a one-device mesh)."""
        axes = tuple((name, size) for name, size in self.mesh.axes if name != STAGE_AXIS)
        if TENSOR_AXIS not in self.mesh.names:
            axes += ((TENSOR_AXIS, 1),)
        return MeshSpec(axes)

    def axis(self, name: str) -> int:
        """The size of mesh axis ``name`` (1 when the mesh has none)."""
        return self.mesh.shape.get(name, 1)

    @property
    def tensor_size(self) -> int:
        return self.axis(TENSOR_AXIS)

    @property
    def num_stages(self) -> int:
        return self.axis(STAGE_AXIS)

    @property
    def num_replicas(self) -> int:
        """Devices groups that each serve their own sequences: data x expert."""
        return math.prod(self.axis(name) for name in REPLICA_AXES)

    @property
    def sequences_per_replica(self) -> int:
        """The most sequences one replica holds: the concurrency spread as evenly as it goes."""
        return -(-self.concurrency // self.num_replicas)

    @property
    def usable_bytes(self) -> int | None:
        return None if self.budget_bytes is None else usable_bytes(self.budget_bytes, self.reserve)

    def source_tokens(self) -> int:
        return self.context if self.source_length is None else self.source_length
