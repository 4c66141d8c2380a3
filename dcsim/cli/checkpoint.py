"""``checkpoint``: a real Orbax save, measured and restored in a child process, or from several
processes on JAX's distributed runtime (``--processes``, ``--processes-sweep``).

The single-process command's child is started before anything heavy is imported
(``dcsim.checkpoint.prestart``) and the parent's time is on the way to its request, so the parent
imports only what its plan needs (JAX and Flax, for the count and the layout): its record and its
two tables are built without pandas, which only the several-process tables import."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dcsim.checkpoint import measurement, multiprocess, prestart, records, results
from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag, frame_text, rows_text
from dcsim.cli.mesh import mesh_flags, strategy_from_args
from dcsim.quantities import units
from dcsim.sharding import meshes

if TYPE_CHECKING:
    import pandas as pd

    from dcsim.checkpoint import disk


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = add_command(commands, "checkpoint", run)
    mesh_flags(command, "checkpoint")
    command.add_argument(
        "--max-params",
        metavar="N",
        help=f"ceiling on the values all devices hold, replicas included (default {measurement.DEFAULT_MAX_PARAMS:,}, "
        f"or ${measurement.MAX_PARAMS_ENV})",
    )
    command.add_argument(
        "--timeout",
        metavar="SECONDS",
        default=measurement.DEFAULT_TIMEOUT_SECONDS,
        help=f"time limit (default {measurement.DEFAULT_TIMEOUT_SECONDS:g})",
    )
    command.add_argument(
        "--processes",
        metavar="P",
        help=f"save from P processes at once on JAX's distributed runtime over loopback, 1 to "
        f"{multiprocess.MAX_PROCESSES}; each holds N/P of the mesh's N devices",
    )
    command.add_argument(
        "--processes-sweep",
        metavar="P1,P2,...",
        help="the same measurement for each process count, side by side, e.g. 1,2,4 (the mesh's device count "
        "must be a multiple of each)",
    )
    command.add_argument(
        "--policy",
        choices=multiprocess.ORBAX_POLICIES,
        help="with --processes or --processes-sweep: save under this Orbax policy (ArrayHandler's "
        "use_replica_parallel), zstd off, and compare each process's stored bytes with the plan's "
        "prediction, made before it saves",
    )
    format_flag(command)


def render_checkpoint_table(report: results.CheckpointReport) -> str:
    """The ``checkpoint`` result for people: sizes beside the raw estimates, files, timings, why.
    Without pandas, which only the several-process tables use."""
    sizes = records.sizes_columns(report)
    sizes = {
        "figure": sizes["figure"],
        "num_bytes": sizes["num_bytes"],
        "size": [units.binary_bytes(n) for n in sizes["num_bytes"]],
        "what": sizes["what"],
    }
    lines = [
        _heading(report, f" ({units.many(report.num_devices, 'device')})"),
        "",
        rows_text(sizes, records.SIZES_COUNTS),
        "",
        rows_text(records.file_groups_columns(report), records.FILE_GROUPS_COUNTS),
        "",
        f"init {report.init_seconds:.3f} s (XLA compilation cache: {report.compilation_cache}) · "
        f"save {report.save_seconds:.3f} s · restore {report.restore_seconds:.3f} s",
        f"restore verified bit for bit: {'yes' if report.restore_verified else 'NO'}",
        f"child peak memory {units.binary_bytes(report.peak_rss_bytes)} "
        f"(idle baseline {units.binary_bytes(report.baseline_rss_bytes)})",
        "",
        *records.explain(report),
    ]
    return "\n".join(lines) + "\n"


def _measurement_options(args: argparse.Namespace, dtype: str) -> measurement.MeasurementOptions:
    """The checkpoint flags as one ``MeasurementOptions``, the flags' own values checked here so a
    refusal names the flag (``--max-params``, ``--timeout``)."""
    return measurement.MeasurementOptions(
        dtype=dtype,
        mesh=args.mesh,
        strategy=strategy_from_args(args, "replicated"),
        rules=meshes.parse_rules(args.rule),
        max_params=None if args.max_params is None else measurement.parse_max_params(args.max_params, "--max-params"),
        timeout_seconds=measurement.check_timeout(args.timeout, "--timeout"),
    )


def run(args: argparse.Namespace) -> str:
    try:
        return _run(args)
    except measurement.OverCeiling as err:
        raise UsageError(f"{err}; raise the ceiling with --max-params or {measurement.MAX_PARAMS_ENV}") from None


def _run(args: argparse.Namespace) -> str:
    if args.processes is not None or args.processes_sweep is not None:
        return _checkpoint_processes(args)
    if args.policy is not None:
        raise UsageError(
            f"--policy checks the plan against a save from several processes: it needs --processes or "
            f"--processes-sweep, got --policy {args.policy} alone"
        )
    config = config_from_args(args)
    waiting = prestart.pending()
    if waiting is not None:  # the child traces the init while this process counts and lays it out
        waiting.preview(config.to_dict(), config.dtype)
    report = measurement.measure_checkpoint(config, _measurement_options(args, config.dtype), prestarted=waiting)
    if args.format == "json":
        return json.dumps(records.checkpoint_record(report), indent=2) + "\n"
    return render_checkpoint_table(report)


def _checkpoint_processes(args: argparse.Namespace) -> str:
    if args.processes is not None and args.processes_sweep is not None:
        raise UsageError("--processes and --processes-sweep: choose one")
    if args.processes_sweep is not None:
        counts = multiprocess.parse_processes_list(args.processes_sweep, "--processes-sweep")
    else:
        counts = (multiprocess.check_processes(args.processes, "--processes"),)
    config = config_from_args(args)
    options = _measurement_options(args, config.dtype)
    plans = multiprocess.plan_sweep(config, options, processes=counts)
    if args.policy is not None:  # predicted before any process starts
        # The plan's prediction lays the state out as memory does (optax, pandas): only when asked,
        # so a plain measurement's parent stays light (tests/test_prestart.py).
        from dcsim.checkpoint.plan import verify

        plans = tuple(verify.with_prediction(plan, args.policy, options.rules) for plan in plans)
    reports = multiprocess.run_sweep(plans)
    if args.processes_sweep is None:
        if args.format == "json":
            return json.dumps(records.multiprocess_record(reports[0]), indent=2) + "\n"
        return render_processes_table(reports[0])
    # The sweep's times predicted from this disk, probed once the groups have ended (not beside them).
    from dcsim.checkpoint import disk

    probe = disk.probe_disk(disk.probe_bytes(reports[0].checkpoint.disk_bytes))
    if args.format == "json":
        sweep = [records.multiprocess_record(r) for r in reports]
        return json.dumps({"sweep": sweep, "on_this_machine": on_this_machine_record(reports, probe)}, indent=2) + "\n"
    return render_sweep_table(reports, probe)


def _for_people(frame: pd.DataFrame) -> pd.DataFrame:
    """Seconds to the millisecond, and whether the restore was verified as yes or NO."""
    shown = frame.assign(**{name: frame[name].map("{:.3f}".format) for name in frame.columns if "seconds" in name})
    if "restore_verified" in shown.columns:
        shown["restore_verified"] = shown["restore_verified"].map({True: "yes", False: "NO"})
    return shown


def _heading(report: results.CheckpointReport, held: str) -> str:
    """The first line: what was measured, and how the devices were held."""
    return (
        f"checkpoint of {units.count(report.total_params)} parameters as {report.dtype}, mesh {report.mesh}{held}, "
        f"strategy {report.strategy}, Orbax {report.orbax_version}"
    )


def render_processes_table(report: results.MultiprocessReport) -> str:
    """``checkpoint --processes P`` for people: the group's totals, each process, files by place, why."""
    totals = report.checkpoint
    processes = _for_people(records.processes_frame(report))
    processes["peak_rss"] = [units.binary_bytes(n) for n in processes["peak_rss_bytes"]]
    lines = [
        _heading(totals, f", {report.num_processes} processes x {units.many(report.devices_per_process, 'device')}"),
        "",
        *records.prediction_lines(report),
        f"raw payload        {units.bytes_exact(totals.raw_payload_bytes)}",
        f"on disk            {units.bytes_exact(totals.disk_bytes)} in {units.count(totals.num_files)} files",
        f"save (group wall)  {totals.save_seconds:.3f} s · restore {totals.restore_seconds:.3f} s",
        f"restore verified bit for bit on every process: {'yes' if totals.restore_verified else 'NO'}",
        f"peak memory        {units.binary_bytes(max(p.peak_rss_bytes for p in report.processes))} per process at "
        f"most, {units.binary_bytes(report.total_peak_rss_bytes)} together",
        f"machine            {units.many(report.cpu_count, 'CPU core')}, load average {report.load_average:.2f}",
        "",
        frame_text(processes),
        "",
        frame_text(records.file_places_frame(report)),
        "",
        *records.explain_processes(report),
        *records.explain_prediction(report),
        *records.explain(totals, compressed=report.policy is None),
        "",
        records.MULTIHOST_NOTE,
    ]
    return "\n".join(lines) + "\n"


