"""A budget as a person types it, as an exact int: ``80GiB``, ``1.5 TiB``, ``96e9 B`` (bytes) or
``7B``, ``12,000`` (values). One parser for every front end (the Memory, Serving and Compare pages,
the CLI's ``--budget``), so that two places never read the same text two ways.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from dcsim.inputs import as_int, show

BUDGET_UNITS = ("bytes", "values")
MAX_BUDGET = 10**18  # an exabyte per device: far past any accelerator, small enough to read
MAX_AMOUNT_CHARS = 32

# Multipliers a person may type after a number. Bytes: decimal and binary units, named honestly.
BYTE_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}  # fmt: skip
# Values: thousands, millions, billions (7B parameters), trillions.
VALUE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
# Fixed pieces, no nested quantifiers: linear whatever arrives. Exponents of up to 4 digits
# (1e400 parses, then fails the range check with its own text in the message).
_AMOUNT = re.compile(r"([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]{1,4}))?[ ]*([A-Za-z]{0,5})")


def parse_amount(text: str, unit: str) -> int:
    """A typed budget as an exact int of ``unit`` (bytes or values): ``80 GiB``, ``80GB``,
    ``1.5 TiB``, ``85899345920``, ``7e9``, ``7B`` (values), ``12,000``.

    GiB is 2**30 and GB 10**9; the result must be a whole number from 1 to 10**18.
    """
    if unit not in BUDGET_UNITS:
        raise ValueError(f"the budget unit must be one of {', '.join(BUDGET_UNITS)}, got {show(unit)}")
    if not isinstance(text, str):
        raise TypeError(f"the budget must be text such as '80 GiB', got {type(text).__name__}")
    if len(text) > MAX_AMOUNT_CHARS:
        raise ValueError(f"the budget may be at most {MAX_AMOUNT_CHARS} characters, got {len(text):,}")
    units = BYTE_UNITS if unit == "bytes" else VALUE_UNITS
    examples = "80 GiB, 80GB, 1.5 TiB or 85899345920" if unit == "bytes" else "7B, 500M, 12,000 or 7e9"
    match = _AMOUNT.fullmatch(text.strip())
    if match is None or match.group(4).lower() not in units:
        named = ", ".join(name for name in units if name) + (" or nothing" if unit == "values" else "")
        raise ValueError(
            f"the budget must be a number of {unit} with an optional unit ({named}), e.g. {examples}; got {show(text)}"
        )
    whole, decimals, exponent, suffix = match.groups()
    amount = Fraction(whole.replace(",", "") + ("." + decimals if decimals else ""))
    amount *= Fraction(10) ** int(exponent or 0) * units[suffix.lower()]
    if amount.denominator != 1:
        raise ValueError(f"the budget must come to a whole number of {unit}, got {show(text)} = {float(amount):g}")
    return check_amount(amount.numerator, shown=text)


def check_amount(amount: Any, shown: Any = None) -> int:
    return as_int(amount, "budget", minimum=1, maximum=MAX_BUDGET, shown=shown)


def parse_budget(text: Any) -> int:
    """A memory budget with its unit (``80GiB``, ``80 GB``, ``1.5 TiB``, ``96e9 B``) as exact bytes.

    A bare number is refused: ``80`` could be GiB or bytes, and a device's memory is never 80
    bytes. Raises ValueError naming what is allowed."""
    if not isinstance(text, str):
        raise TypeError(f"the budget must be text such as '80GiB', got {type(text).__name__}")
    if not any(char.isalpha() for char in text.replace("e", "").replace("E", "")):
        raise ValueError(
            f"the budget needs a unit: B, KB, MB, GB, TB, PB (powers of 1,000) or KiB, MiB, GiB, TiB, PiB "
            f"(powers of 1,024), e.g. 80GiB; got {show(text)}"
        )
    return parse_amount(text, "bytes")
