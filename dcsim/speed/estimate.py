"""A training step's time from a request: the model counted, its state laid out, its step traced
(with its FLOPs), its collectives listed, then ``dcsim.speed.training.step_time``. The ``memory``
command and the published checks (tests/test_speed_published.py) ask here."""

from __future__ import annotations

from typing import Any

from dcsim.memory import activations, flops
from dcsim.memory.state import MemoryReport
from dcsim.memory.step import Step
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.serving.catalog import Accelerator
from dcsim.sharding.meshes import MeshSpec
from dcsim.speed import collectives, pipeline, system, training


def model_flops_per_token(config: ModelConfig, step: Step, param_dtype: str) -> int:
    """The whole model's forward and backward FLOPs a token: the step traced unsplit (no tensor
    parallelism: Megatron's padded vocabulary and repeated KV heads are a rank's, not the model's),
    over its tokens."""
    traced = activations.cached_trace(config, step, param_dtype, None, with_recompute=True)
    assert traced.flops is not None  # with_recompute traces the FLOPs
    return traced.flops.model // traced.flops.tokens


def approximations(config: ModelConfig, report: ParamReport, step: Step) -> dict[str, int]:
    """The published rules a token beside the traced count (``dcsim.memory.flops``)."""
    hparams = system.transformer_hparams(config)
    n = flops.matmul_params(config, report)
    return {
        "matmul_params": n,
        "palm_6n_12lhs": flops.palm_flops_per_token(n, hparams, step.sequence),
        "kaplan_6n_6lsh": flops.kaplan_flops_per_token(n, hparams, step.sequence),
        "six_n": 6 * n,
        "decode_2n": flops.decode_flops_per_token(n),
    }


def training_time(
    config: ModelConfig,
    report: ParamReport,
    memory: MemoryReport,
    traced: activations.ActivationReport,
    device: Accelerator,
    *,
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST,
    tokens: int | None = None,
    price: float | None = None,
    schedule: pipeline.Pipeline | None = None,
) -> training.StepTime:
    """The step's time on ``device`` for the state laid out as ``memory`` and the step ``traced``
    on its mesh (traced ``with_recompute``, which counts its FLOPs), run as ``schedule`` says (its
    micro-batches, and with a ``stage`` axis its pipeline schedule; None: one micro-batch)."""
    if traced.flops is None:
        raise ValueError("the step's time needs its FLOPs: trace it with with_recompute")
    schedule = schedule or pipeline.Pipeline()
    step = traced.step
    hparams = system.transformer_hparams(config)
    mesh: MeshSpec = memory.mesh
    stages = dict(mesh.axes).get(pipeline.STAGE_AXIS, 1)
    schedule.check_for(stages, len(traced.blocks))
    share = pipeline.stage_share(report, traced, memory, hparams, stages)
    rows = collectives.training_collectives(
        report, hparams, mesh, memory.training, step, devices_per_host, pipeline=schedule, share=share
    )
    hbm = training.hbm_bytes(
        report,
        mesh,
        memory.training,
        step,
        share.activation_bytes,
        share.state_bytes,
        share=share,
        micro_batches=schedule.micro_batches,
    )
    return training.step_time(
        device=device,
        flops=share.flops,
        model_flops_per_token=model_flops_per_token(config, step, memory.training.param_dtype),
        hparams=hparams,
        step=step,
        mesh=mesh,
        collectives=rows,
        hbm=hbm,
        tokens=tokens,
        price=price,
        devices_per_host=devices_per_host,
        pipeline=schedule,
        share=share,
    )


def record(time: training.StepTime, config: ModelConfig, report: ParamReport, step: Step) -> dict[str, Any]:
    """The ``time`` JSON object with the approximations a token beside the count."""
    return training.time_record(time) | {"approximations_per_token": approximations(config, report, step)}
