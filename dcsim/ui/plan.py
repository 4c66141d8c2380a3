"""The Checkpoint page's plan at cluster scale: its settings (the checkpoint plan's request,
``dcsim.requests.checkpoint_plan``, and the Memory page's optimizer and master copy, each seeded
from the link and written back), the plan computed once per settings (bounded cache), and its
rendering: the verdict, the per-host bars with the hosts that write nothing, the speedup and
goodput curves, the restore and loss tables. Nothing is saved; times are estimates.
"""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd
import streamlit as st

from dcsim.checkpoint.plan.plan import (
    PlanRequest,
    SettingNames,
    host_runs,
    hosts_label,
    plan_checkpoint,
    seconds_text,
)
from dcsim.model.config import ModelConfig
from dcsim.quantities import units
from dcsim.report import plan_charts
from dcsim.requests import is_on
from dcsim.requests.checkpoint_plan import CHECKPOINT_PLAN, MAX_PLAN_DEVICES
from dcsim.requests.training import TRAINING
from dcsim.ui import cache, frame, state

PAGE = "checkpoint"
MAX_CACHED_PLANS = 8
# The settings a link carries, in the order the page draws them: (request, link key, label).
SETTINGS = (
    (CHECKPOINT_PLAN, "pmesh", "Training mesh"),
    (CHECKPOINT_PLAN, "pzero", "ZeRO stage"),
    (TRAINING, "optim", "Optimizer"),
    (TRAINING, "master", "Master copy"),
    (CHECKPOINT_PLAN, "dph", "Devices a host"),
    (CHECKPOINT_PLAN, "pdevice", "Accelerator"),
    (CHECKPOINT_PLAN, "policy", "Who writes"),
    (CHECKPOINT_PLAN, "storage", "Storage"),
    (CHECKPOINT_PLAN, "async", "Async save"),
    (CHECKPOINT_PLAN, "rmesh", "Restore onto mesh"),
    (CHECKPOINT_PLAN, "rdtype", "Restore dtype"),
)
COLUMNS = 6  # settings a row

_LABELS = {link: label for _, link, label in SETTINGS}
# The plan's refusals name these controls as the page labels them, never the command line's flags.
# The plan's other settings (interval, bandwidths, keep) are not on the page: it plans with their
# defaults, which it never refuses.
PAGE_NAMES = SettingNames(
    devices_per_host=f"“{_LABELS['dph']}”",
    device=f"“{_LABELS['pdevice']}”",
    asynchronous=f"“{_LABELS['async']}”",
    restore_mesh=f"“{_LABELS['rmesh']}”",
)


def _restore_mesh(text: str, name: str) -> str:
    """The restore mesh, within the page's bound as the training mesh is."""
    read = CHECKPOINT_PLAN["rmesh"].read(text, name)
    if read != "none":
        CHECKPOINT_PLAN["pmesh"].read(read, name)
    return read


def _reader(request: Any, link: str) -> Any:
    if link == "rmesh":
        return lambda text: _restore_mesh(text, link)
    return request[link].read


def settings() -> dict[str, str]:
    """Each setting's widget, seeded from the link; the values as the link writes them."""
    values = {}
    columns = [column for _ in range(0, len(SETTINGS), COLUMNS) for column in st.columns(COLUMNS)]
    for column, (request, link, label) in zip(columns[: len(SETTINGS)], SETTINGS, strict=True):
        field = request[link]
        key = frame.seeded_setting(PAGE, link, field.default, _reader(request, link), limit=field.limit)
        text = state.held(column.text_input)(label, key=key, help=frame.plain(field.meaning))
        values[link] = frame.parsed_setting(PAGE, link, str(text or ""), _reader(request, link), label)
    state.set_page_params({**st.session_state.get(state.PAGE_PARAMS, {}), **values})
    return values


