"""Checks for what a person supplies, before any configuration exists.

Every front end (widgets, URL links, uploaded JSON, CLI flags, API calls) turns a person's values
into Python ints, bools, text and JSON through these, so a refusal reads the same everywhere:
a ``ValueError`` (or ``TypeError`` for the wrong kind of thing) that names the field, the rule
and the offending value, quoted short and safe (``show``). Nothing here knows about models.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

_SHOWN_CHARS = 60


def show(value: Any) -> str:
    """A short, safe rendering of a user's value for an error message."""
    text = repr(value) if isinstance(value, (str, bytes)) else str(value)
    if len(text) > _SHOWN_CHARS:
        text = f"{text[:_SHOWN_CHARS]}… ({len(text):,} characters)"
    return text


def _rule(minimum: int, maximum: int | None) -> str:
    if maximum is not None:
        return f"an integer from {minimum:,} to {maximum:,}"
    return "a positive integer" if minimum == 1 else f"an integer of at least {minimum:,}"


def as_int(
    value: Any,
    name: str,
    *,
    minimum: int = 1,
    maximum: int | None = None,
    why: str = "",
    shown: str | None = None,
) -> int:
    """Return ``value`` as a Python int, or raise with a message a person can act on.

    Accepts Python and NumPy integers, integer-valued floats (``4.0``), and 0-d arrays of either
    (NumPy or JAX). Rejects bools and strings (``TypeError``), and fractional, non-finite or
    out-of-range numbers (``ValueError``). ``shown`` is how to quote the value in a message when
    it arrived as text (``'1e400'`` rather than the ``inf`` it parsed to).
    """
    rule = _rule(minimum, maximum) + (f" ({why})" if why else "")
    if shown is None:
        shown = value
    if hasattr(value, "ndim") and hasattr(value, "item"):
        if value.ndim != 0:
            raise TypeError(f"`{name}` must be a scalar, got an array of shape {tuple(value.shape)}")
        value = value.item()
        if not isinstance(shown, str):
            shown = value
    if isinstance(value, bool):
        raise TypeError(f"`{name}` must be {rule}, got the bool {value}")
    if isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, numbers.Real):
        exact = Fraction(value) if isinstance(value, Fraction) else None
        if exact is None:
            as_float = float(value)
            if not math.isfinite(as_float):
                raise ValueError(f"`{name}` must be {rule}, got {show(shown)}")
            exact = Fraction(as_float)
        if exact.denominator != 1:
            raise ValueError(f"`{name}` must be {rule}, got {show(shown)}")
        number = exact.numerator
    else:
        kind = "" if isinstance(value, str) else f"{type(value).__name__} "
        raise TypeError(f"`{name}` must be {rule}, got {kind}{show(shown)}")
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(f"`{name}` must be {rule}, got {show(shown)}")
    return number


# ASCII digits only: Python's int() and float() also take other scripts' digits ("٣" is 3) and
# underscores ("1_0" is 10), which a link should not carry and a person did not mean.
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)


def number_from_text(text: str) -> Any:
    """A person's typed number as an int (``"2"``) or a float (``"2.0"``, ``"1e3"``, ``"1e400"``
    is inf), or the text itself when it is no number; ``as_int`` then says what is wrong."""
    if _INT_TEXT.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts: as a float it is inf, and refused
            return float(text)
    if _FLOAT_TEXT.fullmatch(text):
        return float(text)
    return text


def as_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool; only true bools (Python or NumPy) are accepted."""
    if hasattr(value, "ndim") and hasattr(value, "item") and value.ndim == 0:
        value = value.item()
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be true or false, got {type(value).__name__} {show(value)}")
    return value


def check_choice(value: Any, choices: Sequence[str], label: str) -> str:
    """One of ``choices``; otherwise ValueError listing them: ``{label} must be one of a, b, got 'c'``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{label} must be one of {', '.join(choices)}, got {show(value)}")
    return value


