"""XLA's compiled decoding step against dcsim's serving figures (``dcsim.serving.verify``): the
argument bytes a device are the weights, the cache, the fixed state and the step's tokens, to the
byte. The cases cover every kind of cache: grouped keys and values split by heads, KV heads
repeated past their number, a sliding window's ring buffer, DeepSeek's latent in int8, T5's cross
caches in fp8."""

import pytest

from dcsim.memory.verify import MAX_VERIFY_DEVICES
from dcsim.model.config import ModelConfig
from dcsim.serving import verify
from dcsim.serving.engine import compute_serving
from dcsim.serving.request import Serving
from dcsim.sharding.meshes import parse_mesh


def report(preset: str, mesh: str, **settings: object):
    return compute_serving(ModelConfig(preset=preset), Serving(mesh=parse_mesh(mesh), **settings))


@pytest.mark.slow
@pytest.mark.parametrize(
    "preset, mesh, settings",
    [
        pytest.param("gpt2-small", "model=4", {"context": 512, "concurrency": 4}, id="gpt2-heads-split"),
        pytest.param("llama3-8b", "model=16", {"context": 128, "concurrency": 2}, id="llama3-kv-heads-repeated"),
        pytest.param("gemma2-2b", "model=2", {"context": 8192, "concurrency": 2}, id="gemma2-windows"),
        pytest.param(
            "deepseek-v2-lite", "data=2,model=2", {"context": 256, "concurrency": 4, "kv_dtype": "int8"}, id="mla-int8"
        ),
        pytest.param("t5-small", "data=2", {"context": 128, "concurrency": 2, "kv_dtype": "fp8"}, id="t5-cross-fp8"),
    ],
)
def test_xlas_arguments_equal_dcsims_figure(preset, mesh, settings):
    served = report(preset, mesh, **settings)
    checked = verify.verify(served)
    assert checked.matches, verify.verify_record(checked)
    assert checked.argument_bytes_per_device == served.total_bytes_per_device + checked.token_bytes_per_device
    assert checked.temp_bytes_per_device > 0


@pytest.mark.parametrize(
    "preset, mesh, message",
    [
        ("gpt2-small", "model=2,stage=2", r"each pipeline stage runs its own"),
        ("gpt2-small", f"data={MAX_VERIFY_DEVICES * 2}", r"at most 2,048 virtual CPU devices"),
    ],
)
def test_bounds_are_refused_before_a_child_starts(preset, mesh, message):
    with pytest.raises(ValueError, match=message):
        verify.check_verifiable(report(preset, mesh, context=64))


def test_a_model_without_a_decoder_has_no_step_to_check():
    with pytest.raises(ValueError, match="no decoder cache"):
        verify.verify(report("bert-base", "data=1", context=64))
