"""Whether a slot ran its nodes in node order: the check each fixed-order pass makes where
dependencies do not force that order.

A slot whose nodes do not all depend on the slot's node before them could run them in an order
that depends on the durations. The fixed order (fixed_order.py) takes it to run them in node order
(a node then also waits for the slot's node before it, and starts at the later of that end and its
readiness), and each pass checks here, from the ends it found, that the event-driven replay would
have issued them in that order: that no other node left for the slot was ready first, or at the
same moment in an order of events that could put it first. If not, the caller replays with events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ranges import concat_ranges


@dataclass(frozen=True)
class SlotChecks:
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
    def none() -> "SlotChecks":
        empty = np.zeros(0, dtype=np.int64)
        flags = np.zeros(0, dtype=bool)
        return SlotChecks(empty, empty, empty, empty, empty, flags, flags, empty, ())


def slot_checks(on: np.ndarray, slot: np.ndarray, direct: np.ndarray, same: np.ndarray, deps: np.ndarray,
                dep_ptr: np.ndarray, n: int, waits: dict[int, int],
                syncs: dict[int, list[int]]) -> SlotChecks | None:
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
    return SlotChecks(nodes, prev, dep_idx, dep_start, lens, deg > 0, ~brk, run_end, segments)


def slot_order_holds(c: SlotChecks, F: np.ndarray | list[float]) -> bool:
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
    ends = np.asarray(F, dtype=float)
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
