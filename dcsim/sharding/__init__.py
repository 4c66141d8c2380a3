"""What a model comes to per shard and per device: the ideal share (total / shards, exact) and
the real per-device layout under JAX's sharding rules. The training
state on that layout, and the budget question, are ``dcsim.memory``'s.

Builds on ``dcsim.model`` and ``dcsim.quantities`` (bytes per dtype); no Streamlit, no printing.
"""
