"""``memory``: the training state each device holds (params, grads, master copy, optimizer state)
under a ZeRO stage or a chosen set of split parts, laid out by JAX's sharding rules; with
``--budget``, the smallest mesh that fits; with ``--verify``, XLA's own figure beside dcsim's."""

from __future__ import annotations

import argparse
import dataclasses
import json
from fractions import Fraction
from typing import Any

import pandas as pd

from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag, frame_text
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.inputs import number_from_text, show
from dcsim.memory import search, training
from dcsim.memory.state import MemoryReport, StateArray, compute_memory, trimmed
from dcsim.model import registry
from dcsim.model.count import count_params
from dcsim.quantities import amounts, units
from dcsim.requests.training import TRAINING
from dcsim.sharding import meshes

DEFAULT_STRATEGY = "fsdp"  # ZeRO's split is fsdp's: each array over every device of the mesh
DEFAULT_ZERO = 3
DEFAULT_PARAM_DTYPE = "bfloat16"
TOP_ARRAYS = 10  # rows of the table's largest arrays; JSON has every one (a 70B model has ~3,600)
ALL_ARRAYS_UP_TO = 24  # a model this small shows every array in the table
MAX_UNEVEN_NAMED = 3
EVERY_DEVICE_ALIKE = (
    "the most-loaded device is any device: under JAX's even splits every device of a mesh holds shards "
    "of the same shapes"
)


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
    format_flag(command)


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


# --- JSON -------------------------------------------------------------------------------------------


def spec_text(row: StateArray) -> str:
    """The row's PartitionSpec as JAX writes it, trailing Nones dropped (``state.trimmed``)."""
    return str(trimmed(row.spec))


def _array_record(row: StateArray) -> dict[str, Any]:
    return {
        "path": row.path,
        "part": row.part,
        "shape": list(row.shape),
        "dtype": row.dtype,
        "spec": spec_text(row),
        "bytes_per_device": row.bytes_per_device,
    }


def uneven_arrays(memory: MemoryReport) -> list[StateArray]:
    """The arrays of the split parts of which a device holds more than 1 / devices (the layout could
    not split them evenly, or the optimizer keeps them whole), most bytes a device first. The parts
    left whole are whole by choice and are not listed."""
    split = memory.training.shard
    rows = (row for row in memory.arrays if row.part in split and not memory.is_even(row))
    return sorted(rows, key=lambda row: -row.bytes_per_device)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryResult:
    """What ``memory`` found: the state laid out, and what the flags asked for beside it.

    Attributes:
      memory: the training state on the mesh.
      total_params: the model's parameter count.
      fit: with --budget, the smallest mesh that fits.
      verified: with --verify, XLA's figure for the state (``dcsim.memory.verify``).
      traced: with --sequence, the step's activations (``dcsim.memory.activations``).
      stepped: with both, XLA's compiled training step (``dcsim.memory.verify_step``).
    """

    memory: MemoryReport
    total_params: int
    fit: search.Fit | None = None
    verified: Any = None
    traced: Any = None
    stepped: Any = None


