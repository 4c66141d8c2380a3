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
    """Each object of the JSON array ``data`` as the dataclass ``cls``: its keys exactly the
    class's fields, each value of its field's type (``str``, ``int`` or ``bool``, a bool never
    standing for an int). ``where`` names the file in a message."""
    if not isinstance(data, list):
        raise TypeError(f"{where} must hold a JSON array of rows, got {json_kind(data)}")
    types = typing.get_type_hints(cls)
    names = [field.name for field in dataclasses.fields(cls)]
    rows = []
    for index, record in enumerate(data):
        if not isinstance(record, dict) or sorted(record) != sorted(names):
            found = sorted(record) if isinstance(record, dict) else json_kind(record)
            raise ValueError(f"{where} row {index} must have exactly the fields {names}, has {found}")
        for name in names:
            value = record[name]
            if type(value) is not types[name]:
                wanted = types[name].__name__
                raise TypeError(f"{where} row {index}: `{name}` must be {wanted}, got {show(value)}")
        rows.append(cls(**record))
    return tuple(rows)
