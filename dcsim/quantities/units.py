"""The one place numbers become text, so every view formats them the same way.

Binary units are named as such (KiB = 2**10 bytes, MiB = 2**20, GiB = 2**30); decimal units
(kB = 10**3, MB = 10**6, GB = 10**9) are offered separately. The exact figure always comes
first: a unit is a reading aid, never a replacement.
"""

from __future__ import annotations

from fractions import Fraction

_BINARY = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_DECIMAL = ("kB", "MB", "GB", "TB", "PB", "EB")


def count(n: int) -> str:
    """An exact integer with thousands separators: ``1,234,567``."""
    return f"{n:,}"


def many(n: int, word: str, plural: str | None = None) -> str:
    """``n`` of ``word``, exact, singular for one: ``1 device``, ``8 devices``, ``0 sequences``;
    ``plural`` where adding an s is wrong: ``many(2, "process", "processes")``."""
    return f"{count(n)} {word if n == 1 else plural or word + 's'}"


def _scaled(n: int, base: int, units: tuple[str, ...]) -> str:
    """``n`` over the largest power of ``base`` it reaches, to two decimals: Python's int division
    is correctly rounded, as the exact quotient's float is (a table of 2,900 arrays is formatted
    each run, and Fractions took 50 ms of it)."""
    n, power, unit = int(n), 1, None
    for name in units:
        if n < power * base:
            break
        power, unit = power * base, name
    return f"{n / power:.2f} {unit}"


def binary_bytes(n: int) -> str:
    """``n`` in the largest binary unit it reaches, e.g. ``4.00 MiB``; small sizes in bytes."""
    if n < 1024:
        return f"{n:,} bytes"
    return _scaled(n, 1024, _BINARY)


def decimal_bytes(n: int) -> str:
    """``n`` in the largest decimal unit it reaches, e.g. ``4.20 MB``; small sizes in bytes."""
    if n < 1000:
        return f"{n:,} bytes"
    return _scaled(n, 1000, _DECIMAL)


def bytes_exact(n: int) -> str:
    """The exact byte count with its binary reading: ``4,198,400 bytes (4.00 MiB)``."""
    if n < 1024:
        return f"{n:,} bytes"
    return f"{n:,} bytes ({binary_bytes(n)})"


def bytes_share(value: Fraction) -> str:
    """An exact share of bytes: whole ones as ``bytes_exact`` (``2,155,520,256 bytes (2.01 GiB)``),
    others cut as ``share_short`` cuts them (``26.666… bytes``); ``share`` gives every digit."""
    if value.denominator == 1:
        return bytes_exact(value.numerator)
    text = f"{share_short(value)} bytes"
    return text if value < 1024 else f"{text} ({binary_bytes(int(value))})"


def share(value: Fraction) -> str:
    """An exact share: whole numbers with separators (``10``), others as the float to full
    precision with the exact fraction (``6.666666666666667 (20/3)``)."""
    if value.denominator == 1:
        return count(value.numerator)
    return f"{float(value):,} ({value.numerator:,}/{value.denominator:,})"


def share_short(value: Fraction, digits: int = 3, exact_up_to: int = 6) -> str:
    """A share for a headline: exact when it ends within ``exact_up_to`` significant decimals
    (``1.5``, ``0.3125``), otherwise cut after ``digits`` and marked as cut (``6.666…``).

    Cut, never rounded: the ellipsis says more digits follow, and every digit shown is right.
    """
    if value.denominator == 1:
        return count(value.numerator)
    text, ends = _decimals(value, exact_up_to)
    if not ends:
        text, _ = _decimals(value, digits)
        text += "…"
    return text


def _decimals(value: Fraction, significant: int) -> tuple[str, bool]:
    """``value`` by long division, up to ``significant`` significant decimals; and whether it ended."""
    whole, rest = divmod(value.numerator, value.denominator)
    decimals: list[str] = []
    seen = 0
    while rest and seen < significant:
        digit, rest = divmod(rest * 10, value.denominator)
        decimals.append(str(digit))
        if whole or digit or seen:
            seen += 1
    return f"{whole:,}.{''.join(decimals)}", rest == 0
