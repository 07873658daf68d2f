"""The joint replay without events, for graphs whose slots cannot be issued in another order.

When every GPU and CPU slot of a rank runs its nodes one after the other along dependencies (each
node of a slot depends on the slot's node before it), a slot is always free by the time its next
node is ready, whatever the durations: the replay's times are then plain longest paths, a node
ending at the latest end (or readiness, for a shared collective's partners) of what it waits for
plus its duration. One pass in a fixed topological order computes them with the same additions
and maxima as the event-driven replay, so the times are identical, at a fraction of its cost.

A slot whose nodes do not all depend on the slot's node before them could run them in an order
that depends on the durations. It is taken to run them in node order (a node then also waits for
the slot's node before it, and starts at the later of that end and its readiness), and each pass
checks, from the ends it found, that the replay would have issued them in that order: that no
other node left for the slot was ready first, or at the same moment in an order of events that
could put it first. If not, the caller replays with events.

A node's cause (what it waited for last) is the one that ended last. The event-driven replay
breaks ties in the order its events happen to be taken; the walk along a critical path here gives
up at any tie instead (``None``), and the caller replays with events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..ranges import concat_ranges


@dataclass(frozen=True)
class _SlotChecks:
    """The slots taken to run their nodes in node order without dependencies forcing it: their
    nodes (by slot, then node) and what each replay needs to check that order."""

    nodes: np.ndarray
    prev: np.ndarray                    # the slot's node before each (the zero node for its first)
    dep_idx: np.ndarray                 # each node's dependencies (the zero node for none) ...
    dep_start: np.ndarray               # ... from dep_start[i]
    dep_count: np.ndarray               # ... their number (1 for none)
    unready: np.ndarray                 # whether it has dependencies
    after: np.ndarray                   # whether it depends on the slot's node before it
    run_end: np.ndarray                 # the last position of the run of such nodes it is in
    segments: tuple[tuple[int, int], ...]   # positions of each slot

    @staticmethod
    def none() -> "_SlotChecks":
        empty = np.zeros(0, dtype=np.int64)
        flags = np.zeros(0, dtype=bool)
        return _SlotChecks(empty, empty, empty, empty, empty, flags, flags, empty, ())


@dataclass(frozen=True)
class FixedOrder:
    """A plan's graph in topological order, each node with two of its inputs to take the
    maximum of (repeated when it has one; nodes with more read partial maxima of extra nodes,
    numbered from ``size + 1``, that add no time; ``size`` itself always ends at 0). Two, not
    three: most nodes have one or two inputs, and each step of the pass reads and compares every
    input it holds, while a node with three takes one extra step."""

    size: int                           # nodes of the joint graph
    extra: int                          # partial-maximum nodes after the zero node
    order: list[int]                    # the nodes in topological order ...
    first: list[int]                    # ... and their two inputs
    second: list[int]
    waiters: np.ndarray                 # receives: taken as ending with their send, so they must take no time
    wait_srcs: np.ndarray               # ... and their sends
    deps: np.ndarray                    # distinct dependencies, grouped by node ...
    dep_ptr: np.ndarray                 # ... node g's from dep_ptr[g] (n + 1 entries)
    dep_cols: tuple[np.ndarray, ...] | None   # the same as columns (see _dep_columns)
    syncs: dict[int, list[int]]
    busy_comp: tuple[float, ...]        # per class: its GPU compute, summed in the order it runs
    loose_prev: np.ndarray              # a slot's node that the slot's next node does not depend on ...
    loose_next: np.ndarray              # ... and that next node, which also waits for it
    checks: _SlotChecks


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
    # for the one before it), which each replay checks (_slot_order_holds).
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
    checks = _SlotChecks.none()
    if loose_next.size:
        checks = _slot_checks(on, slot, direct, same, cu, dep_ptr, n, waits, syncs)
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
    out_order, out_a, out_b = order.tolist(), a.tolist(), b.tolist()
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


def _slot_checks(on: np.ndarray, slot: np.ndarray, direct: np.ndarray, same: np.ndarray, deps: np.ndarray,
                 dep_ptr: np.ndarray, n: int, waits: dict[int, int],
                 syncs: dict[int, list[int]]) -> _SlotChecks | None:
    """What the replays check of the slots with a node that does not depend on the slot's node
    before it (``on``: slotted nodes by slot, then node; ``same``: each next to the one before in
    the same slot; ``direct``: of those pairs, the ones with a direct dependency; ``deps``,
    ``dep_ptr``: the distinct dependencies grouped by node, as ``FixedOrder``); None if such a
    slot runs a node that waits on or is awaited by another class (its end or start is not the
    plain sum the slot order needs)."""
    direct_all = np.zeros(on.size, dtype=bool)
    direct_all[1:][same] = direct
    loose = np.zeros(int(slot[on].max()) + 1, dtype=bool)
    loose[slot[on[1:][same][~direct]]] = True
    mask = loose[slot[on]]
    nodes = on[mask]
    special = set(waits) | set(waits.values()) | set(syncs) | {u for us in syncs.values() for u in us}
    if special and np.isin(nodes, np.fromiter(special, dtype=np.int64, count=len(special))).any():
        return None
    prev_all = np.full(on.size, n, dtype=np.int64)
    prev_all[1:][same] = on[:-1][same]
    prev = prev_all[mask]
    brk = ~direct_all[mask]              # a slot's first node or one not depending on the one before
    run_end = np.flatnonzero(np.append(brk[1:], True))[np.cumsum(brk) - 1]
    bounds = np.flatnonzero(np.diff(slot[nodes]) != 0) + 1
    edges = [0, *bounds.tolist(), nodes.size]
    segments = tuple(zip(edges[:-1], edges[1:]))
    cu = np.append(deps, n)
    deg = np.diff(dep_ptr)[nodes]
    lens = np.maximum(deg, 1)
    first = np.where(deg > 0, dep_ptr[nodes], cu.size - 1)
    dep_start = np.cumsum(lens) - lens
    dep_idx = cu[concat_ranges(first, lens)]
    return _SlotChecks(nodes, prev, dep_idx, dep_start, lens, deg > 0, ~brk, run_end, segments)


def _slot_order_holds(c: _SlotChecks, F: list[float]) -> bool:
    """Whether each checked slot ran its nodes in node order with these ends (``F``: every node's,
    the zero node's included). When a node is issued, the slot's nodes before it have run and the
    ones left come after it, so it is the one the slot takes if it is queued by then: if it was
    ready before the slot's node before it ended, if it had no dependencies (ready before any
    node ends), or if it became ready when that node ended, as its only latest dependency (the
    slot is issued after that node's dependants are ready). Otherwise the slot is free when it
    becomes ready, and takes it only if every other node left for the slot becomes ready strictly
    later (in a tie the order of events would decide); the nodes that depend on it along the
    slot's direct dependencies cannot be ready before it ends."""
    if not c.nodes.size:
        return True
    ends = np.array(F)
    dep_ends = ends[c.dep_idx]
    ready = np.maximum.reduceat(dep_ends, c.dep_start)
    before = ends[c.prev]
    queued = (ready < before) | ~c.unready
    at_max = dep_ends == np.repeat(ready, c.dep_count)
    latest = np.add.reduceat(at_max, c.dep_start)
    queued |= c.after & (ready == before) & (latest == 1)
    if queued.all():
        return True
    later = np.full(ready.size, np.inf)
    for lo, hi in c.segments:
        if hi - lo > 1:
            later[lo:hi - 1] = np.minimum.accumulate(ready[hi - 1:lo:-1])[::-1]
    rest = later[c.run_end]
    open_ = ~queued & ~(ready < rest)
    if not open_.any():
        return True
    if np.any(open_ & (ready > rest)):
        return False
    # Ready at the same moment as another node left for the slot: it still comes first if both
    # became ready when the same node ended, its only latest dependency (its dependants are
    # taken in node order).
    pos = np.where(at_max, np.arange(dep_ends.size), dep_ends.size)
    why = np.where(c.unready & (latest == 1), c.dep_idx[np.minimum.reduceat(pos, c.dep_start)], -1)
    # The other nodes ready then are, from position a = run_end + 1, the ones ready at the
    # earliest readiness from each position on (which never decreases within a slot), in the
    # block of positions from a that share a's: per block, the least and greatest of their causes
    # from each position on, as one running extreme over keys that order the blocks.
    earliest = np.minimum(ready, later)
    start = np.concatenate(([True], earliest[1:] != earliest[:-1]))
    start[[lo for lo, _ in c.segments]] = True
    base = (np.cumsum(start) - 1) * (len(F) + 3)
    at_earliest = ready == earliest
    cause = why + 2                     # 1 for a tie among its latest dependencies
    lowest = np.minimum.accumulate((base + np.where(at_earliest, cause, len(F) + 2))[::-1])[::-1] - base
    highest = np.maximum.accumulate((np.where(at_earliest, cause, 0) - base)[::-1])[::-1] + base
    a = c.run_end[open_] + 1
    mine = cause[open_]
    return bool(np.all((why[open_] >= 0) & (lowest[a] == mine) & (highest[a] == mine)))


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


def finish_times(fo: FixedOrder, dur: np.ndarray) -> list[float] | None:
    """Every node's end, or None when the durations leave the fixed order's reach (a receive that
    takes time, a negative or undefined duration, a slot that would not run its nodes in node
    order)."""
    if dur.size and not np.all(dur >= 0.0):
        return None
    if fo.waiters.size and dur[fo.waiters].any():
        return None
    # each node holds its duration (the zero node and partial maxima 0) until its turn comes: its
    # end is then that plus the latest of its inputs (one addition, which is commutative)
    F = dur.tolist()
    F += [0.0] * (1 + fo.extra)
    for g, a, b in zip(fo.order, fo.first, fo.second):
        x = F[a]
        y = F[b]
        if y > x:
            x = y
        F[g] += x
    if not _slot_order_holds(fo.checks, F):
        return None
    del F[fo.size:]
    return F


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


def path_nodes(fo: FixedOrder, finish: np.ndarray, dur: np.ndarray, ends: Sequence[int]) -> list[list[int]] | None:
    """The path of causes that ends in each node of ``ends``, first node first, as the event-driven
    replay's causes give it; None if a node on a path has two causes that end at the same time."""
    return walk_causes(causes(fo, finish, dur).tolist(), ends)


def walk_causes(cause: list[int], ends: Sequence[int]) -> list[list[int]] | None:
    """The path of causes (-1: none) that ends in each node of ``ends``, first node first; None
    if one reaches a tie (-2)."""
    # the paths of a pipeline's classes share most of their nodes: each is walked only up to a
    # node of a path walked already
    path_of = [-1] * len(cause)
    at = [0] * len(cause)
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
