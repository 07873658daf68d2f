"""The joint replay without events, for graphs whose slots cannot be issued in another order.

When every GPU and CPU slot of a rank runs its nodes one after the other along dependencies (each
node of a slot depends on the slot's node before it), a slot is always free by the time its next
node is ready, whatever the durations: the replay's times are then plain longest paths, a node
ending at the latest end (or readiness, for a shared collective's partners) of what it waits for
plus its duration. One pass in a fixed topological order computes them with the same additions
and maxima as the event-driven replay, so the times are identical, at a fraction of its cost.

A slot whose nodes do not all depend on the slot's node before them is taken to run them in node
order, which each pass checks (slot_order.py); the causes along critical paths are found from the
ends afterwards (causes.py). The pass itself runs compiled (_fixed_pass.pyx) where the install
built it, else as the Python loop here: the same steps, so the same ends to the last bit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from ..ranges import concat_ranges
from .slot_order import SlotChecks, slot_checks, slot_order_holds

try:
    # The pass compiled (setup.py builds it when it can); LIBRA_ASTRA_PYTHON_PASS=1 keeps the loop.
    from . import _fixed_pass as _kernel
except ImportError:
    _kernel = None
if os.environ.get("LIBRA_ASTRA_PYTHON_PASS") == "1":
    _kernel = None


@dataclass(frozen=True)
class FixedOrder:
    """A plan's graph in topological order, each node with two of its inputs to take the
    maximum of (repeated when it has one; nodes with more read partial maxima of extra nodes,
    numbered from ``size + 1``, that add no time; ``size`` itself always ends at 0). Two, not
    three: most nodes have one or two inputs, and each step of the pass reads and compares every
    input it holds, while a node with three takes one extra step."""

    size: int                           # nodes of the joint graph
    extra: int                          # partial-maximum nodes after the zero node
    order: np.ndarray                   # the nodes in topological order (int64) ...
    first: np.ndarray                   # ... and their two inputs
    second: np.ndarray
    waiters: np.ndarray                 # receives: taken as ending with their send, so they must take no time
    wait_srcs: np.ndarray               # ... and their sends
    deps: np.ndarray                    # distinct dependencies, grouped by node ...
    dep_ptr: np.ndarray                 # ... node g's from dep_ptr[g] (n + 1 entries)
    dep_cols: tuple[np.ndarray, ...] | None   # the same as columns (see _dep_columns)
    syncs: dict[int, list[int]]
    busy_comp: tuple[float, ...]        # per class: its GPU compute, summed in the order it runs
    loose_prev: np.ndarray              # a slot's node that the slot's next node does not depend on ...
    loose_next: np.ndarray              # ... and that next node, which also waits for it
    checks: SlotChecks

    @cached_property
    def steps(self) -> tuple[list[int], list[int], list[int]]:
        """(order, first, second) as lists, for the Python loop."""
        return self.order.tolist(), self.first.tolist(), self.second.tolist()


def fixed_order(offsets: Sequence[int], dep_u: np.ndarray, dep_v: np.ndarray, slot: np.ndarray,
                comp: np.ndarray, base_ns: np.ndarray, waits: dict[int, int], syncs: dict[int, list[int]],
                busy_start: Sequence[float]) -> FixedOrder | None:
    """The fixed order of a plan's graph, or None if a class's nodes are not numbered in
    dependency order, ranks wait on each other in a cycle, or a slot whose order could depend on
    durations runs a node that waits on or is awaited by another class."""
    n = int(offsets[-1])
    if not n or dep_u.size and not np.all(dep_u < dep_v):
        return None
    # A slot whose nodes each depend directly on the slot's node before it can only run them in
    # node order. Any other slot is taken to run them in node order too (each node then also waits
    # for the one before it), which each replay checks (slot_order_holds).
    on = np.flatnonzero(slot >= 0)
    on = on[np.argsort(slot[on], kind="stable")]
    same = slot[on[1:]] == slot[on[:-1]]
    # dependencies as one sorted key each, by node then dependency, each once (the stable sort is
    # the fastest: the keys come in sorted runs)
    keys = dep_v * n + dep_u
    by_key = np.argsort(keys, kind="stable")
    keys = keys[by_key]
    once = np.concatenate(([True], keys[1:] != keys[:-1])) if keys.size else np.zeros(0, dtype=bool)
    keys = keys[once]
    prev, nxt = on[:-1][same], on[1:][same]
    pairs = nxt * n + prev
    direct = np.ones(pairs.size, dtype=bool)
    if pairs.size and keys.size:
        at = np.minimum(np.searchsorted(keys, pairs), keys.size - 1)
        direct = keys[at] == pairs
    elif pairs.size:
        direct[:] = False
    loose_prev, loose_next = prev[~direct], nxt[~direct]
    # distinct dependencies (a repeated one is still one cause), by node then dependency
    cu, cv = dep_u[by_key][once], dep_v[by_key][once]
    dep_ptr = _starts(cv, n)
    checks = SlotChecks.none()
    if loose_next.size:
        checks = slot_checks(on, slot, direct, same, cu, dep_ptr, n, waits, syncs)
        if checks is None:
            return None
    order = _merge_classes(offsets, dep_u, dep_v, waits, syncs)
    if order is None:
        return None
    # Inputs: dependencies, the send a receive waits for, the dependencies of a shared
    # collective's partners (their readiness), or the zero node for a partner with none.
    srcs = np.fromiter(waits.values(), dtype=np.int64, count=len(waits))
    dsts = np.fromiter(waits.keys(), dtype=np.int64, count=len(waits))
    iu, iv, ptr = cu, cv, dep_ptr
    if waits or syncs or loose_next.size:
        # (a node after a slot's node it does not depend on also waits for that node's end)
        us, vs = [cu, srcs, loose_prev], [cv, dsts, loose_next]
        takers, counts = [], []
        for g, partners in syncs.items():
            for p in partners:
                ins = cu[dep_ptr[p]:dep_ptr[p + 1]]
                us.append(ins if ins.size else np.array([n]))
                takers.append(g)
                counts.append(max(ins.size, 1))
        vs.append(np.repeat(np.array(takers, dtype=np.int64), counts))
        iu, iv = np.concatenate(us), np.concatenate(vs)
        ii = np.argsort(iv, kind="stable")
        iu, iv = iu[ii], iv[ii]
        ptr = _starts(iv, n)
    deg = np.diff(ptr)[order]
    ins = np.concatenate([iu, [n]])     # a node without inputs reads the zero node
    at = np.where(deg > 0, ptr[order], iu.size)
    last = at + np.maximum(deg, 1) - 1
    a = ins[at]
    b = ins[np.minimum(at + 1, last)]
    extra = 0
    wide = np.flatnonzero(deg > 2)
    if wide.size:
        order, a, b, extra = _two_at_a_time(order, a, b, wide, deg[wide], ptr[order[wide]], iu, n)
    out_order, out_a, out_b = (np.ascontiguousarray(x, dtype=np.int64) for x in (order, a, b))
    busy = []
    for ci in range(len(offsets) - 1):
        lo, hi = offsets[ci], offsets[ci + 1]
        comps = base_ns[lo:hi][comp[lo:hi]]
        # one addition after the other, as the replay adds each compute node when it ends
        busy.append(float(np.cumsum(np.concatenate(([busy_start[ci]], comps)))[-1]))
    return FixedOrder(n, extra, out_order, out_a, out_b, dsts, srcs, cu, dep_ptr,
                      _dep_columns(cu, dep_ptr, n), syncs, tuple(busy),
                      loose_prev, loose_next, checks)


def _two_at_a_time(order: np.ndarray, a: np.ndarray, b: np.ndarray, wide: np.ndarray, deg: np.ndarray,
                   start: np.ndarray, ins: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(order, first inputs, second inputs, extra nodes) with the nodes at positions ``wide`` (their
    ``deg`` inputs from ``ins[start]``) reading partial maxima: before each, extra nodes numbered
    from n + 1 on, the first taking the maximum of its first two inputs and each next one of the
    extra node before it and its next input; the node itself takes the last extra node and its
    last input."""
    m = deg - 2                             # extra nodes of each wide node
    total = int(m.sum())
    last_id = n + np.cumsum(m)              # the last extra node of each
    ids = n + 1 + np.arange(total)
    j = np.arange(total) - np.repeat(np.cumsum(m) - m, m)      # an extra node's place before its node
    first_in = np.repeat(start, m)
    extra_a = np.where(j == 0, ins[first_in], ids - 1)
    extra_b = ins[first_in + j + 1]
    a, b = a.copy(), b.copy()
    a[wide] = last_id
    b[wide] = ins[start + deg - 1]
    # every step moves on by the extra nodes placed up to it; the extra nodes fill the gaps
    shift = np.zeros(order.size, dtype=np.int64)
    shift[wide] = m
    at = np.arange(order.size) + np.cumsum(shift)
    extra_at = np.repeat(at[wide] - m, m) + j
    size = order.size + total
    out = [np.empty(size, dtype=np.int64) for _ in range(3)]
    for o, steps, extras in zip(out, (order, a, b), (ids, extra_a, extra_b)):
        o[at] = steps
        o[extra_at] = extras
    return out[0], out[1], out[2], total


