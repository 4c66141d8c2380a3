"""``checkpoint-plan``: a training checkpoint planned at cluster scale before the job starts, from
the state ``memory`` lays out; nothing is saved. Its text's first line is the verdict; ``--format
json`` writes the plan's record (keys in docs/checkpoint.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dcsim.cli.common import UsageError, add_command, config_from_args, format_flag
from dcsim.cli.memory import DEFAULT_STRATEGY, training_on_mesh_from_args
from dcsim.cli.mesh import mesh_flags
from dcsim.requests.training import TRAINING


def add_parser(commands: argparse._SubParsersAction) -> None:
    from dcsim.requests.checkpoint_plan import CHECKPOINT_PLAN

    command = add_command(commands, "checkpoint-plan", run)
    mesh_flags(command, "checkpoint-plan", required=True, default_strategy=DEFAULT_STRATEGY)
    TRAINING.add_arguments(command, ("optim",))
    TRAINING.add_arguments(
        command.add_argument_group("which parts are split (one of; default --zero 3)"), ("zero", "parts")
    )
    TRAINING.add_arguments(command, ("param", "grad", "master"))
    # The plan's flags, declared with their link keys (dcsim.requests.checkpoint_plan.CHECKPOINT_PLAN).
    groups = (
        ("hosts and writers", ("dph", "pdevice", "policy", "minslice", "maxrep")),
        ("storage and time (estimates)", ("storage", "wbw", "sbw", "async", "mttf", "restart", "keep")),
        ("restore onto another mesh or dtype", ("rmesh", "rstrategy", "rdtype")),
    )
    for title, links in groups:
        CHECKPOINT_PLAN.add_arguments(command.add_argument_group(title), links)
    format_flag(command, ("table", "json"))


def request_from_args(args: argparse.Namespace) -> Any:
    """The ``PlanRequest`` the flags describe, each read by its declared parser under its flag."""
    from dcsim.checkpoint.plan import storage, writers
    from dcsim.checkpoint.plan.plan import PlanRequest
    from dcsim.requests.checkpoint_plan import CHECKPOINT_PLAN
    from dcsim.sharding import meshes

    given = {field.link: CHECKPOINT_PLAN.from_flag(args, field.link) for field in CHECKPOINT_PLAN.fields if field.flag}
    if given["rstrategy"] is not None and given["rmesh"] is None:
        raise UsageError("--restore-strategy needs --restore-mesh: the mesh to restore onto")

    def text(link: str) -> str:
        found = given[link]
        return CHECKPOINT_PLAN[link].default if found is None else found

    def optional(link: str) -> int | None:
        found = given[link]
        return None if found is None else int(found)

    write, aggregate = (
        None if given[link] is None else storage.parse_bandwidth(given[link], field)
        for link, field in (("wbw", "--write-bandwidth"), ("sbw", "--storage-bandwidth"))
    )
    return PlanRequest(
        devices_per_host=int(text("dph")),
        device=given["pdevice"],
        policy=given["policy"],
        storage=storage.typed_storage(storage.get_storage(text("storage")), write, aggregate),
        asynchronous=given["async"] == "on",
        restore_mesh=None if given["rmesh"] is None else meshes.parse_mesh(given["rmesh"]),
        restore_strategy=given["rstrategy"],
        restore_dtype=given["rdtype"],
        mttf_hours=float(text("mttf")),
        restart_seconds=float(text("restart")),
        keep=int(text("keep")),
        slice_limits=writers.SliceLimits(min_slice_bytes=optional("minslice"), max_replicas=optional("maxrep")),
    )


def run(args: argparse.Namespace) -> str:
    mesh, strategy, rules, setup = training_on_mesh_from_args(
        args, "checkpoint-plan", "the mesh sets the devices (--mesh) and --param-dtype and --master-dtype the dtypes"
    )
    request = request_from_args(args)
    from dcsim.checkpoint.plan.placement import check_devices_per_host

    check_devices_per_host(request.devices_per_host, mesh)  # before any model is counted
    from dcsim.checkpoint.plan.plan import plan_checkpoint
    from dcsim.cli.checkpoint_plan_text import render_plan
    from dcsim.memory.state import compute_memory
    from dcsim.model.count import count_params

    config = config_from_args(args)
    report = count_params(config)
    memory = compute_memory(report, mesh, strategy, rules, setup, by_stage=False)
    plan = plan_checkpoint(report, memory, request)
    if args.format == "json":
        return json.dumps(plan.record(), indent=2) + "\n"
    return render_plan(plan, report.total_params)
