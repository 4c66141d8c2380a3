"""``dcsim.memory.remedies``: which meshes tensor parallelism is tried on, and a verdict's words
from a footprint a reader can add up by hand (no JAX: the remedies' figures come from a measure
given in the test)."""

import pytest

from dcsim.memory import remedies
from dcsim.memory.report import TrainingReport
from dcsim.memory.step import Step
from dcsim.memory.training import Training
from dcsim.sharding.meshes import parse_mesh


@pytest.mark.parametrize(
    "mesh, tried",
    [
        ("data=8", ["data=4,model=2", "data=2,model=4", "model=8"]),
        ("data=64", ["data=32,model=2", "data=16,model=4", "data=8,model=8"]),  # within a node's 8 GPUs
        ("data=6", ["data=3,model=2"]),  # 4 does not divide 6
        ("data=4,model=2", ["data=2,model=4", "model=8"]),  # the model axis grows
        ("fsdp=4,expert=2", ["fsdp=2,expert=2,model=2", "expert=2,model=4"]),
        ("data=1", []),
        ("model=8", []),  # already all tensor-parallel
    ],
)
def test_tensor_parallelism_is_tried_on_the_same_devices(mesh, tried):
    found = remedies.tensor_meshes(parse_mesh(mesh))
    assert [m.text for m in found] == tried
    assert all(m.num_devices == parse_mesh(mesh).num_devices for m in found)


def footprint(state, activations, budget):
    return TrainingReport(
        num_devices=8,
        parts=(("params", state),),
        split=frozenset({"params"}),
        activations_bytes=activations,
        budget_bytes=budget,
    )


def test_each_single_change_is_measured_and_only_those_that_fit_are_named():
    # 100 bytes of state and 900 of activations against 600: remat halves the activations per
    # policy step in this made-up measure, a model axis of t divides them by t.
    step = Step(sequence=8, micro_batch=2)
    setup = Training.stage(3)
    halving = {"none": 900, "full": 100, "dots": 450, "dots-no-batch": 450, "minimal": 700}

    def measure(mesh, changed_setup, changed_step):
        t = mesh.shape.get("model", 1)
        activations = halving[changed_step.remat] * changed_step.micro_batch // 2 // t
        return 100, activations

    verdict = remedies.verdict(footprint(100, 900, 600), parse_mesh("data=4"), setup, step, measure)
    tried = {remedy.label: remedy.total_bytes for remedy in verdict.remedies}
    assert tried == {
        "remat full": 200,
        "remat dots": 550,
        "remat dots-no-batch": 550,
        "remat minimal": 800,
        "tensor parallelism data=2,model=2": 550,
        "tensor and sequence parallelism data=2,model=2": 550,
        "tensor parallelism model=4": 325,
        "tensor and sequence parallelism model=4": 325,
        "micro-batch 1": 550,
    }
    assert verdict.text == (
        "Mesh data=4 does not fit: 1,000 bytes a device (state 100 bytes, activations 900 bytes) against a budget of "
        "600 bytes, over by 400 bytes, most of it the activations. More data-parallel devices cannot help: the step's "
        "activations do not shrink with them. Fits with remat dots or dots-no-batch (550 bytes) or full (200 bytes); "
        "tensor parallelism data=2,model=2 (550 bytes); or micro-batch 1 (550 bytes)."
    )


def test_a_footprint_that_fits_tries_nothing():
    def measure(*_):
        raise AssertionError("nothing is tried when it fits")

    verdict = remedies.verdict(footprint(100, 400, 600), parse_mesh("data=4"), Training.stage(3), None, measure)
    assert verdict.fits and verdict.remedies == ()
    assert verdict.text.endswith(
        "of a budget of 600 bytes, 100 bytes left; not counted: XLA's temporaries, communication buffers and "
        "fragmentation."
    )
