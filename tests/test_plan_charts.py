"""The checkpoint plan's charts (``dcsim.report.plan_charts``), tested on ``to_dict()``: the hosts
that write nothing are drawn, the flattening point and Daly's interval are marked, times are
labelled estimates."""

from dcsim.checkpoint.plan.plan import PlanRequest, plan_checkpoint
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.report import plan_charts
from dcsim.sharding.meshes import parse_mesh

MLP = count_params(ModelConfig(input_dim=8, layers=(DenseLayer(features=16), DenseLayer(features=4))))


def ddp_plan():
    """Replicated on 32 devices, 4 hosts, GPUs: host 0 writes everything (single-replica)."""
    memory = compute_memory(MLP, parse_mesh("data=32"), "fsdp", (), Training.stage(0, optimizer="adam"))
    return plan_checkpoint(MLP, memory, PlanRequest(device="h100-sxm"))


def test_the_host_chart_draws_the_hosts_that_write_nothing():
    plan = ddp_plan()
    frame = plan_charts.hosts_frame(plan)
    assert frame["status"].tolist() == ["writes", "writes nothing", "writes nothing", "writes nothing"]
    assert frame["bytes_written"].sum() == plan.content.total_bytes
    spec = plan_charts.host_bytes(plan).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["bar", "tick"]
    assert spec["layer"][1]["transform"] == [{"filter": "(datum.status === 'writes nothing')"}]
    assert "1 of 4 hosts write" in spec["title"]["subtitle"]


def test_the_speedup_chart_marks_where_it_flattens():
    plan = ddp_plan()
    frame = plan_charts.curve_frame(plan)
    assert frame["hosts"].tolist() == [1, 2, 4] and frame["flat"].tolist() == [True, False, False]
    spec = plan_charts.speedup(plan).to_dict()
    assert "estimate" in spec["title"]["text"] and "only 1 of 4 hosts write" in spec["title"]["subtitle"]
    assert spec["layer"][0]["encoding"]["y"]["scale"] == {"zero": True}
    assert spec["layer"][1]["mark"]["size"] == 200  # the flattening point, drawn larger


def test_the_goodput_chart_marks_daly_s_interval():
    plan = ddp_plan()
    spec = plan_charts.goodput(plan).to_dict()
    assert spec["layer"][1]["mark"]["type"] == "rule"
    rule_data = spec["datasets"][spec["layer"][1]["data"]["name"]]
    assert rule_data == [{"interval_seconds": plan.interval.daly}]
    assert spec["layer"][0]["encoding"]["x"]["scale"] == {"type": "log"}
