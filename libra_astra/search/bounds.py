"""Proven lower bounds on a candidate's optimum, cheap enough to compute for every candidate.

The simulator-faithful time of a rank class is at least the length of any path through the job's
dependency graph (compute and collectives, across pipeline stages): one compute and one
collective run at a time and every wait only adds time. On a path P with compute C(P) and
collectives whose per-dimension traffic sums to S_d (bytes per NPU):

- a collective takes at least max_d traffic_d / B_d (every time model row holds a dimension's
  full traffic over its bandwidth, plus non-negative terms), so the path takes at least
  C(P) + max_d S_d / B_d;
- with k chunks (``splits``) a collective takes at least (1/k) sum_d traffic_d / B_d (its
  bottleneck row holds every other dimension's traffic / k), so also C(P) + sum_d S_d / (k B_d).

Minimizing over the bandwidths a single constraint allows gives closed forms (Cauchy-Schwarz):
sum_d B_d <= W: min max_d S_d/B_d = sum S / W and min sum_d S_d/B_d = (sum sqrt S_d)^2 / W;
with a budget sum_d p_d B_d <= U (p_d: USD per GB/s of dimension d): sum p S / U and
(sum sqrt(p S))^2 / U. Dropping the other constraints only lowers the minimum, so each is a
lower bound on the constrained optimum, and so is the largest of them. For time x cost:
(C + sum S/(kB)) (sum p B) >= C c_min + (sum sqrt(p S))^2 / k and max_d S_d/B_d sum p B >=
sum p S. For min-cost with a time target T: the path needs sum S/(kB) <= T - C(P), so the cost is
at least (sum sqrt(p S))^2 / (k (T - C(P))), and a path whose compute exceeds T is infeasible.

In the simulator-matching model a collective's bottleneck row also holds the hop latency of
every dimension it uses (ring steps x hops per step x latency per hop), a constant the path adds
to the sum form.

Paths used: the longest compute-only path, the longest path with each collective weighted by its
bytes over the total bandwidth (both found once per parallelization), and each rank class's
collective chain (the generator chains a rank's collectives in issue order).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from .upstream import COLL, COMP, RECV, SEND, Constraints, ring_steps

TIME_BOUNDS = ("compute path", "bytes path", "collective chain")


@dataclass(frozen=True)
class PathSummary:
    """A path's compute and its collectives as (kind, size_bytes, axis) -> count."""

    name: str
    compute_ns: float
    colls: tuple[tuple[tuple[str, int, str], int], ...]


def _stage_graph(programs: dict) -> tuple[list, list, list]:
    """Nodes (stage, op) of all pipeline stages with edges: program dependencies plus send -> recv."""
    stages = sorted(programs)
    base = {}
    n = 0
    for s in stages:
        base[s] = n
        n += len(programs[s])
    preds: list[list[int]] = [[] for _ in range(n)]
    weight_c = [0.0] * n
    coll = [None] * n
    for s in stages:
        ops = programs[s]
        b = base[s]
        for i, op in enumerate(ops):
            for u in op.data_deps + op.ctrl_deps:
                preds[b + i].append(b + u)
            if op.kind == COMP:
                weight_c[b + i] = op.duration_micros * 1000.0
            elif op.kind == COLL:
                coll[b + i] = (op.coll, op.size_bytes, op.axis)
            elif op.kind == SEND:
                coll[b + i] = ("P2P", op.size_bytes, "pp")
        # receives wait for the matching sends of the neighbouring stage, k-th to k-th
        recv_prev = [i for i, op in enumerate(ops) if op.kind == RECV and op.peer_offset < 0]
        recv_next = [i for i, op in enumerate(ops) if op.kind == RECV and op.peer_offset > 0]
        if s - 1 in programs:
            other = [i for i, op in enumerate(programs[s - 1]) if op.kind == SEND and op.peer_offset > 0]
            for r, u in zip(recv_prev, other):
                preds[b + r].append(base[s - 1] + u)
        if s + 1 in programs:
            other = [i for i, op in enumerate(programs[s + 1]) if op.kind == SEND and op.peer_offset < 0]
            for r, u in zip(recv_next, other):
                preds[b + r].append(base[s + 1] + u)
    return preds, weight_c, coll


def _topo(preds: list[list[int]]) -> list[int]:
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for v, ps in enumerate(preds):
        for u in ps:
            succ[u].append(v)
            indeg[v] += 1
    order = [v for v in range(n) if indeg[v] == 0]
    i = 0
    while i < len(order):
        u = order[i]
        i += 1
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order


