"""The critical paths of a fixed-order pass: what each node waited for last, walked back from
the ends.

A node's cause (what it waited for last) is the one that ended last. The event-driven replay
breaks ties in the order its events happen to be taken; the walk along a critical path here gives
up at any tie instead (``None``), and the caller replays with events. The walk runs compiled with
the pass (_fixed_pass.pyx) where the install built it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import fixed_order as fixed_order_mod
from .fixed_order import FixedOrder


def causes(fo: FixedOrder, finish: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """What each node waited for last, as the event-driven replay records it: -1 for nothing, -2
    where two causes end at the same time (the replay's order of events would decide)."""
    F = finish
    if fo.dep_cols is not None:
        ready, cause = _latest_by_columns(fo.dep_cols, F, fo.size)
    else:
        ready, cause = _latest_by_runs(fo.deps, fo.dep_ptr, F, fo.size)
    if fo.loose_next.size:
        # a node that waited for its slot waited for the slot's node before it (ran in node order)
        late = F[fo.loose_prev] > ready[fo.loose_next]
        cause[fo.loose_next[late]] = fo.loose_prev[late]
    start = ready
    if fo.syncs:
        # a shared collective starts when its partners are ready, if later (the first latest partner)
        start, ready_cause = ready.copy(), cause.copy()
        for g, partners in fo.syncs.items():
            t, why = ready[g], ready_cause[g]
            for u in partners:
                if ready[u] > t:
                    t, why = ready[u], ready_cause[u]
            start[g], cause[g] = t, why
    # a receive ends with its send if that ends later than the receive alone would
    if fo.waiters.size:
        w = fo.waiters
        late = F[fo.wait_srcs] > start[w] + dur[w]
        cause[w[late]] = fo.wait_srcs[late]
    return cause


def _latest_by_runs(deps: np.ndarray, ptr: np.ndarray, F: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(each node's readiness: the latest end of its dependencies, 0 for none; the first of them
    to end then, -1 for none, -2 if two do), from the dependencies grouped by node."""
    deg = np.diff(ptr)
    has = deg > 0
    vals = F[deps]
    ready = np.zeros(n)
    starts = ptr[:-1][has]
    if starts.size:
        ready[has] = np.maximum.reduceat(vals, starts)
    at_max = vals == np.repeat(ready, deg)
    ties = np.zeros(n, dtype=np.int64)
    first = np.full(n, -1, dtype=np.int64)
    if starts.size:
        ties[has] = np.add.reduceat(at_max, starts)
        pos = np.where(at_max, np.arange(vals.size), vals.size)
        first[has] = deps[np.minimum.reduceat(pos, starts)]
    return ready, np.where(ties > 1, -2, first)


def _latest_by_columns(cols: tuple[np.ndarray, ...], F: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """As _latest_by_runs, from the dependencies as columns (_dep_columns): a few operations on
    whole columns instead of reductions over runs of one to a few entries. The padding ends at
    -inf, below any end, so it is never the latest of a node with dependencies."""
    if not cols:
        return np.zeros(n), np.full(n, -1, dtype=np.int64)
    ends = np.append(F, -np.inf)
    vals = [ends[c] for c in cols]
    ready = vals[0]
    for v in vals[1:]:
        ready = np.maximum(ready, v)
    ties = np.zeros(n, dtype=np.int64)
    first = np.full(n, -1, dtype=np.int64)
    for c, v in zip(cols, vals):
        at = v == ready
        ties += at
        first = np.where(at, c, first)      # the cause where it is the only one at the latest end
    cause = np.where(ties > 1, -2, first)
    none = cols[0] == n
    ready[none] = 0.0
    cause[none] = -1
    return ready, cause


def path_nodes(fo: FixedOrder, finish: np.ndarray, dur: np.ndarray, ends: Sequence[int]) -> list[np.ndarray] | None:
    """The path of causes that ends in each node of ``ends``, first node first, as the event-driven
    replay's causes give it; None if a node on a path has two causes that end at the same time."""
    cause = causes(fo, finish, dur)
    kernel = fixed_order_mod._kernel
    if kernel is not None:
        return kernel.walk_causes(np.ascontiguousarray(cause, dtype=np.int64), ends)
    return walk_causes(cause.tolist(), ends)


def walk_causes(cause: list[int], ends: Sequence[int]) -> list[np.ndarray] | None:
    """The path of causes (-1: none) that ends in each node of ``ends``, first node first, as
    read-only int64 arrays; None if one reaches a tie (-2)."""
    # the paths of a pipeline's classes share most of their nodes: each is walked only up to a
    # node of a path walked already, and takes the rest of that path as one copy
    path_of = [-1] * len(cause)
    at = [0] * len(cause)
    walked: list[np.ndarray] = []       # each path, its end first
    for g in ends:
        ids: list[int] = []
        w = len(walked)
        i = 0
        while g >= 0:
            p = path_of[g]
            if p >= 0:
                break
            path_of[g] = w
            at[g] = i
            i += 1
            ids.append(g)
            g = cause[g]
        if g == -2:
            return None
        new = np.array(ids, dtype=np.int64)
        path = new if g < 0 else np.concatenate((new, walked[p][at[g]:]))
        path.flags.writeable = False    # answers are cached: no caller changes them
        walked.append(path)
    return [ids[::-1] for ids in walked]
