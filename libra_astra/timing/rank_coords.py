"""Each rank's coordinates on the network's dimensions, split into the double-binary-tree
dimensions and the others, as :func:`.astra_collective.rank_times` groups the ranks by them.

Cached: a prediction times a few chains of collectives on one network, and listing the
coordinates of thousands of ranks for each chain cost more than replaying the chain."""

from __future__ import annotations

import itertools
from functools import lru_cache


@lru_cache(maxsize=16)
def tree_coords(sizes: tuple[int, ...], trees: tuple[int, ...]
                ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """(per rank, its coordinates on the ``trees`` dimensions; per rank, on the others). Rank r's
    coordinate on dimension d is ``r // prod(sizes[:d]) % sizes[d]``: dimension 0 varies fastest."""
    coords = [c[::-1] for c in itertools.product(*(range(n) for n in reversed(sizes)))]
    rest = [d for d in range(len(sizes)) if d not in trees]
    return (tuple(tuple(c[d] for d in trees) for c in coords), tuple(tuple(c[d] for d in rest) for c in coords))
