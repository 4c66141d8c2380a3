"""``memory``: the training state each device holds (params, grads, master copy, optimizer state)
under a ZeRO stage or a chosen set of split parts, laid out by JAX's sharding rules; with
``--budget``, the smallest mesh that fits; with ``--verify``, XLA's own figure beside dcsim's."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag, refuse_unused
from dcsim.cli.memory_text import _buffer_lines as _buffer_lines  # tests/test_buffers.py reads it here
from dcsim.cli.memory_text import render_memory_table
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.memory import remedies, search, stages, training
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import compute_memory
from dcsim.model import registry
from dcsim.model.count import count_params
from dcsim.quantities import amounts
from dcsim.report.memory_records import MemoryResult, memory_record
from dcsim.report.memory_tables import state_arrays_csv
from dcsim.requests.serving import SERVING
from dcsim.requests.timing import TIMING
from dcsim.requests.training import TRAINING
from dcsim.sharding import meshes
from dcsim.speed import STEP, unfit_clause

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
    timing = command.add_argument_group("the step's time (an estimate, with --sequence and --device; docs/time.md)")
    SERVING.add_arguments(
        timing,
        ("device",),
        more_help={"device": ": its speeds give the step's time, its memory the budget (not with --budget)"},
    )
    TIMING.add_arguments(timing, ("dph", "tokens", "price", "mbs", "sched", "vstages"))
    format_flag(command, ("table", "json", "csv"))


STEP_LINKS = ("mb", "remat", "attn", "cdtype", "cf", "sp")  # a step's settings besides --sequence
SCHEDULE_LINKS = ("mbs", "sched", "vstages")  # a timed step's micro-batches and pipeline schedule


def step_from_args(args: argparse.Namespace, moe: bool) -> Any:
    """The ``activations.Step`` the flags describe, or None without --sequence. Each flag is read
    by its declaration (``TRAINING``, under the flag's name) before any rule between flags, so a
    bad value is named whatever else is given."""
    given = {link: TRAINING.from_flag(args, link) for link in ("seq", *STEP_LINKS)}
    if given["seq"] is None:
        named = [TRAINING[link].flag for link in STEP_LINKS if given[link] is not None]
        if named:
            raise UsageError(f"{', '.join(map(str, named))}: for a training step's activations; give --sequence S too")
        return None
    if args.batch is not None:
        raise UsageError(
            "--batch is the batch a model is initialised on, which changes no count; a step's sequences a "
            "data-parallel replica are --micro-batch B"
        )
    if given["cf"] is not None and not moe:
        raise UsageError("--capacity-factor applies to Mixture-of-Experts models (the moe family)")
    from dcsim.memory import activations  # JAX: only once the flags ask for a trace

    values: dict[str, Any] = {"sequence": int(given["seq"])}
    values |= {
        key: given[link] for key, link in (("remat", "remat"), ("attention", "attn"), ("compute_dtype", "cdtype"))
    }
    if given["mb"] is not None:
        values["micro_batch"] = int(given["mb"])
    if given["cf"] is not None:
        values["capacity_factor"] = float(given["cf"])
    if given["sp"] is not None:
        values["sequence_parallel"] = True
    return activations.Step(**{key: value for key, value in values.items() if value is not None})


def training_on_mesh_from_args(
    args: argparse.Namespace, command: str, why: str
) -> tuple[meshes.MeshSpec, str, tuple[meshes.Rule, ...], training.Training]:
    """A training command's mesh, strategy, rules and ``Training``. ``--shards`` and ``--dtype``
    (``count``'s and ``checkpoint``'s) are refused first, saying ``why``: in a training command the
    mesh sets the devices and the training flags the dtypes."""
    refuse_unused(args, command, ("shards", "dtype"), why)
    mesh, strategy, rules = mesh_from_args(args, DEFAULT_STRATEGY)
    return mesh, strategy, rules, training_from_args(args)


def training_from_args(args: argparse.Namespace) -> training.Training:
    """The ``Training`` the flags describe, each read by its declaration (``TRAINING``); ValueError
    or UsageError naming the flag at fault."""
    given = {link: TRAINING.from_flag(args, link) for link in ("zero", "parts", "param", "grad", "master")}
    if given["zero"] is not None and given["parts"] is not None:
        raise UsageError(
            "--zero and --shard both choose the parts to split; give one (--zero K splits stage K's parts, "
            "--shard PARTS names them)"
        )
    kwargs: dict[str, Any] = {
        "optimizer": args.optimizer,
        "param_dtype": given["param"],
        "grad_dtype": None if given["grad"] in (None, "same") else given["grad"],
        "master_dtype": None if given["master"] == training.NO_MASTER else given["master"],
    }
    if given["parts"] is not None:
        return training.Training.sharding(training.parse_parts(given["parts"]), **kwargs)
    zero = DEFAULT_ZERO if given["zero"] is None else int(given["zero"])
    return training.Training.stage(zero, **kwargs)


def timing_from_args(args: argparse.Namespace, step: Any) -> dict[str, Any] | None:
    """The time's settings (device, devices a host, tokens, price, the micro-batches and the pipeline
    schedule), or None without --device; refuses --budget with --device, and the run's and the
    schedule's flags without a device and a step to time."""
    device = SERVING.from_flag(args, "device")
    given = {link: TIMING.from_flag(args, link) for link in ("dph", "tokens", "price", *SCHEDULE_LINKS)}
    if device is not None and args.budget is not None:
        raise UsageError("--budget and --device both give the budget; give one (a device's memory is its budget)")
    if device is None or step is None:
        # a schedule's flag left at its default was not asked for
        asked = [link for link in SCHEDULE_LINKS if given[link] != TIMING[link].flag_default]
        extra = [TIMING[link].flag for link in ("tokens", "price", *asked) if given[link] is not None]
        if extra:
            raise UsageError(
                f"{', '.join(str(flag) for flag in extra)}: for a run's time; give --sequence and --device too"
            )
        if device is None:
            return None
    if given["price"] is not None and given["tokens"] is None:
        raise UsageError("--price prices a run: give its --tokens too")
    from dcsim.speed.pipeline import Pipeline

    return {
        "device": device,
        "devices_per_host": int(str(given["dph"])),
        "tokens": None if given["tokens"] is None else int(given["tokens"]),
        "price": None if given["price"] is None else float(given["price"]),
        "schedule": Pipeline(
            micro_batches=int(str(given["mbs"])),
            schedule=str(given["sched"]),
            virtual_stages=int(str(given["vstages"])),
        ),
    }


