"""The capacity curve: the most sequences a mesh serves at each context, from one serving report.

One sequence's cache on a device is piecewise linear in the context (a sliding window's layer stops
growing at its window), and every stage's room is fixed, so the curve needs no new layout: each
point is the report's own ``concurrency_at`` that context, exact, for contexts doubling from 128
up to the model's positions (or the request's context).
"""

from __future__ import annotations

from typing import NamedTuple

from dcsim.serving.engine import ServingReport

FIRST_CONTEXT = 128


class Point(NamedTuple):
    """The most sequences served at once at one context; ``chosen``: the request's own context."""

    context: int
    max_concurrency: int
    chosen: bool


def contexts(report: ServingReport) -> list[int]:
    """Doubling contexts from 128 to the positions (or the request's context when it is larger or
    the model has no positions limit), with the request's own context among them."""
    top = max(report.max_positions or report.serving.context, report.serving.context)
    found, context = {report.serving.context}, FIRST_CONTEXT
    while context < top:
        found.add(context)
        context *= 2
    found.add(top)
    return sorted(found)


def capacity_curve(report: ServingReport) -> list[Point]:
    """The curve's points (``ServingReport.concurrency_at`` each context); empty without a budget or a cache."""
    points = []
    for context in contexts(report):
        most = report.concurrency_at(context)
        if most is not None:
            points.append(Point(context=context, max_concurrency=most, chosen=context == report.serving.context))
    return points
