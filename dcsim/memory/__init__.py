"""Training memory per device: the parameters, gradients, master copy and optimizer state each
device holds under a ZeRO stage, laid out by JAX's sharding rules (``state``), the smallest mesh
that fits a budget (``search``), and XLA's own figure for the same state (``verify``).

Builds on ``dcsim.model`` and ``dcsim.sharding``; no Streamlit, no printing.
"""
