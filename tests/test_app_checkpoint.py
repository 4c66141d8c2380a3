"""The Checkpoint page in Streamlit's AppTest: the plan, a real measurement, its cache, the guards.

Each real measurement starts a child process (seconds on two busy cores), so only one test measures
a model for real; the failures use a time limit of a fraction of a second, or a child killed right
after its save. Sizes on disk move between runs and versions: they are compared with the raw figures
the page shows, never with hard-coded values.
"""

import dataclasses
import json
import re
from pathlib import Path

import faults
import pytest
from hostile import SCRIPT
from streamlit.testing.v1 import AppTest

from conftest import metrics, open_app, shown
from dcsim.checkpoint import measurement
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.sharding.meshes import parse_mesh
from dcsim.ui import checkpoint as measuring

pytestmark = pytest.mark.slow  # measures real checkpoints from the page

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAGE = "pages/checkpoint.py"
DENSE_1024 = {"v": "1", "input_dim": "1024", "layers": "1024"}
DENSE_1024_CONFIG = ModelConfig(input_dim=1024, layers=(DenseLayer(features=1024),))
ONE = parse_mesh("data=1")
RUN = "Save, measure and restore"


@pytest.fixture(autouse=True)
def fresh_server(monkeypatch):
    """Every test starts as a fresh server would: nothing measured, the default ceiling."""
    monkeypatch.delenv(measurement.MAX_PARAMS_ENV, raising=False)
    monkeypatch.delenv(faults.FAULT_ENV, raising=False)
    measuring._reports.clear()
    measuring._plan.clear()
    yield
    assert not measuring.measurement_lock().busy


def open_page(query: dict[str, str] | None = None) -> AppTest:
    """Open the app on a link to the Checkpoint page, as a visitor's first run does."""
    return open_app(query, PAGE, editors=False, timeout=120)


def metric_help(at, label):
    return next(metric.proto.help for metric in at.metric if metric.label == label)


def texts(at, kind):
    return [shown(element) for element in at.get(kind)]


def button(at):
    return next(widget for widget in at.button if widget.label in (RUN, "Measure again"))


def exact_bytes(text):
    """``4,198,400 bytes (4.00 MiB)...`` -> 4198400."""
    return int(text.split(" bytes")[0].replace(",", ""))


# The plan at cluster scale's own row of figures (tests/test_app_plan.py reads them).
PLAN_METRICS = ("Checkpoint", "Hosts that write", "Busiest host", "Save (estimate)", "Save every (estimate)")


def measured(at) -> dict[str, str]:
    """The page's figures before the plan at cluster scale: the measurement's."""
    return {label: value for label, value in metrics(at).items() if label not in PLAN_METRICS}


def test_the_plan_for_the_default_configuration_shows_before_anything_runs():
    at = open_page()
    assert measured(at) == {"Total parameters": "20", "Raw payload (float32)": "80 bytes"}  # float32 said once
    assert "ceiling of 30,000,000 values" in texts(at, "success")[0]
    assert not at.error
    assert button(at).label == RUN and not button(at).proto.disabled
    # nothing measured yet: the only charts are the plan at cluster scale's (hosts, speedup, goodput)
    titles = [json.loads(chart.proto.spec)["title"]["text"] for chart in at.get("vega_lite_chart")]
    assert titles == [
        "Bytes each host writes (replica-parallel)",
        "Save time against hosts (estimate)",
        "Expected goodput against the interval (estimate)",
    ]
    assert (at.query_params["dtype"], at.query_params["mesh"], at.query_params["strategy"]) == (
        "float32",
        "data=1",
        "replicated",
    )


def test_bfloat16_halves_the_planned_payload_only():
    at = open_page({**DENSE_1024, "dtype": "bfloat16"})
    assert measured(at) == {"Total parameters": "1,049,600", "Raw payload (bfloat16)": "2,099,200 bytes (2.00 MiB)"}
    assert "In float32: 4,198,400 bytes (4.00 MiB)." in texts(at, "caption")
    assert "bfloat16" in metric_help(at, "Raw payload (bfloat16)")


