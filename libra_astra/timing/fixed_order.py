"""The joint replay without events, for graphs whose slots cannot be issued in another order.

When every GPU and CPU slot of a rank runs its nodes one after the other along dependencies (each
node of a slot depends on the slot's node before it), a slot is always free by the time its next
node is ready, whatever the durations: the replay's times are then plain longest paths, a node
ending at the latest end (or readiness, for a shared collective's partners) of what it waits for
plus its duration. One pass in a fixed topological order computes them with the same additions
and maxima as the event-driven replay, so the times are identical, at a fraction of its cost.

A node's cause (what it waited for last) is the one that ended last. The event-driven replay
breaks ties in the order its events happen to be taken; the walk along a critical path here gives
up at any tie instead (``None``), and the caller replays with events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class FixedOrder:
    """A plan's graph in topological order, each node with three of its inputs to take the
    maximum of (repeated when it has fewer; nodes with more read partial maxima of extra nodes,
    numbered from ``size + 1``, that add no time; ``size`` itself always ends at 0)."""

    size: int                           # nodes of the joint graph
    extra: int                          # partial-maximum nodes after the zero node
    order: list[int]                    # the nodes in topological order ...
    first: list[int]                    # ... and their three inputs
    second: list[int]
    third: list[int]
    waiters: np.ndarray                 # receives: taken as ending with their send, so they must take no time
    wait_srcs: np.ndarray               # ... and their sends
    deps: np.ndarray                    # distinct dependencies, grouped by node ...
    dep_ptr: np.ndarray                 # ... node g's from dep_ptr[g] (n + 1 entries)
    waits: dict[int, int]
    syncs: dict[int, list[int]]
    busy_comp: tuple[float, ...]        # per class: its GPU compute, summed in the order it runs


def fixed_order(offsets: Sequence[int], dep_u: np.ndarray, dep_v: np.ndarray, slot: np.ndarray,
                comp: np.ndarray, base_ns: np.ndarray, waits: dict[int, int], syncs: dict[int, list[int]],
                busy_start: Sequence[float]) -> FixedOrder | None:
    """The fixed order of a plan's graph, or None if its slots' order could depend on durations,
    a class's nodes are not numbered in dependency order, or ranks wait on each other in a cycle."""
    n = int(offsets[-1])
    if not n or dep_u.size and not np.all(dep_u < dep_v):
        return None
    # Each node of a slot must depend directly on the slot's node before it (in node order, which
    # then is the only order the slot can run them in).
    on = np.flatnonzero(slot >= 0)
    on = on[np.argsort(slot[on], kind="stable")]
    same = slot[on[1:]] == slot[on[:-1]]
    # dependencies as one sorted key each, by node then dependency, each once
    keys = np.sort(dep_v * n + dep_u)
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys
    pairs = on[1:][same] * n + on[:-1][same]
    if pairs.size:
        at = np.minimum(np.searchsorted(keys, pairs), keys.size - 1)
        if not keys.size or not np.all(keys[at] == pairs):
            return None
    order = _merge_classes(offsets, dep_u, dep_v, waits, syncs)
    if order is None:
        return None
    # distinct dependencies (a repeated one is still one cause), by node then dependency
    cu, cv = keys % n, keys // n
    dep_ptr = _starts(cv, n)
    # Inputs: dependencies, the send a receive waits for, the dependencies of a shared
    # collective's partners (their readiness), or the zero node for a partner with none.
    srcs = np.fromiter(waits.values(), dtype=np.int64, count=len(waits))
    dsts = np.fromiter(waits.keys(), dtype=np.int64, count=len(waits))
    iu, iv, ptr = cu, cv, dep_ptr
    if waits or syncs:
        us, vs = [cu, srcs], [cv, dsts]
        for g, partners in syncs.items():
            for p in partners:
                ins = cu[dep_ptr[p]:dep_ptr[p + 1]]
                us.append(ins if ins.size else np.array([n]))
                vs.append(np.full(max(ins.size, 1), g))
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
    c = ins[np.minimum(at + 2, last)]
    out_order, out_a, out_b, out_c = order.tolist(), a.tolist(), b.tolist(), c.tolist()
    extra = 0
    wide = np.flatnonzero(deg > 3)
    if wide.size:
        # Three inputs at a time: partial maxima in extra nodes just before the node.
        o2: list[int] = []
        a2: list[int] = []
        b2: list[int] = []
        c2: list[int] = []
        prev = 0
        for pos in wide.tolist():
            o2 += out_order[prev:pos]
            a2 += out_a[prev:pos]
            b2 += out_b[prev:pos]
            c2 += out_c[prev:pos]
            g = out_order[pos]
            xs = iu[ptr[g]:ptr[g + 1]].tolist()
            while len(xs) > 3:
                extra += 1
                v = n + extra
                o2.append(v)
                a2.append(xs[0])
                b2.append(xs[1])
                c2.append(xs[2])
                xs = [v] + xs[3:]
            xs += [xs[0]] * (3 - len(xs))
            o2.append(g)
            a2.append(xs[0])
            b2.append(xs[1])
            c2.append(xs[2])
            prev = pos + 1
        out_order, out_a, out_b, out_c = (o2 + out_order[prev:], a2 + out_a[prev:], b2 + out_b[prev:],
                                          c2 + out_c[prev:])
    busy = []
    for ci in range(len(offsets) - 1):
        lo, hi = offsets[ci], offsets[ci + 1]
        comps = base_ns[lo:hi][comp[lo:hi]]
        # one addition after the other, as the replay adds each compute node when it ends
        busy.append(float(np.cumsum(np.concatenate(([busy_start[ci]], comps)))[-1]))
    return FixedOrder(n, extra, out_order, out_a, out_b, out_c, dsts, srcs, cu, dep_ptr, waits, syncs, tuple(busy))


