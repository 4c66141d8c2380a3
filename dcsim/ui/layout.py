"""The Layout page's settings, tables and cached layout computations.

Settings arrive as text (a link's ``mesh``, ``strategy`` and ``rules``, or the page's widgets) and
are parsed by ``dcsim.sharding.layout`` only: this module never decides what a mesh or a rule may be. In a
link, rules are one ``PATTERN=SPEC`` per line, joined by a newline (``%0A``): a pattern is
printable text, so a newline can never be part of one, and the text area shows the same lines.

A request the engine refuses is kept as an ``Outcome`` with the engine's message, and with the
arrays it could place laid out on their own, so the page shows what can be shown instead of
nothing. Outcomes are cached (bounded) on text: the configuration's JSON, the mesh, the strategy
and the rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pandas as pd
import streamlit as st

from dcsim.inputs import show
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import units
from dcsim.report import layout_charts
from dcsim.sharding import layout, meshes
from dcsim.sharding.layout import LayoutReport
from dcsim.ui import cache, frame, state

RULES_SEPARATOR = "\n"
MAX_RULES_TEXT = 4096  # a link stays well under the 4-8 KB proxies commonly allow
DEFAULT_MESH = "data=2,model=2"
DEFAULT_STRATEGY = "fsdp"
DEFAULT_RULES = "*/kernel=data,model\n*/bias=model"
MAX_CACHED_LAYOUTS = 256
MAX_CACHED_SWEEPS = 64
SWEEP_DEVICES = tuple(2**power for power in range(13))  # 1 to 4,096 devices
# Each strategy swept over a one-axis mesh it can use: tensor needs the axis named `model`.
SWEEP_MESHES = (("replicated", "data"), ("fsdp", "data"), ("tensor", layout.TENSOR_AXIS))

STRATEGY_HELP = {  # shown under the strategy's name, so each says what it does as a sentence
    "replicated": "Every device holds every array whole (with an `expert` axis, expert arrays have their experts "
    "split over it).",
    "fsdp": "Each array is split along its largest evenly dividing dimension over all devices (with an `expert` "
    "axis, expert arrays: their experts over it, the largest other dimension over the other axes).",
    "tensor": "Each array's last dimension is split over the `model` axis and copied over the others (with an "
    "`expert` axis, expert arrays also have their experts split over it).",
    "megatron": "Megatron-LM's tensor parallelism as vLLM serves it, over the `model` axis: query, key and value "
    "heads and MLP columns split, the output and down projections on their inputs, the vocabulary padded to a "
    "multiple of 64 and split, KV heads copied when fewer than the ranks; norms and the rest replicated.",
    "custom": "Your PATTERN=SPEC rules, first match wins; unmatched arrays are replicated.",
}
MESH_HELP = (
    "Named axes of the device mesh and their sizes, e.g. `data=4,model=2` (8 devices). "
    f"At most {meshes.MAX_MESH_AXES} axes and {meshes.MAX_MESH_DEVICES:,} devices; the tensor and megatron "
    f"strategies need an axis named `{layout.TENSOR_AXIS}`. An axis named `{layout.EXPERT_AXIS}` "
    "(e.g. `data=2,expert=8`) splits the experts of Mixture-of-Experts blocks (expert parallelism) and is one "
    "more data axis for every other array."
)

# Status of a row in the per-array table.
SPLIT = "split"
REPLICATED = "replicated"
FALLBACK = "replicated (fallback)"
IMPOSSIBLE = "cannot be placed"
NOT_LAID_OUT = "not laid out"
STATUS_COLUMN_WIDTH = 190  # pixels: "⚠ replicated (fallback)", the longest status, with its padding


def mesh_input(key: str) -> str:
    """The mesh's text box, its state under ``key``."""
    return state.held(st.text_input)(
        "Mesh: AXIS=SIZE, comma separated",
        key=key,
        max_chars=meshes.MAX_MESH_CHARS,
        placeholder="data=4,model=2",
        help=MESH_HELP,
    )


