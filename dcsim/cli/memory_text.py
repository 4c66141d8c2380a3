"""``memory``'s text for people: the most-loaded device first (each part against the ideal, the
largest array and why), then the parts, the largest arrays, the step's activations, XLA's check,
the budget and XLA's step. Every figure is read from the result (``dcsim.report.memory_records``)
and its footprint (``dcsim.memory.report``); nothing here adds bytes."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd

from dcsim.cli.common import frame_text
from dcsim.memory import search, training
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import MemoryReport, StateArray
from dcsim.quantities import units
from dcsim.report.memory_records import MemoryResult, spec_text, stage_alike, uneven_arrays
from dcsim.report.memory_tables import state_arrays_frame, state_parts_frame
from dcsim.sharding import meshes

TOP_ARRAYS = 10  # rows of the table's largest arrays; JSON has every one (a 70B model has ~3,600)
ALL_ARRAYS_UP_TO = 24  # a model this small shows every array in the table
MAX_UNEVEN_NAMED = 3


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
    lines = [f"{'on each device':<{width}}bytes ({stage_alike(memory)})"]
    lines += [
        f"{part:<{width}}{_bytes(memory.part_bytes(part))}"
        + {"split": "", "whole": "  (whole on every device)", "whole over data": "  (whole over the data axes)"}[
            memory.part_layout(part)
        ]
        for part in memory.training.parts
    ]
    lines += [
        f"{'total':<{width}}{_bytes(total)}",
        f"{'ideal':<{width}}{units.bytes_share(ideal)}  (all {units.count(memory.total_bytes)} state bytes / "
        f"{units.many(memory.num_devices, 'device')}: an average, not a layout)",
        f"{'over the ideal':<{width}}{units.share_short(gap)} byte{'s' * (gap != 1)}{against}",
    ]
    largest = memory.largest
    why = "splits evenly" if memory.is_even(largest) else "does not split evenly"
    lines.append(f"{'largest array':<{width}}{_array_line(largest)}; {why}: {largest.note}")
    uneven = uneven_arrays(memory)
    split = [row for row in memory.arrays if row.part in memory.training.shard]
    if not split:
        lines.append(f"{'uneven arrays':<{width}}none split over the data axes: the ZeRO stage splits no part")
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


def parts_text(memory: MemoryReport) -> str:
    """The parts' table (``dcsim.report.memory_tables``, the page's "By part"), each device's bytes read
    in binary units too."""
    frame = state_parts_frame(memory)
    columns = ["part", "dtype", "split", "num_arrays", "total_bytes", "bytes_per_device"]
    return frame_text(frame[columns].assign(size_per_device=frame["bytes_per_device"].map(units.binary_bytes)))


def arrays_text(rows: list[StateArray]) -> str:
    """The arrays' table (``dcsim.report.memory_tables``, the CSV's) as text, its notes left to the
    CSV and JSON: part first, as the headline names an array."""
    frame = state_arrays_frame(rows)
    columns = ["part", "path", "shape", "dtype", "partition_spec", "shard_shape", "bytes_per_device"]
    return frame_text(frame[columns].rename(columns={"partition_spec": "spec"}))


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
        f"{units.many(memory.num_devices, 'virtual CPU device')} ({verified.seconds:.1f} s); XLA's memory analysis:",
        f"  XLA's output bytes per device  {_bytes(verified.output_bytes_per_device)}",
        f"  dcsim's figure                 {_bytes(verified.expected_bytes_per_device)}  (the state's "
        f"{units.count(memory.total_bytes_per_device)} bytes and {units.count(table)} bytes of the table of "
        "arrays XLA returns)",
        f"  match: {verdict}",
    ]


def _verdict_line(footprint: TrainingReport, mesh: meshes.MeshSpec) -> str:
    """What a device of the given mesh holds against the budget: fits with what is left, or over."""
    headroom = footprint.headroom_bytes or 0
    verdict = f"fits, {_bytes(headroom)} left" if footprint.fits else f"over by {_bytes(-headroom)}"
    return (
        f"  this mesh: {mesh.text}, {_bytes(footprint.total_bytes)} a device: {verdict} (not counted: "
        f"{', '.join(footprint.leaves_out)})"
    )


def _none_fits(fit: search.Fit, verdict: Any) -> str:
    """Why no mesh of the search fits, and which remedy would (``dcsim.memory.remedies``)."""
    why = fit.why_none_fits or (None if verdict is None else verdict.why_data_cannot)
    text = "no mesh searched fits" + (f": {why}" if why else "")
    fitting = [] if verdict is None else verdict.fitting_phrases()
    if fitting:
        text += f"; on {verdict.mesh.text} it fits with {'; or '.join(fitting)}"
    return text


def _budget_lines(fit: search.Fit, given: meshes.MeshSpec, footprint: TrainingReport, verdict: Any = None) -> list[str]:
    lines = [
        "",
        f"budget: {_bytes(fit.amount)} a device for the state's {_bytes(fit.total_bytes)}"
        + (" and each device's activations" if any(c.activations_bytes_per_device for c in fit.candidates) else ""),
        _verdict_line(footprint, given),
        f"  ideal share: at least {units.many(fit.min_ideal_devices, 'device')} (total / budget, rounded up); "
        + (
            f"smallest mesh searched: {fit.ideal.text} ({units.many(fit.ideal.num_devices, 'device')})"
            if fit.ideal is not None
            else "no mesh searched fits, even by the ideal share"
        ),
        "  real layout: "
        + (
            f"{fit.real.mesh.text} ({units.many(fit.real.mesh.num_devices, 'device')}), "
            f"{_bytes(fit.real.total_bytes_per_device or 0)} on its most-loaded device"
            if fit.real is not None
            else _none_fits(fit, verdict)
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


def _stage_activation_lines(split: Any, traced: Any, width: int) -> list[str]:
    """A pipelined step's activations on the stage shown: its blocks' residuals for the
    micro-batches it has in flight, and on the last stage those outside the blocks and the loss's;
    then every stage's state and activations (``dcsim.memory.stages``)."""
    members = split.blocks[split.stage]
    last = split.stage == split.num_stages - 1
    own = sum(traced.blocks[index].bytes for index in members)
    held = split.activation_bytes[split.stage] - (traced.outside.bytes + traced.loss_bytes if last else 0)
    first = traced.blocks[members[0]]
    lines = [
        f"{'  blocks':<{width}}{_bytes(held)}  (stage {split.stage}'s {len(members):,} blocks x "
        f"{float(Fraction(held, own)):g} micro-batches in flight; {first.path}: {first.residuals} residuals, "
        f"{_bytes(first.bytes)} a micro-batch)",
    ]
    if last:
        lines += [
            f"{'  outside blocks':<{width}}{_bytes(traced.outside.bytes)}  ({traced.outside.path})",
            f"{'  loss':<{width}}{_bytes(traced.loss_bytes)}  (logits cast to float32, softmax cross-entropy)",
        ]
    else:
        lines.append(
            f"{'  outside, loss':<{width}}on the last stage ({_bytes(traced.outside.bytes + traced.loss_bytes)}, "
            "one micro-batch)"
        )
    lines.append(
        f"{'  every stage':<{width}}state + activations a device: "
        + ", ".join(
            f"{stage}: {units.binary_bytes(state)} + {units.binary_bytes(more)}"
            for stage, (state, more) in enumerate(zip(split.state_bytes, split.activation_bytes, strict=True))
        )
    )
    return lines


