"""Counts the docs state in prose are read from the docs and compared with the code's own count
(issue 43): the README said "Thirty presets" while the table held 41, and docs/limits.md said
`model_type` was "one of the 37" while dcsim read 54. A figure written once and never checked drifts
as soon as a row is added; these tests fail on the commit that adds it.

Quick (no child process, no model built): the slow tests/test_docs.py runs the documented commands.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dcsim import hf
from dcsim.model.presets import PRESETS, SOURCE_KINDS

ROOT = Path(__file__).resolve().parent.parent

# Counts in words as the docs write them: one to nine, and tens with an optional unit (forty-one).
_ONES = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}


def number(text: str) -> int:
    """A count as prose writes it: ``41``, ``1,024``, ``Forty-one``, ``thirty``, ``seven``."""
    word = text.lower().replace(",", "")
    if word.isdigit():
        return int(word)
    tens, _, unit = word.partition("-")
    if tens in _TENS and (not unit or unit in _ONES):
        return _TENS[tens] + _ONES.get(unit, 0)
    if word in _ONES:
        return _ONES[word]
    raise ValueError(f"not a count in words or digits: {text!r}")


@pytest.mark.parametrize(
    "text, expected",
    [("41", 41), ("1,024", 1024), ("Forty-one", 41), ("thirty", 30), ("seven", 7), ("ninety-nine", 99)],
)
def test_number_reads_words_and_digits(text, expected):
    assert number(text) == expected


@pytest.mark.parametrize("text", ["thirty-ten", "one-two", "hundred", "4.5", ""])
def test_number_refuses_what_is_not_a_count(text):
    with pytest.raises(ValueError, match="not a count"):
        number(text)


def figures(path: str, pattern: str) -> list[int]:
    """Every count ``pattern``'s group ``count`` finds in ``path``; at least one, or the sentence moved."""
    found = [number(match["count"]) for match in re.finditer(pattern, (ROOT / path).read_text(encoding="utf-8"))]
    assert found, f"{path} no longer says {pattern!r}: update this test with the sentence"
    return found


_COUNT = r"(?P<count>\d[\d,]*|[A-Za-z]+(?:-[a-z]+)?)"


def test_the_readme_counts_the_presets():
    assert figures("README.md", rf"\b{_COUNT} presets:") == [len(PRESETS)]


def test_the_limits_count_the_model_types_dcsim_reads():
    assert figures("docs/limits.md", rf"`model_type` one of the {_COUNT} in") == [len(hf.MODEL_TYPES)]


def test_the_presets_page_counts_each_kind_of_reference_count():
    text = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    said = {
        kind: number(count)
        for count, kind in re.findall(rf"for\s+{_COUNT}(?:\s+of\s+the\s+\d+\s+presets)?,\s+(?:the\s+)?`([^`]+)`", text)
    }
    kinds = [row.source_kind for row in PRESETS.values()]
    assert said == {kind: kinds.count(kind) for kind in SOURCE_KINDS}
    assert f"of the {len(PRESETS)} presets" in text