def memory_record(result: MemoryResult) -> dict[str, Any]:
    """The ``memory`` result as one JSON-ready object (keys in docs/cli.md). Bytes are exact ints;
    the ideal share, when not whole, is a float with its exact fraction beside it."""
    memory, activations, verified = result.memory, result.traced, result.verified
    setup = memory.training
    ideal = memory.ideal_bytes_per_device
    largest = memory.largest
    uneven = uneven_arrays(memory)
    record: dict[str, Any] = {
        "num_devices": memory.num_devices,
        "zero": setup.zero,
        "shard": list(setup.sharded_parts),
        "optimizer": setup.optimizer,
        "per_device": memory.per_device,
        "ideal_total_bytes_per_device": ideal.numerator if ideal.denominator == 1 else float(ideal),
        "ideal_total_bytes_per_device_fraction": str(ideal),
        "total_bytes": memory.total_bytes,
        "mesh": memory.mesh.text,
        "mesh_axes": [{"name": name, "size": size} for name, size in memory.mesh.axes],
        "strategy": memory.strategy,
        "rules": [rule.text for rule in memory.rules],
        "param_dtype": setup.param_dtype,
        "grad_dtype": setup.grads_dtype,
        "master_dtype": setup.master_dtype,
        "optimizer_dtype": setup.state_dtype,
        "total_params": result.total_params,
        "num_arrays": memory.num_arrays,
        "parts": {
            part: {
                "dtypes": memory.part_dtypes(part),
                "split": part in setup.shard,
                "num_arrays": len(memory.part_arrays(part)),
                "total_bytes": memory.part_total_bytes(part),
                "bytes_per_device": memory.part_bytes(part),
            }
            for part in setup.parts
        },
        "largest": {
            **_array_record(largest),
            "shard_shape": list(largest.shard_shape),
            "even": memory.is_even(largest),
            "note": largest.note,
        },
        "num_uneven_arrays": len(uneven),
        "uneven_bytes_per_device": sum(row.bytes_per_device for row in uneven),
        "every_device_alike": EVERY_DEVICE_ALIKE,
        "arrays": [_array_record(row) for row in memory.arrays],
    }
    if activations is not None:
        from dcsim.memory.activations import activations_record

        state = memory.per_device["total_bytes"]
        record["per_device"] = {
            **memory.per_device,
            "state_bytes": state,
            "activations_bytes": activations.bytes_per_device,
            "total_bytes": state + activations.bytes_per_device,
        }
        record["activations"] = activations_record(activations)
    if verified is not None:
        from dcsim.memory import verify  # loaded only for --verify, as in ``run``

        record["xla"] = {
            **verify.verify_record(verified),
            "output_bytes_per_device": verified.output_bytes_per_device,
            "matches": verified.matches,
            "seconds": round(verified.seconds, 3),
        }
        if result.stepped is not None:
            from dcsim.memory import verify_step

            record["xla"] |= verify_step.step_record(result.stepped)
    if result.fit is not None:
        record["budget"] = search.fit_record(result.fit)
    return record


# --- the table --------------------------------------------------------------------------------------


def _bytes(n: int) -> str:
    return units.bytes_exact(n)


def _array_line(row: StateArray) -> str:
    return (
        f"{row.part} {row.path}, {meshes.shape_text(row.shape) or 'scalar'} {row.dtype} {spec_text(row)} -> "
        f"{meshes.shape_text(row.shard_shape) or 'scalar'} on each device, {_bytes(row.bytes_per_device)}"
    )


def _headline(memory: MemoryReport) -> list[str]:
    """The most-loaded device against the ideal, the largest array, and what does not split evenly."""
    ideal = memory.ideal_bytes_per_device
    total = memory.total_bytes_per_device
    gap = total - ideal
    ratio = total / ideal if ideal else None
    if ratio is None:
        against = ""
    elif ratio < Fraction(10001, 10000):
        against = "  (within 0.01% of the ideal)"
    else:
        against = f"  ({float(ratio):,.4g}x the ideal)"
    width = 18
    lines = [f"{'on each device':<{width}}bytes ({EVERY_DEVICE_ALIKE})"]
    lines += [
        f"{part:<{width}}{_bytes(memory.part_bytes(part))}"
        + ("" if part in memory.training.shard else "  (whole on every device)")
        for part in memory.training.parts
    ]
    lines += [
        f"{'total':<{width}}{_bytes(total)}",
        f"{'ideal':<{width}}{units.bytes_share(ideal)}  (all {units.count(memory.total_bytes)} state bytes / "
        f"{units.count(memory.num_devices)} devices: an average, not a layout)",
        f"{'over the ideal':<{width}}{units.share_short(gap)} byte{'s' * (gap != 1)}{against}",
    ]
    largest = memory.largest
    why = "splits evenly" if memory.is_even(largest) else "does not split evenly"
    lines.append(f"{'largest array':<{width}}{_array_line(largest)}; {why}: {largest.note}")
    uneven = uneven_arrays(memory)
    split = [row for row in memory.arrays if row.part in memory.training.shard]
    if not split:
        lines.append(f"{'uneven arrays':<{width}}none split: every part is whole on every device")
    elif not uneven:
        every = f"none: each device holds exactly 1 / {memory.num_devices:,} of every array of the split parts"
        lines.append(f"{'uneven arrays':<{width}}{every}")
    else:
        held = sum(row.bytes_per_device for row in uneven)
        named = "; ".join(f"{row.part} {row.path} ({row.note})" for row in uneven[:MAX_UNEVEN_NAMED])
        more = len(uneven) - MAX_UNEVEN_NAMED
        lines.append(
            f"{'uneven arrays':<{width}}{len(uneven):,} of the {len(split):,} arrays of the split parts "
            f"{'does' if len(uneven) == 1 else 'do'} not split evenly, {_bytes(held)} on each device: {named}"
            + (f"; {more:,} more (see --format json)" if more > 0 else "")
        )
    return lines


