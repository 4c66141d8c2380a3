"""The data files dcsim ships beside its modules are checked as the Python rows they replaced were."""

from __future__ import annotations

import dataclasses

import pytest

from dcsim import shipped


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    name: str
    size: int


def test_rows_become_the_dataclass():
    assert shipped.as_rows(Row, [{"name": "a", "size": 2}], "t.json") == (Row(name="a", size=2),)


@pytest.mark.parametrize(
    "data, error, message",
    [
        ({"name": "a"}, TypeError, r"t.json must hold a JSON array of rows, got an object"),
        ([{"name": "a"}], ValueError, r"t.json row 0 must have exactly the fields \['name', 'size'\], has \['name'\]"),
        ([{"name": "a", "size": 2, "more": 1}], ValueError, r"row 0 must have exactly the fields"),
        ([{"name": "a", "size": "2"}], TypeError, r"t.json row 0: `size` must be int, got '2'"),
        ([{"name": "a", "size": True}], TypeError, r"`size` must be int, got True"),
    ],
    ids=["not an array", "a field missing", "a field unknown", "a string for an int", "a bool for an int"],
)
def test_a_bad_row_is_refused_by_file_row_and_field(data, error, message):
    with pytest.raises(error, match=message):
        shipped.as_rows(Row, data, "t.json")


def test_a_repeated_key_is_refused(tmp_path):
    (tmp_path / "t.json").write_text('[{"name": "a", "name": "b", "size": 1}]')
    with pytest.raises(ValueError, match=r"the t.json repeats the field 'name'"):
        shipped.load(str(tmp_path / "module.py"), "t.json")


def test_toml_files_are_read_too(tmp_path):
    (tmp_path / "t.toml").write_text("rows = [['a', 'b']]\n")
    assert shipped.load(str(tmp_path / "module.py"), "t.toml") == {"rows": [["a", "b"]]}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    note: str | None = None
    words: tuple[str, ...] = ()


def test_a_field_with_a_default_may_be_left_out_and_takes_null_or_an_array_as_typed():
    rows = [{"name": "a"}, {"name": "b", "note": None, "words": ["x", "y"]}, {"name": "c", "note": "n"}]
    assert shipped.as_rows(Entry, rows, "t.json") == (
        Entry(name="a"),
        Entry(name="b", words=("x", "y")),
        Entry(name="c", note="n"),
    )


@pytest.mark.parametrize(
    "record, error, message",
    [
        ({"note": "n"}, ValueError, r"t.json row 0 must have \['name'\], and may have \['name', 'note', 'words'\]"),
        ({"name": "a", "more": 1}, ValueError, r"row 0 must have \['name'\]"),
        ({"name": None}, TypeError, r"t.json row 0: `name` must be str, got None"),
        ({"name": "a", "note": 1}, TypeError, r"`note` must be str \| None, got 1"),
        ({"name": "a", "words": ["x", 1]}, TypeError, r"`words` must be tuple\[str, \.\.\.\], got \['x', 1\]"),
        ({"name": "a", "words": "xy"}, TypeError, r"`words` must be tuple\[str, \.\.\.\], got 'xy'"),
    ],
    ids=[
        "a required field missing",
        "a field unknown",
        "null for a str",
        "an int for a str",
        "an int in an array",
        "a str for an array",
    ],
)
def test_a_bad_optional_field_is_refused(record, error, message):
    with pytest.raises(error, match=message):
        shipped.as_rows(Entry, [record], "t.json")