def _starts(sorted_nodes: np.ndarray, n: int) -> np.ndarray:
    """Where each node's entries begin in an array sorted by node (n + 1 entries)."""
    return np.concatenate(([0], np.cumsum(np.bincount(sorted_nodes, minlength=n))))


def _merge_classes(offsets, dep_u, dep_v, waits, syncs) -> np.ndarray | None:
    """A topological order of the joint graph: each class in node order, a class stopping at a
    receive until its send is placed and at a shared collective until its partners' dependencies
    are (all of the partner's class before it)."""
    k = len(offsets) - 1
    cls_of = np.repeat(np.arange(k), np.diff(np.asarray(offsets)))
    needs: dict[int, list[tuple[int, int]]] = {}
    for g, src in waits.items():
        needs.setdefault(g, []).append((int(cls_of[src]), src + 1))
    for g, partners in syncs.items():
        for p in partners:
            needs.setdefault(g, []).append((int(cls_of[p]), p))
    stops: list[list[int]] = [[] for _ in range(k)]
    for g in sorted(needs):
        stops[int(cls_of[g])].append(g)
    cursor = list(offsets[:-1])
    nxt = [0] * k
    pieces: list[tuple[int, int]] = []
    moved = True
    while moved:
        moved = False
        for ci in range(k):
            end = offsets[ci + 1]
            while cursor[ci] < end:
                i = nxt[ci]
                stop = stops[ci][i] if i < len(stops[ci]) else end
                if stop > cursor[ci]:
                    pieces.append((cursor[ci], stop))
                    cursor[ci] = stop
                    moved = True
                if stop == end:
                    break
                if any(cursor[c] < need for c, need in needs[stop]):
                    break
                pieces.append((stop, stop + 1))
                cursor[ci] = stop + 1
                nxt[ci] = i + 1
                moved = True
    if any(cursor[ci] < offsets[ci + 1] for ci in range(k)):
        return None
    if not pieces:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(lo, hi) for lo, hi in pieces])


def finish_times(fo: FixedOrder, dur: np.ndarray) -> list[float] | None:
    """Every node's end, or None when the durations leave the fixed order's reach (a receive that
    takes time, a negative or undefined duration)."""
    if dur.size and not np.all(dur >= 0.0):
        return None
    if fo.waiters.size and dur[fo.waiters].any():
        return None
    # each node holds its duration (the zero node and partial maxima 0) until its turn comes: its
    # end is then that plus the latest of its inputs (one addition, which is commutative)
    F = dur.tolist()
    F += [0.0] * (1 + fo.extra)
    for g, a, b, c in zip(fo.order, fo.first, fo.second, fo.third):
        x = F[a]
        y = F[b]
        if y > x:
            x = y
        y = F[c]
        if y > x:
            x = y
        F[g] += x
    del F[fo.size:]
    return F


def causes(fo: FixedOrder, finish: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """What each node waited for last, as the event-driven replay records it: -1 for nothing, -2
    where two causes end at the same time (the replay's order of events would decide)."""
    n = fo.size
    F = finish
    ptr = fo.dep_ptr
    deg = np.diff(ptr)
    has = deg > 0
    vals = F[fo.deps]
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
        first[has] = fo.deps[np.minimum.reduceat(pos, starts)]
    cause = np.where(ties > 1, -2, first)
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


def path_nodes(fo: FixedOrder, finish: np.ndarray, dur: np.ndarray, ends: Sequence[int]) -> list[list[int]] | None:
    """The path of causes that ends in each node of ``ends``, first node first, as the event-driven
    replay's causes give it; None if a node on a path has two causes that end at the same time."""
    cause = causes(fo, finish, dur).tolist()
    # the paths of a pipeline's classes share most of their nodes: each is walked only up to a
    # node of a path walked already
    path_of = [-1] * fo.size
    at = [0] * fo.size
    walked: list[list[int]] = []
    for g in ends:
        ids: list[int] = []
        w = len(walked)
        i = 0
        while g >= 0:
            p = path_of[g]
            if p >= 0:
                ids += walked[p][at[g]:]
                break
            path_of[g] = w
            at[g] = i
            i += 1
            ids.append(g)
            g = cause[g]
        if g == -2:
            return None
        walked.append(ids)
    return [ids[::-1] for ids in walked]