def mesh_and_strategy(
    page: str,
    *,
    strategy_help: str,
    strategy_label: str = "Strategy",
    default_mesh: str = DEFAULT_MESH,
    default_strategy: str = DEFAULT_STRATEGY,
) -> tuple[meshes.MeshSpec, str, Any, Any]:
    """The mesh box and the strategy list side by side, as ``page``'s settings ``mesh`` and
    ``strategy`` (``frame.seeded_setting``): the mesh (after a bad edit, the last valid one), the
    strategy, and the two columns, for what the page shows under each (``Any``: Streamlit's column
    class lives in a private module)."""
    mesh_col, strategy_col = st.columns([3, 2])
    with mesh_col:
        mesh_text = mesh_input(
            frame.seeded_setting(page, "mesh", default_mesh, meshes.parse_mesh, limit=meshes.MAX_MESH_CHARS)
        )
    with strategy_col:
        strategy = state.held(st.selectbox)(
            strategy_label,
            layout.STRATEGIES,
            key=frame.seeded_setting(page, "strategy", default_strategy, parse_strategy, limit=32),
            help=strategy_help,
        )
        st.caption(STRATEGY_HELP[strategy])
    return frame.parsed_setting(page, "mesh", mesh_text, meshes.parse_mesh, "Mesh"), strategy, mesh_col, strategy_col


def rules_input(
    page: str, strategy: str, *, help: str | None = None, height: int | None = None
) -> tuple[meshes.Rule, ...]:
    """The custom strategy's rules, as ``page``'s setting ``rules``: a text area shown only for
    ``custom`` (no rules otherwise); after a bad edit, the last valid rules."""
    if strategy != "custom":
        return ()
    text = state.held(st.text_area)(
        "Custom rules: one PATTERN=SPEC a line, first match wins",
        key=frame.seeded_setting(page, "rules", DEFAULT_RULES, parse_rules_text, limit=MAX_RULES_TEXT),
        max_chars=MAX_RULES_TEXT,
        height=height,
        help=help,
    )
    return frame.parsed_setting(page, "rules", text, parse_rules_text, "Rules")


