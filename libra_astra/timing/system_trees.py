"""Double binary trees in the optimizer's time model: a collective whose chunks run a
``doubleBinaryTree`` phase on some dimension, written as rows ``max_r (A[r] @ (1/B) + c[r])``.

A tree phase's ranks finish at different times (leaves last), so the phases after it start at
different times on different ranks. The model keeps one time per *position* (a rank's
coordinates in the dimensions that run trees; ranks at one position run alike) and follows
every event of ASTRA-sim 518bd51's tree phase (astra_collective._Replay.tree): a leaf sends its
chunk up ``ed`` after its start; a parent sends the sum up (the root: down) ``ed + R(m)`` after
the later of its start and its children's arrivals; the total comes down, and a parent sends it
on and ends ``ed + R(m)`` after it arrives, a leaf ``ed`` after. Every message is the whole chunk
``m``: ``hops x latency + m / B``. The trees alternate chunk by chunk (per kind and dimension).

Every event time is then the maximum of sums of such terms: a max-plus expression in 1/B, whose
terms are enumerated here symbolically (each time a set of affine functions of 1/B, with those
that another bounds at every bandwidth dropped), so the rows are the expression itself, without
ASTRA-sim's truncation of each message to whole ns (at most 1 ns a message). A queue that runs
one phase at a time takes its chunks in order (a chunk ends a phase before the next one starts
it), so its waits are maxima too. That holds when every chunk's phases have queues of their own
and the queue runs one phase at a time, or when no queue ever has more chunks than it runs at
once. Otherwise (several active chunks with more chunks than that, or a localBWAware all-reduce
over shared queues) which chunk a queue starts next can change with the bandwidths; the rows
then drop the queues' waits, a lower bound, and the time is ASTRA-sim's replay
(astra_collective), as for rings over shared queues (system_flow.py).

The collective's time is its slowest rank's, issued at one time on every rank, with the trees'
alternation as a fresh run starts it: what ``libra-astra predict`` gives it alone. (Started on
the other tree, after an odd number of tree phases, the slowest rank's time is the same in every
case the tests try: the two trees are one another shifted by a position.)
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from . import astra_collective as ac
from .astra_settings import SystemSettings


class TreePhase(NamedTuple):
    """A double binary tree phase on dimension ``dim`` of ``n`` members: an all-reduce of the
    whole ``m_bytes`` chunk whatever the collective, ``ed_ns`` per message, ``reduce_ns`` per sum."""

    dim: int
    n: int
    m_bytes: float
    ed_ns: float
    reduce_ns: float
    topology: str
    latency_ns: float


class TreeFlow(NamedTuple):
    """A collective with tree phases: its chunks' (queue, phase) in order, chunk count, queue
    capacity, and what ASTRA-sim's replay needs for its time where the rows only bound it."""

    phases: tuple
    chunks: int
    capacity: int
    kind: str
    size_bytes: int
    involved: tuple[bool, ...]
    dims: tuple[tuple[str, int, float], ...]        # (topology, npus, latency) per dimension
    settings: SystemSettings

    @property
    def exact(self) -> bool:
        queues = [q for q, _ in self.phases]
        return self.chunks <= self.capacity or (self.capacity == 1 and len(set(queues)) == len(queues))

    def time_ns(self, inv_bw: Sequence[float]) -> float:
        """ASTRA-sim's time of the collective (its slowest rank) at bandwidths ``1 / inv_bw``."""
        links = [ac.Link(topo, n, 1.0 / inv if inv > 0 else math.inf, lat)
                 for (topo, n, lat), inv in zip(self.dims, inv_bw)]
        return float(ac.collective_time_ns(self.kind, self.size_bytes, self.involved, links, self.settings))


# ---- max-plus expressions: rows [a_0 .. a_{D-1}, c], the value max_r (a_r @ x + c_r) ----

def _prune(p: np.ndarray) -> np.ndarray:
    """Drop the rows another row bounds from above in every coordinate (never the maximum)."""
    if p.shape[0] <= 1:
        return p
    p = np.unique(p, axis=0)
    geq = np.all(p[:, None, :] >= p[None, :, :], axis=2)       # geq[i, j]: row i >= row j
    np.fill_diagonal(geq, False)
    return p[~geq.any(axis=0)]


