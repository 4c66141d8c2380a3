"""``serve``: what each device holds to serve a model (the weights in their serving dtype and the
KV cache the model's own attention keeps in decode mode, laid out by JAX's sharding rules), and
with ``--budget`` or ``--device`` how many sequences, how long a context and the smallest mesh."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from dcsim.cli.common import (
    UsageError,
    add_command,
    config_from_args,
    format_flag,
    format_from_args,
    refuse_unused,
    weight_flags,
)
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.model.cache import kv_dtype_label
from dcsim.model.count import count_params
from dcsim.quantities import units
from dcsim.quantities.amounts import parse_budget
from dcsim.requests.serving import SERVING
from dcsim.requests.timing import TIMING, default_prompt
from dcsim.serving import catalog, records, remedies, search
from dcsim.serving.engine import LEAVES_OUT, ServingReport, compute_serving, default_context
from dcsim.serving.request import (
    DEFAULT_CONTEXT,
    DEFAULT_STRATEGY,
    DEFAULT_WEIGHTS,
    Serving,
    parse_reserve,
    reserve_text,
)

DEFAULT_MESH = "data=1"
MAX_LAYERS_SHOWN = 12  # the table's layer rows; JSON has every one


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = add_command(commands, "serve", run)
    mesh_flags(command, "serve", default=DEFAULT_MESH, default_mesh=DEFAULT_MESH, default_strategy=DEFAULT_STRATEGY)
    weight_flags(command, DEFAULT_WEIGHTS)
    # The request's own flags, declared with their link keys and JSON keys (dcsim.requests.serving.SERVING).
    SERVING.add_arguments(command, ("kv", "context", "concurrency", "source"))
    SERVING.add_arguments(command.add_argument_group("the budget a device has (one of)"), ("devmem", "device"))
    SERVING.add_arguments(command, ("reserve", "fullwin"))
    TIMING.add_arguments(
        command.add_argument_group("the decode speed (an estimate, with --device; docs/time.md)"),
        ("prompt", "dph"),
        defaults={"prompt": None},  # left out: the default, shortened to fit a short context (default_prompt)
    )
    command.add_argument(
        "--verify",
        action="store_true",
        help="also compile one decoding step with XLA on virtual CPU devices and show its argument bytes a device "
        "beside dcsim's (and its temporaries, a CPU compile's decode workspace); small models, no stage axis",
    )
    format_flag(command)


def serving_from_args(args: argparse.Namespace) -> Serving:
    """The request the flags describe; every flag checked, whatever else is given."""
    refuse_unused(
        args,
        "serve",
        ("shards", "dtype", "batch"),
        "the mesh sets the devices, --weights and --kv-dtype the dtypes, --concurrency the sequences",
    )
    if args.budget is not None and args.device is not None:
        raise UsageError("--budget and --device both give the budget; give one (a device's memory is its budget)")
    mesh, strategy, rules = mesh_from_args(args, DEFAULT_STRATEGY)
    fmt = format_from_args(args)
    # Each flag as its link would write it, checked by the declaration under the flag's name.
    given = {link: SERVING.from_flag(args, link) for link in ("kv", "context", "concurrency", "source", "reserve")}
    given |= {link: SERVING.from_flag(args, link) for link in ("devmem", "device", "fullwin")}
    # Without --context, 4,096 until the model is read (run() lowers it to the model's positions).
    context = DEFAULT_CONTEXT if given["context"] is None else int(given["context"])
    source = None if given["source"] is None else int(given["source"])
    amount = None if given["devmem"] is None else parse_budget(given["devmem"])
    return Serving(
        mesh=mesh,
        strategy=strategy,
        rules=rules,
        weights=fmt,
        kv_dtype=str(given["kv"]),
        context=context,
        concurrency=int(str(given["concurrency"])),
        source_length=source,
        budget_bytes=amount,
        device=given["device"],
        reserve=parse_reserve(str(given["reserve"])),
        full_windows=given["fullwin"] is not None,
    )


def _bytes(n: int | None) -> str:
    return "-" if n is None else units.bytes_exact(n)


def _verdict_lines(verdict: remedies.Verdict | None) -> list[str]:
    """The answer for the asked mesh first, then every change tried with its figure."""
    if verdict is None:
        return []
    lines = [verdict.text]
    if verdict.remedies:
        lines.append("changes tried, one at a time, each computed as the asked request is:")
        width = max(len(remedy.label) for remedy in verdict.remedies)
        for remedy in verdict.remedies:
            said = "serves" if remedy.serves else ("cannot run: " + remedy.error if remedy.error else "does not serve")
            lines.append(f"  {remedy.label:<{width}}  {remedy.flags:<28}  {said}")
    return [*lines, ""]


def render_table(
    report: ServingReport,
    found: search.MeshSearch | None,
    verified: Any = None,
    verdict: remedies.Verdict | None = None,
) -> str:
    serving = report.serving
    lines = [
        *_verdict_lines(verdict),
        f"mesh: {serving.mesh.text} ({units.many(serving.mesh.num_devices, 'device')}), strategy: {serving.strategy}; "
        f"weights {serving.weight_format.label}, KV cache {kv_dtype_label(serving.kv_dtype)}",
        f"context {units.many(serving.context, 'token')}, {units.many(serving.concurrency, 'sequence')} "
        f"({units.count(serving.sequences_per_replica)} on the most-loaded of "
        f"{units.many(serving.num_replicas, 'replica')})",
        "",
        f"KV bytes a token (whole model)    {units.count(report.kv_bytes_per_token)}",
        f"KV bytes a sequence (whole model) {_bytes(report.kv_bytes_per_sequence)}",
        f"weights (every weight once)       {_bytes(report.weights_bytes)}"
        f"  ({float(report.table.bits_per_weight):.3f} bits a weight, from the exact bytes)",
        "",
        "the most-loaded device holds",
        f"  weights                         {_bytes(report.weights_bytes_per_device)}",
        f"  KV cache                        {_bytes(report.kv_bytes_per_device)}",
        f"  other (step index, buffers)     {_bytes(report.other_bytes_per_device)}",
        f"  total                           {_bytes(report.total_bytes_per_device)}  ({LEAVES_OUT})",
    ]
    if report.budget_bytes is not None:
        device = f" ({catalog.ACCELERATORS[serving.device].title})" if serving.device else ""
        lines += [
            "",
            f"budget a device                   {_bytes(report.budget_bytes)}{device}",
            f"{'usable (reserve ' + reserve_text(serving.reserve) + ')':<34}{_bytes(report.usable_bytes)}",
            f"fits                              {'yes' if report.fits else 'no'}"
            "  (weights + KV + other against the usable bytes; activations not counted)",
        ]
        if report.has_cache:
            limited = report.max_context_limited_by
            lines += [
                f"max concurrency at the context    {units.count(report.max_concurrency or 0)} sequences"
                f"  ({units.count(report.max_concurrency_in_blocks or 0)} in vLLM's 16-token blocks)",
                f"max context at the concurrency    {units.count(report.max_context or 0)} tokens"
                f"  (limited by {limited})",
                f"KV tokens a replica               {units.count(report.kv_tokens_per_replica or 0)}",
            ]
        if found is not None:
            answer = found.answer
            tried = ", ".join(f"{item.mesh.text} {'yes' if item.serves else 'no'}" for item in found.tried)
            served = (
                "none of those tried"
                if answer is None
                else f"{answer.mesh.text} ({units.many(answer.num_devices, 'device')})"
            )
            lines += [f"smallest mesh serving the target  {served}", f"  tried: {tried}"]
    if report.layers:
        lines += ["", f"{'layers':<32} {'kind':<8} {'window':>7} {'tokens':>9} {'bytes a token':>14}"]
        groups = records.layer_groups(report.layers)
        for group in groups[:MAX_LAYERS_SHOWN]:
            layer = group[0]
            window = f"{layer.window:,}" if layer.window else "-"
            name = layer.path if len(group) == 1 else f"{layer.path} and {len(group) - 1:,} more like it"
            line = f"{name:<32} {layer.kind:<8} {window:>7} {layer.tokens:>9,} {layer.bytes_per_token:>14,}"
            lines.append(line + (f"  (a state of {layer.state_bytes:,} bytes a sequence)" if layer.state_bytes else ""))
        if len(groups) > MAX_LAYERS_SHOWN:
            lines.append(f"... {len(groups) - MAX_LAYERS_SHOWN:,} more rows (--format json lists every layer)")
    if verified is not None:
        same = "equal to dcsim's" if verified.matches else f"dcsim's differs by {verified.difference_bytes:+,}"
        lines += [
            "",
            f"XLA arguments a device            {_bytes(verified.argument_bytes_per_device)}  ({same}: weights + KV "
            f"+ other + {verified.token_bytes_per_device:,} bytes of the step's tokens)",
            f"XLA temporaries a device          {_bytes(verified.temp_bytes_per_device)}  (the decode workspace of a "
            "CPU compile; GPU and TPU assign buffers differently)",
        ]
    lines += ["", *(f"Note: {note.rstrip('.')}." for note in (*report.table.notes, *report.notes))]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> str:
    serving = serving_from_args(args)
    config = config_from_args(args)
    if args.context is None:
        serving = dataclasses.replace(serving, context=default_context(config))
    report = count_params(config)
    served = compute_serving(config, serving, report)
    verified = None
    if args.verify:
        from dcsim.serving import verify  # XLA's check only when asked: a plain serve never loads it

        verify.check_verifiable(served)
        verified = verify.verify(served)
    found = search.smallest_mesh(config, serving, report)
    speed = None
    curve: list[Any] = []
    no_speed = None  # why a device's budget comes without its speed (a figure the catalog lacks)
    if serving.device is not None:
        from dcsim.speed import serving as speeds  # the decode speed: only with a device's speeds

        given = TIMING.from_flag(args, "prompt")
        prompt = default_prompt(serving.context) if given is None else int(given)
        dph = int(str(TIMING.from_flag(args, "dph")))
        try:
            accelerator = catalog.get_accelerator(serving.device)
            request = speeds.SpeedRequest(
                report=served, config=config, params=report, device=accelerator, prompt=prompt, devices_per_host=dph
            )
            speed, curve = speeds.decode_speed(request), speeds.speed_curve(request)
        except speeds.PromptTooLong as err:  # bad input: refused, as the page refuses it
            raise UsageError(f"--prompt: {err}") from None
        except ValueError as err:  # the budget stands as before; the speed says what it lacks
            no_speed = f"no decode speed: {err}"
    elif args.prompt is not None or args.devices_per_host != TIMING["dph"].flag_default:
        raise UsageError("--prompt and --devices-per-host: for the decode speed; give --device too")
    verdict = remedies.verdict(config, served, report, found)
    written = None
    if args.write is not None:
        from dcsim.quant import write

        written = write.write(served.table, args.write)
    if args.format == "json":
        record: dict[str, Any] = records.serving_record(served, found)
        if verdict is not None:
            record["verdict"] = verdict.record()
        if verified is not None:
            record["xla"] = verify.verify_record(verified)
        if written is not None:
            record["written"] = written.to_dict()
        if serving.device is not None:
            record["time"] = None if speed is None else speeds.speed_record(speed)
            if speed is not None:
                record["time"]["curve"] = [dataclasses.asdict(point) for point in curve]
            if no_speed is not None:
                record["time_note"] = no_speed
        return json.dumps(record, indent=2) + "\n"
    text = render_table(served, found, verified, verdict)
    if speed is not None or no_speed is not None:
        text += f"{speed.text if speed is not None else no_speed}\n"
    if written is not None:
        text += written_text(written)
    return text


def written_text(written: Any) -> str:
    same = "equal to the byte" if written.file_bytes == written.predicted_file_bytes else "DIFFERENT"
    return (
        f"\nwritten {written.path}: {written.file_bytes:,} bytes on disk, dcsim predicted "
        f"{written.predicted_file_bytes:,} ({same}); {written.tensors_checked:,} tensors read back and checked\n"
    )
