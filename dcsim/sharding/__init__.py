"""What a model comes to per shard and per device: the ideal share (total / shards, exact), raw
payload bytes per dtype, the real per-device layout under JAX's sharding rules, and the budget
question (how many devices a budget needs, by the average and by the layout).

Builds on ``dcsim.model``; no Streamlit, no printing.
"""
