"""Honest units: binary means 2**10, decimal means 10**3, and the exact figure comes first."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dcsim.quantities import units


@pytest.mark.parametrize(
    "n, binary, decimal",
    [
        (0, "0 bytes", "0 bytes"),
        (80, "80 bytes", "80 bytes"),
        (1000, "1,000 bytes", "1.00 kB"),
        (1024, "1.00 KiB", "1.02 kB"),
        (4_198_400, "4.00 MiB", "4.20 MB"),
        (2**30, "1.00 GiB", "1.07 GB"),
        (10**9, "953.67 MiB", "1.00 GB"),
        (275_906_592_768, "256.96 GiB", "275.91 GB"),
    ],
)
def test_byte_units(n, binary, decimal):
    assert units.binary_bytes(n) == binary
    assert units.decimal_bytes(n) == decimal


@given(st.integers(min_value=1024, max_value=2**80))
def test_a_unit_reading_is_the_exact_quotient_rounded(n):
    """Two decimals of the exact n / 1024**k (as a Fraction), for the largest unit n reaches."""
    k = min(len(units._BINARY), next(k for k in range(1, 99) if n < 1024 ** (k + 1)))
    assert units.binary_bytes(n) == f"{float(Fraction(n, 1024**k)):.2f} {units._BINARY[k - 1]}"
    j = min(len(units._DECIMAL), next(j for j in range(1, 99) if n < 1000 ** (j + 1)))
    assert units.decimal_bytes(n) == f"{float(Fraction(n, 1000**j)):.2f} {units._DECIMAL[j - 1]}"


def test_exact_bytes_come_first():
    assert units.bytes_exact(80) == "80 bytes"
    assert units.bytes_exact(4_198_400) == "4,198,400 bytes (4.00 MiB)"


@pytest.mark.parametrize(
    "value, text",
    [
        (Fraction(10), "10"),
        (Fraction(3, 2), "1.5 (3/2)"),
        (Fraction(20, 3), "6.666666666666667 (20/3)"),
        (Fraction(4_295_032_832), "4,295,032,832"),
    ],
)
def test_shares_read_exactly(value, text):
    assert units.share(value) == text


def test_counts_have_separators():
    assert units.count(68_976_648_192) == "68,976,648,192"


@pytest.mark.parametrize(
    "n, word, plural, text",
    [
        (1, "device", None, "1 device"),
        (0, "device", None, "0 devices"),
        (8, "CPU core", None, "8 CPU cores"),
        (1, "process", "processes", "1 process"),
        (2, "process", "processes", "2 processes"),
        (1_024, "array", None, "1,024 arrays"),
    ],
    ids=["one", "none", "several", "irregular-one", "irregular-several", "separators"],
)
def test_many_is_singular_for_one_only_and_takes_an_irregular_plural(n, word, plural, text):
    assert units.many(n, word, plural) == text
