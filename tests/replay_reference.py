"""The dependency-aware replay as it was before it became one event-driven simulation: each
rank class replayed alone against the other classes' latest times, in sweeps until nothing
changes. Kept only as the reference the joint replay (libra_astra/timing/predict.py) must agree
with (tests/test_replay_equivalence.py)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from libra_astra.demand.types import Demand, RankClass
from libra_astra.model.network import Network
from libra_astra.timing.model import TimeModel, class_time_ns, collective_times_ns

JobNode = tuple[int, int]


@dataclass(frozen=True)
class _Replay:
    finish: tuple[list[float], ...]             # per class, per node
    cause: tuple[list[JobNode | None], ...]     # what each node waited for last
    busy_comp: tuple[float, ...]
    converged: bool = True              # the sweeps stopped because nothing changed


@dataclass
class _ClassState:
    finish: list[float]
    cause: list[JobNode | None]
    ready: list[float]                  # when the node could start on this rank alone
    ready_cause: list[JobNode | None]
    busy: float


_SLOTS = ("comp", "cpu")


def _replay_class(rc: RankClass, ci: int, coll_ns: list[float], preds: list[list[int]],
                  waits: dict[int, JobNode], syncs: dict[int, list[JobNode]],
                  prev: Sequence[_ClassState | None]) -> _ClassState:
    """One rank of a class, event by event, the way ASTRA-sim's workload layer runs it.

    Per rank one GPU compute node ("comp"), one CPU op ("cpu") and one collective or send
    ("coll") run at a time; receives and other "free" nodes take no slot. When a slot frees, the
    ready node of that kind that comes first in the DAG (ASTRA-sim: the lowest node id) gets it.
    Collectives and sends keep their DAG order (the emitted traces chain them). Every start is
    the finish of some node (its last dependency or the slot's previous node), recorded as its
    cause, so a node's finish is the length of the path of causes that ends in it."""
    nodes = rc.dag.nodes
    n = len(nodes)
    finish, ready = [0.0] * n, [0.0] * n
    cause: list[JobNode | None] = [None] * n
    ready_cause: list[JobNode | None] = [None] * n
    children: list[list[int]] = [[] for _ in range(n)]
    left = [0] * n
    for v in range(n):
        for u in preds[v]:
            children[u].append(v)
        left[v] = len(preds[v])
    last_comm = -1
    for v, (kind, _) in enumerate(nodes):
        if kind == "coll":
            if last_comm >= 0:
                children[last_comm].append(v)
                left[v] += 1
            last_comm = v
    events: list[tuple[float, int]] = []
    queue: dict[str, list[int]] = {k: [] for k in _SLOTS}
    running = {k: False for k in _SLOTS}
    last_on = {k: -1 for k in _SLOTS}
    busy = 0.0

    def launch(v: int, start: float, why: JobNode | None) -> None:
        kind, value = nodes[v]
        if kind == "coll":
            # A collective shared with other classes starts when their ranks are ready for it too.
            for cj, u in syncs.get(v, ()):
                other = prev[cj]
                if other is not None and other.ready[u] > start:
                    start, why = other.ready[u], other.ready_cause[u]
            dur = coll_ns[int(value)]
        else:
            dur = float(value)
        end = start + dur
        src = waits.get(v)
        if src is not None and prev[src[0]] is not None and prev[src[0]].finish[src[1]] > end:
            end, why = prev[src[0]].finish[src[1]], src
        finish[v], cause[v] = end, why
        heapq.heappush(events, (end, v))

    def dispatch(kind: str, now: float) -> None:
        q = queue[kind]
        if running[kind] or not q:
            return
        v = heapq.heappop(q)
        why = ready_cause[v]
        last = last_on[kind]
        if last >= 0 and finish[last] > ready[v]:
            why = (ci, last)   # it waited for the slot
        running[kind], last_on[kind] = True, v
        launch(v, max(now, ready[v]), why)

    def make_ready(v: int, t: float, why: JobNode | None) -> None:
        ready[v], ready_cause[v] = t, why
        kind = nodes[v][0]
        if kind in queue:
            heapq.heappush(queue[kind], v)
            dispatch(kind, t)
        else:
            launch(v, t, why)

    for v in range(n):
        if left[v] == 0:
            make_ready(v, 0.0, None)
    got = [0.0] * n
    got_cause: list[JobNode | None] = [None] * n
    while events:
        t, u = heapq.heappop(events)
        kind = nodes[u][0]
        if kind in running:
            running[kind] = False
            if kind == "comp":
                busy += float(nodes[u][1])
        for v in children[u]:
            left[v] -= 1
            if t >= got[v]:
                got[v], got_cause[v] = t, (ci, u)
            if left[v] == 0:
                make_ready(v, got[v], got_cause[v])
        if kind in running:
            dispatch(kind, t)
    return _ClassState(finish, cause, ready, ready_cause, busy)


def replay(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> _Replay:
    classes = d.rank_classes
    k = len(classes)
    coll_ns = [collective_times_ns(rc, bw_gbps, net, model).tolist() for rc in classes]
    preds, waits, syncs = [], [], []
    for rc in classes:
        dag = rc.dag
        p: list[list[int]] = [[] for _ in (dag.nodes if dag else ())]
        for u, v in (dag.deps if dag else ()):
            p[v].append(u)
        preds.append(p)
        waits.append({v: (c, u) for v, c, u in (dag.links if dag else ()) if 0 <= c < k})
        s: dict[int, list[JobNode]] = {}
        for v, c, u in (dag.syncs if dag else ()):
            if 0 <= c < k:
                s.setdefault(v, []).append((c, u))
        syncs.append(s)
    states: list[_ClassState | None] = [None] * k
    # Waits only lengthen times, so sweeps from zero settle after at most as many sweeps as the
    # longest chain of cross-class waits (plus one to see nothing change). Each class is
    # replayed with the other classes' latest states (Gauss-Seidel): a pipeline whose classes
    # come in stage order then settles in a few sweeps instead of one per stage.
    for _ in range(2 + sum(len(w) + len(s) for w, s in zip(waits, syncs))):
        changed = False
        for ci, rc in enumerate(classes):
            if rc.dag is None:
                comp, comm = class_time_ns(rc, bw_gbps, net, model)
                new = _ClassState([comp + comm], [None], [0.0], [None], comp)
            else:
                new = _replay_class(rc, ci, coll_ns[ci], preds[ci], waits[ci], syncs[ci], states)
            old = states[ci]
            changed = changed or old is None or old.finish != new.finish or old.ready != new.ready
            states[ci] = new
        if not changed:
            break
    return _Replay(tuple(s.finish for s in states), tuple(s.cause for s in states),
                   tuple(s.busy for s in states), not changed)


def critical_paths(d: Demand, bw_gbps: Sequence[float], net: Network,
                   model: TimeModel) -> list[tuple[float, tuple[JobNode, ...]]]:
    """Per rank class, (its finish time, a longest path that ends in it). A path's time is the
    sum of its compute and collectives, and may run through other classes via receives."""
    r = replay(d, bw_gbps, net, model)
    out = []
    for ci, rc in enumerate(d.rank_classes):
        if rc.dag is None:
            out.append((r.finish[ci][0], ((ci, -1),)))
            continue
        f = r.finish[ci]
        if not f:
            out.append((0.0, ()))
            continue
        node: JobNode | None = (ci, max(range(len(f)), key=f.__getitem__))
        path = []
        while node is not None:
            path.append(node)
            node = r.cause[node[0]][node[1]]
        out.append((f[path[0][1]], tuple(reversed(path))))
    return out
