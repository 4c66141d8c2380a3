"""Time limits for child processes, as a person or an operator writes them: every child dcsim starts
(a checkpoint measurement, an XLA check) is bounded by one, checked by one rule.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

from dcsim.inputs import show

# The longest limit any child may be given: an hour, past which a hang is no longer told from work.
MAX_TIMEOUT_SECONDS = 3600.0


def check_timeout(value: Any, name: str = "timeout_seconds") -> float:
    """A time limit in seconds: a real number greater than 0 and at most ``MAX_TIMEOUT_SECONDS``."""
    rule = f"a number of seconds greater than 0 and at most {MAX_TIMEOUT_SECONDS:g}"
    shown = value
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"`{name}` must be {rule}, got {show(shown)}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be {rule}, got {type(value).__name__} {show(shown)}")
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_SECONDS):
        raise ValueError(f"`{name}` must be {rule}, got {show(shown)}")
    return seconds


def timeout_from_env(name: str, default: float) -> float:
    """The time limit an operator set in the environment variable ``name`` (``check_timeout``'s
    rule), else ``default``."""
    text = os.environ.get(name, "").strip()
    return check_timeout(text, name) if text else default
