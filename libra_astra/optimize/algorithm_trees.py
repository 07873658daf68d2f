"""doubleBinaryTree as a candidate of ``optimize --algorithms auto-tree`` (algorithms.py): where
it is no candidate, and the proof that drops it where another implementation is never slower.

Where a tree is no candidate (besides a dimension whose size is not a power of two, which
ASTRA-sim crashes on):

- a one-dimensional network whose workload has sub-group collectives of the kind (flat rings):
  ASTRA-sim uses a one-entry list as written for them, takes the group's ring for a tree and
  crashes (system_rows refuses the same setting under --system);
- an all-gather dimension that another dimension follows in some all-gather (its phases run from
  the last dimension down): a tree runs an all-reduce of the chunk and leaves it ungathered, so
  the dimensions after it carry a chunk ``n`` times smaller than the all-gather's, and ASTRA-sim's
  time is that of less data than the collective moves (a win the model would find, and which is
  no real all-gather);
- a dimension a hierarchical collective covers only part of: emit splits it into pieces, one
  logical dimension each, and every collective over the whole dimension would run one tree per
  piece, which the model (one tree over the dimension) does not time.

A tree phase is not one affine time, so the phase-by-phase test of algorithms.py does not apply.
A tree is dropped on (kind, dimension) when some other candidate X gives every hierarchical
collective of the kind rows each no larger, coefficient by coefficient and constant by constant,
than one of the tree's rows: then the maximum over X's rows is no larger at every bandwidth. It
is checked with every combination of the candidates of the kind's other dimensions (a tree there
changes what reaches this one), so the tree cannot give a better optimum in any combination.
X's rows must be its time (no queue that reorders: system_rows.bounded_flows finds none), while
the tree's rows are its time or a lower bound of it; so X takes no longer than the tree's time
either way (ASTRA-sim's, the slowest rank's, as the model counts a collective).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Sequence

import numpy as np

from ..model.collectives import ALL_GATHER, P2P
from ..model.network import Network
from ..timing.astra_settings import KINDS
from ..timing.model import TimeModel
from ..timing.system_rows import bounded_flows, system_rows_of

TREE = "doubleBinaryTree"
# contexts (combinations of the kind's other dimensions) beyond which a tree is kept unproven
MAX_CONTEXTS = 64


def tree_refusals(workloads, net: Network, free: Sequence[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """(kind, dimension) -> why a tree is no candidate there, for the pairs ``free``."""
    colls = [c for w in workloads for rc in w.demand.rank_classes for c in rc.collectives]
    split = {d for c in colls if c.algorithm == "hierarchical" and c.type != P2P
             for d, p in enumerate(c.participants) if 1 < p < net.dims[d].npus}
    after = {d for c in colls if c.type == ALL_GATHER and c.algorithm == "hierarchical"
             for d in range(net.num_dims) if c.participants[d] > 1 and any(p > 1 for p in c.participants[:d])}
    out = {}
    for kind, d in free:
        n = net.dims[d].npus
        sub = next((c for c in colls if c.type == kind and c.algorithm == "flat_ring"), None)
        if n & (n - 1):
            out[(kind, d)] = f"{n} NPUs, not a power of two (ASTRA-sim crashes)"
        elif net.num_dims == 1 and sub is not None:
            out[(kind, d)] = (f"sub-group {kind} of {sub.participants[0]} NPUs with a one-entry list (ASTRA-sim "
                              "uses the group's ring as a tree and crashes)")
        elif kind == ALL_GATHER and d in after:
            out[(kind, d)] = ("the all-gather goes on to lower dimensions: a tree would leave the chunk ungathered "
                              "for them (ASTRA-sim times less data than the all-gather moves)")
        elif d in split:
            out[(kind, d)] = ("a group covers part of the dimension: emit splits it and ASTRA-sim would run one "
                              "tree per piece, which the model does not time")
    return out


def _rows_below(x: tuple[np.ndarray, np.ndarray], t: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether every row of ``x`` is at most some row of ``t`` in every coefficient and the constant."""
    (ax, cx), (at, ct) = x, t
    le = np.all(ax[:, None, :] <= at[None, :, :] * (1 + 1e-12) + 1e-15, axis=2) & (cx[:, None] <= ct[None, :] + 1e-9)
    return bool(le.any(axis=1).all())


def _model(model: TimeModel, kind: str, names: dict[int, str]) -> TimeModel:
    lists = [list(v) for v in model.system.implementations]
    for d, name in names.items():
        lists[KINDS.index(kind)][d] = name
    return replace(model, system=replace(model.system, implementations=tuple(tuple(v) for v in lists)))


def tree_dominated(workloads, net: Network, model: TimeModel, kind: str, d: int, others: Sequence[str],
                   rest: dict[int, Sequence[str]]) -> str | None:
    """The first of ``others`` never slower than a tree on (kind, d) whatever the candidates
    ``rest`` (dimension -> candidates) of the kind's other dimensions; None if there is none."""
    colls = list({(c.type, c.size_bytes, c.participants, c.hops): c for w in workloads
                  for rc in w.demand.rank_classes for c in rc.collectives
                  if c.type == kind and c.algorithm == "hierarchical" and c.participants[d] > 1}.values())
    dims = sorted(rest)
    contexts = list(itertools.product(*(rest[e] for e in dims)))
    if not colls or len(contexts) > MAX_CONTEXTS:
        return None

    def rows(names: dict[int, str], c) -> tuple[np.ndarray, np.ndarray]:
        r = system_rows_of([c], net, _model(model, kind, names))
        return r.A, r.const_ns

    def below(x: str, ctx: tuple, c) -> bool:
        names = dict(zip(dims, ctx))
        return (not bounded_flows([c], net, _model(model, kind, {**names, d: x}))
                and _rows_below(rows({**names, d: x}, c), rows({**names, d: TREE}, c)))
    return next((x for x in others if all(below(x, ctx, c) for ctx in contexts for c in colls)), None)
