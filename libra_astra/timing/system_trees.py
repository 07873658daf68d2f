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

import itertools
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
        return fixed_order(self)

    def time_ns(self, inv_bw: Sequence[float]) -> float:
        """ASTRA-sim's time of the collective (its slowest rank) at bandwidths ``1 / inv_bw``."""
        if any(inv == math.inf and used for inv, used in zip(inv_bw, self.involved)):
            return math.inf                         # a dimension it uses has no bandwidth
        links = [ac.Link(topo, n, 1.0 / inv if 0 < inv < math.inf else 1.0, lat)
                 for (topo, n, lat), inv in zip(self.dims, inv_bw)]
        try:
            return float(ac.collective_time_ns(self.kind, self.size_bytes, self.involved, links, self.settings))
        except ac.NeverEnds:        # ASTRA-sim deadlocks at these bandwidths
            return math.inf


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


def _least_of(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """A lower bound of min(p, q): min(a x + c, a' x + c') >= min(a, a') x + min(c, c') for x >= 0."""
    return _prune(np.minimum(p[:, None, :], q[None, :, :]).reshape(-1, p.shape[1]))


def _kth_least(values: Sequence[np.ndarray], k: int) -> np.ndarray:
    """A lower bound of the k-th smallest of ``values``: the least over k of them of their
    maximum (all of them at once when there are too many such sets)."""
    sets = list(itertools.combinations(range(len(values)), k)) if math.comb(len(values), k) <= 64 else []
    if not sets:
        out = np.vstack(values)
        return out.min(axis=0, keepdims=True)
    out = _vmax([values[x] for x in sets[0]])
    for t in sets[1:]:
        out = _least_of(out, _vmax([values[x] for x in t]))
    return out


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


def _turns(f: TreeFlow) -> list[list[int]]:
    """Which tree each chunk's step runs (even: the root last): ASTRA-sim counts a dimension's
    tree phases per kind in the order the chunks' phases are made, chunk by chunk."""
    seen: dict[int, int] = {}
    out = []
    for _ in range(f.chunks):
        row = []
        for _, ph in f.phases:
            k = seen[ph.dim] = seen.get(ph.dim, -1) + 1 if isinstance(ph, TreePhase) else -1
            row.append(k)
        out.append(row)
    return out


def _queue_before(f: TreeFlow) -> dict[tuple[int, int], tuple[int, int]]:
    """(chunk, step) -> the phase its queue runs just before it, when the order is fixed and
    the queue runs one at a time: a queue of one step takes the chunks in order; a queue of the
    first and last steps (a localBWAware all-reduce on two dimensions) takes every chunk's first
    step, all queued at the issue, then the last steps as they come, in chunk order."""
    queues = [q for q, _ in f.phases]
    out = {}
    for q in dict.fromkeys(queues):
        steps = [j for j, x in enumerate(queues) if x == q]
        order = [(i, j) for j in steps for i in range(f.chunks)]
        out.update({b: a for a, b in zip(order, order[1:])})
    return out


def fixed_order(f: TreeFlow) -> bool:
    """Whether every queue's order is fixed (the rows are then the time)."""
    queues = [q for q, _ in f.phases]
    steps = {q: [j for j, x in enumerate(queues) if x == q] for q in queues}
    return f.chunks <= f.capacity or (f.capacity == 1 and all(
        len(s) == 1 or (len(s) == 2 and s == [0, len(queues) - 1]) for s in steps.values()))


def _ends(f: TreeFlow, tree_dims: list[int], sizes: list[int], D: int, relaxed: bool):
    """The slowest position's end of the collective as a max-plus expression."""
    P = math.prod(sizes)
    zero = np.zeros((1, D + 1))
    turns = _turns(f)
    before = {} if relaxed or f.chunks <= f.capacity else _queue_before(f)
    E: dict[tuple[int, int], list] = {}
    first: list = []                                # (relaxed) each chunk's start of its first step
    q0 = f.phases[0][0]
    for j, (q, ph) in enumerate(f.phases):          # a queue's phase waits only for earlier steps
        for i in range(f.chunks):
            S = E[(i, j - 1)] if j else [zero] * P
            if (i, j) in before:                    # the queue's one slot
                S = [_vmax([s, e]) for s, e in zip(S, E[before[(i, j)]])]
            elif relaxed and f.chunks > f.capacity and j == 0 and i >= f.capacity:
                # every chunk waits in the first queue from the issue, in order: chunk i starts
                # once i - capacity + 1 of the earlier ones have ended
                S = [_kth_least([E[(x, 0)][p] for x in range(i)], i - f.capacity + 1) for p in range(P)]
            elif relaxed and f.chunks > f.capacity and j and q == q0:
                S = [_vmax([s, e]) for s, e in zip(S, first[-1])]   # behind every chunk's first step
            if j == 0:
                first.append(S)
            if isinstance(ph, TreePhase):
                E[(i, j)] = _tree_step(S, ph, turns[i][j] % 2 == 0, tree_dims.index(ph.dim), sizes, D)
            else:
                E[(i, j)] = [_plus(s, _term(D, ph.dim, ph.a_bytes, ph.c_ns)) for s in S]
    return _vmax([e for i in range(f.chunks) for e in E[(i, len(f.phases) - 1)]])


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
    """Lower bounds from the queues' work, per position: a queue holds each chunk's phase for at
    least its least time, ``capacity`` at a time (so for at least the sum over the capacity, and
    for ``ceil(chunks / capacity)`` of the shortest), after the position's least time through the
    steps before and before its least time through the steps after. (The least of two affine
    times is bounded from below by their least coefficients.)"""
    P, J = math.prod(sizes), len(f.phases)
    lb = np.zeros((P, f.chunks, J, D + 1))          # least time of each position's, chunk's and step's phase
    turns = _turns(f)
    for i in range(f.chunks):
        for j, (_, ph) in enumerate(f.phases):
            if not isinstance(ph, TreePhase):
                lb[:, i, j] = _term(D, ph.dim, ph.a_bytes, ph.c_ns)
                continue
            least = np.array(_least_ns(ph, turns[i][j] % 2 == 0, D))
            slot = tree_dims.index(ph.dim)
            lb[:, i, j] = least[np.arange(P) // math.prod(sizes[:slot]) % sizes[slot]]
    low = lb.min(axis=1)                            # (P, J): whichever chunk comes first
    queues = [q for q, _ in f.phases]
    rows = []
    for q in dict.fromkeys(queues):
        steps = [j for j in range(J) if queues[j] == q]
        outside = low[:, :steps[0]].sum(axis=1) + low[:, steps[-1] + 1:].sum(axis=1)
        rows.append(outside + lb[:, :, steps].sum(axis=(1, 2)) / f.capacity)
        for j in steps:
            rest = low.sum(axis=1) - low[:, j]
            rows.append(rest + -(-f.chunks // f.capacity) * low[:, j])
    return list(np.vstack(rows))


def tree_rows(f: TreeFlow, num_dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, const) of the collective: exact when ``f.exact`` (but for ASTRA-sim's truncation of
    each message to whole ns), else lower bounds (the queues' waits dropped; each queue's work)."""
    tree_dims = sorted({ph.dim for _, ph in f.phases if isinstance(ph, TreePhase)})
    sizes = [next(ph.n for _, ph in f.phases if isinstance(ph, TreePhase) and ph.dim == d) for d in tree_dims]
    rows = _ends(f, tree_dims, sizes, num_dims, not f.exact)
    if not f.exact:
        rows = _vmax([rows, np.array(_work_rows(f, tree_dims, sizes, num_dims))])
    return np.ascontiguousarray(rows[:, :num_dims]), np.ascontiguousarray(rows[:, num_dims])
