"""Child processes for the engine's measurements and checks: a fresh interpreter with its own
environment (virtual CPU devices, XLA's flags and compilation cache), a time limit, a group kill,
and the shared body of an XLA check's child (``workers``).

The checkpoint measurement (``dcsim.checkpoint``), XLA's check of the training state and step
(``dcsim.memory.verify``, ``verify_step``) and of the decoding step (``dcsim.serving.verify``) all
run on it; it knows none of them. Importing this package imports nothing else (no JAX), so a parent
that only starts a child pays for the standard library alone.
"""