def longest_paths(programs: dict, collective_bytes, total_bw_gbps: float | None) -> list[PathSummary]:
    """The longest compute-only path and (with a total bandwidth) the longest path weighting each
    collective by its bytes per NPU over the total bandwidth.

    ``collective_bytes(kind, size, axis)`` gives a collective's bytes per NPU summed over dimensions
    (placement-independent for the hierarchical algorithm: 2 m (P-1)/P for all-reduce, ...)."""
    preds, wc, coll = _stage_graph(programs)
    order = _topo(preds)
    out = []
    alphas = [("compute path", 0.0)]
    if total_bw_gbps:
        alphas.append(("bytes path", 1.0 / total_bw_gbps))
    cb = [collective_bytes(*c) if c is not None else 0.0 for c in coll]
    n = len(preds)
    # both weightings in one pass: (compute only, compute + alpha * bytes)
    alpha = alphas[-1][1]
    d0, d1 = [0.0] * n, [0.0] * n
    a0, a1 = [-1] * n, [-1] * n
    for v in order:
        b0 = b1 = 0.0
        w0 = w1 = -1
        for u in preds[v]:
            if w0 < 0 or d0[u] > b0:
                b0, w0 = d0[u], u
            if w1 < 0 or d1[u] > b1:
                b1, w1 = d1[u], u
        d0[v] = b0 + wc[v]
        d1[v] = b1 + wc[v] + alpha * cb[v]
        a0[v], a1[v] = w0, w1
    for (name, _), dist, arg in zip(alphas, (d0, d1), (a0, a1)):
        end = max(range(n), key=dist.__getitem__) if n else -1
        comp = 0.0
        colls: Counter = Counter()
        v = end
        while v >= 0:
            comp += wc[v]
            if coll[v] is not None and coll[v][0] != "P2P":
                colls[coll[v]] += 1
            v = arg[v]
        out.append(PathSummary(name, comp, tuple(sorted(colls.items()))))
    return out


def collective_chains(programs: dict) -> list[PathSummary]:
    """Per stage program, its chain of collectives (no compute); identical chains once."""
    seen = set()
    out = []
    for s in sorted(programs):
        c = tuple(sorted(Counter((op.coll, op.size_bytes, op.axis) for op in programs[s] if op.kind == COLL).items()))
        if c not in seen:  # the middle stages of a pipeline have the same chain
            seen.add(c)
            out.append(PathSummary("collective chain", 0.0, c))
    return out


def path_traffic(path: PathSummary, traffic, num_dims: int) -> list[float]:
    """Per-dimension bytes per NPU of the path's collectives; ``traffic(kind, size, axis)`` gives one's."""
    tot = [0.0] * num_dims
    for (kind, size, axis), cnt in path.colls:
        for d, t in enumerate(traffic(kind, size, axis)):
            tot[d] += t * cnt
    return tot


def path_ring_steps(path: PathSummary, participants, num_dims: int) -> list[float]:
    """Per dimension, the ring steps the path's collectives take there (``participants(axis)``)."""
    tot = [0.0] * num_dims
    for (kind, _size, axis), cnt in path.colls:
        for d, p in enumerate(participants(axis)):
            tot[d] += ring_steps(kind, p) * cnt
    return tot


def path_latency_ns(steps: Sequence[float], hop_ns: Sequence[float]) -> float:
    """Hop latency the path's collectives pay at least: in the simulator-matching model a collective's
    bottleneck row holds the latency of every dimension it uses (steps x hops per step x latency)."""
    return sum(s * h for s, h in zip(steps, hop_ns))


def bound(objective: str, paths: Sequence[tuple[str, float, Sequence[float], float]], prices: Sequence[float],
          cons: Constraints, splits: int, c_min: float = 0.0) -> tuple[float, str]:
    """(lower bound on the candidate's objective, name of the path that gives it); inf = infeasible.

    ``paths``: (name, compute_ns, per-dimension traffic S, latency_ns) of each path (see
    :func:`path_traffic`, :func:`path_latency_ns`; latency 0 for a model without latency)."""
    k = float(splits)
    best, name = 0.0, "none"
    W, U = cons.total_bw_gbps, cons.budget_usd
    for pname, comp, S, lat in paths:
        total = sum(S)
        if objective == "perf":
            comm = lat
            if W:
                root = sum(math.sqrt(x) for x in S)
                comm = max(total / W, root * root / (k * W) + lat)
            if U:
                pS = [p * x for p, x in zip(prices, S)]
                root = sum(math.sqrt(x) for x in pS)
                comm = max(comm, sum(pS) / U, root * root / (k * U) + lat)
            val = comp + comm
        else:
            pS = [p * x for p, x in zip(prices, S)]
            root = sum(math.sqrt(x) for x in pS)
            if objective == "perf-per-cost":
                val = max(comp * c_min + sum(pS), (comp + lat) * c_min + root * root / k)
            else:  # min-cost
                T = cons.time_target_ns or math.inf
                if T - comp - lat <= 0:
                    return math.inf, pname
                val = max(sum(pS) / (T - comp), root * root / (k * (T - comp - lat)))
        if val > best:
            best, name = val, pname
    return best, name


def needs_prices(objective: str, cons: Constraints) -> bool:
    """Whether the bound depends on the dimensions' prices (else one bound serves every block choice)."""
    return objective != "perf" or bool(cons.budget_usd)


def min_cost_usd(prices: Sequence[float], cons: Constraints) -> float:
    """Least network cost the total-bandwidth equality forces (0 when only upper bounds are given)."""
    if cons.total_bw_gbps and not cons.total_bw_is_upper_bound:
        return cons.total_bw_gbps * min(prices)
    return 0.0
