"""XLA's own figure for the training state a device holds, to check ``dcsim.memory.state`` against.

``compute_memory`` adds up shard shapes that JAX's sharding rules give. This module asks the
compiler instead: a child process (``dcsim.memory.verify_child``, started through
``dcsim.runtime.workers``) builds a real ``jax.sharding.Mesh`` of that many virtual CPU devices,
compiles, and never runs, a program with no inputs that returns every state array with its
``NamedSharding``, and reads ``compiled.memory_analysis().output_size_in_bytes``. Lowering and
compiling allocate nothing, so Llama 2 7B's state on 256 devices is checked in about two seconds.

XLA's figure is the sum of the local shards plus a tuple table of ``TUPLE_ENTRY_BYTES`` (one
pointer) per returned array; a program returning a single array returns no tuple. So the two
figures match when XLA's equals ``total_bytes_per_device`` plus that table, to the byte.

Everything is checked before a child starts (``check_verifiable``: the device and array bounds),
the child runs under a time limit and is ended with its whole process group on any failure, and
its temporary folder is always removed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jax.sharding import PartitionSpec

from dcsim.memory.state import MemoryReport
from dcsim.runtime.checks import MAX_VERIFY_DEVICES, VerifyFailed, XlaCheck, run_check
from dcsim.sharding.wire import mesh_json, spec_json

# Compile time and memory grow faster than the number of arrays returned: 8,192 arrays took 5.7 to
# 8.1 s and 0.9 to 1.3 GB here (8 and 2,048 devices), 16,000 took 21 s and 2.6 GB, 32,000 78 s and
# 9 GB. 8,192 covers every preset with every optimizer and a master copy: the largest, DeepSeek-V3
# with Adafactor, has 5,803 arrays and took 4.9 s on 2,048 devices.
MAX_VERIFY_ARRAYS = 8192
TUPLE_ENTRY_BYTES = 8

CHILD_MODULE = "dcsim.memory.verify_child"
JOB_NAME = "XLA memory check"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verified(XlaCheck):
    """XLA's figure for a training state beside dcsim's.

    Attributes:
      output_bytes_per_device: XLA's ``output_size_in_bytes`` of the compiled state, per device.
      expected_bytes_per_device: dcsim's ``total_bytes_per_device`` plus XLA's tuple table.
      num_arrays: the state arrays compiled.
      seconds: the child's wall time, start-up included.
    """

    output_bytes_per_device: int

    @property
    def xla_bytes_per_device(self) -> int:
        return self.output_bytes_per_device


def tuple_table_bytes(num_arrays: int) -> int:
    """The bytes of XLA's tuple table for a program returning ``num_arrays`` arrays: a pointer
    each, and none for a single array (XLA returns it bare)."""
    return TUPLE_ENTRY_BYTES * num_arrays if num_arrays != 1 else 0


def expected_bytes_per_device(memory: MemoryReport) -> int:
    """What XLA should report for ``memory``'s state: its bytes per device and the tuple table."""
    return memory.total_bytes_per_device + tuple_table_bytes(memory.num_arrays)


def check_verifiable(memory: MemoryReport) -> None:
    """Refuse, before any child starts, a state XLA's check cannot compile within its bounds.

    Raises TypeError for anything but a ``MemoryReport``, and ValueError naming the bound
    (devices, arrays), what is allowed and what was asked."""
    if not isinstance(memory, MemoryReport):
        raise TypeError(f"memory must be a dcsim.memory.state.MemoryReport, got {type(memory).__name__}")
    if memory.pipeline is not None:
        raise ValueError(
            f"XLA's memory check compiles one program over the whole mesh, and with a `stage` axis "
            f"({memory.mesh.text}) each stage's devices hold a different program's state; check a mesh without "
            "`stage` (a stage's own state is its arrays over the other axes)"
        )
    if memory.num_devices > MAX_VERIFY_DEVICES:
        raise ValueError(
            f"XLA's memory check runs on at most {MAX_VERIFY_DEVICES:,} virtual CPU devices (XLA's CPU backend "
            f"compiles for no more in one process), got a mesh of {memory.num_devices:,} ({memory.mesh.text}); "
            f"check a mesh of at most {MAX_VERIFY_DEVICES:,} devices"
        )
    if memory.num_arrays > MAX_VERIFY_ARRAYS:
        num_params = sum(1 for row in memory.arrays if row.part == "params")
        raise ValueError(
            f"XLA's memory check compiles at most {MAX_VERIFY_ARRAYS:,} state arrays (compile time and memory grow "
            f"faster than the count), and this training state has {memory.num_arrays:,}: {num_params:,} parameter "
            f"arrays with their {', '.join(memory.training.parts[1:])} ({memory.training.optimizer}); check a "
            "smaller model or an optimizer with less state"
        )


def verify_request(memory: MemoryReport) -> dict[str, Any]:
    """The child's request: the mesh, and the state as kinds of array with how many of each
    (``[[shape, dtype, spec, count], ...]``, in order of first appearance). Llama 2 7B's 1,456
    arrays are a few dozen kinds."""
    counts: dict[tuple[tuple[int, ...], str, PartitionSpec], int] = {}
    for row in memory.arrays:
        key = (tuple(row.stored_shape), row.dtype, row.spec)  # the shape laid out: megatron may pad or repeat
        counts[key] = counts.get(key, 0) + 1
    return {
        "mesh": mesh_json(memory.mesh),
        "kinds": [[list(shape), dtype, spec_json(spec), count] for (shape, dtype, spec), count in counts.items()],
    }


def verify(memory: MemoryReport, timeout_seconds: float | None = None) -> Verified:
    """Compile ``memory``'s training state in a child process and compare XLA's bytes per device
    with dcsim's.

    ``timeout_seconds``: the child's limit once JAX has started in it (starting has the same
    allowance again); ``default_timeout_seconds()`` when None.

    Raises ValueError (a bound, a bad time limit; no child started) and ``VerifyFailed`` (the child
    failed or overran; it was ended). A mismatch is not an error: see ``Verified.matches``.
    """
    check_verifiable(memory)
    result, elapsed = run_check(CHILD_MODULE, JOB_NAME, verify_request(memory), memory.num_devices, timeout_seconds)
    output_bytes, num_arrays = result.get("output_bytes_per_device"), result.get("num_arrays")
    if not isinstance(output_bytes, int) or num_arrays != memory.num_arrays:
        raise VerifyFailed(
            f"the {JOB_NAME} answered {output_bytes!r} bytes for {num_arrays!r} arrays, and the state has "
            f"{memory.num_arrays:,}: it did not compile this state"
        )
    return Verified(
        output_bytes_per_device=output_bytes,
        expected_bytes_per_device=expected_bytes_per_device(memory),
        num_arrays=memory.num_arrays,
        seconds=elapsed,
    )


def verify_record(verified: Verified) -> dict[str, Any]:
    """A check as JSON: XLA's bytes per device, the expected bytes, the tuple table's bytes per
    array, the number of arrays and whether the figures match."""
    return {
        "output_bytes_per_device": verified.output_bytes_per_device,
        "expected_bytes_per_device": verified.expected_bytes_per_device,
        "tuple_bytes_per_array": TUPLE_ENTRY_BYTES,
        "num_arrays": verified.num_arrays,
        "matches": verified.matches,
    }