def _vmax(parts: Sequence[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else _prune(np.vstack(parts))


def _plus(p: np.ndarray, term: np.ndarray) -> np.ndarray:
    return p + term


def _term(D: int, dim: int = -1, a: float = 0.0, c: float = 0.0) -> np.ndarray:
    t = np.zeros(D + 1)
    if dim >= 0:
        t[dim] = a
    t[D] = c
    return t


def _tree_step(S: list, step: TreePhase, root_max: bool, slot: int, sizes: Sequence[int], D: int) -> list:
    """Each position's end of one tree phase, from each position's start ``S``."""
    parent, kids = ac._tree(step.n, root_max)
    link = ac.Link(step.topology, step.n, 1.0, step.latency_ns)
    stride = math.prod(sizes[:slot])
    wait, work = _term(D, c=step.ed_ns), _term(D, c=step.ed_ns + step.reduce_ns)

    def msg(src: int, dst: int) -> np.ndarray:
        return _term(D, step.dim, step.m_bytes, ac._hops(link, dst - src) * step.latency_ns)
    root = parent.index(-1)
    order, stack = [], [root]
    while stack:                                    # parents before children
        y = stack.pop()
        order.append(y)
        stack.extend(kids[y])
    E = [None] * len(S)
    for base in range(len(S)):
        if base // stride % sizes[slot]:
            continue
        at = [base + y * stride for y in range(step.n)]
        up: list = [None] * step.n                  # when each member sends up (the root: down)
        for y in reversed(order):
            if not kids[y]:
                up[y] = _plus(S[at[y]], wait)
            else:
                up[y] = _plus(_vmax([S[at[y]]] + [_plus(up[k], msg(k, y)) for k in kids[y]]), work)
        send = {root: up[root]}
        E[at[root]] = up[root]
        for y in order:
            for k in kids[y]:
                got = _plus(send[y], msg(y, k))
                send[k] = E[at[k]] = _plus(got, work if kids[k] else wait)
    return E


def _ends(f: TreeFlow, tree_dims: list[int], sizes: list[int], D: int, relaxed: bool):
    """The slowest position's end of the collective as a max-plus expression."""
    P = math.prod(sizes)
    zero = np.zeros((1, D + 1))
    turn: dict[int, int] = {}
    prev_chunk: list | None = None                  # the previous chunk's ends, per step
    last = []
    for _ in range(f.chunks):
        ends, S = [], [zero] * P
        for j, (_, ph) in enumerate(f.phases):
            if prev_chunk is not None and not relaxed and f.chunks > f.capacity:
                S = [_vmax([s, e]) for s, e in zip(S, prev_chunk[j])]       # the queue's one slot
            if isinstance(ph, TreePhase):
                k = turn[ph.dim] = turn.get(ph.dim, -1) + 1
                E = _tree_step(S, ph, k % 2 == 0, tree_dims.index(ph.dim), sizes, D)
            else:
                E = [_plus(s, _term(D, ph.dim, ph.a_bytes, ph.c_ns)) for s in S]
            ends.append(E)
            S = E
        prev_chunk = ends
        last.extend(ends[-1])
    return _vmax(last)


def _least_ns(step: TreePhase, root_max: bool, D: int) -> list[np.ndarray]:
    """Per member, the least time from its start to its end of a tree phase: its own chain up to
    the root and back (a member ends only after the total has come down to it)."""
    parent, kids = ac._tree(step.n, root_max)
    link = ac.Link(step.topology, step.n, 1.0, step.latency_ns)
    own = lambda y: step.ed_ns + (step.reduce_ns if kids[y] else 0.0)     # noqa: E731
    out = []
    for y in range(step.n):
        t = _term(D, c=own(y) * (2 if parent[y] >= 0 else 1))
        a = y
        while parent[a] >= 0:
            p = parent[a]
            t = t + 2 * _term(D, step.dim, step.m_bytes, ac._hops(link, p - a) * step.latency_ns)
            t = t + _term(D, c=(step.ed_ns + step.reduce_ns) * (2 if parent[p] >= 0 else 1))
            a = p
        out.append(t)
    return out


def _work_rows(f: TreeFlow, tree_dims: list[int], sizes: list[int], D: int) -> list[np.ndarray]:
    """Lower bounds from the queues' work: at each position a queue holds every chunk's phase
    for at least its least time, ``capacity`` at a time, after the phases before it that do not
    depend on the position (ring, direct, halving-doubling) and before those after it."""
    rows = []
    fixed = [None if isinstance(ph, TreePhase) else _term(D, ph.dim, ph.a_bytes, ph.c_ns) for _, ph in f.phases]
    turn: dict[int, int] = {}
    least: list[list] = [[] for _ in f.phases]        # per step: per chunk, per member
    for _ in range(f.chunks):
        for j, (_, ph) in enumerate(f.phases):
            if isinstance(ph, TreePhase):
                k = turn[ph.dim] = turn.get(ph.dim, -1) + 1
                least[j].append(_least_ns(ph, k % 2 == 0, D))
    for j, (_, ph) in enumerate(f.phases):
        rest = sum((t for i, t in enumerate(fixed) if i != j and t is not None), _term(D))
        if not isinstance(ph, TreePhase):
            rows.append(rest + -(-f.chunks // f.capacity) * fixed[j])
            continue
        for y in range(ph.n):
            rows.append(rest + sum(chunk[y] for chunk in least[j]) / f.capacity)
    return rows


def tree_rows(f: TreeFlow, num_dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, const) of the collective: exact when ``f.exact`` (but for ASTRA-sim's truncation of
    each message to whole ns), else lower bounds (the queues' waits dropped; each queue's work)."""
    tree_dims = sorted({ph.dim for _, ph in f.phases if isinstance(ph, TreePhase)})
    sizes = [next(ph.n for _, ph in f.phases if isinstance(ph, TreePhase) and ph.dim == d) for d in tree_dims]
    rows = _ends(f, tree_dims, sizes, num_dims, not f.exact)
    if not f.exact:
        rows = _vmax([rows, np.array(_work_rows(f, tree_dims, sizes, num_dims))])
    return np.ascontiguousarray(rows[:, :num_dims]), np.ascontiguousarray(rows[:, num_dims])