def test_measuring_dense_1024_shows_a_verified_report_kept_for_reruns_and_other_sessions(monkeypatch):
    at = open_page(DENSE_1024)
    assert metrics(at)["Raw payload (float32)"].startswith("4,198,400 bytes")
    button(at).click().run()
    assert not at.exception
    assert not at.error
    assert any(text.startswith("Measured just now") for text in texts(at, "caption"))
    assert button(at).label == "Measure again"
    values = metrics(at)
    assert values["Restored bit for bit"] == "Yes"
    assert values["Devices"] == "1"
    disk = exact_bytes(metrics(at)["On disk"])
    largest = exact_bytes(metrics(at)["Largest file"])
    # Measured, so it differs from the estimate: compressed data plus metadata files.
    assert disk != 4_198_400
    assert 0 < largest <= disk
    assert int(values["Files"]) > 1
    assert values["Save"].endswith(" s") and values["Restore"].endswith(" s")
    (sizes_table, groups_table, files_table) = at.dataframe
    sizes = dict(zip(sizes_table.value["figure"], sizes_table.value["num_bytes"], strict=True))
    assert exact_bytes(sizes["raw_payload_bytes"]) == 4_198_400
    assert exact_bytes(sizes["disk_bytes"]) == disk
    assert sum(exact_bytes(text) for text in groups_table.value["num_bytes"]) == disk
    assert sum(int(text.replace(",", "")) for text in files_table.value["num_bytes"]) == disk
    chart = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert chart["title"]["text"] == "Checkpoint size against the raw estimate (bytes)"
    assert chart["encoding"]["y"]["sort"] == [
        "Raw float32 (estimate)",
        "Raw payload, float32 (estimate)",
        "On disk (measured)",
    ]
    explanation = " ".join(texts(at, "markdown"))
    assert "raw payload of 4,198,400" in explanation
    assert "Compression" in explanation and "File layout" in explanation
    downloads = [element.proto.label for element in at.get("download_button")]
    assert {"Sizes (CSV)", "Files (CSV)", "Whole measurement (JSON)"} <= set(downloads)

    # A rerun, a revisit and another session asking the same thing see the kept report: nothing runs.
    def must_not_run(*args, **kwargs):
        raise AssertionError("a kept report was measured again")

    monkeypatch.setattr(measurement, "run_checkpoint", must_not_run)
    at.run()
    at.switch_page("pages/model.py").run()
    at.switch_page(PAGE).run()
    other = open_page(DENSE_1024)
    for session in (at, other):
        assert not session.exception
        assert exact_bytes(metrics(session)["On disk"]) == disk
        assert any("cached: nothing was run now" in text for text in texts(session, "caption"))
        assert button(session).label == "Measure again"
    # Other settings are another measurement: nothing kept for them.
    assert "On disk" not in metrics(open_page({**DENSE_1024, "mesh": "data=2"}))

    # "Measure again" replaces the kept report for everyone (here with a stand-in for the child).
    kept = measuring.cached_report(
        DENSE_1024_CONFIG, measuring.Settings(dtype="float32", mesh=ONE, strategy="replicated")
    )
    again = dataclasses.replace(kept.report, save_seconds=98.76)
    monkeypatch.setattr(measurement, "run_checkpoint", lambda plan, on_progress: (on_progress("done"), again)[1])
    button(at).click().run()
    assert metrics(at)["Save"] == "98.76 s"
    other.run()
    assert metrics(other)["Save"] == "98.76 s"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("timeout", r"ran out of time|stopped: .*time limit of 0\.3 s"),
        ("kill", r"failed: .*killed by SIGKILL"),
        ("disk-full", r"failed: .*the temporary disk filled up while saving the checkpoint \([\d,]+ bytes free"),
    ],
    ids=["timeout", "child-killed-after-save", "temporary-disk-full"],
)
def test_a_failed_measurement_is_an_error_message_and_the_page_keeps_serving(monkeypatch, setup, message):
    if setup == "timeout":
        monkeypatch.setattr(measuring, "TIMEOUT_SECONDS", 0.3)
    elif setup == "kill":
        faults.inject(monkeypatch, "measuring:kill")
    else:
        faults.inject(monkeypatch, "fsize:65536")  # no file of the child past 64 KiB
    at = open_page(DENSE_1024)
    button(at).click().run()
    assert not at.exception
    assert any(re.search(message, text) for text in texts(at, "error")), texts(at, "error")
    assert "temporary checkpoint was removed" in " ".join(texts(at, "error"))
    assert "On disk" not in metrics(at)  # a failure is never kept
    at.run()
    assert not at.exception and button(at).label == RUN


