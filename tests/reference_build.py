"""The problem build as it was before it was vectorized (one collective at a time), kept as the
oracle the vectorized build is compared with (tests/test_build_equivalence.py). Not library code:
change it only together with the time model it restates."""

from __future__ import annotations

import numpy as np

from libra_astra.model import collectives as coll
from libra_astra.demand.types import Collective
from libra_astra.model.network import Network
from libra_astra.timing.model import TimeModel


def collective_rows(c: Collective, net: Network, model: TimeModel) -> tuple[np.ndarray, np.ndarray]:
    A, const = _rows(c, net, model)
    if model.efficiency is not None:
        A = A / np.asarray(model.efficiency, dtype=float)
    return A, const


def _reduced_bytes(kind: str, carried: float, p: int) -> float:
    # Reduce steps of a ring over p members add (p-1) chunks of carried/p bytes each.
    if kind in (coll.ALL_REDUCE, coll.REDUCE_SCATTER) and p > 1:
        return carried * (p - 1) / p
    return 0.0


def _rows(c: Collective, net: Network, model: TimeModel) -> tuple[np.ndarray, np.ndarray]:
    D = net.num_dims
    traffic = np.asarray(c.traffic_bytes, dtype=float)
    used = [d for d in range(D) if traffic[d] > 0]
    if not used:
        return np.zeros((1, D)), np.zeros(1)
    if model.kind == "libra":
        A = np.zeros((len(used), D))
        for r, d in enumerate(used):
            A[r, d] = traffic[d]
        return A, np.zeros(len(used))
    lat = np.array([dim.latency_ns for dim in net.dims]) if model.latency else np.zeros(D)
    k = model.splits
    mem = model.local_mem_bw_gbps
    if c.algorithm != "hierarchical":
        # One stage over all crossed dims (flat ring or P2P): the slowest crossed link sets the pace.
        steps_lat = max(c.hops[d] * lat[d] for d in used)
        red = 0.0
        if mem is not None and c.algorithm == "flat_ring":
            p = int(np.prod([max(1, x) for x in c.participants]))
            red = 3.0 * _reduced_bytes(c.type, c.size_bytes, p) / mem
        chunks = 1 if c.algorithm == "p2p" else k
        A = np.zeros((len(used), D))
        for r, d in enumerate(used):
            A[r, d] = traffic[d]
        return A, np.full(len(used), red + chunks * steps_lat)
    hops = np.asarray(c.hops, dtype=float)
    if c.type == coll.ALL_TO_ALL:
        # ASTRA-sim's ring all-to-all forwards each block hop by hop round the ring: every link
        # carries m (p - 1) / 2 bytes, p / 2 times the table's m (p - 1) / p, and the ring pays
        # p (p - 1) / 2 hop latencies instead of p - 1 (both measured).
        ring_factor = np.array([max(p, 2) / 2.0 for p in c.participants])
        traffic = traffic * ring_factor
        hops = hops * ring_factor
    order = [d for d in range(D) if traffic[d] > 0]
    carried = c.size_bytes
    red_by_dim, lat_by_dim = {}, {}
    for d in coll.dim_order(c.type, D):
        p = c.participants[d]
        if traffic[d] > 0:
            red_by_dim[d] = 3.0 * _reduced_bytes(c.type, carried, p) / mem if mem is not None else 0.0
            lat_by_dim[d] = hops[d] * lat[d]
        if c.type in (coll.ALL_REDUCE, coll.REDUCE_SCATTER):
            carried /= p
        elif c.type == coll.ALL_GATHER:
            carried *= p
    # Chunks flow through the stages. As measured on ASTRA-sim, the stages that add a chunk's
    # share to the bottleneck stage i are the lower dimensions for all-reduce and every other
    # dimension for reduce-scatter, all-gather and all-to-all.
    fill_all = c.type != coll.ALL_REDUCE
    A = np.zeros((len(order), D))
    const = np.zeros(len(order))
    for i, d in enumerate(order):
        A[i, d] = traffic[d]
        const[i] = red_by_dim[d] + k * lat_by_dim[d]
        for e in order:
            if e != d and (fill_all or e < d):
                A[i, e] += traffic[e] / k
                const[i] += red_by_dim[e] / k + lat_by_dim[e]
    return A, const




