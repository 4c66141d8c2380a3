"""Tables dcsim ships as JSON or TOML files beside the modules that read them: rows a reader should be able
to disagree with one by one (an accelerator's memory, a naming scheme's patterns), kept apart from
the code that uses them.

A file is read once, when its module is imported, and every row is checked as strictly as the
Python rows it replaces were: a repeated key, a missing or unknown field, or a value of the wrong
kind fails the import with a message naming the file, the row and the field. Pure Python, no JAX:
the modules that read these files are read on the quick paths (the CLI's refusals, the links codec).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dcsim.inputs import json_kind, no_duplicate_keys, show

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Row = TypeVar("Row", bound="DataclassInstance")


def load(module_file: str, name: str) -> Any:
    """The JSON or TOML file ``name`` beside the module whose ``__file__`` is ``module_file`` (TOML
    where the rows hold regular expressions, which its literal strings write without escapes)."""
    text = (Path(module_file).parent / name).read_text(encoding="utf-8")
    if name.endswith(".toml"):
        import tomllib  # here, not at the top: the start-up path reads JSON only

        return tomllib.loads(text)  # a repeated key is an error in TOML itself
    return json.loads(text, object_pairs_hook=no_duplicate_keys(name))


def as_rows(cls: type[Row], data: Any, where: str) -> tuple[Row, ...]:
    """Each object of the JSON array ``data`` as the dataclass ``cls``: its keys the class's fields
    (one with a default may be left out), each value of its field's type (``str``, ``int`` or
    ``bool``, a bool never standing for an int; ``X | None`` also takes null, and ``tuple[str, ...]``
    an array of strings). ``where`` names the file in a message."""
    if not isinstance(data, list):
        raise TypeError(f"{where} must hold a JSON array of rows, got {json_kind(data)}")
    hints = typing.get_type_hints(cls)
    names = [field.name for field in dataclasses.fields(cls)]
    required = [field.name for field in dataclasses.fields(cls) if _required(field)]
    rows = []
    for index, record in enumerate(data):
        if not isinstance(record, dict) or not set(required) <= set(record) <= set(names):
            found = sorted(record) if isinstance(record, dict) else json_kind(record)
            fields = f"exactly the fields {names}" if required == names else f"{required}, and may have {names}"
            raise ValueError(f"{where} row {index} must have {fields}, has {found}")
        values = {}
        for name, value in record.items():
            values[name] = _typed(value, hints[name], f"{where} row {index}: `{name}`")
        rows.append(cls(**values))
    return tuple(rows)


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _typed(value: Any, wanted: Any, where: str) -> Any:
    """``value`` as the type ``wanted`` (a JSON array as a tuple); raises TypeError naming ``where``."""
    arms = typing.get_args(wanted) if isinstance(wanted, types.UnionType) else (wanted,)
    if value is None and type(None) in arms:
        return None
    for arm in arms:
        if typing.get_origin(arm) is tuple and isinstance(value, list):
            (item, _) = typing.get_args(arm)
            if all(type(each) is item for each in value):
                return tuple(value)
        elif type(value) is arm:
            return value
    raise TypeError(f"{where} must be {_kind_name(wanted)}, got {show(value)}")


def _kind_name(wanted: Any) -> str:
    return wanted.__name__ if isinstance(wanted, type) else str(wanted)
