"""Chunks through phases: a collective's time from its phases (system_phases.py), as ASTRA-sim's
queues run them, written as rows ``max_r (A[r] @ (1/B) + c[r])`` for the optimizer.

All K chunks of a collective enter the queue of their first phase at once, in order; a queue
runs at most ``active-chunks-per-dimension`` phases at a time, first come first served, and a
chunk that ends a phase joins its next phase's queue in the same instant (docs/astra-sim-settings.md).

When every phase of a chunk has a queue of its own (reduce-scatter, all-gather, all-to-all,
baseline all-reduce, and any collective on one dimension), chunks leave each queue in the
order they entered it, and with ``W = (K - 1) // cap`` the time is exactly::

    max_i ( sum_j p_j + W p_i )

(a path through the queues that waits W times at one of them; with the phases' times p affine
in 1/B each term is a row). One chunk is the sum of its phases. A localBWAware all-reduce over
two or more dimensions with more than one chunk sends reduce-scatter and all-gather phases
through one queue per dimension, and which of them goes first can change with the bandwidths:
its rows are then *lower bounds* (the chain of one chunk; each queue's work divided by its
capacity between the phases that must precede and follow it; each kind of phase's waves), and
:func:`replay_ns` gives the time itself. The optimizer minimizes the bounds and the design's
time is the replay's, so the certificate says how far the bound is from it.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple, Sequence

import numpy as np

from .system_phases import Phase


class Flow(NamedTuple):
    """A collective as the queues see it: its chunks' phases, chunk count and queue capacity."""

    phases: tuple[tuple[int, Phase], ...]     # (queue, phase) of one chunk, in order
    chunks: int
    capacity: int

    @property
    def exact(self) -> bool:
        queues = [q for q, _ in self.phases]
        return self.chunks <= 1 or len(set(queues)) == len(queues)


def _row(parts: Sequence[tuple[float, Phase]], num_dims: int) -> tuple[np.ndarray, float]:
    a = np.zeros(num_dims)
    c = 0.0
    for mult, p in parts:
        a[p.dim] += mult * p.a_bytes
        c += mult * p.c_ns
    return a, c


def flow_rows(f: Flow, num_dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, const) of a collective's rows: exact when ``f.exact``, else lower bounds."""
    ps = [p for _, p in f.phases]
    if not ps:
        return np.zeros((1, num_dims)), np.zeros(1)
    K, cap = f.chunks, f.capacity
    rows = [_row([(1.0, p) for p in ps], num_dims)]
    if K > 1 and f.exact:
        W = (K - 1) // cap
        rows += [_row([(1.0 + (W if j == i else 0), p) for j, p in enumerate(ps)], num_dims) for i in range(len(ps))]
    elif K > 1:
        waves = -(-K // cap)
        queues = [q for q, _ in f.phases]
        for i, q in enumerate(queues):
            # this phase's K instances take `waves` rounds; one chunk's other phases before and after
            rows.append(_row([(waves if j == i else 1.0, p) for j, p in enumerate(ps)], num_dims))
            if queues.index(q) == i and queues.count(q) > 1:
                last = len(queues) - 1 - queues[::-1].index(q)
                # the queue's work over its capacity, between what precedes its first phase and
                # what follows its last
                outside = [(1.0, p) for j, p in enumerate(ps) if j < i or j > last]
                shared = [(K / cap, ps[j]) for j in range(len(queues)) if queues[j] == q]
                rows.append(_row(outside + shared, num_dims))
    A = np.array([r[0] for r in rows])
    const = np.array([r[1] for r in rows])
    return A, const


def replay_ns(f: Flow, inv_bw: Sequence[float]) -> float:
    """The collective's time at bandwidths ``1 / inv_bw``: the chunks' walk through the queues,
    event by event (ends in the order they happen, ties in the order they were scheduled)."""
    dur = [p.a_bytes * inv_bw[p.dim] + p.c_ns for _, p in f.phases]
    if not dur or f.chunks <= 0:
        return 0.0
    queues = [q for q, _ in f.phases]
    waiting: dict[int, list[int]] = {q: [] for q in queues}
    running = {q: 0 for q in queues}
    events: list = []
    seq = 0
    step = [0] * f.chunks
    end = 0.0

    def admit(q: int, t: float) -> None:
        nonlocal seq
        while waiting[q] and running[q] < f.capacity:
            ch = waiting[q].pop(0)
            running[q] += 1
            heapq.heappush(events, (t + dur[step[ch]], seq, ch))
            seq += 1

    waiting[queues[0]].extend(range(f.chunks))
    admit(queues[0], 0.0)
    while events:
        t, _, ch = heapq.heappop(events)
        q = queues[step[ch]]
        running[q] -= 1
        step[ch] += 1
        if step[ch] < len(dur):
            nq = queues[step[ch]]
            waiting[nq].append(ch)
            admit(nq, t)
        else:
            end = max(end, t)
        admit(q, t)
    return end
