"""What a training checkpoint holds: memory's state arrays less the gradients.

A checkpoint saves the parameters in their dtype, the master copy when there is one, and the
optimizer's state (optax's moments and its int32 step count, which is the step a restart resumes
from); gradients live for one step and are not saved. The arrays are ``dcsim.memory.state``'s own
rows, laid out as memory lays them out, so every byte here is a byte memory counts.

MLPerf Storage sizes the same checkpoint with DLIO's hand formula (``dlio_benchmark/checkpointing/
base_checkpointing.py``): 2 bytes a parameter for an fp16 model and 3 x 4 bytes for its fp32
optimizer groups, plus ``5 x hidden`` fp32 values in each of the 3 groups on every rank, a term no
optimizer keeps. For Llama 3 8B on its 8 ranks that gives 112,425,623,552 bytes:
14 x 8,030,261,248 + 8 x 3 x 5 x 4,096 x 4. dcsim's state for bfloat16 params, a float32 master
copy and AdamW is 14 x 8,030,261,248 + 4: the 4 is optax's int32 step count.
"""

from __future__ import annotations

import dataclasses
import functools

from dcsim.memory.state import MemoryReport, StateArray
from dcsim.memory.training import PARTS

SAVED_PARTS = tuple(part for part in PARTS if part != "grads")
DLIO_BYTES_PER_PARAM = 2 + 3 * 4  # DLIO: fp16 model + three fp32 optimizer groups
# MLPerf Storage v2.0's Llama 3 8B checkpoint by DLIO's formula, and what it adds beyond 14 bytes a
# parameter: 5 x hidden fp32 values in each of 3 optimizer groups, on each of 8 ranks.
MLPERF_LLAMA3_8B_BYTES = 112_425_623_552
MLPERF_LLAMA3_8B_PARAMS = 8_030_261_248
MLPERF_LLAMA3_8B_EXTRA = 8 * 3 * 5 * 4096 * 4


@dataclasses.dataclass(frozen=True)
class Content:
    """The arrays a checkpoint saves, and their bytes by part (each array once, no replicas, no
    file headers or metadata)."""

    memory: MemoryReport

    @functools.cached_property
    def arrays(self) -> tuple[StateArray, ...]:
        return tuple(row for row in self.memory.arrays if row.part in SAVED_PARTS)

    @functools.cached_property
    def parts(self) -> dict[str, int]:
        """``{part: bytes}`` of the parts the setup keeps, in ``PARTS`` order."""
        return {part: self.memory.part_total_bytes(part) for part in SAVED_PARTS if part in self.memory.training.parts}

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())

    @property
    def scalar_bytes(self) -> int:
        """Bytes of the optimizer's scalars (step counts)."""
        return sum(row.bytes for row in self.arrays if row.part == "optimizer" and row.shape == ())

    def dlio_formula_bytes(self, num_params: int) -> int:
        """DLIO's 14 bytes a parameter, without its per-rank extra."""
        return DLIO_BYTES_PER_PARAM * num_params
