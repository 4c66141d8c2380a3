"""The accelerator catalog's speeds (``dcsim.serving.catalog``): dense peaks, never the "with
sparsity" figures, decimal units, one direction of a link, each row with its source."""

from __future__ import annotations

import pytest

from dcsim.serving import catalog

TERA = 10**12


def test_h100_sxm_as_nvidias_whitepaper_and_datasheet_state_it():
    """H100 SXM5: 989.4 dense BF16 TFLOPS (the datasheet's 1,979 is with sparsity), 1,978.9 dense FP8;
    3.35TB/s is 3.35 x 10^12 bytes a second; NVLink's 900GB/s counts both directions."""
    row = catalog.get_accelerator("h100-sxm")
    assert row.peak_flops("bfloat16") == 989_400_000_000_000
    assert row.peak_flops("float8") == 1_978_900_000_000_000
    assert row.hbm_bytes_per_second == 3_350_000_000_000
    assert row.scale_up_bytes_per_second == 900 * 10**9 // 2
    assert row.scale_out_bytes_per_second == 400 * 10**9 // 8  # 400Gb/s a GPU


@pytest.mark.parametrize("name", catalog.DEVICE_NAMES)
def test_every_row_has_dense_speeds_with_a_source(name):
    """An FP8 or INT8 dense peak is at most twice the BF16 one (the ratio every vendor's tensor
    cores have; a sparse figure taken by mistake would be four times); memory bandwidth within what
    HBM and GDDR deliver; a link one way below the memory's bandwidth."""
    row = catalog.get_accelerator(name)
    assert row.speed_source is not None
    assert "http" in row.speed_source or "whitepaper" in row.speed_source
    bf16 = row.peak_flops("bfloat16")
    assert 100 * TERA <= bf16 <= 2_500 * TERA
    for other in (row.fp8_flops_per_second, row.int8_ops_per_second):
        assert other is None or bf16 <= other <= 4 * bf16
    fp8 = row.fp8_flops_per_second
    assert fp8 is None or fp8 <= 2 * bf16 + bf16 // 40  # as printed: the L40S sheet has 362.05 and 733
    assert 250 * 10**9 <= row.speed("hbm_bytes_per_second") <= 8 * TERA
    for link in (row.scale_up_bytes_per_second, row.scale_out_bytes_per_second):
        assert link is None or 0 < link < row.speed("hbm_bytes_per_second")


def test_a_missing_figure_is_refused_by_name():
    with pytest.raises(ValueError, match="a100-80gb has no dense peak for float8"):
        catalog.get_accelerator("a100-80gb").peak_flops("float8")
    with pytest.raises(ValueError, match="l4 has no scale up bytes per second figure"):
        catalog.get_accelerator("l4").speed("scale_up_bytes_per_second")
