"""The replayed ranks' times once every collective's release is known, in one pass.

A replay couples its ranks only through the collectives: a collective's transfer starts (its
release) when its last member is ready. Each rank is a graph of nodes with a start and an end; a
node's start needs some of its dependencies' starts or ends, its end needs its own start (and, for a
synchronizing call, the device work it waits for), and a collective node's end needs the release.
Taking events (a node's start or end) as soon as everything they need is known solves all ranks in
time linear in their nodes. Iterating whole-rank replays until the releases stop changing gives the
same times but takes as many passes as the longest chain of collectives (hundreds for a profile of
100 steps); it stays as the answer for a graph whose ranks wait on each other in a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class RankEvents:
    """One rank's graph for :func:`settle_events`, nodes numbered 0..n-1.

    ``start_needs[k]`` / ``end_needs[k]``: the events node k's start / end needs besides its own start
    (event ``2 * j`` is node j's start, ``2 * j + 1`` its end); ``coll[k]``: its collective or None;
    ``start_of(k, start, end)`` and ``end_of(k, start, end, release)`` compute them (``release``: the
    collective's on this rank's clock, None for other nodes)."""

    start_needs: Sequence[Sequence[int]]
    end_needs: Sequence[Sequence[int]]
    coll: Sequence[int | None]
    start_of: Callable[[int, list, list], int]
    end_of: Callable[[int, list, list, int | None], int]


def settle_events(ranks: dict[int, RankEvents], off: dict[int, int]) -> dict[int, tuple[list, list]] | None:
    """Each rank's (start, end) per node; None when the ranks wait on each other in a cycle."""
    members: dict[int, int] = {}
    for g in ranks.values():
        for c in g.coll:
            if c is not None:
                members[c] = members.get(c, 0) + 1
    state = {}
    queue: list[tuple[int, int]] = []
    coll_nodes: dict[int, list[tuple[int, int]]] = {}
    for r, g in ranks.items():
        n = len(g.coll)
        waiting = [0] * (2 * n)
        users: list[list[int]] = [[] for _ in range(2 * n)]
        for k in range(n):
            for e in g.start_needs[k]:
                users[e].append(2 * k)
            waiting[2 * k] = len(g.start_needs[k])
            needs_end = list(g.end_needs[k]) + [2 * k]
            for e in needs_end:
                users[e].append(2 * k + 1)
            waiting[2 * k + 1] = len(needs_end) + (g.coll[k] is not None)
            if g.coll[k] is not None:
                coll_nodes.setdefault(g.coll[k], []).append((r, k))
            if not waiting[2 * k]:
                queue.append((r, 2 * k))
        state[r] = ([None] * n, [None] * n, waiting, users)
    release: dict[int, int] = {}
    ready: dict[int, int] = {}
    done = 0
    while queue:
        r, e = queue.pop()
        g = ranks[r]
        start, end, waiting, users = state[r]
        k = e >> 1
        if e & 1:
            c = g.coll[k]
            end[k] = g.end_of(k, start, end, None if c is None else release[c] + off[r])
        else:
            start[k] = g.start_of(k, start, end)
            c = g.coll[k]
            if c is not None:
                t = start[k] - off[r]
                ready[c] = t if c not in ready else max(ready[c], t)
                members[c] -= 1
                if not members[c]:
                    release[c] = ready[c]
                    for r2, k2 in coll_nodes[c]:
                        w = state[r2][2]
                        w[2 * k2 + 1] -= 1
                        if not w[2 * k2 + 1]:
                            queue.append((r2, 2 * k2 + 1))
        done += 1
        for u in users[e]:
            waiting[u] -= 1
            if not waiting[u]:
                queue.append((r, u))
    if done != sum(2 * len(g.coll) for g in ranks.values()):
        return None
    return {r: (s[0], s[1]) for r, s in state.items()}


def settle(times: Callable[[int, dict[int, int]], tuple[dict, dict, dict]], ranks: Sequence[int], count: int,
           off: dict[int, int]) -> dict[int, tuple[dict, dict]]:
    """Each rank's (start, end) of every node once the collectives' releases reach their fixed
    point: ``times(rank, releases on its clock)`` replays one rank and gives (start, end, ready
    of each collective); a release is its last member's readiness on the shared clock."""
    release: dict[int, int] = {}
    results: dict[int, tuple[dict, dict]] = {}
    for _ in range(count + 2):
        ready_all: dict[int, list[int]] = {}
        for r in ranks:
            start, end, ready = times(r, {i: t + off[r] for i, t in release.items()})
            results[r] = (start, end)
            for i, t in ready.items():
                ready_all.setdefault(i, []).append(t - off[r])
        new = {i: max(ts) for i, ts in ready_all.items()}
        if new == release:
            break
        release = new
    return results