def parts_frame(memory: MemoryReport) -> pd.DataFrame:
    setup = memory.training
    parts = setup.parts
    return pd.DataFrame(
        {
            "part": list(parts),
            "dtype": [", ".join(memory.part_dtypes(part)) for part in parts],
            "split": ["yes" if part in setup.shard else "no" for part in parts],
            "num_arrays": [len(memory.part_arrays(part)) for part in parts],
            "total_bytes": [memory.part_total_bytes(part) for part in parts],
            "bytes_per_device": [memory.part_bytes(part) for part in parts],
            "size_per_device": [units.binary_bytes(memory.part_bytes(part)) for part in parts],
        }
    )


def arrays_frame(rows: list[StateArray]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "part": [row.part for row in rows],
            "path": [row.path for row in rows],
            "shape": [meshes.shape_text(row.shape) or "scalar" for row in rows],
            "dtype": [row.dtype for row in rows],
            "spec": [spec_text(row) for row in rows],
            "shard_shape": [meshes.shape_text(row.shard_shape) or "scalar" for row in rows],
            "bytes_per_device": [row.bytes_per_device for row in rows],
        }
    )


def _verify_lines(memory: MemoryReport, verified: Any) -> list[str]:
    """XLA's figure beside dcsim's: its output per device is the state plus a tuple table (a
    pointer a returned array), so dcsim's figure is shown with that table added."""
    table = verified.expected_bytes_per_device - memory.total_bytes_per_device
    if verified.matches:
        verdict = "yes, to the byte"
    else:
        difference = verified.output_bytes_per_device - verified.expected_bytes_per_device
        verdict = f"NO: XLA's figure is {abs(difference):,} bytes {'more' if difference > 0 else 'less'}"
    return [
        "",
        f"XLA's check: the {units.count(verified.num_arrays)} state arrays compiled, never run, on "
        f"{units.count(memory.num_devices)} virtual CPU devices ({verified.seconds:.1f} s); XLA's memory analysis:",
        f"  XLA's output bytes per device  {_bytes(verified.output_bytes_per_device)}",
        f"  dcsim's figure                 {_bytes(verified.expected_bytes_per_device)}  (the state's "
        f"{units.count(memory.total_bytes_per_device)} bytes and {units.count(table)} bytes of the table of "
        "arrays XLA returns)",
        f"  match: {verdict}",
    ]