def merge_terms(items, net: Network, model: TimeModel, cache: dict) -> list:
    """Terms [(A, g, weight)] of (collective, count) items; terms equal up to scale merge."""
    merged: dict = {}
    for c, count in items:
        if count <= 0:
            continue
        key = (c.type, c.size_bytes, c.participants, c.traffic_bytes, c.hops, c.algorithm)
        rows = cache.get(key)
        if rows is None:
            A, g = collective_rows(c, net, model)
            if model.stages_add_up:
                A, g = _undominated(A, g)
            scale = float(A.max()) if not np.any(g) and A.max() > 0 else 1.0
            An = A / scale
            mkey = (An.shape, np.round(An, 12).tobytes(), g.tobytes())
            rows = (mkey, An, g, scale)
            cache[key] = rows
        mkey, An, g, scale = rows
        if mkey in merged:
            merged[mkey][2] += count * scale
        else:
            merged[mkey] = [An, g, count * scale]
    return list(merged.values())




def _undominated(A: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One collective's rows without those its first row of largest sum (then constant) bounds in
    every column and constant (the optimizer's rows with one chunk per collective)."""
    sums = A @ np.ones(A.shape[1])
    c = max(range(A.shape[0]), key=lambda r: (sums[r], g[r], -r))
    keep = [r for r in range(A.shape[0])
            if r == c or not (all(A[c, j] >= A[r, j] for j in range(A.shape[1])) and g[c] >= g[r])]
    return A[keep], g[keep]


def class_problem_rows(classes, D: int, b0: float):
    """(A, g, owner, w, term_class, class_e, t_eq parts) of the perf objective, assembled term by
    term as the old build did, from [(compute_ns, merged terms)] of one workload."""
    slowest = 0.0
    for comp, terms in classes:
        tc = comp + sum(wt * float(np.max(An.sum(axis=1) / b0 + g)) for An, g, wt in terms)
        slowest = max(slowest, tc)
    t0 = slowest if slowest > 0 else 1.0
    A_rows, g_rows, owner, wts, tclass, ce = [], [], [], [], [], []
    k = 0
    for q, (comp, terms) in enumerate(classes):
        items = list(terms) or [[np.zeros((1, D)), np.zeros(1), 1.0]]
        for An, g, weight in items:
            A_rows.append(An / (b0 * t0))
            g_rows.append(g / t0)
            owner.append(np.full(An.shape[0], k))
            wts.append(weight)
            tclass.append(q)
            k += 1
        ce.append(comp / t0)
    return (np.vstack(A_rows), np.concatenate(g_rows), np.concatenate(owner), np.array(wts, dtype=float),
            np.array(tclass), np.array(ce), t0)


def path_items(demand, path) -> tuple[float, list]:
    """Compute time and [(collective index in the classes' concatenation, count)] of a dependency
    path, node by node, as path_terms gathered them before it was vectorized."""
    first, at = [], 0
    for rc in demand.rank_classes:
        first.append(at)
        at += len(rc.collectives)
    comp = 0.0
    items, counts = [], []
    for ci, v in path:
        rc = demand.rank_classes[ci]
        if v < 0:
            comp += rc.compute_time_ns
            items.extend(range(first[ci], first[ci] + len(rc.collectives)))
            counts.extend(c.count for c in rc.collectives)
            continue
        kind, value = rc.dag.nodes[v]
        if kind != "coll":
            comp += value
        else:
            items.append(first[ci] + int(value))
            counts.append(1.0)
    return comp, list(zip(items, counts))


def baseline_traffic(workloads, D: int) -> np.ndarray:
    """The baselines' bytes per dimension, one collective at a time (the loop it replaced)."""
    traffic = np.zeros(D)
    for w in workloads:
        for rc in w.demand.rank_classes:
            for c in rc.collectives:
                traffic += w.weight * c.count * np.array(c.traffic_bytes) * rc.num_ranks
    return traffic
