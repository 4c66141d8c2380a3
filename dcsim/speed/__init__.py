"""How long a step takes: a training step's time and a serving replica's speed, from the model's own
FLOPs (``dcsim.memory.flops``, counted from the traced step), the bytes each device reads, the
collectives the layout needs, and the accelerator's published speeds (``dcsim.serving.catalog``).

Every figure here is an estimate and says so: it shows its bounds (the roofline, full overlap, no
overlap) and names its inputs, each efficiency and latency with its published source
(``dcsim.speed.system``). Counts (FLOPs, bytes) stay exact ints; only seconds are floats.
"""
