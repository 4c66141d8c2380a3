"""How often to save: the job's mean time between interruptions, Young's and Daly's intervals, the
expected goodput against the interval, and the storage the kept checkpoints take.

- M, the mean time between interruptions: a per-accelerator MTTF over the accelerator count. The
  default MTTF is MLPerf Storage's 50,000 hours a accelerator. Beside it, the observed figure:
  Llama 3 405B's pre-training saw 419 unexpected interruptions in 54 days on 16,384 H100s
  (Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.4), an MTBI of about 3.1 hours,
  which is an MTTF of about 50,700 hours a GPU.
- δ, a save's blocking time (the whole write when synchronous, the device-to-host copy when
  asynchronous), and R, the cost of a restart (a restore and the overhead a person sets).
- Young (1974): τ = √(2δM). Daly (2006), to higher order: τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ
  for δ < 2M, else M.
- Goodput, Daly's complete model: of wall time, the fraction that is useful work,
  τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)).

Every figure here is an estimate from its inputs; none is measured.
"""

from __future__ import annotations

import dataclasses
import math

from dcsim.inputs import show

DEFAULT_MTTF_HOURS = 50_000
MTTF_SOURCE = "MLPerf Storage's 50,000 hours an accelerator"
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_SOURCE = 'Dubey et al., "The Llama 3 Herd of Models" (2024), section 3.3.4'
CURVE_POINTS = 41


def check_positive(value: object, field: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field} must be a number of {unit} above 0, got {show(value)}")
    return float(value)


def check_non_negative(value: object, field: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{field} must be a number of {unit}, 0 or more, got {show(value)}")
    return float(value)


def mtbi_seconds(num_devices: int, mttf_hours: float) -> float:
    return mttf_hours * 3600 / num_devices


def llama3_mtbi_seconds() -> float:
    return LLAMA3_DAYS * 86400 / LLAMA3_INTERRUPTIONS


def young_interval(delta: float, mtbi: float) -> float:
    return math.sqrt(2 * delta * mtbi)


def daly_interval(delta: float, mtbi: float) -> float:
    if delta >= 2 * mtbi:
        return mtbi
    ratio = delta / (2 * mtbi)
    return math.sqrt(2 * delta * mtbi) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta


def goodput(interval: float, delta: float, mtbi: float, restart: float) -> float:
    """Daly's expected useful fraction of wall time with saves every ``interval`` of work."""
    try:
        wall = mtbi * math.exp(restart / mtbi) * math.expm1((interval + delta) / mtbi)
    except OverflowError:
        return 0.0
    return interval / wall if wall > 0 else 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Interval:
    """The interval question answered: inputs, M, both intervals, goodput at Daly's, the curve."""

    mttf_hours: float
    num_devices: int
    delta: float
    restart: float
    mtbi: float
    young: float
    daly: float
    goodput_at_optimum: float
    lost_per_failure: float
    curve: tuple[tuple[float, float], ...]


def plan_interval(num_devices: int, mttf_hours: float, delta: float, restart: float) -> Interval:
    mtbi = mtbi_seconds(num_devices, mttf_hours)
    young = young_interval(delta, mtbi)
    daly = daly_interval(delta, mtbi)
    best = max(daly, 1e-9)
    curve = tuple(
        (tau, goodput(tau, delta, mtbi, restart))
        for tau in (best * 10 ** ((index - CURVE_POINTS // 2) / 10) for index in range(CURVE_POINTS))
    )
    return Interval(
        mttf_hours=mttf_hours,
        num_devices=num_devices,
        delta=delta,
        restart=restart,
        mtbi=mtbi,
        young=young,
        daly=daly,
        goodput_at_optimum=goodput(best, delta, mtbi, restart),
        lost_per_failure=(daly + delta) / 2 + restart,
        curve=curve,
    )
