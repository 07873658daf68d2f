"""Dependency-aware time prediction: the ranks' DAGs replayed the way ASTRA-sim runs them.

Per rank at most one compute node and one collective run at a time; compute overlaps
communication when the dependencies allow it. Nodes are issued in the DAG's (topological) order
on their resource, so a node starts at max(its dependencies' finish, its resource's free time).
A receive also waits for the matching send of another rank class (the DAG's ``links``, from
pipeline parallelism) and a collective shared with ranks of other classes starts when they are
ready for it too (``syncs``), so the classes are replayed together until those waits settle.
Collective durations come from a time model (model.py), normally the ``pipelined`` model with
the simulator's chunk count, latency and local memory bandwidth.

A class without a DAG falls back to the no-overlap sum. The job time is the slowest class.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..demand.types import Demand
from ..errors import LibraError
from ..model.network import Network
from .model import TimeModel, class_rows, class_time_ns, rows_times_ns

# A node of the job: (rank class, node index); node -1 stands for a whole class without a DAG.
JobNode = tuple[int, int]


@dataclass(frozen=True)
class Prediction:
    time_ns: float                   # slowest class
    class_times_ns: tuple[float, ...]
    exposed_comm_ns: float           # of the slowest class: time not hidden behind compute
    overlap_aware: bool


@dataclass(frozen=True)
class _Replay:
    finish: tuple[list[float], ...]             # per class, per node
    cause: list[int]                            # per joint node: the joint node it waited for last, or -1
    offsets: tuple[int, ...]                    # first joint node of each class (and the total)
    busy_comp: tuple[float, ...]


@dataclass(frozen=True)
class _Joint:
    """The job's nodes (every class's, numbered one after another) and what each waits for; the
    structure does not depend on the bandwidths, so it is built once per demand.

    A node waits for its dependencies and the previous node on its resource (``preds``, in that
    order), then for the readiness of the same collective in other classes (``syncs``), and
    finishes no earlier than the matching send of another class (``link``, -1 for none)."""
    offsets: tuple[int, ...]            # first joint node of each class (and the total)
    kinds: tuple[str, ...]              # per class: "dag", or "flat" (one node, the no-overlap sum)
    # in a topological order of the joint graph: (node, preds, syncs, link, a sync partner?)
    plan: list[tuple[int, tuple[int, ...], tuple[int, ...], int, bool]]
    preds: list[tuple[int, ...]]
    is_coll: np.ndarray                 # per joint node
    value: np.ndarray                   # compute ns, or the collective's index in its class
    is_comp: np.ndarray
    # per (class, network, time model): the class's collective rows (class_rows)
    rows: dict = field(default_factory=dict, compare=False)
    # the last replay, by (bandwidths, network, time model): the optimizer's final evaluation
    # replays the bandwidths of its last critical paths
    last: list = field(default_factory=list, compare=False)


def _joint(d: Demand) -> _Joint:
    classes = d.rank_classes
    k = len(classes)
    offsets = [0]
    for rc in classes:
        offsets.append(offsets[-1] + (len(rc.dag.nodes) if rc.dag is not None else 1))
    n = offsets[-1]
    preds: list[tuple[int, ...]] = [()] * n
    syncs: list[tuple[int, ...]] = [()] * n
    link = [-1] * n
    kinds: list[str] = ["flat"] * n
    value = [0.0] * n
    for ci, rc in enumerate(classes):
        if rc.dag is None:
            continue
        o, nodes = offsets[ci], rc.dag.nodes
        p: list[list[int]] = [[] for _ in nodes]
        for u, v in rc.dag.deps:
            p[v].append(o + u)
        last: dict[str, int] = {}
        for v, (kind, x) in enumerate(nodes):
            # Waiting on the resource is an edge from the previous node of the same kind.
            u = last.get(kind)
            if u is not None:
                p[v].append(u)
            last[kind] = o + v
        preds[o:o + len(nodes)] = [tuple(x) for x in p]
        kinds[o:o + len(nodes)] = [kind for kind, _ in nodes]
        value[o:o + len(nodes)] = [float(x) for _, x in nodes]
        for v, c, u in rc.dag.links:
            if 0 <= c < k:
                link[o + v] = offsets[c] + u
        s: dict[int, list[int]] = {}
        for v, c, u in rc.dag.syncs:
            if 0 <= c < k:
                s.setdefault(o + v, []).append(offsets[c] + u)
        for g, us in s.items():
            syncs[g] = tuple(us)
    order = _merge_order(offsets, preds, syncs, link)
    if len(order) < n:
        order = _kahn_order(preds, syncs, link)
    if len(order) < n:
        done = set(order)
        g = next(g for g in range(n) if g not in done)
        ci = bisect_right(offsets, g) - 1
        raise LibraError(
            f"demand {d.name!r}: rank class {ci} node {g - offsets[ci]} can never start: receives or shared "
            "collectives of several classes wait on each other in a cycle (the ranks would deadlock); check "
            "that the traces' sends and receives pair up and that groups issue their collectives in one order"
        )
    partner = [False] * n
    for us in syncs:
        for u in us:
            partner[u] = True
    plan = [(g, preds[g], syncs[g], link[g], partner[g]) for g in order]
    kinds_a = np.asarray(kinds, dtype=object)
    return _Joint(tuple(offsets), tuple("flat" if rc.dag is None else "dag" for rc in classes), plan,
                  preds, kinds_a == "coll", np.asarray(value, dtype=np.float64), kinds_a == "comp")


def _merge_order(offsets: list[int], preds: list[tuple[int, ...]], syncs: list[tuple[int, ...]],
                 link: list[int]) -> list[int]:
    """A topological order of the joint graph, quickly, or a shorter list if this way fails.

    Each class's own order is topological already (edges go from lower to higher indices), so
    the classes are merged: a class advances while its next node's waits on other classes are
    met (its link's source is done; each sync partner's inputs are done, so its readiness is
    known), and the classes take turns until none can advance. Asking for a class's whole
    prefix is more than the true dependencies ask, so getting stuck proves nothing: the caller
    then sorts the joint graph itself (``_kahn_order``)."""
    k = len(offsets) - 1
    cls_of = lambda g: bisect_right(offsets, g) - 1  # noqa: E731
    need: dict[int, list[tuple[int, int]]] = {}   # node -> (class, nodes of it that must be done)
    for g, src in enumerate(link):
        if src >= 0:
            c = cls_of(src)
            need.setdefault(g, []).append((c, src - offsets[c] + 1))
    for g, us in enumerate(syncs):
        for u in us:
            if preds[u]:
                c = cls_of(u)
                need.setdefault(g, []).append((c, max(preds[u]) - offsets[c] + 1))
    done = [0] * k
    order: list[int] = []
    moved = True
    while moved:
        moved = False
        for ci in range(k):
            o, size, p = offsets[ci], offsets[ci + 1] - offsets[ci], done[ci]
            while p < size:
                waits = need.get(o + p)
                if waits is not None:
                    done[ci] = p
                    if any(done[c] < m for c, m in waits):
                        break
                order.append(o + p)
                p += 1
                moved = True
            done[ci] = p
    return order


def _kahn_order(preds: list[tuple[int, ...]], syncs: list[tuple[int, ...]], link: list[int]) -> list[int]:
    """A topological order of the joint graph by Kahn's algorithm (shorter if it has a cycle):
    a node comes after its inputs, its sync partners' inputs and its link's source."""
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for g in range(n):
        ins = list(preds[g])
        for u in syncs[g]:
            ins.extend(preds[u])
        if link[g] >= 0:
            ins.append(link[g])
        for u in ins:
            succ[u].append(g)
        indeg[g] = len(ins)
    order = [g for g in range(n) if indeg[g] == 0]
    for g in order:  # the list grows while it is walked
        for h in succ[g]:
            indeg[h] -= 1
            if indeg[h] == 0:
                order.append(h)
    return order


# Joint graphs of recent demands, by identity (a demand is immutable; hashing one walks its DAGs).
_JOINTS: dict[int, tuple[weakref.ref, _Joint]] = {}


def _joint_of(d: Demand) -> _Joint:
    hit = _JOINTS.get(id(d))
    if hit is not None and hit[0]() is d:
        return hit[1]
    j = _joint(d)
    if len(_JOINTS) >= 16:
        _JOINTS.pop(next(iter(_JOINTS)))
    _JOINTS[id(d)] = (weakref.ref(d), j)
    return j


def _replay(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> _Replay:
    """One pass over the joint graph in topological order: each node starts when its inputs
    and its sync partners' inputs are done, and finishes no earlier than its link's source."""
    classes = d.rank_classes
    j = _joint_of(d)
    key = (tuple(float(b) for b in bw_gbps), net, model)
    if j.last and j.last[0] == key:
        return j.last[1]
    out = _replay_joint(j, classes, bw_gbps, net, model)
    j.last[:] = [key, out]
    return out


def _replay_joint(j: _Joint, classes, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> _Replay:
    off = j.offsets
    dur = j.value.copy()
    flat_comp: dict[int, float] = {}
    for ci, rc in enumerate(classes):
        lo, hi = off[ci], off[ci + 1]
        if rc.dag is None:
            comp, comm = class_time_ns(rc, bw_gbps, net, model)
            dur[lo] = comp + comm
            flat_comp[ci] = comp
            continue
        sel = j.is_coll[lo:hi]
        if sel.any():
            rows = j.rows.get((ci, net, model))
            if rows is None:
                # the rows do not depend on overlap: share them with the no-overlap model's
                rows = j.rows[(ci, net, model)] = class_rows(rc, net, replace(model, overlap=False))
            coll_ns = rows_times_ns(rows, bw_gbps)
            dur[lo:hi][sel] = coll_ns[j.value[lo:hi][sel].astype(np.int64)]
    dur_l = dur.tolist()
    n = off[-1]
    finish = [0.0] * n
    ready: list[float | None] = [None] * n
    cause = [-1] * n
    ready_cause = [-1] * n
    preds = j.preds

    def ready_of(g: int) -> float:
        start, why = 0.0, -1
        for u in preds[g]:
            if finish[u] > start:
                start, why = finish[u], u
        ready[g], ready_cause[g] = start, why
        return start

    for g, pg, sg, src, partner in j.plan:
        r = ready[g] if partner else None
        if r is None:
            start, why = 0.0, -1
            for u in pg:
                f = finish[u]
                if f > start:
                    start, why = f, u
            if partner:
                ready[g], ready_cause[g] = start, why
        else:
            start, why = r, ready_cause[g]
        for u in sg:
            r = ready[u]
            if r is None:
                r = ready_of(u)
            if r > start:
                start, why = r, ready_cause[u]
        end = start + dur_l[g]
        if src >= 0 and finish[src] > end:
            end, why = finish[src], src
        finish[g] = end
        cause[g] = why

    fin, bc = [], []
    for ci, rc in enumerate(classes):
        lo, hi = off[ci], off[ci + 1]
        fin.append(finish[lo:hi])
        busy = flat_comp.get(ci, 0.0)
        if rc.dag is not None:
            for x in dur[lo:hi][j.is_comp[lo:hi]].tolist():
                busy += x
        bc.append(busy)
    return _Replay(tuple(fin), cause, off, tuple(bc))


def critical_paths(d: Demand, bw_gbps: Sequence[float], net: Network,
                   model: TimeModel) -> list[tuple[float, tuple[JobNode, ...]]]:
    """Per rank class, (its finish time, a longest path that ends in it). A path's time is the
    sum of its compute and collectives, and may run through other classes via receives."""
    r = _replay(d, bw_gbps, net, model)
    out = []
    for ci, rc in enumerate(d.rank_classes):
        if rc.dag is None:
            out.append((r.finish[ci][0], ((ci, -1),)))
            continue
        f = r.finish[ci]
        if not f:
            out.append((0.0, ()))
            continue
        g = r.offsets[ci] + max(range(len(f)), key=f.__getitem__)
        walk = []
        while g >= 0:
            walk.append(g)
            g = r.cause[g]
        joint = np.asarray(walk[::-1], dtype=np.int64)
        cls = np.searchsorted(np.asarray(r.offsets), joint, side="right") - 1
        local = joint - np.asarray(r.offsets)[cls]
        out.append((f[walk[0] - r.offsets[ci]], tuple(zip(cls.tolist(), local.tolist()))))
    return out


def predict(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> Prediction:
    r = _replay(d, bw_gbps, net, model)
    times = [max(f, default=0.0) for f in r.finish]
    i = max(range(len(times)), key=times.__getitem__)
    return Prediction(times[i], tuple(times), times[i] - r.busy_comp[i],
                      any(rc.dag is not None for rc in d.rank_classes))
