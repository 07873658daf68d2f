"""The GPU-faithful step as a function of the collectives' transfers, for the optimizer.

replay.py's rules, written as one max-plus graph over every rank: a node starts at the latest end
of what it waits for plus its recorded lag and ends its duration later; a collective's transfer
starts (on the shared clock) when its last member is there and ends on every member at once. So
every value is a maximum over paths of a constant plus the transfers on the path, and so is each
rank's step, as long as the step starts independently of the transfers (checked): a convex,
non-decreasing function of the transfers, which are convex in 1/B. The optimizer adds the
critical path of each rank at a design as a cutting plane (optimize/optimizer.py), as it does for
the overlap model's dependency paths.
"""

from __future__ import annotations

import graphlib
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from ..errors import LibraError
from .collectives import MeasuredCollective
from .kineto import RankProfile
from .replay import rank_graphs

_HUGE_NS = 1e15     # a transfer no step could hide: a value that moves with it depends on it


@dataclass(frozen=True, eq=False)
class FaithfulGraph:
    """Values (each node's start and end per rank, each collective's release) in topological
    order, each the maximum over its inputs of (input + constant [+ a transfer]). An input below 0
    is the origin of rank position ``-1 - input`` (its profile's first recorded time)."""

    ranks: tuple[int, ...]
    order: tuple[int, ...]
    ins: tuple[tuple[tuple[int, float, int], ...], ...]   # per value: (input, constant ns, collective or -1)
    origin_ns: tuple[int, ...]                            # per rank position, from the earliest one's
    # per rank position, per profiled step: (its end value, ns after it, its start value or -1, ns before it)
    steps: tuple[tuple[tuple[int, int, int, int], ...], ...]
    num_collectives: int

    def values(self, transfer_ns: Sequence[float]) -> tuple[list[float], list[int]]:
        """Every value at these transfers, and the input each took its maximum from."""
        t = list(transfer_ns)
        val = [0.0] * len(self.ins)
        arg = [0] * len(self.ins)
        origin = self.origin_ns
        for v in self.order:
            best, which = -np.inf, 0
            for j, (src, w, c) in enumerate(self.ins[v]):
                x = (val[src] if src >= 0 else origin[-1 - src]) + w + (t[c] if c >= 0 else 0.0)
                if x > best:
                    best, which = x, j
            val[v], arg[v] = best, which
        return val, arg

    def rank_steps_ns(self, transfer_ns: Sequence[float]) -> list[float]:
        """Each rank's replayed step (the mean over its profiled steps), ns, in ``ranks`` order."""
        val, _ = self.values(transfer_ns)
        return [self._step(val, i) for i in range(len(self.ranks))]

    def _step(self, val: list[float], i: int) -> float:
        total = 0.0
        for end, after, start, before in self.steps[i]:
            total += (val[end] + after) - ((val[start] if start >= 0 else 0.0) - before)
        return total / len(self.steps[i])

    def path(self, val: list[float], arg: list[int], v: int) -> tuple[float, list[int], list[int]]:
        """The critical path ending at value ``v``: (its constant, its collectives, its values)."""
        const, colls, seen = 0.0, [], []
        while v >= 0:
            seen.append(v)
            src, w, c = self.ins[v][arg[v]]
            const += w
            if c >= 0:
                colls.append(c)
            if src < 0:
                const += self.origin_ns[-1 - src]
            v = src
        return const, colls, seen

    @cached_property
    def fixed_starts(self) -> bool:
        """Whether every step starts at the same time whatever the transfers."""
        n = self.num_collectives
        lo, _ = self.values([0.0] * n)
        hi, _ = self.values([_HUGE_NS] * n)
        return all(start < 0 or lo[start] == hi[start] for steps in self.steps for _, _, start, _ in steps)


def faithful_graph(profiles: Sequence[RankProfile], collectives: Sequence[MeasuredCollective], world: int,
                   offsets_ns: Sequence[int] | None, source: str) -> FaithfulGraph:
    """The GPU-faithful replay of these profiles as one graph (replay.py's rules, module docstring)."""
    graphs = rank_graphs(profiles, collectives, world)
    ranks = tuple(p.rank for p in profiles)
    off = dict(zip(ranks, offsets_ns or [0] * len(ranks)))
    ins: list[list[tuple[int, float, int]]] = []

    def new() -> int:
        ins.append([])
        return len(ins) - 1

    release = [new() for _ in collectives]
    # Times relative to the earliest rank's first record: epoch nanoseconds are past float64's exact integers.
    shift = min(graphs[r][1][0] for r in ranks)
    origins, steps = [], []
    for i, r in enumerate(ranks):
        nodes, (lo, _), bounds = graphs[r]
        origins.append(lo - shift)
        start = {k: new() for k in nodes}
        end = {k: new() for k in nodes}
        for k, n in nodes.items():
            if n.sync and len(n.deps) > 1:
                # blocked: starts after its thread, ends after the device op it waited for
                ins[start[k]].append((end[n.deps[0]], n.lag_ns, -1))
                ins[end[k]] += [(start[k], n.dur_ns, -1), (end[n.deps[-1]], n.dur_ns, -1)]
                continue
            ins[start[k]] += [(end[d], n.lag_ns, -1) for d in n.deps] or [(-1 - i, n.lag_ns, -1)]
            if n.coll is None:
                ins[end[k]].append((start[k], n.dur_ns, -1))
            else:
                # on the shared clock the release is the last member's arrival
                ins[release[n.coll]].append((start[k], -off[r], -1))
                ins[end[k]].append((release[n.coll], off[r], n.coll))
        rank_steps = []
        for w_lo, w_hi, first, last, launched in bounds:
            if last is None:
                raise LibraError(f"{source}: rank {r} has a profiled step without host calls; the GPU-faithful "
                                 "optimum needs each step's calls")
            # its end: as long after its thread's last call as recorded, and after the device work it
            # launched, less what that work overran the step by in the record
            e = new()
            ins[e] += [(end[last], w_hi - nodes[last].rec_end, -1)]
            ins[e] += [(end[k], min(0, w_hi - nodes[k].rec_end), -1) for k in launched]
            s = (start[first], nodes[first].rec_start - w_lo) if first is not None else (-1, shift - w_lo)
            rank_steps.append((e, 0, s[0], s[1]))
        steps.append(tuple(rank_steps))
    missing = [c for c, v in enumerate(release) if not ins[v]]
    if missing:
        raise LibraError(f"{source}: collective #{missing[0]} has no member in the profiles; measure the same profiles")
    try:
        order = tuple(graphlib.TopologicalSorter({v: [s for s, _, _ in e if s >= 0]
                                                  for v, e in enumerate(ins)}).static_order())
    except graphlib.CycleError:
        raise LibraError(f"{source}: the ranks' collectives wait on each other in a cycle (the profiles do not "
                         "order them the same way on every rank); the GPU-faithful replay has no fixed point") from None
    return FaithfulGraph(ranks, order, tuple(tuple(e) for e in ins), tuple(origins), tuple(steps), len(collectives))
