"""Charts of a real checkpoint (the Checkpoint page): its bytes on disk beside the raw estimates,
and, across processes, the save time, the bytes written and the peak memory of each process.

Built from ``dcsim.checkpoint``'s frames; the axes they share are in ``dcsim.report.chart_axes``.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from dcsim.quantities import units
from dcsim.report.chart_axes import BYTE_LABELS, as_layer, chart_data

# The checkpoint page's bars: the two estimates, then what the disk holds.
CHECKPOINT_BARS = ("raw_float32_bytes", "raw_payload_bytes", "disk_bytes")


def checkpoint_sizes(sizes: pd.DataFrame, dtype: str) -> alt.Chart:
    """A real checkpoint's bytes on disk beside the raw estimates it is compared with.

    ``sizes`` is ``dcsim.checkpoint.sizes_frame`` (``figure``, ``num_bytes``); ``dtype`` is the
    storage dtype the payload was saved in. Bars on a linear scale from zero, so lengths compare;
    tooltips carry the exact byte count.
    """
    names = {
        "raw_float32_bytes": "Raw float32 (estimate)",
        "raw_payload_bytes": f"Raw payload, {dtype} (estimate)",
        "disk_bytes": "On disk (measured)",
    }
    data = sizes[sizes["figure"].isin(CHECKPOINT_BARS)].copy()
    data["label"] = data["figure"].map(names)
    data["kind"] = ["measured" if figure == "disk_bytes" else "estimate" for figure in data["figure"]]
    data["num_bytes_text"] = data["num_bytes"].map(units.bytes_exact)
    data = data.set_index("figure").loc[list(CHECKPOINT_BARS)].reset_index()
    return (
        alt.Chart(
            data[["figure", "label", "kind", "num_bytes", "num_bytes_text"]],
            title=alt.Title("Checkpoint size against the raw estimate (bytes)", subtitle="Measured on disk by Orbax"),
        )
        .mark_bar()
        .encode(
            y=alt.Y("label:N", sort=list(data["label"]), title=None, axis=alt.Axis(labelLimit=0)),
            x=alt.X("num_bytes:Q", scale=alt.Scale(zero=True), axis=alt.Axis(title="Bytes", labelExpr=BYTE_LABELS)),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=["estimate", "measured"], range=["#9ca3af", "#1f77b4"]),
                legend=None,  # the labels say which bars are estimates
            ),
            tooltip=[
                alt.Tooltip("label:N", title="Figure"),
                alt.Tooltip("num_bytes_text:N", title="Bytes (exact)"),
            ],
        )
        .properties(
            description=(
                "Bar chart comparing the raw float32 estimate, the raw payload in the storage dtype and "
                "the bytes the checkpoint wrote to disk."
            )
        )
    )


# --- checkpoints across processes: figures against the number of processes -----------------------


def save_time_by_processes(sweep: pd.DataFrame) -> alt.LayerChart:
    """The group's save and restore wall time against the number of processes.

    ``sweep`` is ``dcsim.checkpoint.records.sweep_frame`` (``num_processes``, ``save_seconds``,
    ``restore_seconds``). The processes are categories on the x axis (1, 2, 4 are not a scale a
    reader should interpolate along); seconds from zero, so a flat line reads as no speed-up.
    """
    names = {"save_seconds": "Save", "restore_seconds": "Restore"}
    data = sweep.melt(
        id_vars=["num_processes"], value_vars=list(names), var_name="figure", value_name="seconds"
    ).assign(
        figure=lambda frame: frame["figure"].map(names),
        seconds_text=lambda frame: frame["seconds"].map("{:.3f} s".format),
    )
    base = alt.Chart(data).encode(
        x=alt.X("num_processes:O", title="Processes", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("seconds:Q", title="Wall time of the group (s)", scale=alt.Scale(zero=True)),
        color=alt.Color(
            "figure:N",
            title=None,
            sort=list(names.values()),
            scale=alt.Scale(domain=list(names.values()), range=["#1f77b4", "#9ca3af"]),
            legend=alt.Legend(orient="bottom"),
        ),
        tooltip=[
            alt.Tooltip("num_processes:O", title="Processes"),
            alt.Tooltip("figure:N", title="Figure"),
            alt.Tooltip("seconds_text:N", title="Wall time"),
        ],
    )
    return as_layer(
        alt.layer(base.mark_line(), base.mark_point(filled=True, size=60)).properties(
            title=alt.Title(
                "Save time against processes (s)", subtitle="From the first process starting to the last finishing"
            ),
            description="Line chart of the group's save and restore wall time in seconds for each number of processes.",
        )
    )


# Each per-process chart's field and texts (``charts.toml``).
_PER_PROCESS = chart_data("per_process", ("field", "title", "subtitle", "axis_title", "description"))


def _per_process_bars(frame: pd.DataFrame, chart: str) -> alt.Chart:
    """One bar per process, grouped by the run's number of processes, from zero, exact in tooltips;
    ``chart`` names its field and texts in ``charts.toml``."""
    texts = _PER_PROCESS[chart]
    field, axis_title = texts["field"], texts["axis_title"]
    data = frame.assign(
        process_name=frame["process"].map("Process {}".format),
        value_text=frame[field].map(units.bytes_exact),
    )
    names = [f"Process {n}" for n in sorted(frame["process"].unique())]
    return (
        alt.Chart(
            data[["num_processes", "process", "process_name", field, "value_text"]],
            title=alt.Title(texts["title"], subtitle=texts["subtitle"]),
        )
        .mark_bar()
        .encode(
            x=alt.X("num_processes:O", title="Processes", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("process_name:N", sort=names),
            y=alt.Y(f"{field}:Q", scale=alt.Scale(zero=True), axis=alt.Axis(title=axis_title, labelExpr=BYTE_LABELS)),
            color=alt.Color(
                "process_name:N",
                title=None,
                sort=names,
                scale=alt.Scale(scheme="tableau10"),
                legend=alt.Legend(orient="bottom", columns=2),
            ),
            tooltip=[
                alt.Tooltip("num_processes:O", title="Processes"),
                alt.Tooltip("process_name:N", title="Process"),
                alt.Tooltip("value_text:N", title=axis_title),
            ],
        )
        .properties(description=texts["description"])
    )


def bytes_per_process(per_process: pd.DataFrame) -> alt.Chart:
    """Bytes each process wrote, grouped by the number of processes
    (``dcsim.checkpoint.records.sweep_processes_frame``)."""
    return _per_process_bars(per_process, "bytes_per_process")


def memory_per_process(per_process: pd.DataFrame) -> alt.Chart:
    """Each process's peak resident memory, grouped by the number of processes."""
    return _per_process_bars(per_process, "memory_per_process")
