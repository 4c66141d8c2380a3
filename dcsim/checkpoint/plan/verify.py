"""The plan checked against a real Orbax save: each process's bytes predicted before it saves.

``checkpoint --processes P --policy POLICY`` saves the model's parameters from P processes on JAX's
distributed runtime (``dcsim.checkpoint.multiprocess``), through Orbax's ``ArrayHandler`` with
``use_replica_parallel`` set by the policy and zstd off. Before any process starts, this module
lays the same parameters out as ``memory`` does (``compute_memory``'s params rows, in the
measurement's dtype), has the plan's writers (``plan_writes``) say which device writes which
bytes, and sums them per process as the plan sums them per host: a process is a host of N/P
devices in mesh order. Each process then reads back the chunks it stored in its own OCDBT
database; the report compares the two to the byte, and says what the files add beyond them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dcsim.checkpoint.multiprocess import MultiprocessPlan, check_orbax_policy
from dcsim.checkpoint.plan.placement import Hosts
from dcsim.checkpoint.plan.writers import plan_writes
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.sharding.meshes import Rule


def predict_process_bytes(plan: MultiprocessPlan, policy: str, rules: Sequence[Rule] = ()) -> tuple[int, ...]:
    """The array bytes each process of ``plan``'s group writes under ``policy``, by the plan's engine.

    ``rules``: the measurement's own (``MeasurementOptions.rules``), so the layout is the one the
    processes will build.
    """
    check_orbax_policy(policy)
    base = plan.checkpoint
    # ZeRO-3 lays the params out with the strategy; only the params rows are kept (the measurement
    # saves the parameters alone), in the dtype the processes store.
    memory = compute_memory(
        base.report, base.mesh, base.strategy, tuple(rules), Training.stage(3, param_dtype=base.dtype)
    )
    params = [row for row in memory.arrays if row.part == "params"]
    laid = {row.path: row.spec for row in params}
    if laid != base.specs:
        raise RuntimeError("the plan's layout and the measurement's differ: the prediction would be of another save")
    writes = plan_writes(params, base.mesh, policy)
    return writes.host_bytes(Hosts(base.mesh, plan.devices_per_process))


def with_prediction(plan: MultiprocessPlan, policy: str, rules: Sequence[Rule] = ()) -> MultiprocessPlan:
    """``plan`` saving under ``policy``, with each process's bytes predicted."""
    return dataclasses.replace(plan, policy=policy, predicted_bytes=predict_process_bytes(plan, policy, rules))