def _activation_lines(footprint: TrainingReport, traced: Any, split: Any = None) -> list[str]:
    """The step's activations beside the state: the total a device needs, the blocks, the loss,
    the formula and why it differs; with a ``stage`` axis, the stage's (``split``)."""
    from dcsim.memory.activations import ATTENTION_HELP, POLICY_HELP

    step = traced.step
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
        f"{'state':<{width}}{_bytes(footprint.state_bytes)}",
        f"{'activations':<{width}}{_bytes(footprint.activations_bytes or 0)}  (residuals JAX's autodiff keeps, traced "
        f"abstractly in {traced.seconds:.1f} s)",
        *(
            _stage_activation_lines(split, traced, width)
            if split is not None and split.activation_bytes is not None
            else [
                f"{'  blocks':<{width}}{_bytes(traced.blocks_bytes)}"
                + (
                    f"  ({len(blocks):,} blocks; {first.path}: {first.residuals} residuals, {_bytes(first.bytes)})"
                    if first
                    else ""
                ),
                f"{'  outside blocks':<{width}}{_bytes(traced.outside.bytes)}  ({traced.outside.path})",
                f"{'  loss':<{width}}{_bytes(traced.loss_bytes)}  (logits cast to float32, softmax cross-entropy)",
            ]
        ),
        f"{'total':<{width}}{_bytes(footprint.total_bytes)}  (state + activations)",
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


