"""The largest buffers of a compiled program (``dcsim.memory.buffers``): hand-written HLO whose
sizes a reader checks by hand, then a real compile with a known large intermediate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from dcsim.memory import buffers

HLO = """HloModule jit_f, is_scheduled=true

%fused (p: f32[1024,1024]) -> f32[1024,1024] {
  %p = f32[1024,1024]{1,0} parameter(0)
  ROOT %big_inside_a_fusion = f32[1024,1024]{1,0} exponential(%p)
}

ENTRY %main (x: f32[64,32]) -> (f32[64,64], s32[]) {
  %x = f32[64,32]{1,0} parameter(0)
  %scores = f32[64,64]{1,0} dot(%x, %x), lhs_contracting_dims={1}, metadata={op_name="jit(f)/dot_general"}
  %probs = bf16[64,64]{1,0} fusion(%scores), kind=kLoop, calls=%fused, metadata={op_name="jit(f)/exp"}
  %view = f32[4096]{0} bitcast(%scores)
  %pair = (f32[64,64]{1,0}, s32[]) tuple(%scores, %n)
  %n = s32[] constant(7)
  ROOT %out = f32[64,64]{1,0} add(%scores, %scores)
}
"""


def test_the_entry_arrays_in_program_order_with_bytes_by_hand():
    found = buffers.program_buffers(HLO)
    # 64 x 64 float32 is 16,384 bytes, in bfloat16 8,192; the fusion's body, the parameter, the
    # bitcast, the tuple and the constant make no buffer of the entry's
    assert [(b.name, b.text, b.bytes, b.op) for b in found] == [
        ("scores", "f32[64,64]", 16_384, "dot"),
        ("probs", "bf16[64,64]", 8_192, "fusion"),
        ("out", "f32[64,64]", 16_384, "add"),
    ]
    assert found[0].source == "jit(f)/dot_general" and found[2].source == ""


def test_largest_first_ties_in_program_order():
    assert [b.name for b in buffers.largest_buffers(HLO, 2)] == ["scores", "out"]
    assert buffers.largest_buffers(HLO, 0) == []
    assert buffers.largest_buffers("no module here") == []


@pytest.mark.parametrize("limit", [-1, 2.5, True, "3"], ids=["negative", "float", "bool", "text"])
def test_a_bad_limit_is_refused(limit):
    with pytest.raises(ValueError, match="`limit` must be a non-negative integer"):
        buffers.largest_buffers(HLO, limit)


def test_records_round_trip_and_bad_ones_are_refused():
    (largest,) = buffers.largest_buffers(HLO, 1)
    record = buffers.buffer_record(largest)
    assert record == {
        "name": "scores",
        "shape": [64, 64],
        "dtype": "f32",
        "bytes": 16_384,
        "op": "dot",
        "source": "jit(f)/dot_general",
    }
    assert buffers.buffer_from_record(record) == largest
    with pytest.raises(ValueError, match="has the keys name, shape"):
        buffers.buffer_from_record({"name": "scores"})
    with pytest.raises(ValueError, match="bytes must be a int"):
        buffers.buffer_from_record(record | {"bytes": "16384"})
    with pytest.raises(ValueError, match="shape must be non-negative integers"):
        buffers.buffer_from_record(record | {"shape": [64, -1]})


def test_a_compiled_programs_large_intermediate_is_found():
    """(128 x 256) @ (256 x 1024) makes a 128 x 1024 float32 intermediate, 524,288 bytes, four times
    the 131,072-byte result: XLA must make it, and it leads the list."""
    compiled = (
        jax.jit(lambda a, b: jnp.tanh(a @ b) @ b.T)
        .lower(jax.ShapeDtypeStruct((128, 256), jnp.float32), jax.ShapeDtypeStruct((256, 1024), jnp.float32))
        .compile()
    )
    largest = buffers.largest_buffers(compiled.as_text())
    assert (largest[0].shape, largest[0].dtype, largest[0].bytes) == ((128, 1024), "f32", 524_288)
    assert largest[0].source.startswith("jit(<lambda>)/")
    assert all(b.bytes <= 524_288 for b in largest)


def test_the_memory_commands_table_lists_them_one_a_line():
    """What ``memory --verify`` prints under XLA's ratio: the hand-written program's two largest,
    each with its shape, its exact bytes, its instruction and the JAX op it came from, if any."""
    from dcsim.cli.memory import _buffer_lines

    lines = _buffer_lines(buffers.largest_buffers(HLO, 2))
    assert lines[0].startswith("  XLA's largest buffers (each one the step makes;")
    # 64 x 64 x 4 = 16,384 bytes = 16 x 1,024: 16.00 KiB
    assert lines[1:] == [
        "    f32[64,64]  16,384 bytes (16.00 KiB)  dot scores, from jit(f)/dot_general",
        "    f32[64,64]  16,384 bytes (16.00 KiB)  add out",
    ]
    assert _buffer_lines([]) == []
