"""A checkpoint at cluster scale, planned before the job starts: what it holds, which host writes
which byte, how long a save stalls the run, what a restore onto another mesh reads, what a lost
host costs and how often to save.

The state is the one ``dcsim.memory`` lays out (the same ``MemoryReport`` arrays: params, master
copy, optax's state; grads are not saved), so the checkpoint's bytes are memory's bytes with no new
arithmetic. Devices go to hosts in mesh order (``hosts``); each array's shards, replicas and
writers come from its sharding's structure, once a distinct spec, never device by device a
whole model (``placement``); the writers follow Orbax's rules, single-replica and replica-parallel
(``replica_slices.get_replica_slices`` ported and checked against the pinned Orbax on real
arrays), or PyTorch DCP's deduplication (``writers``). Times are estimates from a storage model
whose every figure carries its source (``storage``); the restore reads stored chunks
(``restore``), the loss is counted per tier (``loss``) and the interval is Young's and Daly's
(``interval``). ``plan`` puts them into one report that the faces render.

Builds on ``dcsim.memory``, ``dcsim.sharding`` and ``dcsim.serving``'s accelerator catalog; no
Streamlit, no printing, no files.
"""
