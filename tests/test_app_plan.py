"""The Checkpoint page's plan at cluster scale in Streamlit's AppTest: the figures it shows for a
link, every setting written back to the link, and a bad link value named and replaced. Nothing is
measured: the plan starts no process."""

import pytest

from conftest import open_app, shown
from dcsim.checkpoint.plan import content as contents
from dcsim.quantities import units

pytestmark = pytest.mark.slow  # AppTest runs of the whole Checkpoint page

PAGE = "pages/checkpoint.py"
MLP = {"v": "1", "input_dim": "8", "layers": "16_4"}
DDP = {**MLP, "pmesh": "data=32", "pzero": "0", "pdevice": "h100-sxm"}


PLAN_METRICS = ("Checkpoint", "Hosts that write", "Busiest host", "Save (estimate)", "Save every (estimate)")


def plan_figures(at) -> dict[str, str]:
    """The plan's figures, from its row of metrics: the exact bytes where the help gives them."""
    return {
        m.label: m.help if m.label in ("Checkpoint", "Busiest host") else m.value
        for m in at.metric
        if m.label in PLAN_METRICS
    }


def test_a_replicated_state_on_gpus_has_host_0_write_everything():
    at = open_app({**DDP, "rdtype": "float32"}, PAGE, editors=False, timeout=120)
    figures = plan_figures(at)
    assert figures["Hosts that write"] == "1 of 4"
    # Adam on bfloat16 params, no master copy: 424 + 2 x 424 + 4 bytes (the int32 step count)
    total = 424 + 2 * 424 + 4
    assert figures["Checkpoint"] == figures["Busiest host"] == units.bytes_exact(total)
    loss = at.table[-1].value
    assert list(loss.index) == ["hosts 0-3"]  # every host holds a copy: a local tier loses nothing
    assert loss.iloc[0, 0] == units.bytes_exact(0)
    verdict = next(shown(info) for info in at.info if "checkpoint, 1 of 4 hosts write" in shown(info))
    assert "under single-replica (3 write nothing)" in verdict
    assert len(at.get("vega_lite_chart")) >= 3  # hosts, speedup, goodput (and the page's own charts)
    # The restore into float32 params casts the bfloat16 params and Adam's bfloat16 moments, as asked.
    restore = next(shown(text) for text in at.markdown if "read amplification" in shown(text))
    assert "cast on restore, as asked with --restore-dtype: params bfloat16 -> float32, optimizer bfloat16" in restore
    settings = {"pmesh": "data=32", "pzero": "0", "pdevice": "h100-sxm", "policy": "auto", "rdtype": "float32"}
    for key, value in settings.items():
        assert at.query_params[key] == value


def test_a_bad_link_value_is_named_and_the_default_used():
    wide = {"v": "1", "input_dim": "64", "layers": "64"}  # 64x64 and 64: fsdp splits both over 64 devices
    at = open_app(
        {**wide, "pmesh": "data=1048576", "policy": "fast", "rdtype": "fp7"}, PAGE, editors=False, timeout=120
    )
    warnings = [shown(warning) for warning in at.warning]
    assert any("`pmesh` may have at most 65,536 devices" in text for text in warnings), warnings
    assert any("`policy` must be one of single-replica" in text for text in warnings), warnings
    assert any("`rdtype`: the restore dtype must be one of float32" in text for text in warnings), warnings
    assert plan_figures(at)["Hosts that write"] == "8 of 8"  # data=64, ZeRO-3: every host writes
    assert contents.SAVED_PARTS  # the plan saves memory's parts less the grads


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"pmesh": "data=8", "dph": "3"}, "“Devices a host” must divide the mesh's 8 devices"),
        ({"pmesh": "data=8", "dph": "2", "async": "on"}, "“Async save” needs “Accelerator” with a host link figure"),
        (
            {"pmesh": "data=4", "dph": "2", "rmesh": "data=3"},
            "“Restore onto mesh”: the restore cannot lay the checkpoint out",
        ),
    ],
    ids=["devices-a-host", "async", "restore-mesh"],
)
def test_a_refused_plan_names_the_pages_own_controls(settings, says):
    at = open_app({**MLP, **settings}, PAGE, editors=False, timeout=120)
    (refusal,) = [shown(error) for error in at.error if "This plan cannot be made" in shown(error)]
    assert says in refusal
    assert "--" not in refusal  # the command line's flags are not on this page
