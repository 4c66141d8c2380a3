"""``memory``: the training state each device holds (params, grads, master copy, optimizer state)
under a ZeRO stage or a chosen set of split parts, laid out by JAX's sharding rules; with
``--budget``, the smallest mesh that fits; with ``--verify``, XLA's own figure beside dcsim's."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag
from dcsim.cli.memory_text import _buffer_lines as _buffer_lines  # tests/test_buffers.py reads it here
from dcsim.cli.memory_text import render_memory_table
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.inputs import number_from_text, show
from dcsim.memory import remedies, search, training
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import compute_memory
from dcsim.model import registry
from dcsim.model.count import count_params
from dcsim.quantities import amounts
from dcsim.report.memory_records import MemoryResult, memory_record
from dcsim.report.memory_tables import state_arrays_csv
from dcsim.requests.training import TRAINING
from dcsim.sharding import meshes

DEFAULT_STRATEGY = "fsdp"  # ZeRO's split is fsdp's: each array over every device of the mesh
DEFAULT_ZERO = 3
DEFAULT_PARAM_DTYPE = "bfloat16"


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = add_command(commands, "memory", run)
    mesh_flags(command, "memory", metavar="AXIS=SIZE[,AXIS=SIZE...]", required=True, default_strategy=DEFAULT_STRATEGY)
    # The request's flags, declared with their link keys and JSON keys (dcsim.requests.training.TRAINING).
    TRAINING.add_arguments(command, ("optim",))
    TRAINING.add_arguments(
        command.add_argument_group("which parts are split (one of; default --zero 3)"), ("zero", "parts")
    )
    TRAINING.add_arguments(command, ("param", "grad", "master"))
    command.add_argument(
        "--verify",
        action="store_true",
        help="also compile the same state with XLA on virtual CPU devices and show its per-device bytes "
        "beside dcsim's (small meshes only)",
    )
    TRAINING.add_arguments(command, ("devmem",))
    step = command.add_argument_group(
        "activations of a training step (with --sequence; traced from JAX's autodiff, per data-parallel replica)"
    )
    TRAINING.add_arguments(step, ("seq", "mb", "remat", "attn", "cdtype", "cf", "sp"))
    format_flag(command, ("table", "json", "csv"))


STEP_FLAGS = ("micro_batch", "remat", "attention", "compute_dtype", "capacity_factor", "sequence_parallel")


def step_from_args(args: argparse.Namespace, moe: bool) -> Any:
    """The ``activations.Step`` the flags describe, or None without --sequence; every value is
    checked before any rule between flags, so a bad value is named whatever else is given."""
    from dcsim.memory import activations  # JAX: only once the flags ask for a trace

    values: dict[str, Any] = {}
    if args.sequence is not None:
        values["sequence"] = activations.sequence_from_text(args.sequence, "--sequence")
    if args.micro_batch is not None:
        values["micro_batch"] = activations.micro_batch_from_text(args.micro_batch, "--micro-batch")
    for flag, choices in (
        ("remat", tuple(activations.POLICIES)),
        ("attention", activations.ATTENTION_KINDS),
        ("compute_dtype", activations.COMPUTE_DTYPES),
    ):
        if getattr(args, flag) is not None:
            values[flag] = activations.check_choice(getattr(args, flag), choices, f"--{flag.replace('_', '-')}")
    if args.capacity_factor is not None and args.capacity_factor.strip().lower() != "none":
        factor = number_from_text(args.capacity_factor.strip())
        if not isinstance(factor, (int, float)):
            shown = show(args.capacity_factor)
            raise ValueError(f"--capacity-factor must be a number from 0.01 to 64 (or none: dropless), got {shown}")
        values["capacity_factor"] = activations.check_capacity_factor(factor, "--capacity-factor")
    if args.sequence_parallel:
        values["sequence_parallel"] = True
    if "sequence" not in values:
        given = [f"--{flag.replace('_', '-')}" for flag in STEP_FLAGS if getattr(args, flag) not in (None, False)]
        if given:
            raise UsageError(f"{', '.join(given)}: for a training step's activations; give --sequence S too")
        return None
    if args.batch is not None:
        raise UsageError(
            "--batch is the batch a model is initialised on, which changes no count; a step's sequences a "
            "data-parallel replica are --micro-batch B"
        )
    if "capacity_factor" in values and not moe:
        raise UsageError("--capacity-factor applies to Mixture-of-Experts models (the moe family)")
    return activations.Step(**values)


def training_from_args(args: argparse.Namespace) -> training.Training:
    """The ``Training`` the flags describe; ValueError or UsageError naming the flag at fault."""
    if args.zero is not None and args.shard is not None:
        raise UsageError(
            "--zero and --shard both choose the parts to split; give one (--zero K splits stage K's parts, "
            "--shard PARTS names them)"
        )
    master = None if args.master_dtype == training.NO_MASTER else args.master_dtype
    if master is not None and master not in training.DTYPES:
        raise ValueError(
            f"the master dtype must be one of {', '.join(training.DTYPES)}, or {training.NO_MASTER} for no master "
            f"copy; got {show(master)}"
        )
    kwargs: dict[str, Any] = {
        "optimizer": args.optimizer,
        "param_dtype": training.check_dtype(args.param_dtype, "param"),
        "grad_dtype": None if args.grad_dtype is None else training.check_dtype(args.grad_dtype, "grad"),
        "master_dtype": master,
    }
    if args.shard is not None:
        return training.Training.sharding(training.parse_parts(args.shard), **kwargs)
    zero = DEFAULT_ZERO if args.zero is None else training.check_stage(args.zero)
    return training.Training.stage(zero, **kwargs)


def run(args: argparse.Namespace) -> str:
    for flag, name in (("shards", "--shards"), ("dtype", "--dtype")):
        if getattr(args, flag) is not None:
            raise UsageError(
                f"{name} does not apply to memory: the mesh sets the number of devices (--mesh) and "
                "--param-dtype, --grad-dtype and --master-dtype the dtypes"
            )
    mesh, strategy, rules = mesh_from_args(args, DEFAULT_STRATEGY)
    setup = training_from_args(args)
    amount = None if args.budget is None else amounts.parse_budget(args.budget)
    config = config_from_args(args)
    step = step_from_args(args, moe=registry.family_of(config).trains_experts)
    report = count_params(config)
    memory = compute_memory(report, mesh, strategy, rules, setup)
    traced = None
    per_mesh = None
    if step is not None:
        from dcsim.memory import activations

        traced = activations.cached_trace(config, step, setup.param_dtype, mesh, with_recompute=True)

        def per_mesh(candidate: meshes.MeshSpec) -> int:
            return activations.cached_trace(config, step, setup.param_dtype, candidate).bytes_per_device

    verified = None
    if args.verify:
        from dcsim.memory import verify  # XLA compiles only for --verify

        verify.check_verifiable(memory)  # refuses a mesh past its bounds before the budget search runs
        if step is not None:
            from dcsim.memory import verify_step

            verify_step.check_step_verifiable(memory, report.total_params, step)
    fit = None if amount is None else search.fit(report, mesh, strategy, rules, setup, amount, activations=per_mesh)
    stepped = None
    if args.verify:
        verified = verify.verify(memory)
        if step is not None and traced is not None:
            stepped = verify_step.verify_step(memory, config.to_json(), step, traced.bytes_per_device)
    if args.format == "csv":
        return state_arrays_csv(memory.arrays)
    footprint = TrainingReport.of(memory, None if traced is None else traced.bytes_per_device, amount)
    verdict = None
    if amount is not None:
        measure = remedies.engine_measure(config, report, strategy, rules)
        verdict = remedies.verdict(footprint, mesh, setup, step, measure, fit)
    result = MemoryResult(
        memory=memory,
        footprint=footprint,
        total_params=report.total_params,
        fit=fit,
        verified=verified,
        traced=traced,
        stepped=stepped,
        verdict=verdict,
    )
    if args.format == "json":
        return json.dumps(memory_record(result), indent=2) + "\n"
    return render_memory_table(result)
