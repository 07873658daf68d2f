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

With ``--algorithms auto`` the traffic and latency of each collective are its least over every
implementation (``algorithms.least_collective``; docs/search.md): the same forms hold with the
queue bytes in the max form and one chunk's bytes (not divided by k) in the sum form.

Paths used: the longest compute-only path, the longest path with each collective weighted by its
bytes over the total bandwidth (both found once per parallelization), and each rank class's
collective chain (the generator chains a rank's collectives in issue order).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from .upstream import COLL, COMP, RECV, SEND, Constraints

TIME_BOUNDS = ("compute path", "bytes path", "collective chain")


@dataclass(frozen=True)
class PathSummary:
    """A path's compute and its collectives as (kind, size_bytes, axis) -> count."""

    name: str
    compute_ns: float
    colls: tuple[tuple[tuple[str, int, str], int], ...]


@dataclass(frozen=True)
class _Compact:
    """One stage program as plain lists (made once per program object: the middle stages of a
    pipeline share theirs)."""

    preds: list            # per op, its dependencies (local indices, all earlier: program order is topological)
    comp_ns: list          # per op, compute time (0 for anything but compute)
    nbytes: list           # per op, bytes per NPU of a collective or a send (0 otherwise)
    coll: list             # per op, (kind, size, axis) of a collective, else None
    recv_prev: list        # receives from the previous stage, in order
    recv_next: list
    send_next: list        # sends to the next stage, in order
    send_prev: list


def _compact(ops, collective_bytes) -> _Compact:
    preds, comp, nbytes, coll = [], [], [], []
    rp, rn, sn, spv = [], [], [], []
    for i, op in enumerate(ops):
        deps = op.data_deps + op.ctrl_deps
        if deps and max(deps) >= i:
            raise ValueError(f"op {i} ({op.name}) depends on a later op")  # the generator never writes that
        preds.append(deps)
        k = op.kind
        if k == COMP:
            comp.append(op.duration_micros * 1000.0)
            nbytes.append(0.0)
            coll.append(None)
        elif k == COLL:
            comp.append(0.0)
            nbytes.append(collective_bytes(op.coll, op.size_bytes, op.axis))
            coll.append((op.coll, op.size_bytes, op.axis))
        else:
            comp.append(0.0)
            nbytes.append(collective_bytes("P2P", op.size_bytes, "pp") if k == SEND else 0.0)
            coll.append(None)
            if k == RECV:
                (rp if op.peer_offset < 0 else rn).append(i)
            elif k == SEND:
                (spv if op.peer_offset < 0 else sn).append(i)
    return _Compact(preds, comp, nbytes, coll, rp, rn, sn, spv)


def longest_paths(programs: dict, collective_bytes, total_bw_gbps: float | None) -> list[PathSummary]:
    """The longest compute-only path and (with a total bandwidth) the longest path weighting each
    collective by its bytes per NPU over the total bandwidth, through all pipeline stages: program
    dependencies plus each receive waiting for the matching send of the neighbouring stage
    (k-th receive from a side to the k-th send towards it).

    ``collective_bytes(kind, size, axis)`` gives a collective's bytes per NPU summed over dimensions
    (placement-independent for the hierarchical algorithm: 2 m (P-1)/P for all-reduce, ...).
    Ties go to the first dependency and the first end node (tests compare with a plain pass in
    topological order)."""
    stages = sorted(programs)
    S = len(stages)
    by_id: dict = {}
    comp = [by_id.get(id(programs[s])) or by_id.setdefault(id(programs[s]), _compact(programs[s], collective_bytes))
            for s in stages]
    base, n = [], 0
    for c in comp:
        base.append(n)
        n += len(c.preds)
    alpha = 1.0 / total_bw_gbps if total_bw_gbps else 0.0
    # per stage: receive -> (stage index, local index) of the send it waits for
    ext: list[dict] = [{} for _ in stages]
    pos = {s: i for i, s in enumerate(stages)}
    for si, s in enumerate(stages):
        c = comp[si]
        # stage 0 receives from the last stage (and the last from stage 0) only in the
        # interleaved schedule, whose chunks wrap around the pipeline
        if (s - 1) % S in pos:
            o = pos[(s - 1) % S]
            ext[si].update((r, (o, u)) for r, u in zip(c.recv_prev, comp[o].send_next))
        if (s + 1) % S in pos:
            o = pos[(s + 1) % S]
            ext[si].update((r, (o, u)) for r, u in zip(c.recv_next, comp[o].send_prev))
    d0, d1 = [0.0] * n, [0.0] * n
    a0, a1 = [-1] * n, [-1] * n
    ptr = [0] * S
    left = n
    # each stage runs in program order until a receive whose send is not done yet; then the next
    while left:
        moved = 0
        for si in range(S):
            c = comp[si]
            i, m = ptr[si], len(c.preds)
            if i == m:
                continue
            b, ex = base[si], ext[si]
            preds, wc, nb = c.preds, c.comp_ns, c.nbytes
            i0 = i
            while i < m:
                e = ex.get(i)
                if e is not None:
                    if ptr[e[0]] <= e[1]:
                        break
                    e = base[e[0]] + e[1]
                # both longest paths (compute only; with communication) and their argmax inline:
                # a helper call per input would cost more than this whole loop body
                b0 = b1 = 0.0
                w0 = w1 = -1
                for u in preds[i]:
                    u += b
                    x = d0[u]
                    if w0 < 0 or x > b0:
                        b0, w0 = x, u
                    x = d1[u]
                    if w1 < 0 or x > b1:
                        b1, w1 = x, u
                if e is not None:
                    x = d0[e]
                    if w0 < 0 or x > b0:
                        b0, w0 = x, e
                    x = d1[e]
                    if w1 < 0 or x > b1:
                        b1, w1 = x, e
                v = b + i
                d0[v] = b0 + wc[i]
                d1[v] = b1 + wc[i] + alpha * nb[i]
                a0[v], a1[v] = w0, w1
                i += 1
            ptr[si] = i
            moved += i - i0
        if not moved:
            raise ValueError("the stage programs' sends and receives wait on each other in a cycle")
        left -= moved
    names = ["compute path"] + (["bytes path"] if total_bw_gbps else [])
    out = []
    for name, dist, arg in zip(names, (d0, d1), (a0, a1)):
        end = max(range(n), key=dist.__getitem__) if n else -1
        total_c = 0.0
        colls: Counter = Counter()
        v, si = end, S - 1
        while v >= 0:
            while base[si] > v:
                si -= 1
            while si + 1 < S and base[si + 1] <= v:
                si += 1
            c = comp[si]
            total_c += c.comp_ns[v - base[si]]
            k = c.coll[v - base[si]]
            if k is not None:
                colls[k] += 1
            v = arg[v]
        out.append(PathSummary(name, total_c, tuple(sorted(colls.items()))))
    return out


def collective_chains(programs: dict) -> list[PathSummary]:
    """Per stage program, its chain of collectives (no compute); identical chains once."""
    seen = set()
    done = set()
    out = []
    for s in sorted(programs):
        if id(programs[s]) in done:   # a program object shared by several stages
            continue
        done.add(id(programs[s]))
        c = tuple(sorted(Counter((op.coll, op.size_bytes, op.axis) for op in programs[s] if op.kind == COLL).items()))
        if c not in seen:  # the middle stages of a pipeline have the same chain
            seen.add(c)
            out.append(PathSummary("collective chain", 0.0, c))
    return out


def bound(objective: str, paths: Sequence[tuple[str, float, Sequence[float], float]], prices: Sequence[float],
          cons: Constraints, splits: int, c_min: float = 0.0) -> tuple[float, str]:
    """(lower bound on the candidate's objective, name of the path that gives it); inf = infeasible.

    ``paths``: (name, compute_ns, per-dimension traffic S, latency_ns) of each path (see
    ``candidates._path_sums``; latency 0 for a model without latency), or with a fifth item, the
    per-dimension bytes of one chunk for the sum form in place of S / splits (``--algorithms
    auto``: ``algorithms.least_collective``)."""
    k = float(splits)
    best, name = 0.0, "none"
    if objective in ENERGY_OBJECTIVES:
        # c_min: the part of the objective's multiplier of T no bandwidth removes (time_multiplier_floor);
        # every path's compute and latency is a lower bound on T
        for pname, comp, _S, lat, *_chain in paths:
            if (comp + lat) * c_min > best:
                best, name = (comp + lat) * c_min, pname
        return best, name
    W, U = cons.total_bw_gbps, cons.budget_usd
    for pname, comp, S, lat, *chain in paths:
        total = sum(S)
        # the sum form: S / k, or (--algorithms auto) one chunk's least bytes as given
        C, kc = (chain[0], 1.0) if chain else (S, k)
        if objective == "perf":
            comm = lat
            if W:
                root = sum(math.sqrt(x) for x in C)
                comm = max(total / W, root * root / (kc * W) + lat)
            if U:
                pS = [p * x for p, x in zip(prices, S)]
                root = sum(math.sqrt(p * x) for p, x in zip(prices, C)) if chain else sum(math.sqrt(x) for x in pS)
                comm = max(comm, sum(pS) / U, root * root / (kc * U) + lat)
            val = comp + comm
        else:
            pS = [p * x for p, x in zip(prices, S)]
            root = sum(math.sqrt(p * x) for p, x in zip(prices, C)) if chain else sum(math.sqrt(x) for x in pS)
            if objective == "perf-per-cost":
                val = max(comp * c_min + sum(pS), (comp + lat) * c_min + root * root / kc)
            else:  # min-cost
                T = cons.time_target_ns or math.inf
                if T - comp - lat <= 0:
                    return math.inf, pname
                val = max(sum(pS) / (T - comp), root * root / (kc * (T - comp - lat)))
        if val > best:
            best, name = val, pname
    return best, name


ENERGY_OBJECTIVES = ("min-energy", "perf-per-watt", "min-tco")


def time_multiplier_floor(objective: str, npus: int, power, tco) -> float:
    """What the energy objectives are at least per ns of step time, whatever the bandwidths: the NPUs'
    and nodes' power (J per ns; min-tco: their capital share and electricity, USD per ns of the
    run's steps). The objectives' other parts (fabric power and capital, energy above idle) are >= 0."""
    npu = power.npu
    if objective == "min-energy":
        return npus * (npu.idle_w + npu.rest_of_node_w) * 1e-9
    if objective == "perf-per-watt":
        return npus * (npu.active_w + npu.rest_of_node_w) * 1e-9
    life_s = tco.lifetime_years * 365.25 * 24 * 3600.0
    per_s = (npus * tco.npu_usd + tco.usd_per_provisioned_w * npus * (npu.active_w + npu.rest_of_node_w)) / life_s \
        + tco.usd_per_kwh / 3.6e6 * npus * (npu.idle_w + npu.rest_of_node_w)
    return tco.run_steps * per_s * 1e-9


def needs_prices(objective: str, cons: Constraints) -> bool:
    """Whether the bound depends on the dimensions' prices (else one bound serves every block choice)."""
    return objective in ("perf-per-cost", "min-cost") or bool(cons.budget_usd)


def min_cost_usd(prices: Sequence[float], cons: Constraints) -> float:
    """Least network cost the total-bandwidth equality forces (0 when only upper bounds are given)."""
    if cons.total_bw_gbps and not cons.total_bw_is_upper_bound:
        return cons.total_bw_gbps * min(prices)
    return 0.0
