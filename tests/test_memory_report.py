"""One device's training footprint (``dcsim.memory.report``): the parts, the activations, the total,
the verdict and the headroom against a budget, each redone here by hand.

The model is Dense(8) on width 8: a kernel of 8x8 and a bias of 8, 72 parameters. In bfloat16 (2
bytes a value) the parameters and the gradients take 144 bytes each; Adam's two bfloat16 moments
288 and its int32 step count 4, so the optimizer state takes 292: 580 bytes in all on one device.
"""

import pytest

from dcsim.memory.report import NO_STEP, NOT_COUNTED, TrainingReport, leaves_out_text
from dcsim.memory.state import compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.sharding.meshes import parse_mesh

PARAMS = 72 * 2
OPTIMIZER = 2 * PARAMS + 4
STATE = PARAMS + PARAMS + OPTIMIZER  # 580
DENSE8 = ModelConfig(input_dim=8, layers=(DenseLayer(features=8),))


def dense_footprint(mesh="data=1", activations=None, budget=None, training=None):
    training = Training.stage(0) if training is None else training
    memory = compute_memory(count_params(DENSE8), parse_mesh(mesh), "fsdp", (), training)
    return TrainingReport.of(memory, activations, budget)


def test_the_state_alone_on_one_device_by_hand():
    report = dense_footprint()
    assert report.parts == (("params", PARAMS), ("grads", PARAMS), ("optimizer", OPTIMIZER))
    assert report.state_bytes == report.total_bytes == STATE == 580
    assert report.part_bytes("master") == 0  # no master copy is kept
    assert report.fits is None and report.headroom_bytes is None  # no budget, no verdict
    assert report.leaves_out == (NO_STEP, *NOT_COUNTED)
    assert report.per_device_record() == {
        "params_bytes": 144,
        "grads_bytes": 144,
        "master_bytes": 0,
        "optimizer_bytes": 292,
        "total_bytes": 580,
    }


def test_activations_count_in_the_total_and_against_the_budget():
    fits = dense_footprint(activations=100, budget=700)
    assert fits.total_bytes == 680 and fits.headroom_bytes == 20 and fits.fits is True
    over = dense_footprint(activations=100, budget=600)
    assert over.headroom_bytes == -80 and over.fits is False
    exact = dense_footprint(activations=100, budget=680)
    assert exact.headroom_bytes == 0 and exact.fits is True  # at most the budget fits
    assert fits.leaves_out == NOT_COUNTED
    assert over.record() == {
        "state_bytes": 580,
        "activations_bytes": 100,
        "total_bytes": 680,
        "budget_bytes": 600,
        "fits": False,
        "headroom_bytes": -80,
        "leaves_out": ["XLA's temporaries", "communication buffers", "fragmentation"],
    }
    assert list(fits.per_device_record().items())[-3:] == [
        ("total_bytes", 680),
        ("state_bytes", 580),
        ("activations_bytes", 100),
    ]


def test_zero_three_on_four_devices_splits_every_part():
    # fsdp splits the 8x8 kernel and the bias of 8 four ways: 18 of the 72 values on each device;
    # the int32 step count stays whole.
    report = dense_footprint("data=4", training=Training.stage(3))
    assert report.num_devices == 4 and report.split == frozenset({"params", "grads", "master", "optimizer"})
    assert dict(report.parts) == {"params": 36, "grads": 36, "optimizer": 2 * 36 + 4}
    assert report.state_bytes == 148


def test_a_master_copy_is_a_part_of_its_own():
    report = dense_footprint(training=Training.stage(0, master_dtype="float32"))
    # float32 master copy of 72 values; Adam's moments then float32 too (optax takes its dtype)
    assert dict(report.parts) == {"params": 144, "grads": 144, "master": 288, "optimizer": 2 * 288 + 4}


def test_the_sentence_beside_the_verdict():
    assert leaves_out_text(True) == (
        "Counts the state and the step's activations; not XLA's temporaries, communication buffers or fragmentation."
    )
    assert leaves_out_text(False) == (
        "Counts the training state only: a step's activations are not counted (give a sequence to add them)."
    )
    assert dense_footprint(activations=1).leaves_out_text == leaves_out_text(True)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"activations_bytes": -1}, "activations_bytes must be a non-negative int, got -1"),
        ({"budget_bytes": 1.5}, "budget_bytes must be a non-negative int, got 1.5"),
        ({"budget_bytes": True}, "budget_bytes must be a non-negative int, got True"),
        ({"parts": (("weights", 1),)}, "parts must be among params, grads, master, optimizer, got weights"),
        ({"parts": (("params", 2.0),)}, "the params bytes must be a non-negative int, got 2.0"),
    ],
    ids=["negative-activations", "float-budget", "bool-budget", "unknown-part", "float-part"],
)
def test_figures_are_exact_ints(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        TrainingReport(**{"num_devices": 1, "parts": (("params", 2),), "split": frozenset(), **fields})


def test_the_report_is_frozen():
    report = dense_footprint()
    with pytest.raises(AttributeError):
        report.budget_bytes = 1
