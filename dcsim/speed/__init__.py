"""How long a step takes: a training step's time and a serving replica's speed, from the model's own
FLOPs (``dcsim.memory.flops``, counted from the traced step), the bytes each device reads, the
collectives the layout needs, and the accelerator's published speeds (``dcsim.serving.catalog``).

Every figure here is an estimate and says so: it shows its bounds (the roofline, full overlap, no
overlap) and names its inputs, each efficiency and latency with its published source
(``dcsim.speed.system``). Counts (FLOPs, bytes) stay exact ints; only seconds are floats.
"""

from dcsim.quantities.units import binary_bytes

STEP = "the time is of a step"  # what a step time of a setup that does not fit is
DECODE = "the speed is of a decode"  # and a decode speed


def unfit_clause(device: str, over_bytes: int, what: str) -> str:
    """What an estimate of a setup over its device's memory says on its own line: ``what`` is the
    figure's subject ("the time is of a step", "the speed is of a decode"). A clause, lower case,
    for a line that goes on; a page starts it as a sentence."""
    return f"this setup does not fit the {device} (over by {binary_bytes(over_bytes)}): {what} that cannot run as set"
