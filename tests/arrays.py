"""Parameter reports written by hand for the layout tests: any paths and shapes, no model traced."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dcsim.model.count import ArrayRow, ParamReport


def array(path: str, shape: Sequence[int]) -> ArrayRow:
    """A float32 parameter at ``path`` (``module/kind``) of ``shape``."""
    module, _, kind = path.rpartition("/")
    return ArrayRow(
        collection="params",
        path=path,
        module=module,
        kind=kind,
        shape=tuple(shape),
        dtype="float32",
        num_values=math.prod(shape),
    )


def param_report(shapes: Mapping[str, Sequence[int]]) -> ParamReport:
    """A report of float32 parameters, one a path of ``shapes``, in its order."""
    return ParamReport(arrays=tuple(array(path, shape) for path, shape in shapes.items()))
