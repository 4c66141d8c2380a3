"""The child process of ``dcsim.memory.verify``: ``python -m dcsim.memory.verify_child REQUEST RESULT PROGRESS``.

It compiles, and never runs, one program with no inputs that returns the whole training state
laid out on a real ``jax.sharding.Mesh`` of virtual CPU devices, and reports the bytes of output
XLA's memory analysis says each device holds. Lowering and compiling allocate nothing, so a 7B
model's state on 256 devices is checked in a second or two and a few hundred MB.

The device count must be set before JAX starts (``XLA_FLAGS``, set by the parent), so this runs
in a fresh interpreter. It imports JAX and NumPy only: no Flax, optax or Orbax, which the answer
does not need and whose imports would slow every check.

The request is compact: the mesh as ``[[axis, size], ...]`` and the state as kinds of array,
``[[shape, dtype, spec, count], ...]``, each spec entry null, an axis name or a list of names.
The result is ``{"output_bytes_per_device", "num_arrays", "num_devices"}``, or ``{"error": message}``.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from dcsim.runtime import workers
from dcsim.sharding.wire import device_mesh, spec_from_json

MODULE = "dcsim.memory.verify_child"
STAGES = ("lowering", *workers.ANALYSIS_STAGES)


def output_bytes(request: dict[str, Any], progress: TextIO) -> dict[str, Any]:
    """Compile the state the request describes; XLA's output bytes per device."""
    if any(str(dtype) == "float64" for _, dtype, _, _ in request["kinds"]):
        # Without x64 JAX would quietly make float64 arrays float32, and XLA would size those.
        jax.config.update("jax_enable_x64", True)
    mesh = device_mesh(request["mesh"])
    workers.write_stage(progress, STAGES[0])
    shapes: list[tuple[tuple[int, ...], str]] = []
    shardings: list[NamedSharding] = []
    for shape, dtype, spec, count in request["kinds"]:
        sharding = NamedSharding(mesh, spec_from_json(spec))
        shapes += [(tuple(int(d) for d in shape), str(dtype))] * int(count)
        shardings += [sharding] * int(count)

    def state() -> list[Any]:
        return [jnp.zeros(shape, dtype) for shape, dtype in shapes]

    lowered = jax.jit(state, out_shardings=shardings).lower()
    analysis = workers.memory_analysis(lowered, progress, "the compiled state")
    return {
        "output_bytes_per_device": analysis["output_bytes"],
        "num_arrays": len(shapes),
        "num_devices": mesh.size,
    }


def main(argv: list[str]) -> int:
    """Run one check; returns the exit code (0: a result, 1: an error message in the result)."""
    return workers.check_child_main(argv, MODULE, output_bytes, "XLA could not compile the training state")


if __name__ == "__main__":
    workers.exit_child(main(sys.argv[1:]))