def check_text(value: Any, name: str, max_chars: int) -> str:
    """Printable text of 1 to ``max_chars`` characters, stripped: no control or formatting
    characters (a right-to-left override, a newline) that could disguise what is shown."""
    if not isinstance(value, str):
        raise TypeError(f"`{name}` must be text, got {type(value).__name__} {show(value)}")
    stripped = value.strip()
    if not stripped:
        raise ValueError(f"`{name}` must not be empty")
    if len(stripped) > max_chars:
        raise ValueError(f"`{name}` may be at most {max_chars:,} characters, got {len(stripped):,}")
    if not stripped.isprintable():
        raise ValueError(f"`{name}` must be printable text (no control characters), got {show(stripped)}")
    return stripped


def json_size(text: str | bytes) -> int:
    """A document's size in UTF-8 bytes, as a file has it."""
    return len(text) if isinstance(text, bytes) else _utf8_size(text)


def load_json(text: str | bytes, what: str, max_bytes: int, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """Parse a JSON document a person supplied: at most ``max_bytes`` of UTF-8, repeated keys
    refused; ``what`` names the document in every message ("configuration"). ``parse_constant``
    is ``json.loads``'s hook for ``NaN`` and ``Infinity``."""
    # No character takes less than a byte, so a text longer than the limit in characters is
    # refused before it is encoded.
    size = len(text) if isinstance(text, bytes) or len(text) > max_bytes else _utf8_size(text)
    if size > max_bytes:
        raise ValueError(f"a {what} file may be at most {max_bytes:,} bytes, got {size:,}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"a {what} file must be UTF-8 text: {err.reason} at byte {err.start}") from None
    try:
        return json.loads(text, object_pairs_hook=no_duplicate_keys(what), parse_constant=parse_constant)
    except json.JSONDecodeError as err:
        raise ValueError(f"the {what} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except RecursionError:
        raise ValueError(f"the {what} JSON is nested too deeply") from None
    except ValueError as err:  # e.g. an integer literal longer than Python converts
        raise ValueError(f"the {what} is not valid JSON: {err}") from None


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def json_kind(value: Any) -> str:
    """How a message names a parsed JSON value's kind: "an object", "an array", "a number"..."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def reject_unknown(data: dict, valid: tuple[str, ...], where: str) -> None:
    """Refuse a JSON object's unknown keys by name, listing the valid ones."""
    unknown = [key for key in data if key not in valid]
    if unknown:
        names = ", ".join(show(key) for key in unknown[:5])
        raise ValueError(f"unknown {where} field {names}; valid fields: {', '.join(valid)}")


def check_document(
    data: Any, *, what: str, keys: tuple[str, ...], format_name: str, version: int, format_required: bool
) -> dict[str, Any]:
    """A dcsim JSON document's envelope, checked: an object of known ``keys`` whose ``format`` is
    ``format_name`` (optional unless ``format_required``) and whose ``version``, if given, is one
    this dcsim reads (at most ``version``). Returns ``data``; the caller checks its fields."""
    if not isinstance(data, dict):
        raise TypeError(f"a {what} must be a JSON object, got {json_kind(data)}")
    reject_unknown(data, keys, what)
    if (format_required or "format" in data) and data.get("format") != format_name:
        raise ValueError(f"`format` must be {format_name!r} for a dcsim {what}, got {show(data.get('format'))}")
    if "version" in data:
        found = as_int(data["version"], "version")
        if found > version:
            raise ValueError(
                f"this {what} has version {found}, newer than this dcsim reads (up to {version}); "
                "upgrade dcsim to open it"
            )
    return data


def no_duplicate_keys(what: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json.loads`` ``object_pairs_hook`` refusing a repeated key, which plain JSON parsing
    would silently resolve to the last value; ``what`` names the document in the message."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, value in pairs:
            if key in data:
                raise ValueError(f"the {what} repeats the field {show(key)}")
            data[key] = value
        return data

    return hook
