"""XLA's compiled memory analysis against dcsim's training-state figure (``dcsim.memory.verify``).

The refusals start no child and run in the quick loop; every test that compiles in a child
process is marked slow, as the project's marker says.
"""

from __future__ import annotations

import dataclasses
import tempfile

import pytest

from conftest import small_preset
from dcsim.memory import verify as mv
from dcsim.memory.state import MemoryReport, compute_memory
from dcsim.memory.training import Training
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.runtime import checks
from dcsim.sharding.meshes import parse_mesh, parse_rules

SEED_MODEL = count_params(ModelConfig())  # one Dense(4) with bias on width 4: a 4x4 kernel and 4 biases
MLP = count_params(ModelConfig(input_dim=8, layers=(DenseLayer(features=16), DenseLayer(features=8))))
LLAMA_CUT = ModelConfig(preset="llama2-70b", overrides={"num_layers": 2})
MOE_SMALL = small_preset("mixtral-8x7b", num_kv_heads=2, expert_ffn_dim=32, vocab_size=128)


def memory_of(report, mesh, strategy="fsdp", training=None, rules=()):
    return compute_memory(report, parse_mesh(mesh), strategy, parse_rules(rules), training or Training.stage(3))


@pytest.fixture
def no_child(monkeypatch):
    """Fails the test if a child process is started."""

    def refuse(*args, **kwargs):
        raise AssertionError("a child process was started")

    monkeypatch.setattr(checks, "run_workers", refuse)


# --- golden figures and the record --------------------------------------------------------------


def test_the_tuple_table_is_a_pointer_an_array_and_none_for_one():
    assert [mv.tuple_table_bytes(n) for n in (0, 1, 2, 9)] == [0, 0, 16, 72]


def test_expected_bytes_by_hand():
    """Adam, ZeRO-3, float32 on data=2: params, grads, mu and nu each hold half of the kernel (8)
    and half of the bias (2), 4 x 10 x 4 B = 160, plus the int32 step count (4) and a tuple of
    9 arrays (72): 236."""
    memory = memory_of(SEED_MODEL, "data=2", training=Training.stage(3, optimizer="adam", param_dtype="float32"))
    assert memory.num_arrays == 9
    assert mv.expected_bytes_per_device(memory) == 160 + 4 + 72


def test_the_request_is_compact_and_complete():
    memory = memory_of(count_params(ModelConfig(preset="llama2-7b")), "data=256", training=Training.stage(3))
    request = mv.verify_request(memory)
    assert request["mesh"] == [["data", 256]]
    assert sum(kind[-1] for kind in request["kinds"]) == memory.num_arrays == 1165
    assert len(request["kinds"]) < 20  # a few kinds of array, not one entry each


def test_multi_axis_specs_travel_as_lists():
    memory = memory_of(MLP, "data=4,model=2", "custom", rules=("*/kernel=None,data+model",))
    specs = [kind[2] for kind in mv.verify_request(memory)["kinds"]]
    assert [None, ["data", "model"]] in specs


def test_verify_record():
    verified = mv.Verified(output_bytes_per_device=236, expected_bytes_per_device=236, num_arrays=9, seconds=1.5)
    assert mv.verify_record(verified) == {
        "output_bytes_per_device": 236,
        "expected_bytes_per_device": 236,
        "tuple_bytes_per_array": 8,
        "num_arrays": 9,
        "matches": True,
    }
    off = dataclasses.replace(verified, output_bytes_per_device=244)
    assert not off.matches and off.difference_bytes == 8 and mv.verify_record(off)["matches"] is False


# --- refusals: no child starts ------------------------------------------------------------------


def test_devices_up_to_the_bound_are_allowed(no_child):
    mv.check_verifiable(memory_of(SEED_MODEL, f"data={mv.MAX_VERIFY_DEVICES}", "replicated"))


def test_too_many_devices_are_refused_before_a_child_starts(no_child):
    memory = memory_of(SEED_MODEL, f"data={mv.MAX_VERIFY_DEVICES + 1}", "replicated")
    message = r"at most 2,048 virtual CPU devices .* got a mesh of 2,049 \(data=2049\)"
    with pytest.raises(ValueError, match=message):
        mv.check_verifiable(memory)
    with pytest.raises(ValueError, match=message):
        mv.verify(memory)