def on_this_machine_record(reports: Sequence[results.MultiprocessReport], probe: disk.DiskProbe) -> dict[str, object]:
    """The sweep's save times predicted from this disk's probe, beside the measured ones."""
    from dcsim.checkpoint.plan import verify

    return verify.on_this_machine_record(reports, probe)


def render_on_this_machine(reports: Sequence[results.MultiprocessReport], probe: disk.DiskProbe) -> tuple[str, ...]:
    from dcsim.checkpoint.plan import verify

    lines = [
        f"On this machine (estimate): the plan's storage model with this disk as measured here: "
        f"{verify.describe_disk(probe)}",
    ]
    for time in verify.predict_sweep_times(reports, probe):
        lines.append(
            f"  P = {time.num_processes}: predicted {time.predicted_seconds:.4f} to "
            f"{time.predicted_seconds_high:.4f} s ({time.limit}), measured {time.measured_seconds:.3f} s: "
            f"{time.ratio:,.1f}x the prediction"
        )
    lines.append(f"  not modelled: {verify.sweep_leaves_out(reports)}")
    return (*lines, "")


def render_sweep_table(reports: Sequence[results.MultiprocessReport], probe: disk.DiskProbe | None = None) -> str:
    """``checkpoint --processes-sweep`` for people: one row per process count, then each run's
    processes, then (with this disk's ``probe``) the storage model's times beside the measured ones."""
    first = reports[0].checkpoint
    lines = [
        _heading(first, "")
        + f"; {units.many(reports[-1].cpu_count, 'CPU core')}, load average {reports[-1].load_average:.2f}",
        "",
        frame_text(_for_people(records.sweep_frame(reports))),
        "",
        frame_text(_for_people(records.sweep_processes_frame(reports))),
        "",
        *(_sweep_prediction(reports)),
        *(render_on_this_machine(reports, probe) if probe is not None else ()),
        records.MULTIHOST_NOTE,
    ]
    return "\n".join(lines) + "\n"


def _sweep_prediction(reports: Sequence[results.MultiprocessReport]) -> tuple[str, ...]:
    """One line for a sweep saved under a policy: whether every run's prediction matched."""
    if reports[0].policy is None:
        return ()
    missed = ", ".join(str(r.num_processes) for r in reports if not r.prediction_matches)
    verdict = f"DOES NOT MATCH for P = {missed}" if missed else "matches for every process count"
    return (
        f"policy {reports[0].policy}, zstd off: the plan's prediction {verdict} (predicted_bytes against the "
        "chunk_bytes each process stored, above)",
        "",
    )