# Nodes with more distinct dependencies than this have their latest found by runs (reduceat):
# columns as wide as the widest node would hold mostly padding.
_MAX_COLUMNS = 4


def _dep_columns(deps: np.ndarray, dep_ptr: np.ndarray, n: int) -> tuple[np.ndarray, ...] | None:
    """Each node's distinct dependencies as columns, column j holding its (j + 1)-th (in the order
    of ``deps``) or ``n`` where it has fewer; None if a node has more than _MAX_COLUMNS."""
    deg = np.diff(dep_ptr)
    width = int(deg.max()) if n else 0
    if width > _MAX_COLUMNS:
        return None
    at = dep_ptr[:-1]
    last = max(deps.size - 1, 0)
    padded = np.append(deps, n)
    return tuple(np.where(deg > j, padded[np.minimum(at + j, last)], n) for j in range(width))


def _starts(sorted_nodes: np.ndarray, n: int) -> np.ndarray:
    """Where each node's entries begin in an array sorted by node (n + 1 entries)."""
    return np.concatenate(([0], np.cumsum(np.bincount(sorted_nodes, minlength=n))))


def _merge_classes(offsets, dep_u, dep_v, waits, syncs) -> np.ndarray | None:
    """A topological order of the joint graph: each class in node order, a class stopping at a
    receive until its send is placed and at a shared collective until its partners' dependencies
    are (all of the partner's class before it)."""
    k = len(offsets) - 1
    cls_of = np.repeat(np.arange(k), np.diff(np.asarray(offsets))).tolist()
    needs: dict[int, list[tuple[int, int]]] = {}
    for g, src in waits.items():
        needs.setdefault(g, []).append((cls_of[src], src + 1))
    for g, partners in syncs.items():
        for p in partners:
            needs.setdefault(g, []).append((cls_of[p], p))
    stops: list[list[int]] = [[] for _ in range(k)]
    for g in sorted(needs):
        stops[cls_of[g]].append(g)
    cursor = list(offsets[:-1])
    nxt = [0] * k
    pieces: list[tuple[int, int]] = []
    moved = True
    while moved:
        moved = False
        for ci in range(k):
            # the class runs on from its cursor, one piece up to its first stop that has to wait
            start = cursor[ci]
            mine, i = stops[ci], nxt[ci]
            while i < len(mine):
                stop = mine[i]
                cursor[ci] = stop       # its nodes before the stop are placed
                blocked = False
                for c, need in needs[stop]:
                    if cursor[c] < need:
                        blocked = True
                        break
                if blocked:
                    break
                i += 1
                cursor[ci] = stop + 1
            else:
                cursor[ci] = offsets[ci + 1]
            if cursor[ci] > start:
                pieces.append((start, cursor[ci]))
                moved = True
            nxt[ci] = i
    if any(cursor[ci] < offsets[ci + 1] for ci in range(k)):
        return None
    if not pieces:
        return np.zeros(0, dtype=np.int64)
    lo, hi = np.array(pieces, dtype=np.int64).T
    return concat_ranges(lo, hi - lo)


