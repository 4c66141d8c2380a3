"""The verdict for the serving mesh a person asked about, and what would make it serve, tried
through the engine.

The answer leads with the asked mesh: it serves the request or not, by how much, and which part is
over (the weights or the KV cache). When it does not, each change is computed with
``dcsim.serving.engine`` on the same request, one at a time: the smallest mesh that serves (the
tensor axis grows first, ``dcsim.serving.search``), an 8-bit KV cache, smaller weight formats, and
what the asked mesh does serve (the most sequences at the context, the longest context at the
concurrency). Only the changes that serve are named; nothing is suggested that was not computed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.serving import engine
from dcsim.serving.request import Serving, check_kv_dtype, reserve_text
from dcsim.serving.search import MeshSearch

KV_TRIED = "fp8"  # vLLM's --kv-cache-dtype fp8 (float8_e4m3fn): half of a 16-bit cache
WEIGHTS_TRIED = ("fp8-channel", "int8", "awq-int4")  # an 8-bit float, an 8-bit integer and a 4-bit format


@dataclasses.dataclass(frozen=True, kw_only=True)
class Remedy:
    """One change tried: what the most-loaded device then holds, or why it cannot serve.

    Attributes:
      kind: ``mesh``, ``kv``, ``weights``, ``concurrency`` or ``context``.
      label: the change in words (``weights awq-int4``).
      flags: the change as command-line flags.
      total_bytes: the most-loaded device's bytes after the change (None: cannot run).
      serves: whether the change serves the (changed) request within the usable bytes.
      error: why it cannot run, or None.
    """

    kind: str
    label: str
    flags: str
    total_bytes: int | None
    serves: bool
    error: str | None = None

    def record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "change": self.label,
            "flags": self.flags,
            "total_bytes": self.total_bytes,
            "serves": self.serves,
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    """The asked mesh against the usable bytes, and the remedies tried when it does not serve."""

    report: engine.ServingReport
    remedies: tuple[Remedy, ...] = ()

    @property
    def serves(self) -> bool:
        return bool(self.report.fits)

    @property
    def over_part(self) -> str:
        report = self.report
        return "KV cache" if report.kv_bytes_per_device > report.weights_bytes_per_device else "weights"

    @property
    def serving(self) -> tuple[Remedy, ...]:
        return tuple(remedy for remedy in self.remedies if remedy.serves)

    @property
    def text(self) -> str:
        """The answer in a sentence or two: the mesh, serves or not and by how much, which part is
        over, and the changes that serve."""
        report = self.report
        request = report.serving
        usable = report.usable_bytes or 0
        budget = report.budget_bytes or 0
        asked = f"{units.many(request.concurrency, 'sequence')} of {units.many(request.context, 'token')}"
        total = units.binary_bytes(report.total_bytes_per_device)
        parts = (
            f" (weights {units.binary_bytes(report.weights_bytes_per_device)}, KV cache "
            f"{units.binary_bytes(report.kv_bytes_per_device)})"
        )
        against = (
            f"{units.binary_bytes(usable)} usable ({units.binary_bytes(budget)} less a reserve of "
            f"{reserve_text(request.reserve)})"
        )
        if self.serves:
            left = units.binary_bytes(usable - report.total_bytes_per_device)
            most = report.max_concurrency
            more = "" if most is None else f"; at most {units.many(most, 'sequence')} at this context"
            return (
                f"Mesh {request.mesh.text} serves {asked}: {total} a device{parts} of {against}, {left} left{more}; "
                f"{engine.LEAVES_OUT}."
            )
        over = units.binary_bytes(report.total_bytes_per_device - usable)
        head = (
            f"Mesh {request.mesh.text} does not serve {asked}: {total} a device{parts} against {against}, over by "
            f"{over}, most of it the {self.over_part}."
        )
        named = [remedy.label for remedy in self.serving]
        if not named:
            return head + " No change tried (a larger mesh, an 8-bit KV cache, smaller weights) serves it."
        return f"{head} Serves with {'; '.join(named[:-1]) + '; or ' if len(named) > 1 else ''}{named[-1]}."

    def record(self) -> dict[str, Any]:
        """The ``verdict`` JSON object (keys in docs/cli.md)."""
        report = self.report
        return {
            "mesh": report.serving.mesh.text,
            "serves": self.serves,
            "total_bytes": report.total_bytes_per_device,
            "usable_bytes": report.usable_bytes,
            "over_part": None if self.serves else self.over_part,
            "remedies": [remedy.record() for remedy in self.remedies],
            "serving": [remedy.label for remedy in self.serving],
            "text": self.text,
        }


def _tried(config: ModelConfig, request: Serving, report: ParamReport, kind: str, label: str, flags: str) -> Remedy:
    try:
        served = engine.compute_serving(config, request, report)
    except ValueError as err:
        return Remedy(kind=kind, label=label, flags=flags, total_bytes=None, serves=False, error=str(err))
    size = units.binary_bytes(served.total_bytes_per_device)
    return Remedy(
        kind=kind,
        label=f"{label} ({size})",
        flags=flags,
        total_bytes=served.total_bytes_per_device,
        serves=bool(served.fits),
    )


def _plain_changes(report: engine.ServingReport) -> Sequence[Remedy]:
    """What the asked mesh does serve, read from the report: fewer sequences, or a shorter context."""
    request = report.serving
    # (the flag, the most the mesh serves, what was asked, its words)
    changes = (
        ("concurrency", report.max_concurrency, request.concurrency, "{} at this context", "sequence"),
        ("context", report.max_context if report.has_cache else None, request.context, "a context of {}", "token"),
    )
    return [
        Remedy(
            kind=kind,
            label=words.format(units.many(most, unit)),
            flags=f"--{kind} {most}",
            total_bytes=None,
            serves=True,
        )
        for kind, most, asked, words, unit in changes
        if most and most < asked
    ]


def verdict(
    config: ModelConfig, report: engine.ServingReport, params: ParamReport, found: MeshSearch | None
) -> Verdict | None:
    """The verdict for the report's mesh (None without a budget), with every remedy tried when it
    does not serve."""
    if report.usable_bytes is None:
        return None
    if report.fits:
        return Verdict(report=report)
    request = report.serving
    remedies: list[Remedy] = []
    answer = None if found is None else found.answer
    if answer is not None and answer.mesh != request.mesh:
        remedies.append(
            Remedy(
                kind="mesh",
                label=f"{answer.mesh.text} ({units.many(answer.num_devices, 'device')})",
                flags=f"--mesh {answer.mesh.text}",
                total_bytes=answer.total_bytes_per_device,
                serves=True,
            )
        )
    if report.has_cache and check_kv_dtype(request.kv_dtype) not in (check_kv_dtype(KV_TRIED), "int8"):
        changed = dataclasses.replace(request, kv_dtype=KV_TRIED)
        remedies.append(_tried(config, changed, params, "kv", f"KV cache {KV_TRIED}", f"--kv-dtype {KV_TRIED}"))
    for name in WEIGHTS_TRIED:
        if name != request.weight_format.name:
            changed = dataclasses.replace(request, weights=name)
            remedies.append(_tried(config, changed, params, "weights", f"weights {name}", f"--weights {name}"))
    remedies += _plain_changes(report)
    return Verdict(report=report, remedies=tuple(remedies))