@functools.lru_cache(maxsize=MAX_CACHED_PLANS)
def _plan(config_json: str, values: tuple[tuple[str, str], ...]) -> Any:
    from dcsim.checkpoint.plan import storage
    from dcsim.memory import training
    from dcsim.memory.state import compute_memory
    from dcsim.sharding import meshes

    given = dict(values)
    config = ModelConfig.from_json(config_json)
    report = cache.count(config)
    master = None if given["master"] == training.NO_MASTER else given["master"]
    setup = training.Training.stage(int(given["pzero"]), optimizer=given["optim"], master_dtype=master)
    mesh = meshes.parse_mesh(given["pmesh"])
    memory = compute_memory(report, mesh, "fsdp", (), setup, by_stage=False)
    request = PlanRequest(
        devices_per_host=int(given["dph"]),
        device=None if given["pdevice"] == "none" else given["pdevice"],
        policy=None if given["policy"] == "auto" else given["policy"],
        storage=storage.get_storage(given["storage"]),
        asynchronous=is_on(CHECKPOINT_PLAN["async"], given["async"]),
        restore_mesh=None if given["rmesh"] == "none" else meshes.parse_mesh(given["rmesh"]),
        names=PAGE_NAMES,
        restore_dtype=None if given["rdtype"] == "same" else given["rdtype"],
    )
    return plan_checkpoint(report, memory, request)


def render(config: ModelConfig) -> None:
    st.subheader("Planned at cluster scale")
    st.caption(
        "Nothing is saved: the checkpoint of the training state the Memory page lays out (params, master copy, "
        "optax's state; fsdp for the split parts), on hosts of a real cluster, by Orbax's writing rules or "
        f"PyTorch DCP's. Bytes are exact; times are estimates from the storage's stated figures. Meshes of at "
        f"most {MAX_PLAN_DEVICES:,} devices here; `checkpoint-plan` on the command line takes any."
    )
    values = settings()
    try:
        plan = _plan(config.architecture().to_json(), tuple(sorted(values.items())))
    except (TypeError, ValueError) as err:
        st.error(frame.plain(f"This plan cannot be made: {err}."), icon=":material/error:")
        return
    st.info(frame.plain(plan.verdict), icon=":material/save:")
    frame.metric_row(
        ("Checkpoint", units.decimal_bytes(plan.content.total_bytes), units.bytes_exact(plan.content.total_bytes)),
        ("Hosts that write", f"{plan.save.writing_hosts:,} of {plan.hosts.num_hosts:,}"),
        ("Busiest host", units.decimal_bytes(plan.max_host_bytes), units.bytes_exact(plan.max_host_bytes)),
        (
            "Save (estimate)",
            seconds_text(plan.save.seconds),
            f"It blocks training {seconds_text(plan.blocking_seconds)}.",
        ),
        ("Save every (estimate)", seconds_text(plan.save_every)),
    )
    st.altair_chart(plan_charts.host_bytes(plan), width="stretch")
    curve_col, goodput_col = st.columns(2)
    curve_col.altair_chart(plan_charts.speedup(plan), width="stretch")
    goodput_col.altair_chart(plan_charts.goodput(plan), width="stretch")
    restore = plan.restore
    st.markdown(
        frame.plain(
            f"Restore onto {values['rmesh'] if values['rmesh'] != 'none' else 'the saving mesh'}: read "
            f"amplification {float(restore.read_amplification):.4g} (stored bytes read over bytes held)."
            + (f" The {restore.cast_text()}." if restore.casts else "")
        )
    )
    restore_runs = host_runs(list(zip(restore.bytes_read, restore.bytes_held, strict=True)))
    st.table(
        pd.DataFrame(
            {
                "Hosts (restore mesh)": [hosts_label(first, last) for first, last, _ in restore_runs],
                "Reads, each": [units.bytes_exact(read) for _, _, (read, _) in restore_runs],
                "Holds, each": [units.bytes_exact(held) for _, _, (_, held) in restore_runs],
            }
        ).set_index("Hosts (restore mesh)")
    )
    loss_runs = host_runs(plan.loss_local.bytes_lost)
    st.table(
        pd.DataFrame(
            {
                "Hosts (saving mesh)": [hosts_label(first, last) for first, last, _ in loss_runs],
                "Lost with it under a local tier, each": [units.bytes_exact(lost) for _, _, lost in loss_runs],
            }
        ).set_index("Hosts (saving mesh)")
    )
    fewest = plan.loss_local.min_hosts_to_lose_data
    st.caption(
        frame.plain(
            "A lost host: the persistent checkpoint loses nothing (only the storage can). Under a local tier, "
            f"where each host keeps its own shards, the fewest hosts whose loss loses data: {fewest:,}."
        )
    )