def run(args: argparse.Namespace) -> str:
    mesh, strategy, rules, setup = training_on_mesh_from_args(
        args,
        "memory",
        "the mesh sets the number of devices (--mesh) and --param-dtype, --grad-dtype and --master-dtype the dtypes",
    )
    budget = TRAINING.from_flag(args, "devmem")
    amount = None if budget is None else amounts.parse_budget(budget)
    config = config_from_args(args)
    step = step_from_args(args, moe=registry.family_of(config).trains_experts)
    timing = timing_from_args(args, step)
    device = None
    if timing is not None:
        from dcsim.serving import catalog

        device = catalog.get_accelerator(timing["device"])
        amount = device.bytes
    report = count_params(config)
    schedule = None if timing is None else timing["schedule"]
    traced = None
    per_mesh = None
    per_stage = None
    if step is not None:
        from dcsim.memory import activations

        traced = activations.cached_trace(config, step, setup.param_dtype, mesh, with_recompute=True)

        def per_mesh(candidate: meshes.MeshSpec) -> int:
            return activations.cached_trace(config, step, setup.param_dtype, candidate).bytes_per_device

        def per_stage(candidate: meshes.MeshSpec, _: tuple[int, ...]) -> tuple[int, ...]:
            held = activations.cached_trace(config, step, setup.param_dtype, candidate)
            count = stages.num_stages(candidate.axes)
            return stages.activation_bytes(held, stages.stage_blocks(len(held.blocks), count), schedule)

    in_flight = None
    if traced is not None:
        traced_step = traced

        def in_flight(blocks: tuple[range, ...]) -> tuple[int, ...]:
            return stages.activation_bytes(traced_step, blocks, schedule)

    memory = compute_memory(report, mesh, strategy, rules, setup, stage_activations=in_flight)
    activation_bytes = None
    if traced is not None:
        staged = memory.pipeline
        activation_bytes = traced.bytes_per_device
        if staged is not None and staged.activation_bytes is not None:
            activation_bytes = staged.activation_bytes[staged.stage]

    verified = None
    if args.verify:
        from dcsim.memory import verify  # XLA compiles only for --verify

        verify.check_verifiable(memory)  # refuses a mesh past its bounds before the budget search runs
        if step is not None:
            from dcsim.memory import verify_step

            verify_step.check_step_verifiable(memory, report.total_params, step)
    fit = (
        None
        if amount is None
        else search.fit(report, mesh, strategy, rules, setup, amount, activations=per_mesh, stage_activations=per_stage)
    )
    stepped = None
    if args.verify:
        verified = verify.verify(memory)
        if step is not None and traced is not None:
            counted = None if traced.flops is None else traced.flops.hardware
            stepped = verify_step.verify_step(
                memory, config.to_json(), step, traced.bytes_per_device, dcsim_flops=counted
            )
    if args.format == "csv":
        return state_arrays_csv(memory.arrays)
    footprint = TrainingReport.of(memory, activation_bytes, amount)
    verdict = None
    if amount is not None:
        measure = remedies.engine_measure(config, report, strategy, rules, schedule)
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
    time = None
    if device is not None and traced is not None and timing is not None:
        from dcsim.speed import estimate

        time = estimate.training_time(
            config,
            report,
            memory,
            traced,
            device,
            devices_per_host=timing["devices_per_host"],
            tokens=timing["tokens"],
            price=timing["price"],
            schedule=timing["schedule"],
        )
    if args.format == "json":
        record = memory_record(result)
        if device is not None:
            record["time"] = None if time is None or step is None else estimate.record(time, config, report, step)
        return json.dumps(record, indent=2) + "\n"
    text = render_memory_table(result)
    if device is not None:
        text += _time_lines(time, footprint)
    return text


