"""Dependency-aware time prediction: a rank's DAG replayed the way ASTRA-sim runs it.

Per rank at most one compute node and one collective run at a time; compute overlaps
communication when the dependencies allow it. Nodes are issued in the DAG's (topological) order
on their resource, so a node starts at max(its dependencies' finish, its resource's free time).
Collective durations come from a time model (timing.py), normally the ``pipelined`` model with
the simulator's chunk count, latency and local memory bandwidth.

Without a DAG the prediction falls back to the no-overlap sum. Ranks of different classes are
replayed independently: the job time is the slowest class (cross-rank waiting is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .demand import Demand, RankClass
from .network import Network
from .timing import TimeModel, class_time_ns, collective_times_ns


@dataclass(frozen=True)
class Prediction:
    time_ns: float                   # slowest class
    class_times_ns: tuple[float, ...]
    exposed_comm_ns: float           # of the slowest class: time not hidden behind compute
    overlap_aware: bool


def _replay(rc: RankClass, bw_gbps: Sequence[float], net: Network, model: TimeModel):
    """Finish times and, per node, the predecessor that made it wait (-1 if none)."""
    assert rc.dag is not None
    coll_ns = collective_times_ns(rc, bw_gbps, net, model).tolist()
    preds: list[list[int]] = [[] for _ in rc.dag.nodes]
    for u, v in rc.dag.deps:
        preds[v].append(u)
    n = len(rc.dag.nodes)
    finish = [0.0] * n
    cause = [-1] * n
    last = {"comp": -1, "coll": -1}
    busy_comp = 0.0
    for v, (kind, value) in enumerate(rc.dag.nodes):
        # Waiting on the resource is an edge from the previous node of the same kind.
        start, why = 0.0, -1
        for u in preds[v] + ([last[kind]] if last[kind] >= 0 else []):
            if finish[u] > start:
                start, why = finish[u], u
        dur = float(value) if kind == "comp" else coll_ns[int(value)]
        finish[v] = start + dur
        cause[v] = why
        last[kind] = v
        if kind == "comp":
            busy_comp += dur
    return finish, cause, busy_comp


def class_time_with_overlap(rc: RankClass, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> tuple[float, float]:
    """(finish time, exposed communication) of one rank class replayed over its DAG."""
    if rc.dag is None:
        comp, comm = class_time_ns(rc, bw_gbps, net, model)
        return comp + comm, comm
    finish, _, busy_comp = _replay(rc, bw_gbps, net, model)
    end = max(finish, default=0.0)
    return end, end - busy_comp


def critical_path(rc: RankClass, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> tuple[float, tuple[int, ...]]:
    """(finish time, node indices of a longest path) of one rank class; the path's time is
    its compute plus its collectives, and the class time is the maximum over all such paths."""
    if rc.dag is None:
        comp, comm = class_time_ns(rc, bw_gbps, net, model)
        return comp + comm, ()
    finish, cause, _ = _replay(rc, bw_gbps, net, model)
    if not finish:
        return 0.0, ()
    v = max(range(len(finish)), key=finish.__getitem__)
    path = []
    while v >= 0:
        path.append(v)
        v = cause[v]
    return finish[path[0]], tuple(reversed(path))


def predict(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> Prediction:
    times, exposed = [], []
    for rc in d.rank_classes:
        t, e = class_time_with_overlap(rc, bw_gbps, net, model)
        times.append(t)
        exposed.append(e)
    i = max(range(len(times)), key=times.__getitem__)
    return Prediction(times[i], tuple(times), exposed[i], any(rc.dag is not None for rc in d.rank_classes))
