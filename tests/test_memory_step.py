"""A training step's request without JAX (``dcsim.memory.step``): its checks, its fields as a
comparison gives them, and the step against a model's heads and widths under tensor parallelism."""

import pytest

from dcsim.memory import step as steps
from dcsim.memory.step import Step
from dcsim.model.config import ModelConfig


def test_the_names_are_the_flax_modules_own():
    from dcsim.model import forward as layers

    assert tuple(layers.REMAT_POLICIES) == steps.POLICY_NAMES
    assert steps.ATTENTION_KINDS == layers.ATTENTION_KINDS
    assert Step(sequence=8, remat="minimal", attention="naive").forward == layers.Forward(
        attention="naive", dispatch="dropless", capacity_factor=1.0
    )


@pytest.mark.slow  # one child interpreter, forked a request
def test_a_step_is_checked_without_jax(imports_probe):
    reply = imports_probe({"modules": ["dcsim.memory.step", "dcsim.memory.formula"]})
    assert reply["code"] == 0, reply["stderr"]
    assert reply["heavy"] == []


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"sequence": 0}, "`sequence` must be an integer from 1 to"),
        ({"sequence": 8, "micro_batch": 1 << 17}, "`micro_batch` must be an integer from 1 to 65,536"),
        ({"sequence": 8, "remat": "some"}, "the remat policy must be one of none, full, dots, dots-no-batch, minimal"),
        ({"sequence": 8, "attention": "ring"}, "the attention kind must be one of naive, flash"),
        ({"sequence": 8, "capacity_factor": 100}, "the capacity factor must be a number from 0.01 to 64"),
    ],
    ids=["sequence", "micro-batch", "remat", "attention", "capacity"],
)
def test_a_bad_step_is_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Step(**fields)


def test_a_step_from_a_comparisons_fields():
    assert steps.from_fields({}) is None
    assert steps.from_fields({"sequence": 4096, "remat": "full"}) == Step(sequence=4096, remat="full")
    assert steps.from_fields({"sequence": "4e3", "micro_batch": "2"}, as_text=True) == Step(
        sequence=4000, micro_batch=2
    )
    with pytest.raises(ValueError, match="`mb`: for a training step's activations; give `seq` too"):
        steps.from_fields({"micro_batch": 2}, label={"micro_batch": "mb", "sequence": "seq"}.get)


def test_tensor_parallelism_splits_heads_and_widths_or_says_why():
    # Llama 2 7B: 32 heads of 128 (32 KV heads), SwiGLU 11,008 wide, vocabulary 32,000.
    config = ModelConfig(preset="llama2-7b")
    hparams = steps.check_for_model(config, Step(sequence=4096))
    assert hparams["num_heads"] == 32 and hparams["ffn_dim"] == 11008
    from dcsim.model import registry

    split = steps.split_hparams(registry.family_of(config), hparams, "model", 4)
    assert (split["num_heads"], split["num_kv_heads"], split["ffn_dim"], split["vocab_size"]) == (8, 8, 2752, 8000)
    with pytest.raises(ValueError, match=r"the mesh's model axis \(3\) must divide the KV heads \(32\)"):
        steps.check_for_model(config, Step(sequence=4096), ("model", 3))
    with pytest.raises(ValueError, match=r"sequence parallelism splits the sequence over the mesh's model axis \(4\)"):
        steps.check_for_model(config, Step(sequence=4094, sequence_parallel=True), ("model", 4))
    with pytest.raises(ValueError, match="at most the model's positions"):
        steps.check_for_model(config, Step(sequence=8192))