def _time_lines(time: Any, footprint: TrainingReport) -> str:
    """The step's time under the table: the point, its band, what it leaves out; the collectives a
    device runs; a run's days, device-hours and cost. A ``footprint`` over the device's memory is
    said on the time's own line, as the page says it."""
    if time is None:
        return "step time: give --sequence to time a step (the device's memory is the budget)\n"
    from dcsim.speed.collectives import comm_record

    over = footprint.over_bytes
    unfit = "" if over is None else f"; {unfit_clause(time.device.name, over, STEP)}"
    lines = [
        "",
        time.text + unfit,
        f"  compute {time.compute_seconds:.3g} s ({time.flops.hardware:,} FLOPs a device, matmul efficiency "
        f"{time.matmul_efficiency:g}), memory {time.memory_seconds:.3g} s ({time.hbm_bytes:,} bytes), communication "
        f"{time.comm_seconds:.3g} s ({time.exposed_comm_seconds:.3g} s exposed)",
    ]
    for row in comm_record(time.collectives):
        where = "inside a host" if row["inside_host"] else "across hosts"
        lines.append(
            f"  {row['kind']:<15} over {row['axis']:<14} {row['calls']:>5} calls  {row['bytes']:,} bytes ({where})"
        )
    if time.run is not None:
        run = time.run
        cost = "" if run.cost is None else f", cost {run.cost:.4g} at {run.price_per_device_hour:g} a device-hour"
        lines.append(
            f"run (estimate): {run.tokens:,} tokens in {run.steps:,} steps: {run.seconds / 86400:.3g} days, "
            f"{run.device_hours:.4g} device-hours{cost}"
        )
    return "\n".join(lines) + "\n"