def _verdict_lines(verdict: Any) -> list[str]:
    """The answer for the asked mesh first (``dcsim.memory.remedies``), then every remedy tried with
    the bytes a device would hold."""
    lines = [verdict.text]
    if verdict.remedies:
        lines.append("remedies tried on this mesh, one change at a time, each laid out and traced as the request is:")
        sized = [r.total_bytes for r in verdict.remedies]
        frame = pd.DataFrame(
            {
                "change": [remedy.label for remedy in verdict.remedies],
                "flags": [remedy.flags for remedy in verdict.remedies],
                "bytes_per_device": ["-" if size is None else units.count(size) for size in sized],
                "size": ["-" if size is None else units.binary_bytes(size) for size in sized],
                "fits": [
                    "yes" if r.fits(verdict.amount) else ("no" if r.error is None else "cannot run")
                    for r in verdict.remedies
                ],
            }
        )
        lines.append(frame_text(frame))
        failed = [remedy for remedy in verdict.remedies if remedy.error is not None]
        lines += [f"  {remedy.label}: {remedy.error}" for remedy in failed[:MAX_UNEVEN_NAMED]]
    return [*lines, ""]


def render_memory_table(result: MemoryResult) -> str:
    """The ``memory`` result for people: the most-loaded device first (each part against the ideal,
    the largest array and why), then the parts, the largest arrays, the step's activations, XLA's
    check, the budget and XLA's step."""
    memory = result.memory
    rules = "".join(f"\n  rule {rule.text}" for rule in memory.rules)
    lines = [
        *([] if result.verdict is None else _verdict_lines(result.verdict)),
        f"mesh: {memory.mesh.text} ({units.many(memory.num_devices, 'device')}), strategy: {memory.strategy}{rules}",
        f"training: {memory.training.text}",
        *(
            f"note: {text}"
            for text in [training.tensor_parallel_note(memory.strategy, memory.training, memory.mesh)]
            if text
        ),
        f"model: {units.count(result.total_params)} parameters; {units.count(memory.num_arrays)} state arrays"
        + ("" if memory.pipeline is None else f" on a device of {memory.pipeline.text}"),
        "",
        *_headline(memory),
        "",
        parts_text(memory),
        "",
    ]
    if memory.num_arrays <= ALL_ARRAYS_UP_TO:
        lines += ["arrays:", arrays_text(list(memory.arrays))]
    else:
        top = sorted(memory.arrays, key=lambda row: -row.bytes_per_device)[:TOP_ARRAYS]
        lines += [
            f"the {len(top)} largest arrays on a device ({units.count(memory.num_arrays)} in all: every one with "
            "--format json):",
            arrays_text(top),
        ]
    if result.traced is not None:
        lines += _activation_lines(result.footprint, result.traced, memory.pipeline)
    if result.verified is not None:
        lines += _verify_lines(memory, result.verified)
    if result.fit is not None:
        lines += _budget_lines(result.fit, memory.mesh, result.footprint, result.verdict)
    if result.stepped is not None:
        lines += _step_lines(result.stepped)
    return "\n".join(lines) + "\n"


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
        *_xla_work_lines(stepped),
    ]


def _xla_work_lines(stepped: Any) -> list[str]:
    """XLA's FLOPs a device and its collectives by kind, axis and shapes (``--verify``)."""
    from dcsim.memory.verify_step import collective_counts

    lines = []
    if stepped.flops is not None:
        lines.append(
            f"  XLA's FLOPs a device        {stepped.flops:,}  (cost_analysis of the compiled step, the optimizer's "
            "update included)"
        )
    if stepped.dcsim_flops is not None and stepped.flops:
        lines.append(
            f"  dcsim's FLOPs a device      {stepped.dcsim_flops:,}  "
            f"({stepped.dcsim_flops / stepped.flops:.3f}x XLA's: dcsim counts the forward, backward and recompute, "
            "not the optimizer's update; XLA counts a scan's body once, flash attention's backward loop included)"
        )
    counts = collective_counts(stepped.collectives)
    if counts:
        lines.append("  XLA's collectives (ops, kind, mesh axes, result shapes; CPU compiles promote bf16 to f32):")
        lines += [
            f"    {row['ops']:>4}  {row['kind']:<18} {row['axis'] or '-':<14} {', '.join(row['shapes'])[:90]}"
            for row in counts
        ]
    return lines


def _buffer_lines(largest: Any) -> list[str]:
    """The largest buffers XLA's compiled step makes, one a line: shape, bytes, instruction, source."""
    if not largest:
        return []
    lines = ["  XLA's largest buffers (each one the step makes; XLA reuses memory between those not alive together):"]
    for buffer in largest:
        source = f", from {buffer.source}" if buffer.source else ""
        lines.append(f"    {buffer.text}  {_bytes(buffer.bytes)}  {buffer.op} {buffer.name}{source}")
    return lines