def _budget_lines(fit: search.Fit, given: meshes.MeshSpec) -> list[str]:
    lines = [
        "",
        f"budget: {_bytes(fit.amount)} a device for the state's {_bytes(fit.total_bytes)}"
        + (" and each device's activations" if any(c.activations_bytes_per_device for c in fit.candidates) else ""),
        f"  ideal share: at least {units.count(fit.min_ideal_devices)} devices (total / budget, rounded up); "
        + (
            f"smallest mesh searched: {fit.ideal.text} ({units.count(fit.ideal.num_devices)} devices)"
            if fit.ideal is not None
            else "no mesh searched is that large"
        ),
        "  real layout: "
        + (
            f"{fit.real.mesh.text} ({units.count(fit.real.mesh.num_devices)} devices), "
            f"{_bytes(fit.real.total_bytes_per_device or 0)} on its most-loaded device"
            if fit.real is not None
            else "no mesh searched fits" + (f": {fit.why_none_fits}" if fit.why_none_fits else "")
        ),
        "",
        f"meshes searched (the first axis of {given.text} grows, the others stay; the layout is not monotone, "
        "so each is laid out):",
    ]
    laid = [c for c in fit.candidates if c.total_bytes_per_device is not None]
    if laid:
        frame = pd.DataFrame(
            {
                "mesh": [c.mesh.text for c in laid],
                "devices": [c.mesh.num_devices for c in laid],
                "bytes_per_device": [c.total_bytes_per_device for c in laid],
                "size": [units.binary_bytes(c.total_bytes_per_device or 0) for c in laid],
                "fits": ["yes" if c.fits(fit.amount) else "no" for c in laid],
            }
        )
        lines.append(frame_text(frame))
    failed = [c for c in fit.candidates if c.error is not None]
    for c in failed[:MAX_UNEVEN_NAMED]:
        lines.append(f"{c.mesh.text}: cannot be laid out: {c.error}")
    if len(failed) > MAX_UNEVEN_NAMED:
        lines.append(f"({len(failed) - MAX_UNEVEN_NAMED:,} more meshes cannot be laid out; see --format json)")
    return lines


def _activation_lines(memory: MemoryReport, traced: Any) -> list[str]:
    """The step's activations beside the state: the total a device needs, the blocks, the loss,
    the formula and why it differs."""
    from dcsim.memory.activations import ATTENTION_HELP, POLICY_HELP

    step = traced.step
    state = memory.total_bytes_per_device
    width = 18
    formula = traced.korthikanti_bytes
    blocks = traced.blocks
    first = blocks[0] if blocks else None
    lines = [
        "",
        f"activations of a step: sequence {step.sequence:,}, micro-batch {step.micro_batch:,} a data-parallel replica, "
        f"remat {step.remat}, {step.attention} attention, compute {step.compute_dtype}"
        + (f", tensor parallel over model={traced.tensor_parallel}" if traced.tensor_parallel > 1 else "")
        + (" with sequence parallelism" if step.sequence_parallel else ""),
        f"  remat {step.remat}: {POLICY_HELP[step.remat]}"
        + (
            ""
            if traced.recompute_fraction is None
            else f"; recomputes {100 * traced.recompute_fraction:.1f}% of a block's forward and backward FLOPs"
        ),
        f"  {step.attention} attention: {ATTENTION_HELP[step.attention]}",
        f"{'state':<{width}}{_bytes(state)}",
        f"{'activations':<{width}}{_bytes(traced.bytes_per_device)}  (residuals JAX's autodiff keeps, traced "
        f"abstractly in {traced.seconds:.1f} s)",
        f"{'  blocks':<{width}}{_bytes(traced.blocks_bytes)}"
        + (
            f"  ({len(blocks):,} blocks; {first.path}: {first.residuals} residuals, {_bytes(first.bytes)})"
            if first
            else ""
        ),
        f"{'  outside blocks':<{width}}{_bytes(traced.outside.bytes)}  ({traced.outside.path})",
        f"{'  loss':<{width}}{_bytes(traced.loss_bytes)}  (logits cast to float32, softmax cross-entropy)",
        f"{'total':<{width}}{_bytes(state + traced.bytes_per_device)}  (state + activations)",
        f"{'formula':<{width}}"
        + (
            f"{_bytes(formula)}  (Korthikanti et al. 2022 for the same s, b, h, a, L)"
            if formula is not None
            else f"none: Korthikanti et al. have no counterpart for remat {step.remat}"
        ),
        f"  {traced.formula_note}",
    ]
    if traced.routed:
        lines.append(f"  routed experts: {step.dispatch_text}")
    return lines