def test_a_second_request_is_told_the_server_is_busy(monkeypatch):
    monkeypatch.setattr(measuring, "WAIT_SECONDS", 0.1)
    at = open_page(DENSE_1024)
    with measuring.measurement_lock().hold():
        at.run()
        assert any("Another measurement is running" in element.value for element in at.info)
        button(at).click().run()
    assert not at.exception
    assert any(text.startswith("Busy: another checkpoint measurement") for text in texts(at, "warning"))
    assert "try again" in texts(at, "warning")[-1]
    assert "On disk" not in metrics(at)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            {"v": "1", "input_dim": "8192", "layers": "8192"},
            "this model has 67,117,056 parameters, over the checkpoint measurement's ceiling of 30,000,000",
        ),
        (
            {"v": "1", "input_dim": "1024", "layers": "4096", "mesh": "data=8"},
            "on the mesh data=8 the replicated layout has the devices hold 33,587,200 values together",
        ),
    ],
    ids=["big-model", "replicas-over-the-ceiling"],
)
def test_a_model_over_the_ceiling_is_refused_before_anything_runs(query, message):
    at = open_page(query)
    assert message in shown(at.error[0])
    # A person in the browser has no flag to pass: the page names the server's setting, not the CLI's.
    assert "--max-params" not in shown(at.error[0])
    assert any(
        f"raise it with the environment variable `{measurement.MAX_PARAMS_ENV}`" in text
        for text in texts(at, "caption")
    )
    assert button(at).proto.disabled
    assert not at.get("success")


def test_the_ceiling_follows_the_server_environment(monkeypatch):
    monkeypatch.setenv(measurement.MAX_PARAMS_ENV, "10")
    at = open_page()  # 20 parameters
    assert "ceiling of 10 values" in shown(at.error[0])
    assert button(at).proto.disabled


@pytest.mark.parametrize(
    ("query", "warning"),
    [
        ({"dtype": "fp8"}, "`dtype` must be one of float32, bfloat16, float16, int8, float64, got 'fp8'; using"),
        ({"strategy": "tensor"}, "`strategy` must be one of replicated, fsdp on this page, got 'tensor'"),
        ({"mesh": "data=1e400"}, "mesh axis `data` needs a size"),
        ({"mesh": "data=128"}, "at most 64 virtual devices, got 128"),
        ({"mesh": "x" * 2000}, "`mesh` may be at most 512 characters"),
        ({"mesh": "[evil](http://x.example)"}, "AXIS=SIZE"),
        ({"mesh": f"{SCRIPT}=2"}, "a mesh axis name must be a letter"),
    ],
    ids=["dtype", "strategy", "huge-size", "too-many-devices", "too-long", "markdown-link", "html"],
)
def test_bad_link_settings_warn_and_fall_back(query, warning):
    at = open_page({"v": "1", **query})
    assert not at.error
    assert any(warning in text for text in texts(at, "warning")), texts(at, "warning")
    assert (at.query_params["dtype"], at.query_params["mesh"], at.query_params["strategy"]) == (
        "float32",
        "data=1",
        "replicated",
    )
    assert "<script>" not in " ".join(element.value for element in at.warning)
    assert "](" not in " ".join(element.value for element in at.warning)
    assert not button(at).proto.disabled


def test_a_repeated_link_setting_warns_and_falls_back():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["strategy"] = ["fsdp", "replicated"]
    at.switch_page(PAGE).run()
    assert not at.exception
    assert any("`strategy` appears 2 times" in text for text in texts(at, "warning"))
    assert at.query_params["strategy"] == "replicated"


def test_settings_from_a_link_and_a_typed_mesh():
    at = open_page({**DENSE_1024, "mesh": "data=2,model=2", "strategy": "fsdp", "dtype": "bfloat16"})
    assert not at.warning
    assert [box.value for box in at.selectbox] == ["dense", "bfloat16", "data=2,model=2", "fsdp", 1]  # the model first
    assert "4 virtual devices (data=2,model=2, fsdp)" in texts(at, "success")[0]
    at.selectbox[2].set_value("data=4").run()
    assert at.query_params["mesh"] == "data=4"


def test_a_disk_without_room_is_refused_with_the_figures(monkeypatch):
    real_usage = measurement.shutil.disk_usage
    monkeypatch.setattr(measurement.shutil, "disk_usage", lambda path: real_usage(path)._replace(free=1_000_000))
    at = open_page(DENSE_1024)
    button(at).click().run()
    assert not at.exception
    (error,) = texts(at, "error")
    assert re.search(
        r"failed: the temporary folder .* has 1,000,000 bytes free and this checkpoint needs about [\d,]+ "
        r"\(its raw float32 payload of 4,198,400 bytes .*nothing was written\. Free some space",
        error,
    ), error
    assert "On disk" not in metrics(at)