def finish_times(fo: FixedOrder, dur: np.ndarray) -> np.ndarray | None:
    """Every node's end, or None when the durations leave the fixed order's reach (a receive that
    takes time, a negative or undefined duration, a slot that would not run its nodes in node
    order)."""
    if dur.size and not np.all(dur >= 0.0):
        return None
    if fo.waiters.size and dur[fo.waiters].any():
        return None
    # each node holds its duration (the zero node and partial maxima 0) until its turn comes: its
    # end is then that plus the latest of its inputs (one addition, which is commutative)
    if _kernel is not None:
        F = np.zeros(fo.size + 1 + fo.extra)
        F[:fo.size] = dur
        _kernel.longest_paths(fo.order, fo.first, fo.second, F)
    else:
        F = _python_pass(fo, dur)
    if not slot_order_holds(fo.checks, F):
        return None
    return F[:fo.size]


def _python_pass(fo: FixedOrder, dur: np.ndarray) -> np.ndarray:
    """The pass as a Python loop over the steps (the compiled one's reference)."""
    F = dur.tolist()
    F += [0.0] * (1 + fo.extra)
    order, first, second = fo.steps
    for g, a, b in zip(order, first, second):
        x = F[a]
        y = F[b]
        if y > x:
            x = y
        F[g] += x
    return np.array(F)