def render_memory_table(result: MemoryResult) -> str:
    """The ``memory`` result for people: the most-loaded device first (each part against the ideal,
    the largest array and why), then the parts, the largest arrays, the step's activations, XLA's
    check, the budget and XLA's step."""
    memory = result.memory
    rules = "".join(f"\n  rule {rule.text}" for rule in memory.rules)
    lines = [
        f"mesh: {memory.mesh.text} ({units.count(memory.num_devices)} devices), strategy: {memory.strategy}{rules}",
        f"training: {memory.training.text}",
        *(
            f"note: {text}"
            for text in [training.tensor_parallel_note(memory.strategy, memory.training, memory.mesh)]
            if text
        ),
        f"model: {units.count(result.total_params)} parameters; {units.count(memory.num_arrays)} state arrays",
        "",
        *_headline(memory),
        "",
        frame_text(parts_frame(memory)),
        "",
    ]
    if memory.num_arrays <= ALL_ARRAYS_UP_TO:
        lines += ["arrays:", frame_text(arrays_frame(list(memory.arrays)))]
    else:
        top = sorted(memory.arrays, key=lambda row: -row.bytes_per_device)[:TOP_ARRAYS]
        lines += [
            f"the {len(top)} largest arrays on a device ({units.count(memory.num_arrays)} in all: every one with "
            "--format json):",
            frame_text(arrays_frame(top)),
        ]
    if result.traced is not None:
        lines += _activation_lines(memory, result.traced)
    if result.verified is not None:
        lines += _verify_lines(memory, result.verified)
    if result.fit is not None:
        lines += _budget_lines(result.fit, memory.mesh)
    if result.stepped is not None:
        lines += _step_lines(result.stepped)
    return "\n".join(lines) + "\n"


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
    result = MemoryResult(
        memory=memory, total_params=report.total_params, fit=fit, verified=verified, traced=traced, stepped=stepped
    )
    if args.format == "json":
        return json.dumps(memory_record(result), indent=2) + "\n"
    return render_memory_table(result)


def _step_lines(stepped: Any) -> list[str]:
    """XLA's compiled step beside dcsim's state + activations, with why they differ."""
    return [
        "",
        f"XLA's training step, compiled on virtual CPU devices ({stepped.seconds:.1f} s): loss, value_and_grad under "
        "the remat policy, the optax update, the state donated",
        f"  XLA's peak a device        {_bytes(stepped.peak_bytes)}  (arguments {_bytes(stepped.argument_bytes)} + "
        f"outputs {_bytes(stepped.output_bytes)} + temporaries {_bytes(stepped.temp_bytes)} - aliased "
        f"{_bytes(stepped.alias_bytes)})",
        f"  dcsim's state + activations  {_bytes(stepped.dcsim_bytes)}  ({stepped.ratio:.2f}x XLA's)",
        "  A CPU compile keeps transients of the backward that are not residuals (the float32 logits' gradient, "
        "each layer's temporaries); TPU and GPU compiles assign buffers and rematerialise differently.",
        *_buffer_lines(stepped.largest_buffers),
    ]


def _buffer_lines(largest: Any) -> list[str]:
    """The largest buffers XLA's compiled step makes, one a line: shape, bytes, instruction, source."""
    if not largest:
        return []
    lines = ["  XLA's largest buffers (each one the step makes; XLA reuses memory between those not alive together):"]
    for buffer in largest:
        source = f", from {buffer.source}" if buffer.source else ""
        lines.append(f"    {buffer.text}  {_bytes(buffer.bytes)}  {buffer.op} {buffer.name}{source}")
    return lines
