"""Sizes and amounts, the leaf layer every other layer may use: bytes per dtype and raw payloads
(``payload``), exact figures in words (``units``), and a budget as a person types it, ``80GiB`` or
``7B`` values (``amounts``).

Its own layer because the engine (model, sharding, memory, serving, checkpoint) and the front ends
all need these and none of them owns them: kept in ``sharding`` and ``report``, they made ``model``
import ``sharding`` (which imports ``model``) and the engine import the report layer above it.
Imports nothing from dcsim but ``dcsim.inputs``; no JAX beyond ``jax.numpy``'s dtype sizes, imported
when a size is first asked for (the CLI's help and refusals start without JAX).
"""