def rule_lines(text: str) -> list[str]:
    """The non-empty lines of a rules text area, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_rules_text(text: str) -> tuple[meshes.Rule, ...]:
    """Rules from text with one ``PATTERN=SPEC`` a line; raises ValueError naming what is wrong."""
    if len(text) > MAX_RULES_TEXT:
        raise ValueError(f"the rules may be at most {MAX_RULES_TEXT:,} characters in all, got {len(text):,}")
    rules = meshes.parse_rules(rule_lines(text))
    if not rules:
        raise ValueError("the custom strategy needs at least one PATTERN=SPEC rule, e.g. */kernel=None,model")
    return rules


def rules_text(rules: tuple[meshes.Rule, ...]) -> str:
    """Rules as the text area and the link hold them: one ``PATTERN=SPEC`` a line."""
    return RULES_SEPARATOR.join(rule.text for rule in rules)


def parse_strategy(text: str) -> str:
    if text not in layout.STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(layout.STRATEGIES)}; got {show(text)}")
    return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """A layout request's result.

    Attributes:
      layout: the whole layout, when every array can be placed.
      error: the engine's one-line refusal otherwise.
      problems: ``(path, message)`` of every array that cannot be placed (empty when the request
        as a whole was refused, e.g. ``tensor`` on a mesh without ``model``).
      placed: the arrays that can be placed, laid out on their own, when only some cannot.
    """

    layout: LayoutReport | None = None
    error: str | None = None
    problems: tuple[tuple[str, str], ...] = ()
    placed: LayoutReport | None = None


def lay_out(report: ParamReport, mesh: meshes.MeshSpec, strategy: str, rules: tuple[meshes.Rule, ...] = ()) -> Outcome:
    """``compute_layout``, with a refusal kept as an Outcome instead of raised."""
    try:
        return Outcome(layout=layout.compute_layout(report, mesh, strategy, rules))
    except layout.LayoutError as err:
        refused = {path for path, _ in err.problems}
        rest = ParamReport(arrays=tuple(row for row in report.arrays if row.path not in refused))
        placed = layout.compute_layout(rest, mesh, strategy, rules) if rest.arrays else None
        return Outcome(error=str(err), problems=err.problems, placed=placed)
    except ValueError as err:
        return Outcome(error=str(err))


@st.cache_data(max_entries=MAX_CACHED_LAYOUTS, show_spinner=False)
def _cached_layout(config_json: str, mesh_text: str, strategy: str, rules: str) -> Outcome:
    report = cache.count(ModelConfig.from_json(config_json))
    return lay_out(report, meshes.parse_mesh(mesh_text), strategy, parse_rules_text(rules) if rules else ())


def cached_layout(
    config: ModelConfig, mesh: meshes.MeshSpec, strategy: str, rules: tuple[meshes.Rule, ...] = ()
) -> Outcome:
    """``lay_out`` of the configuration, cached per (configuration, mesh, strategy, rules) text."""
    return _cached_layout(
        config.architecture().to_json(), mesh.text, strategy, rules_text(rules) if strategy == "custom" else ""
    )


def array_table(report: ParamReport, outcome: Outcome) -> pd.DataFrame:
    """One row per parameter array, in model order: path, status, shape, partition_spec,
    shard_shape, values_per_shard, replication_factor, stored_values, note.

    Counts are exact ints (``None`` where the array has no layout); ``status`` is ``split``,
    ``replicated``, ``replicated (fallback)`` (the strategy had to copy it), ``cannot be placed``
    (the engine's message in ``note``) or ``not laid out`` (the whole request was refused).
    """
    laid = outcome.layout or outcome.placed
    rows = {row.path: row for row in laid.arrays} if laid else {}
    problems = dict(outcome.problems)
    records = []
    for array in report.arrays:
        row = rows.get(array.path)
        record: dict[str, Any] = {"path": array.path, "shape": "x".join(map(str, array.shape)) or "scalar"}
        if row is not None:
            if row.replicated_fallback:
                status = FALLBACK
            elif all(entry is None for entry in row.spec):
                status = REPLICATED
            else:
                status = SPLIT
            record |= {
                "partition_spec": row.partition_spec,
                "shard_shape": "x".join(map(str, row.shard_shape)) or "scalar",
                "values_per_shard": row.values_per_shard,
                "replication_factor": row.replication_factor,
                "stored_values": row.stored_values,
                "status": status,
                "note": row.note,
            }
        else:
            impossible = array.path in problems
            record |= {
                "partition_spec": "",
                "shard_shape": "",
                "values_per_shard": None,
                "replication_factor": None,
                "stored_values": None,
                "status": IMPOSSIBLE if impossible else NOT_LAID_OUT,
                "note": problems[array.path] if impossible else (outcome.error or ""),
            }
        records.append(record)
    columns = [
        "path",
        "status",
        "shape",
        "partition_spec",
        "shard_shape",
        "values_per_shard",
        "replication_factor",
        "stored_values",
        "note",
    ]
    frame = pd.DataFrame(records, columns=columns)
    for column in ("values_per_shard", "replication_factor", "stored_values"):
        frame[column] = pd.array(list(frame[column]), dtype="Int64") if len(frame) else frame[column]
    return frame


def strategy_frame(
    config: ModelConfig, mesh: meshes.MeshSpec, rules: tuple[meshes.Rule, ...], chosen: str | None = None
) -> pd.DataFrame:
    """Values per device of every strategy on this mesh (custom only with rules, megatron only when
    ``chosen``: a serving layout, shown beside the others when asked for), beside the ideal share:
    strategy, values_per_device (None when refused), values_text, ideal_share, ideal_share_text,
    status (the refusal, or ``ok``)."""
    report = cache.count(config)
    share = Fraction(report.total_params, mesh.num_devices)
    records = []
    for strategy in layout.STRATEGIES:
        if (strategy == "custom" and not rules) or (strategy == "megatron" and chosen != "megatron"):
            continue
        outcome = cached_layout(config, mesh, strategy, rules if strategy == "custom" else ())
        values = outcome.layout.values_per_device if outcome.layout else None
        records.append(
            {
                "strategy": strategy,
                "values_per_device": values,
                "values_text": units.count(values) if values is not None else "cannot be laid out",
                "ideal_share": float(share),
                "ideal_share_text": units.share(share),
                "status": "ok" if outcome.layout else outcome.error,
            }
        )
    frame = pd.DataFrame(records)
    frame["values_per_device"] = pd.array(list(frame["values_per_device"]), dtype="Int64")
    return frame


def sweep_frame(report: ParamReport) -> pd.DataFrame:
    """Values per device of replicated and fsdp over ``data=N``, tensor over ``model=N``, and the
    ideal share, for N = 1, 2, 4 ... 4,096: devices, series, values_per_device (float, for
    position), values_text (exact). Points a strategy refuses are left out."""
    records = []
    for devices in SWEEP_DEVICES:
        share = Fraction(report.total_params, devices)
        records.append(
            {
                "devices": devices,
                "series": layout_charts.IDEAL_SERIES,
                "values_per_device": float(share),
                "values_text": units.share(share),
            }
        )
        for strategy, axis in SWEEP_MESHES:
            outcome = lay_out(report, meshes.MeshSpec(((axis, devices),)), strategy)
            if outcome.layout is None:
                continue
            values = outcome.layout.values_per_device
            records.append(
                {
                    "devices": devices,
                    "series": f"{strategy} ({axis}=N)",
                    "values_per_device": float(values),
                    "values_text": units.count(values),
                }
            )
    return pd.DataFrame(records, columns=["devices", "series", "values_per_device", "values_text"])


@st.cache_data(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def _cached_sweep(config_json: str) -> pd.DataFrame:
    return sweep_frame(cache.count(ModelConfig.from_json(config_json)))


def cached_sweep(config: ModelConfig) -> pd.DataFrame:
    """``sweep_frame`` of the configuration, cached per configuration."""
    return _cached_sweep(config.architecture().to_json())


def experts_caption(report: ParamReport, mesh: meshes.MeshSpec) -> str | None:
    """What the mesh's ``expert`` axis does to this model (``layout.experts_note``); None without one."""
    return layout.experts_note(mesh, layout.num_expert_arrays(report))


def fallback_warning(laid: LayoutReport) -> str:
    """Why some arrays are flagged as replicated by necessity, in one sentence for the page."""
    copied = "replicated on every device instead"
    if any(row.replicated_fallback and len(row.spec) for row in laid.arrays):  # split over `expert` only
        copied = f"replicated instead (expert arrays: over every axis but `{layout.EXPERT_AXIS}`)"
    return (
        f"{laid.num_replicated_fallbacks:,} of {len(laid.arrays):,} arrays could not be split as the "
        f"{laid.strategy} strategy asks and are {copied}; they are flagged “{FALLBACK}” in the table below, "
        "with the reason."
    )


def mesh_frame(mesh: meshes.MeshSpec) -> pd.DataFrame:
    """The mesh's axes as a readable table: axis, size (text with separators)."""
    return pd.DataFrame({"axis": list(mesh.names), "size": [units.count(size) for size in mesh.sizes]})


_FLAGS = {FALLBACK: "⚠ ", IMPOSSIBLE: "✖ ", NOT_LAID_OUT: "✖ "}
MAX_PATHS_NAMED = 3  # arrays named in a reason; the table lists every one
MAX_REASONS_SHOWN = 12  # distinct reasons written out under the table; the rest are in its Why column


def flagged_reasons(table: pd.DataFrame) -> pd.DataFrame:
    """The reasons behind the flagged rows of ``array_table``, once each: status, note,
    num_arrays and paths (the first ``MAX_PATHS_NAMED``), in the order they first appear.

    A reason is one sentence for many arrays (every block repeats the same shapes), and it is
    long; a table cell cuts it, so the page writes these out in full under the table.
    """
    flagged = table[table["status"].isin(list(_FLAGS))]
    # The engine names the array in its message; named generically, arrays of one shape share one.
    pairs = zip(flagged["path"], flagged["note"], strict=True)
    generic = [note.replace(f"`{path}`", "the array") for path, note in pairs]
    flagged = flagged.assign(note=generic)
    groups = flagged.groupby(["status", "note"], sort=False)["path"]
    return pd.DataFrame(
        [
            {"status": status, "note": note, "num_arrays": len(paths), "paths": list(paths[:MAX_PATHS_NAMED])}
            for (status, note), paths in groups
        ],
        columns=["status", "note", "num_arrays", "paths"],
    )


def reason_text(reason: Any, num_arrays: int) -> str:
    """A row of ``flagged_reasons`` in words, e.g. ``⚠ Replicated (fallback), 80 of 723 arrays
    (block_0/attn/query/kernel, …): no dimension of 8192x64x128 splits evenly into 3 parts.``"""
    count = (
        f"all {units.count(num_arrays)}"
        if reason.num_arrays == num_arrays
        else (f"{units.count(reason.num_arrays)} of {units.count(num_arrays)}")
    )
    named = (
        ""
        if reason.num_arrays == num_arrays
        else (" (" + ", ".join(reason.paths) + (", …" if reason.num_arrays > len(reason.paths) else "") + ")")
    )
    note = reason.note.removeprefix("replicated: ") if reason.status == FALLBACK else reason.note
    return (
        f"{_FLAGS[reason.status]}{reason.status.capitalize()}, {count} arrays{named}: "
        f"{note[:1].upper()}{note[1:]}{'' if note.endswith('.') else '.'}"
    )


def table_text(table: pd.DataFrame) -> pd.DataFrame:
    """``array_table`` for the screen: counts as exact text with separators (blank where an array
    has no layout), flagged statuses marked with a sign."""

    def counts(value: Any) -> str:
        return "" if pd.isna(value) else units.count(int(value))

    return table.assign(
        **{column: table[column].map(counts) for column in ("values_per_shard", "replication_factor", "stored_values")},
        status=table["status"].map(lambda status: _FLAGS.get(status, "") + status),
    )


MAX_MESH_TRIES = 24  # one layout each (cached), the nearest first: bounds a run's work when nothing near is taken


def nearest_mesh(mesh: meshes.MeshSpec, accepts: Callable[[meshes.MeshSpec], bool]) -> meshes.MeshSpec | None:
    """The mesh nearest ``mesh`` that ``accepts`` takes, one axis's size changed (from 1 to twice
    its size): the nearer size first, the smaller of two as near, the axes in the mesh's order.
    None when none of the first ``MAX_MESH_TRIES`` is taken."""
    tries = sorted(
        (abs(size - asked), size > asked, index, size)
        for index, (_, asked) in enumerate(mesh.axes)
        for size in range(1, 2 * asked + 1)
        if size != asked
    )
    for _, _, index, size in tries[:MAX_MESH_TRIES]:
        axes = list(mesh.axes)
        axes[index] = (axes[index][0], size)
        try:
            candidate = meshes.MeshSpec(tuple(axes))
        except ValueError:  # past the devices a mesh may have
            continue
        if accepts(candidate):
            return candidate
    return None


def offer_mesh(
    where: Any,
    page: str,
    config: ModelConfig,
    mesh: meshes.MeshSpec,
    accepts: Callable[[meshes.MeshSpec], bool],
    *,
    rerun: Callable[[], None] | None = None,
) -> None:
    """When ``accepts`` refuses ``mesh`` (after a switch of model, a `model` axis that no longer
    divides the heads), one click to the nearest mesh it takes (``nearest_mesh``), in ``where``;
    ``rerun`` as ``frame.offer``'s (``st.rerun`` from inside a fragment: the mesh is outside it)."""
    if accepts(mesh):
        return
    nearest = nearest_mesh(mesh, accepts)
    if nearest is None:
        return
    frame.offer(
        where,
        f"Use {nearest.text}, the nearest mesh this model takes",
        {frame.setting_key(page, "mesh"): nearest.text},
        help=f"{mesh.text} cannot lay {frame.describe(config)} out; {nearest.text} changes one axis's size.",
        rerun=rerun,
    )


def lays_out(
    config: ModelConfig, strategy: str, rules: tuple[meshes.Rule, ...] = ()
) -> Callable[[meshes.MeshSpec], bool]:
    """Whether the configuration's every array can be placed on a mesh under ``strategy``."""
    return lambda mesh: cached_layout(config, mesh, strategy, rules).error is None
