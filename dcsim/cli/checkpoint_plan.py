"""``checkpoint-plan``: a training checkpoint planned at cluster scale before the job starts, from
the state ``memory`` lays out; nothing is saved. Its text's first line is the verdict; ``--format
json`` writes the plan's record (keys in docs/checkpoint.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag
from dcsim.cli.memory import DEFAULT_STRATEGY, training_from_args
from dcsim.cli.mesh import mesh_flags, mesh_from_args
from dcsim.inputs import number_from_text, show
from dcsim.requests.training import TRAINING


def add_parser(commands: argparse._SubParsersAction) -> None:
    from dcsim.checkpoint.plan import interval, placement, storage, writers

    command = add_command(commands, "checkpoint-plan", run)
    mesh_flags(command, "checkpoint-plan", required=True, default_strategy=DEFAULT_STRATEGY)
    TRAINING.add_arguments(command, ("optim",))
    TRAINING.add_arguments(
        command.add_argument_group("which parts are split (one of; default --zero 3)"), ("zero", "parts")
    )
    TRAINING.add_arguments(command, ("param", "grad", "master"))
    hosts = command.add_argument_group("hosts and writers")
    hosts.add_argument(
        "--devices-per-host",
        metavar="N",
        default=str(placement.DEFAULT_DEVICES_PER_HOST),
        help=f"devices a host, in mesh order (default {placement.DEFAULT_DEVICES_PER_HOST}); must divide the mesh",
    )
    hosts.add_argument(
        "--device",
        metavar="NAME",
        help="the accelerator (the serving catalog's name): its host link times an async save's copy and its "
        "platform picks Orbax's default policy",
    )
    hosts.add_argument(
        "--policy",
        metavar="POLICY",
        help="who writes a replicated shard: "
        + "; ".join(f"{name}: {text}" for name, text in writers.POLICY_HELP.items())
        + " (default: Orbax's for the device: single-replica on CUDA GPUs, else replica-parallel)",
    )
    hosts.add_argument("--min-slice-bytes", metavar="B", help="Orbax's min_slice_bytes_for_replica_parallel")
    hosts.add_argument("--max-replicas", metavar="R", help="Orbax's max_replicas_for_replica_parallel")
    store = command.add_argument_group("storage and time (estimates)")
    store.add_argument(
        "--storage",
        metavar="NAME",
        default=storage.DEFAULT_STORAGE,
        help=f"the storage: {', '.join(storage.STORAGE_NAMES)} (default {storage.DEFAULT_STORAGE})",
    )
    store.add_argument("--write-bandwidth", metavar="BW", help="a host's write bandwidth, e.g. 25GB/s or 200Gb/s")
    store.add_argument("--storage-bandwidth", metavar="BW", help="the storage's aggregate bandwidth, e.g. 65GB/s")
    store.add_argument(
        "--async", dest="asynchronous", action="store_true", help="an async save: only the device-to-host copy blocks"
    )
    store.add_argument(
        "--mttf-hours",
        metavar="H",
        default=str(interval.DEFAULT_MTTF_HOURS),
        help=f"an accelerator's mean time to failure (default {interval.DEFAULT_MTTF_HOURS:,}: {interval.MTTF_SOURCE})",
    )
    store.add_argument("--restart-seconds", metavar="S", default="0", help="a restart's overhead beside the restore")
    store.add_argument("--keep", metavar="N", default="1", help="checkpoints kept (max_to_keep; default 1)")
    restore = command.add_argument_group("restore onto another mesh")
    restore.add_argument("--restore-mesh", metavar="AXIS=SIZE[,...]", help="the mesh to restore onto")
    restore.add_argument("--restore-strategy", metavar="STRATEGY", help="its strategy (default the training's)")
    format_flag(command, ("table", "json"))


def _number(text: str, field: str, unit: str) -> float:
    value = number_from_text(text.strip()) if isinstance(text, str) else text
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field} must be a number of {unit}, got {show(text)}")
    return float(value)


def _whole(text: str | None, field: str, minimum: int) -> int | None:
    if text is None:
        return None
    value = number_from_text(text.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field} must be a whole number of at least {minimum:,}, got {show(text)}")
    return value


def request_from_args(args: argparse.Namespace, strategy: str) -> Any:
    from dcsim.checkpoint.plan import storage
    from dcsim.checkpoint.plan.plan import PlanRequest
    from dcsim.checkpoint.plan.writers import check_policy
    from dcsim.sharding import layout, meshes

    per_host = _whole(args.devices_per_host, "--devices-per-host", 1)
    base = storage.get_storage(args.storage)
    write = None if args.write_bandwidth is None else storage.parse_bandwidth(args.write_bandwidth, "--write-bandwidth")
    aggregate = (
        None
        if args.storage_bandwidth is None
        else storage.parse_bandwidth(args.storage_bandwidth, "--storage-bandwidth")
    )
    restore_mesh = None if args.restore_mesh is None else meshes.parse_mesh(args.restore_mesh)
    if args.restore_strategy is not None:
        if restore_mesh is None:
            raise UsageError("--restore-strategy needs --restore-mesh: the mesh to restore onto")
        if args.restore_strategy not in layout.STRATEGIES or args.restore_strategy == "custom":
            allowed = ", ".join(name for name in layout.STRATEGIES if name != "custom")
            raise ValueError(f"--restore-strategy must be one of {allowed}, got {show(args.restore_strategy)}")
    return PlanRequest(
        devices_per_host=per_host if per_host is not None else 8,
        device=args.device,
        policy=None if args.policy is None else check_policy(args.policy),
        storage=storage.typed_storage(base, write, aggregate),
        asynchronous=args.asynchronous,
        restore_mesh=restore_mesh,
        restore_strategy=args.restore_strategy,
        mttf_hours=_number(args.mttf_hours, "--mttf-hours", "hours"),
        restart_seconds=_number(args.restart_seconds, "--restart-seconds", "seconds"),
        keep=_whole(args.keep, "--keep", 1) or 1,
        min_slice_bytes=_whole(args.min_slice_bytes, "--min-slice-bytes", 0),
        max_replicas=_whole(args.max_replicas, "--max-replicas", 1),
    )


def run(args: argparse.Namespace) -> str:
    for flag, name in (("shards", "--shards"), ("dtype", "--dtype")):
        if getattr(args, flag) is not None:
            raise UsageError(
                f"{name} does not apply to checkpoint-plan: the mesh sets the devices (--mesh) and "
                "--param-dtype and --master-dtype the dtypes"
            )
    mesh, strategy, rules = mesh_from_args(args, DEFAULT_STRATEGY)
    setup = training_from_args(args)
    request = request_from_args(args, strategy)
    from dcsim.checkpoint.plan.placement import check_devices_per_host

    check_devices_per_host(request.devices_per_host, mesh)  # before any model is counted
    from dcsim.checkpoint.plan.plan import plan_checkpoint
    from dcsim.cli.checkpoint_plan_text import render_plan
    from dcsim.memory.state import compute_memory
    from dcsim.model.count import count_params

    config = config_from_args(args)
    report = count_params(config)
    memory = compute_memory(report, mesh, strategy, rules, setup)
    plan = plan_checkpoint(report, memory, request)
    if args.format == "json":
        return json.dumps(plan.record(), indent=2) + "\n"
    return render_plan(plan, report.total_params)
