"""Integer ranges laid end to end, built in one numpy pass: the rows of chosen collectives, the
dependencies of chosen nodes, the bytes of chosen fields."""

from __future__ import annotations

import numpy as np


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``starts[i], starts[i] + 1, ..., starts[i] + lengths[i] - 1`` for every i, one after the
    other (lengths >= 0), as int64."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if ends.size else 0
    # each position's offset from its own range's first position in the output
    return np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)
