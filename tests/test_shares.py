"""The ideal share: total / shards, exact."""

from fractions import Fraction

import hypothesis.strategies as hs
import pytest
from hypothesis import given

from dcsim.sharding.shares import ideal_share, powers_of_two, sweep


@pytest.mark.parametrize(
    "total, shards, exact, fraction, value",
    [
        (20, 2, Fraction(10), "10", 10.0),
        (6, 4, Fraction(3, 2), "3/2", 1.5),
        (20, 3, Fraction(20, 3), "20/3", 20 / 3),
        (0, 5, Fraction(0), "0", 0.0),
        (68_976_648_192, 4096, Fraction(68_976_648_192, 4096), "16840002", 16_840_002.0),
    ],
    ids=["seed-example", "one-and-a-half", "thirds", "empty", "llama2-70b-over-4096"],
)
def test_golden_shares(total, shards, exact, fraction, value):
    share = ideal_share(total, shards)
    assert (share.exact, share.fraction, share.value) == (exact, fraction, value)
    assert share.is_whole == (exact.denominator == 1)


@given(hs.integers(0, 10**15), hs.integers(1, 1 << 20))
def test_share_times_shards_is_the_total(total, shards):
    share = ideal_share(total, shards)
    assert share.exact * shards == total
    assert share.value == pytest.approx(total / shards)


def test_shares_reject_bad_counts():
    with pytest.raises(ValueError, match="`num_shards` must be an integer from 1 to 1,048,576, got 0"):
        ideal_share(20, 0)
    with pytest.raises(ValueError, match="`total_params` must be an integer of at least 0, got -1"):
        ideal_share(-1, 2)


def test_sweep_over_powers_of_two():
    assert powers_of_two(4096) == [2**bit for bit in range(13)]
    assert powers_of_two(5) == [1, 2, 4]
    assert [share.fraction for share in sweep(20, [1, 2, 3, 8])] == ["20", "10", "20/3", "5/2"]
