"""concat_ranges against the ranges built one by one."""

from __future__ import annotations

import numpy as np

from libra_astra.ranges import concat_ranges


def test_concat_ranges_is_the_ranges_one_after_the_other():
    rng = np.random.default_rng(7)
    for _ in range(300):
        k = int(rng.integers(0, 7))
        starts, lengths = rng.integers(-5, 60, k), rng.integers(0, 6, k)      # empty ranges included
        expected = [v for s, n in zip(starts.tolist(), lengths.tolist()) for v in range(s, s + n)]
        got = concat_ranges(starts, lengths)
        assert got.dtype == np.int64 and got.tolist() == expected
