"""Raw payload bytes per dtype, exact ints."""

import pytest

from dcsim.quantities.payload import NOT_CHECKPOINT_SIZE, RAW_DTYPES, bytes_per_value, raw_bytes, raw_payloads


@pytest.mark.parametrize("dtype, size", [("float32", 4), ("bfloat16", 2), ("float16", 2), ("int8", 1), ("float64", 8)])
def test_bytes_per_value(dtype, size):
    assert bytes_per_value(dtype) == size


def test_seed_example_is_80_float32_bytes():
    assert raw_bytes(20) == 80
    assert [(row.dtype, row.num_bytes) for row in raw_payloads(20)] == [
        ("float32", 80),
        ("bfloat16", 40),
        ("float16", 40),
        ("int8", 20),
        ("float64", 160),
    ]
    assert RAW_DTYPES[0] == "float32"


def test_large_counts_stay_exact_ints():
    assert raw_bytes(68_976_648_192) == 275_906_592_768
    assert type(raw_bytes(68_976_648_192)) is int


def test_rejects_unknown_dtype_and_negative_counts():
    with pytest.raises(
        ValueError, match="`dtype` must be one of float32, bfloat16, float16, int8, float64, got 'int4'"
    ):
        raw_bytes(20, "int4")
    with pytest.raises(ValueError, match="`num_values` must be an integer of at least 0, got -1"):
        raw_bytes(-1)


def test_the_label_says_it_is_not_the_checkpoint_size():
    assert "not the checkpoint size" in NOT_CHECKPOINT_SIZE
