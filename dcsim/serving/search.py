"""The smallest mesh that serves a target: the request's concurrency at its context, within each
device's usable bytes.

The tensor size grows first, 1, 2, 4, 8, ... (while the heads allow it: vLLM's rule, see
``engine.tensor_heads``), because weights that do not fit one device only fit split; then, for
each tensor size whose weights fit, the fewest replicas (``data``) whose devices hold their share
of the sequences: a replica of ``k`` free sequences' room serves ``ceil(concurrency / k)`` of
them. The request's ``expert`` and ``stage`` axes stay as given. Every mesh tried is kept with its
figure or the reason it cannot serve, and the answer is the one with the fewest devices (the
smaller tensor size on a tie: fewer collectives a token).
"""

from __future__ import annotations

import dataclasses
import math

from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport, count_params
from dcsim.serving import engine
from dcsim.serving.request import DATA_AXIS, EXPERT_AXIS, TENSOR_AXIS, Serving
from dcsim.sharding.meshes import MeshSpec

MAX_SEARCH_TENSOR = 64  # tensor sizes tried: 1, 2, 4, ..., 64 (no published deployment splits further)
MAX_SEARCH_DEVICES = 4096  # as the training budget search


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tried:
    """One mesh tried: what its most-loaded device holds and the sequences it serves, or why not."""

    mesh: MeshSpec
    total_bytes_per_device: int | None
    max_concurrency: int | None
    serves: bool
    reason: str = ""

    @property
    def num_devices(self) -> int:
        return self.mesh.num_devices


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshSearch:
    tried: tuple[Tried, ...]

    @property
    def answer(self) -> Tried | None:
        serving = [item for item in self.tried if item.serves]
        if not serving:
            return None
        return min(serving, key=lambda item: (item.num_devices, item.mesh.shape.get(TENSOR_AXIS, 1)))


def _mesh(serving: Serving, data: int, tensor: int) -> MeshSpec:
    """The request's mesh with ``data`` replicas and a ``model`` axis of ``tensor``, other axes kept."""
    axes = dict(serving.mesh.axes)
    axes[DATA_AXIS], axes[TENSOR_AXIS] = data, tensor
    order = [DATA_AXIS, *(name for name in serving.mesh.names if name not in (DATA_AXIS, TENSOR_AXIS)), TENSOR_AXIS]
    return MeshSpec(tuple((name, axes[name]) for name in order))


def _tried(config: ModelConfig, serving: Serving, mesh: MeshSpec, report: ParamReport) -> Tried:
    request = dataclasses.replace(serving, mesh=mesh)
    try:
        served = engine.compute_serving(config, request, report)
    except ValueError as err:
        return Tried(mesh=mesh, total_bytes_per_device=None, max_concurrency=None, serves=False, reason=str(err))
    concurrency = served.max_concurrency
    serves = bool(served.fits)
    reason = ""
    if not serves:
        reason = (
            "the weights and fixed state alone pass the usable bytes"
            if served.weights_bytes_per_device + served.other_bytes_per_device > (served.usable_bytes or 0)
            else f"serves at most {concurrency:,} sequences at this context"
        )
    return Tried(
        mesh=mesh,
        total_bytes_per_device=served.total_bytes_per_device,
        max_concurrency=concurrency,
        serves=serves,
        reason=reason,
    )


def smallest_mesh(config: ModelConfig, serving: Serving, report: ParamReport | None = None) -> MeshSearch | None:
    """Search as the module's text says; None without a budget."""
    if serving.usable_bytes is None:
        return None
    report = report or count_params(config)
    fixed = serving.axis(EXPERT_AXIS) * serving.num_stages
    tried: list[Tried] = []
    tensor = 1
    while tensor <= MAX_SEARCH_TENSOR and tensor * fixed <= MAX_SEARCH_DEVICES:
        best = MeshSearch(tried=tuple(tried)).answer
        if best is not None and tensor * fixed >= best.num_devices:
            break  # every larger tensor size needs at least as many devices as the best found
        one = _tried(config, serving, _mesh(serving, 1, tensor), report)
        tried.append(one)
        if not one.serves and one.max_concurrency:  # weights fit: more replicas share the sequences
            per_replica = one.max_concurrency // serving.axis(EXPERT_AXIS)
            replicas = math.ceil(serving.concurrency / per_replica)
            data = math.ceil(replicas / serving.axis(EXPERT_AXIS))
            if data * tensor * fixed <= MAX_SEARCH_DEVICES:
                tried.append(_tried(config, serving, _mesh(serving, data, tensor), report))
        if one.serves:
            break  # a larger tensor size only adds devices
        tensor *= 2
    return MeshSearch(tried=tuple(tried))
