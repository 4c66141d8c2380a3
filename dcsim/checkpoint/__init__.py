"""A real Orbax checkpoint, measured in child processes.

``measurement`` plans a measurement (validation, the ceiling, the layout's PartitionSpecs) and runs
it in one child (``worker``); ``multiprocess`` runs the same from P processes on ``jax.distributed``
(``multiprocess_worker``); ``child`` is every child process's one entry point; ``prestart`` starts
the CLI's child before the parent imports JAX; ``results`` holds what a measurement found and
``records`` what the front ends show of it. Builds on ``dcsim.model``, ``dcsim.sharding`` and
``dcsim.runtime`` (which starts, watches and ends the child processes); no Streamlit, no printing.

Importing this package imports nothing else, so a child started as ``python -m
dcsim.checkpoint.child`` pays only for what it uses.
"""
