"""One config.json's fields read into a dcsim family's hyperparameters (``dcsim.hf.readers`` reads
them as each model type's entry in ``dcsim.hf.table`` says)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dcsim.inputs import as_bool, as_int, show
from dcsim.model import schemas

MISSING = object()


class Fields:
    """One config.json's fields, read into dcsim hyperparameters. Each value is checked against
    the dcsim hyperparameter's range under the file's own name (``hidden_size``, not ``d_model``),
    and where it came from is kept for the messages about hyperparameters taken together."""

    def __init__(self, data: Mapping[str, Any], family: str):
        self.data = data
        self.family = family
        self.hparams: dict[str, Any] = {}
        self.source: dict[str, str] = {}
        self.notes: list[str] = []
        self.text: dict[str, str] = {}  # words the entry's ``counted`` sentence is filled with
        self.missing = MISSING

    def _int(self, key: str, default: Any, minimum: int = 1, maximum: int | None = None) -> int:
        """The integer field ``key``; ``default`` stands for a missing or null one (``MISSING``: required)."""
        value = self.data.get(key, default)
        if value is None and default is not MISSING:
            value = default
        if value is MISSING:
            raise ValueError(f"`{key}` is missing; it decides the parameter count")
        return as_int(value, key, minimum=minimum, maximum=maximum)

    def take(self, name: str, key: str, default: Any = MISSING) -> int:
        """The integer field ``key`` as the hyperparameter ``name``, within that one's range."""
        spec = schemas.hparam(self.family, name, self.family)
        self.hparams[name] = self._int(key, default, spec.low, spec.high)
        self.source[name] = key
        return self.hparams[name]

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        return default if value is None else as_bool(value, key)

    def set(self, **hparams: Any) -> None:
        self.hparams.update(hparams)

    def require(self, key: str, wanted: Any, default: Any, why: str) -> None:
        value = self.data.get(key, default)
        if value != wanted or isinstance(value, bool) is not isinstance(wanted, bool):
            raise ValueError(f"`{key}` is {show(value)}; dcsim counts only {show(wanted)}: {why}")

    def note(self, text: str) -> None:
        """Say something about the file that changes no count (a field transformers ignores), once
        (a vision-language model's parts are read from the same file)."""
        if text not in self.notes:
            self.notes.append(text)

    def no_biases(self, why: str, *keys: str) -> None:
        """Refuse any of ``keys`` (``attention_bias``, ``mlp_bias``) set true: biases this family
        has no place for."""
        for key in keys:
            if self.flag(key, False):
                raise ValueError(f"`{key}` is true; {why}")

    def head_width(self, default: int | None) -> None:
        """``head_dim`` as the family's hyperparameter: the file's, else ``default`` (the model
        class's; None: hidden_size / num_attention_heads). The usual width is 0, "d_model / num_heads"."""
        hidden, heads = self.hparams["d_model"], self.hparams["num_heads"]
        spec = schemas.hparam(self.family, "head_dim", self.family)
        if self.data.get("head_dim") is None and default is None:
            return
        width = self._int("head_dim", default, 1, spec.maximum)
        self.hparams["head_dim"] = 0 if width * heads == hidden else width
        self.source["head_dim"] = "head_dim"


def lm_head(tied: bool) -> str:
    return "language-model head " + ("tied to the token embedding" if tied else "untied")