def test_too_many_arrays_are_refused_before_a_child_starts(no_child):
    memory = memory_of(SEED_MODEL, "data=2")
    copies = mv.MAX_VERIFY_ARRAYS // memory.num_arrays + 1
    big = dataclasses.replace(memory, arrays=memory.arrays * copies)
    assert big.num_arrays > mv.MAX_VERIFY_ARRAYS
    message = rf"at most 8,192 state arrays .* has {big.num_arrays:,}: {2 * copies:,} parameter arrays"
    with pytest.raises(ValueError, match=message):
        mv.check_verifiable(big)
    with pytest.raises(ValueError, match=message):
        mv.verify(big)
    at_bound = dataclasses.replace(memory, arrays=(memory.arrays * copies)[: mv.MAX_VERIFY_ARRAYS])
    mv.check_verifiable(at_bound)


def test_only_a_memory_report_is_verified(no_child):
    with pytest.raises(TypeError, match=r"must be a dcsim\.memory\.state\.MemoryReport, got dict"):
        mv.verify({"arrays": []})  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), 1e9], ids=["zero", "negative", "nan", "huge"])
def test_bad_time_limits_are_refused(no_child, seconds):
    with pytest.raises(ValueError, match="timeout_seconds"):
        mv.verify(memory_of(SEED_MODEL, "data=2"), timeout_seconds=seconds)


def test_a_bad_timeout_variable_is_refused_by_name(no_child, monkeypatch):
    monkeypatch.setenv(checks.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=f"`{checks.TIMEOUT_ENV}` must be a number of seconds"):
        mv.verify(memory_of(SEED_MODEL, "data=2"))


def test_the_timeout_variable_sets_the_default(monkeypatch):
    monkeypatch.delenv(checks.TIMEOUT_ENV, raising=False)
    assert checks.default_timeout_seconds() == checks.DEFAULT_TIMEOUT_SECONDS
    monkeypatch.setenv(checks.TIMEOUT_ENV, " 7.5 ")
    assert checks.default_timeout_seconds() == 7.5


# --- XLA's figure, from a child process ---------------------------------------------------------


@pytest.mark.slow
def test_xla_agrees_with_the_figure_worked_by_hand():
    memory = memory_of(SEED_MODEL, "data=2", training=Training.stage(3, optimizer="adam", param_dtype="float32"))
    verified = mv.verify(memory)
    assert verified.output_bytes_per_device == 236
    assert verified.matches and verified.num_arrays == 9 and verified.seconds > 0


SETUPS = [
    ("mlp-data4-model2-tensor-sgd-zero0", MLP, "data=4,model=2", "tensor", (), Training.stage(0, optimizer="sgd")),
    (
        "mlp-custom-rule-momentum-zero2",
        MLP,
        "data=4,model=2",
        "custom",
        ("*/kernel=None,data+model", "*/bias=model"),
        Training.stage(2, optimizer="momentum"),
    ),
    (
        "llama70b-cut-data4-model2-fsdp-adafactor-zero1-master",
        count_params(LLAMA_CUT),
        "data=4,model=2",
        "fsdp",
        (),
        Training.stage(1, optimizer="adafactor", master_dtype="float32"),
    ),
    (
        "llama70b-cut-data4-model2-tensor-free-parts-adam-fp16",
        count_params(LLAMA_CUT),
        "data=4,model=2",
        "tensor",
        (),
        Training.sharding(frozenset({"params", "optimizer"}), optimizer="adam", param_dtype="float16"),
    ),
    (
        "moe-data2-expert4-fsdp-lion-zero3",
        count_params(MOE_SMALL),
        "data=2,expert=4",
        "fsdp",
        (),
        Training.stage(3, optimizer="lion", master_dtype="float32"),
    ),
    # float64 needs JAX's x64 mode in the child too, or XLA would size float32 arrays.
    ("mlp-float64-adam-zero3", MLP, "data=4", "fsdp", (), Training.stage(3, param_dtype="float64")),
    ("mlp-int8-f64-master", MLP, "data=4", "fsdp", (), Training.stage(1, param_dtype="int8", master_dtype="float64")),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("report", "mesh", "strategy", "rules", "training"), [s[1:] for s in SETUPS], ids=[s[0] for s in SETUPS]
)
def test_xla_agrees(report, mesh, strategy, rules, training):
    memory = memory_of(report, mesh, strategy, training, rules)
    verified = mv.verify(memory)
    assert verified.num_arrays == memory.num_arrays
    assert verified.output_bytes_per_device == memory.total_bytes_per_device + 8 * memory.num_arrays
    assert verified.matches


@pytest.mark.slow
def test_xla_sees_the_layout_change():
    """The same state split by ZeRO-3 and held whole by ZeRO-0: XLA's figures differ, each as
    dcsim says (by hand: 236 and 396 bytes)."""
    training = {"param_dtype": "float32", "optimizer": "adam"}
    split = mv.verify(memory_of(SEED_MODEL, "data=2", training=Training.stage(3, **training)))
    whole = mv.verify(memory_of(SEED_MODEL, "data=2", training=Training.stage(0, **training)))
    assert (split.output_bytes_per_device, whole.output_bytes_per_device) == (236, 396)
    assert split.matches and whole.matches


@pytest.mark.slow
def test_the_device_bound_compiles():
    memory = memory_of(SEED_MODEL, f"data={mv.MAX_VERIFY_DEVICES}", "replicated")
    assert mv.verify(memory).matches


@pytest.mark.slow
def test_a_tiny_time_limit_ends_the_child_with_a_clear_message(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(mv.VerifyFailed) as caught:
        mv.verify(memory_of(SEED_MODEL, "data=2"), timeout_seconds=0.01)
    message = str(caught.value)
    assert "the time limit of 0.01 s passed" in message and checks.TIMEOUT_ENV in message
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []  # the child's folder was removed


@pytest.mark.slow
def test_a_failing_child_gives_one_readable_line(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("XLA_FLAGS", "--xla_no_such_flag=1")
    with pytest.raises(
        mv.VerifyFailed, match=r"XLA memory check exited with code .* Unknown flag in XLA_FLAGS"
    ) as caught:
        mv.verify(memory_of(SEED_MODEL, "data=2"))
    assert "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_llama2_7b_on_256_devices():
    memory = memory_of(
        count_params(ModelConfig(preset="llama2-7b")), "data=256", training=Training.stage(3, optimizer="adam")
    )
    verified = mv.verify(memory)
    assert verified.matches
    # By hand: params, grads, mu and nu in bfloat16, each 2 x 6,738,415,616 / 256 = 52,643,872 bytes,
    # the int32 step count (4) and a tuple of 1,165 arrays (9,320).
    assert verified.output_bytes_per_device == 4 * 52_643_872 + 4 + 9_320
    assert isinstance(memory, MemoryReport) and verified.num_arrays == 1165


# --- the training step's check: its answer read back ---------------------------------------------


def _step_answer(monkeypatch, largest):
    from dcsim.memory import activations, verify_step

    answer = {"argument_bytes": 100, "output_bytes": 40, "temp_bytes": 1_000, "alias_bytes": 40}
    if largest is not None:
        answer["largest_buffers"] = largest
    monkeypatch.setattr(mv, "run_check", lambda *args, **kwargs: (answer, 1.5))
    memory = memory_of(SEED_MODEL, "data=2")
    return verify_step.verify_step(memory, "{}", activations.Step(sequence=8), 10)


def test_the_steps_largest_buffers_reach_the_record(monkeypatch):
    from dcsim.memory import verify_step

    logits = {"name": "fusion.3", "shape": [2, 8, 16], "dtype": "f32", "bytes": 1_024, "op": "fusion", "source": "x"}
    stepped = _step_answer(monkeypatch, [logits])
    assert stepped.peak_bytes == 100 + 40 + 1_000 - 40
    assert stepped.largest_buffers[0].text == "f32[2,8,16]"
    assert verify_step.step_record(stepped)["step_largest_buffers"] == [logits]


@pytest.mark.parametrize("largest", [None, "fusion.3", [{"name": "fusion.3"}]], ids=["missing", "text", "partial"])
def test_a_step_answer_without_its_buffers_is_a_failed_check(monkeypatch, largest):
    with pytest.raises(mv.VerifyFailed, match="answered no largest buffers"):
        _step_answer(monkeypatch, largest)
