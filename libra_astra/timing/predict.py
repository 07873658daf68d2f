"""Dependency-aware time prediction: the ranks' DAGs replayed the way ASTRA-sim runs them.

Per rank at most one GPU compute node, one CPU op and one collective (or send) run at a time,
as in ASTRA-sim's HardwareResource; receives take no slot. Compute, CPU ops and communication
overlap when the dependencies allow it. When a slot frees, the ready node of its kind that comes
first in the DAG gets it (ASTRA-sim issues ready nodes in ascending node id); collectives keep
their DAG order, so a node starts at max(its dependencies' finish, its slot's free time).
A receive also waits for the matching send of another rank class (the DAG's ``links``, from
pipeline parallelism) and a collective shared with ranks of other classes starts when they are
ready for it too (``syncs``), so all classes are replayed together, in one event-driven
simulation over their joint graph. When every slot of the graph runs its nodes in node order
(forced by dependencies, or checked against the times found), the same times come from one pass
over it in a fixed order instead (fixed_order.py), and the event-driven simulation runs only
where that order does not hold or a tie on a critical path needs its order of events.
Collective durations come from a time model (model.py), normally the ``pipelined`` model with
the simulator's chunk count, latency and local memory bandwidth.

A class without a DAG falls back to the no-overlap sum. The job time is the slowest class.
"""

from __future__ import annotations

import gc
import heapq
from contextlib import contextmanager
from itertools import chain
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, Sequence

import numpy as np

from ..demand.types import Demand
from ..model.network import Network
from .fixed_order import FixedOrder, finish_times, fixed_order, path_nodes as fixed_path_nodes, walk_causes
from .model import TimeModel, class_time_ns, demand_rows, rows_times_ns

# A node of the job: (rank class, node index); node -1 stands for a whole class without a DAG.
JobNode = tuple[int, int]


@dataclass(frozen=True)
class Prediction:
    time_ns: float                   # slowest class
    class_times_ns: tuple[float, ...]
    # Of the slowest class: its time minus its summed GPU compute, what ASTRA-sim prints as
    # "exposed communication" (CPU-op time and idle time are in it).
    exposed_comm_ns: float
    overlap_aware: bool


@dataclass(frozen=True)
class _Replay:
    """Per node of the joint graph (classes one after the other from ``offsets[ci]``)."""

    finish: list[float]
    cause: list[int]                    # what each node waited for last, -1 for nothing
    busy_comp: tuple[float, ...]        # per class
    offsets: tuple[int, ...]
    cycles: int                         # waits dropped because ranks waited on each other in a cycle

    def class_finish(self, ci: int) -> list[float]:
        return self.finish[self.offsets[ci]:self.offsets[ci + 1]]

    def class_last(self, ci: int) -> int:
        """The first node of class ``ci`` to end last, as max() picks it; -1 if it has none."""
        f = self.class_finish(ci)
        return self.offsets[ci] + f.index(max(f)) if f else -1

    def path_nodes(self, ends: Sequence[int]) -> list[list[int]]:
        """The path of causes that ends in each global node of ``ends``, first node first."""
        found = walk_causes(self.cause, ends)
        assert found is not None     # the event-driven replay's causes never tie
        return found


_COMP, _CPU, _COLL, _FREE = 0, 1, 2, 3
_KIND_CODE = {"comp": _COMP, "cpu": _CPU, "coll": _COLL, "free": _FREE}
# Why a node cannot take the replay's fast path (flags of _Plan.special).
_AWAITED_READY, _AWAITED_END, _WAITS, _SYNCS = 1, 2, 4, 8


@dataclass
class _Plan:
    """The joint graph of a demand: every class's nodes numbered one after the other (so the
    global order is (class, node) order), with everything that does not depend on bandwidth.
    The lists the event-driven replay walks are made when it first runs (the fixed order,
    fixed_order.py, reads the arrays)."""

    offsets: tuple[int, ...]            # first global node of each class, and the total at the end
    cls: np.ndarray                     # class of each global node
    waits: dict[int, int]               # receive -> the send it cannot finish before
    syncs: dict[int, list[int]]         # collective -> the same collective of other classes
    base_ns: np.ndarray                 # duration of every node that is not a collective
    coll_pos: np.ndarray                # global nodes that are collectives ...
    coll_idx: np.ndarray                # ... and their collective in the classes' concatenation
    no_dag: tuple[int, ...]             # classes replayed as one node of their no-overlap time
    # (dependency sources, targets: dependants by node, then the rank's next collective), the
    # GPU or CPU slot (2 per class) a node takes or -1, and whether it is GPU compute
    edges: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    last: tuple | None = None           # ((bandwidths, network, model), its _Replay)
    node_table: tuple | None = None     # node_table(), once asked for
    fixed: FixedOrder | None | bool = False   # fixed_order(), False until asked for
    last_times: tuple | None = None     # ((bandwidths, network, model), its _Times)

    @cached_property
    def cls_of(self) -> list[int]:
        return self.cls.tolist()

    def busy_start(self, d: Demand) -> list[float]:
        """Busy compute of each class before its first node: the whole compute of a class
        replayed as one node."""
        return [d.rank_classes[ci].compute_time_ns if ci in self.no_dag else 0.0
                for ci in range(len(self.offsets) - 1)]

    @cached_property
    def slot(self) -> list[int]:
        return self.edges[2].tolist()

    @cached_property
    def is_comp(self) -> list[bool]:
        return self.edges[3].tolist()

    @cached_property
    def children(self) -> list[list[int]]:
        """Dependants, then the rank's next collective: the order a replay of the class alone
        visits them in, so ties in readiness and slot dispatch resolve alike."""
        u_all, v_all = self.edges[:2]
        order = np.argsort(u_all, kind="stable")
        targets = v_all[order].tolist()
        bounds = np.searchsorted(u_all[order], np.arange(self.offsets[-1] + 1)).tolist()
        return [targets[a:b] for a, b in zip(bounds, bounds[1:])]

    @cached_property
    def left(self) -> list[int]:
        """Dependencies to finish before a node is ready."""
        return np.bincount(self.edges[1], minlength=self.offsets[-1]).tolist()

    @cached_property
    def special(self) -> bytearray:
        """_AWAITED_READY | _AWAITED_END | _WAITS | _SYNCS of each node."""
        special = bytearray(self.offsets[-1])
        for g, src in self.waits.items():
            special[g] |= _WAITS
            special[src] |= _AWAITED_END
        for g, partners in self.syncs.items():
            special[g] |= _SYNCS
            for u in partners:
                special[u] |= _AWAITED_READY
        return special

    @cached_property
    def job_of(self) -> list[JobNode]:
        """(class, node) of each global node."""
        n = self.offsets[-1]
        return list(zip(self.cls_of, (np.arange(n) - np.asarray(self.offsets)[self.cls]).tolist()))


@dataclass(frozen=True)
class _Times:
    """A replay's ends from the fixed order (fixed_order.py); its causes are found along the
    critical paths only, when asked for."""

    finish: list[float]
    busy_comp: tuple[float, ...]
    offsets: tuple[int, ...]
    fixed: FixedOrder
    dur: np.ndarray
    ends_ns: np.ndarray                 # finish, as an array
    # path_nodes' answers by their ends: the optimizer asks again at the design it settles on
    walked: dict = field(default_factory=dict, compare=False, repr=False)

    def class_last(self, ci: int) -> int:
        """As _Replay.class_last (argmax takes the first of equal ends, and no end is NaN)."""
        lo, hi = self.offsets[ci], self.offsets[ci + 1]
        return lo + int(np.argmax(self.ends_ns[lo:hi])) if hi > lo else -1

    def path_nodes(self, ends: Sequence[int]) -> list[list[int]] | None:
        """As _Replay.path_nodes, or None where two causes of a node on a path tie."""
        key = tuple(ends)
        if key not in self.walked:
            self.walked[key] = fixed_path_nodes(self.fixed, self.ends_ns, self.dur, ends)
        found = self.walked[key]
        return None if found is None else [list(ids) for ids in found]


# Per demand object (not per equal demand: a demand read again builds its plan again, as a new
# command would); an entry goes when its demand does.
_PLANS: dict[int, _Plan] = {}


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    # The replay allocates one small object per node and event and makes no reference cycles;
    # left on, the cycle collector would walk every live object (the demand's included) many
    # times per replay, which costs about as much as the replay itself.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan(d: Demand) -> _Plan:
    # Built once per demand: the optimizer replays the same demand at many bandwidths.
    plan = _PLANS.get(id(d))
    if plan is None:
        with _no_cycle_collection():
            plan = _PLANS[id(d)] = _build_plan(d)
        weakref.finalize(d, _PLANS.pop, id(d), None)
    return plan


def node_table(d: Demand) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What each global node of the joint graph stands for, from the plan the replays built
    already: (first global node of each class and the total, each node's duration if it is not
    a collective, each node's collective in the classes' concatenation or -1, the class a node
    stands for whole (a class without a DAG) or -1)."""
    plan = _plan(d)
    if plan.node_table is None:
        item = np.full(plan.offsets[-1], -1, dtype=np.int64)
        item[plan.coll_pos] = plan.coll_idx
        whole = np.full(plan.offsets[-1], -1, dtype=np.int64)
        whole[[plan.offsets[ci] for ci in plan.no_dag]] = plan.no_dag
        plan.node_table = (np.asarray(plan.offsets, dtype=np.int64), plan.base_ns, item, whole)
    return plan.node_table


def _build_plan(d: Demand) -> _Plan:
    classes = d.rank_classes
    k = len(classes)
    sizes = [len(rc.dag.nodes) if rc.dag is not None else 1 for rc in classes]
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    n = offsets[-1]
    code = np.full(n, _FREE, dtype=np.int64)
    base = np.zeros(n)
    value = np.zeros(n)
    coll_base = np.zeros(n, dtype=np.int64)   # first collective of the node's class
    cls = np.repeat(np.arange(k), sizes)
    us, vs = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    waits: dict[int, int] = {}
    syncs: dict[int, list[int]] = {}
    no_dag = []
    first_coll = 0
    shape = None        # the last DAG's, kept for the next class while their DAGs are equal
    for ci, rc in enumerate(classes):
        off, dag = offsets[ci], rc.dag
        if dag is None:
            no_dag.append(ci)
            first_coll += len(rc.collectives)
            continue
        end = off + sizes[ci]
        if shape is None or shape[0] is not dag and (dag.nodes != shape[0].nodes or dag.deps != shape[0].deps):
            shape = (dag, *_dag_shape(dag))
        kinds, deps, colls, values, zero = shape[1:]
        code[off:end] = kinds
        # equal nodes have equal values, but -0.0 == 0.0: a DAG with a zero duration reads its own
        value[off:end] = values if shape[0] is dag or not zero else [v for _, v in dag.nodes]
        coll_base[off:end] = first_coll
        us += [deps[:, 0] + off, colls[:-1] + off]
        vs += [deps[:, 1] + off, colls[1:] + off]
        for v, c, u in dag.links:
            if 0 <= c < k and 0 <= u < sizes[c]:
                waits[off + v] = offsets[c] + u
        for v, c, u in dag.syncs:
            if 0 <= c < k and 0 <= u < sizes[c] and dag.nodes[v][0] == "coll":
                syncs.setdefault(off + v, []).append(offsets[c] + u)
        first_coll += len(rc.collectives)
    u_all, v_all = np.concatenate(us), np.concatenate(vs)
    is_coll = code == _COLL
    coll_pos = np.flatnonzero(is_coll)
    base[~is_coll] = value[~is_coll]
    slotted = (code == _COMP) | (code == _CPU)
    return _Plan(tuple(offsets), cls, waits, syncs, base, coll_pos,
                 coll_base[coll_pos] + value[coll_pos].astype(np.int64), tuple(no_dag),
                 (u_all, v_all, np.where(slotted, 2 * cls + code, -1), code == _COMP))


def _dag_shape(dag) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """A DAG's node kinds, its dependencies (u, v rows), its collectives (numbered within the DAG),
    its node values and whether a duration is zero (its sign is not in an equality of nodes).
    Equal DAGs have equal shapes (a pipeline's middle stages often do): the plan reuses the last."""
    kinds = np.array([_KIND_CODE[kind] for kind, _ in dag.nodes], dtype=np.int64)
    values = np.array([v for _, v in dag.nodes], dtype=float)
    deps = np.fromiter(chain.from_iterable(dag.deps), dtype=np.int64, count=2 * len(dag.deps)).reshape(-1, 2)
    # A node's children in the order a replay of its class alone visits them (dependants by
    # node, then the next collective): ties in readiness and slot dispatch resolve alike.
    deps = deps[np.argsort(deps[:, 1], kind="stable")]
    # the emitted traces chain a rank's collectives: each waits for the one before
    is_coll = kinds == _COLL
    return kinds, deps, np.flatnonzero(is_coll), values, bool(np.any(values[~is_coll] == 0.0))


def _duration_array(d: Demand, plan: _Plan, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> np.ndarray:
    # Collective times do not depend on overlap: the rows are the ones the no-overlap optimum
    # (the optimizer's start) has built already, stacked once per demand, network and model.
    dur = plan.base_ns.copy()
    if plan.coll_pos.size:
        dur[plan.coll_pos] = rows_times_ns(demand_rows(d, net, model), bw_gbps)[plan.coll_idx]
    for ci in plan.no_dag:
        comp, comm = class_time_ns(d.rank_classes[ci], bw_gbps, net, model)
        dur[plan.offsets[ci]] = comp + comm
    return dur


def _replay(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel,
            dur: np.ndarray | None = None) -> _Replay:
    """The event-driven replay at a design; ``dur``: its durations, if the caller has them."""
    plan = _plan(d)
    key = (tuple(float(b) for b in bw_gbps), net, model)
    # The optimizer takes the critical paths at a design and then evaluates that same design.
    last = plan.last
    if last is not None and last[0] == key:
        return last[1]
    if dur is None:
        dur = _duration_array(d, plan, bw_gbps, net, model)
    with _no_cycle_collection():
        r = _simulate(plan, dur.tolist(), d)
    plan.last = (key, r)
    return r


def _times(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> _Replay | _Times:
    """The replay's ends (and busy compute), from the fixed order when the plan has one and the
    durations allow it, else from the event-driven replay: the same numbers either way."""
    plan = _plan(d)
    key = (tuple(float(b) for b in bw_gbps), net, model)
    for cached in (plan.last_times, plan.last):
        if cached is not None and cached[0] == key:
            return cached[1]
    if plan.fixed is False:
        plan.fixed = fixed_order(plan.offsets, *plan.edges, plan.base_ns, plan.waits, plan.syncs,
                                 plan.busy_start(d))
    fo = plan.fixed
    dur = None
    if fo is not None:
        dur = _duration_array(d, plan, bw_gbps, net, model)
        finish = finish_times(fo, dur)
        if finish is not None:
            t = _Times(finish, fo.busy_comp, plan.offsets, fo, dur, np.fromiter(finish, float, count=len(finish)))
            plan.last_times = (key, t)
            return t
    return _replay(d, bw_gbps, net, model, dur)


def _simulate(plan: _Plan, dur: list[float], d: Demand) -> _Replay:
    """All rank classes in one event-driven simulation, one event per node.

    Events are taken in (time, class, node) order, so each class meets its own events in the
    order a replay of that class alone would, and the waits across classes are met as they
    happen: a receive whose send has not started keeps its slot, and its end is set once the
    send's end is known; a shared collective starts once the other classes' ranks are ready for
    it. Such an end is never earlier than the moment it becomes known, so event times never go
    back and a node is ready at the time its last dependency ends.

    Only a wait that can end at the very moment it is met (a send or shared collective that
    takes no time) could end after later events of its class at that moment were taken: while
    one may, those events are held back, so ties resolve as in a replay of the class alone."""
    k = len(plan.offsets) - 1
    n = plan.offsets[-1]
    slot, is_comp, children, cls_of = plan.slot, plan.is_comp, plan.children, plan.cls_of
    waits, syncs, special = plan.waits, plan.syncs, plan.special
    left = plan.left[:]
    finish, ready = [0.0] * n, [0.0] * n
    cause, ready_cause = [-1] * n, [-1] * n
    known = bytearray(n)            # the end of an awaited node is final
    is_ready = bytearray(n)         # an awaited node is ready
    queue: list[list[int]] = [[] for _ in range(2 * k)]
    running = [False] * (2 * k)
    last_on = [-1] * (2 * k)
    busy = plan.busy_start(d)
    events: list[tuple[float, int]] = []
    wait_on: dict[int, list[int]] = {}          # send -> receives waiting for its end
    sync_on: dict[int, list[int]] = {}          # collective -> collectives waiting for it to be ready
    pend_wait: dict[int, tuple[float, int]] = {}
    pend_sync: dict[int, list] = {}
    risky: list[set[int]] = [set() for _ in range(k)]   # waiting nodes that could end now
    held: list[list[tuple[float, int]]] = [[] for _ in range(k)]
    nheld = [0]
    push, pop, pushpop = heapq.heappush, heapq.heappop, heapq.heappushpop

    def lowest_end(g: int, now: float, depth: int = 0) -> float:
        # The earliest its end can be: a node not started yet starts now at the earliest.
        if g in pend_wait and depth < 64:
            return max(pend_wait[g][0], lowest_end(waits[g], now, depth + 1))
        return now + dur[g]

    def defer(g: int) -> None:
        if dur[g] == 0.0 or dur[waits.get(g, g)] == 0.0 or waits.get(g, -1) in waits:
            risky[cls_of[g]].add(g)

    def undefer(g: int) -> None:
        c = cls_of[g]
        if g in risky[c]:
            risky[c].discard(g)
            for e in held[c]:
                push(events, e)
            nheld[0] -= len(held[c])
            held[c].clear()

    def settle(g: int, end: float, why: int) -> None:
        # The end of g, and of the receives that waited for it, is final.
        stack = [(g, end, why)]
        while stack:
            g, end, why = stack.pop()
            finish[g], cause[g], known[g] = end, why, 1
            push(events, (end, g))
            undefer(g)
            for w in wait_on.pop(g, ()):
                p = pend_wait.pop(w, None)
                if p is None:
                    continue   # it went on without its wait (a cycle)
                e, y = p
                if end > e:
                    e, y = end, g
                stack.append((w, e, y))

    def end_at(g: int, end: float, why: int) -> None:
        src = waits.get(g)
        if src is not None:
            if not known[src]:
                pend_wait[g] = (end, why)
                wait_on.setdefault(src, []).append(g)
                defer(g)
                return
            if finish[src] > end:
                end, why = finish[src], src
        settle(g, end, why)

    def synced(g: int, start: float, why: int) -> None:
        undefer(g)
        for u in syncs[g]:
            if ready[u] > start:
                start, why = ready[u], ready_cause[u]
        end_at(g, start + dur[g], why)

    def launch(g: int, start: float, why: int) -> None:
        if not special[g]:
            end = start + dur[g]
            finish[g], cause[g] = end, why
            push(events, (end, g))
        elif g in syncs:
            missing = [u for u in syncs[g] if not is_ready[u]]
            if missing:
                pend_sync[g] = [start, why, len(missing)]
                for u in missing:
                    sync_on.setdefault(u, []).append(g)
                defer(g)
            else:
                synced(g, start, why)
        else:
            end_at(g, start + dur[g], why)

    def take_slot(s: int, g: int, now: float) -> None:
        # g is the lowest ready node of slot s, which is free: ASTRA-sim issues it now.
        why = ready_cause[g]
        last = last_on[s]
        if last >= 0 and finish[last] > ready[g]:
            why = last   # it waited for the slot
        running[s], last_on[s] = True, g
        launch(g, max(now, ready[g]), why)

    def make_ready(g: int, t: float, why: int) -> None:
        ready[g], ready_cause[g], is_ready[g] = t, why, 1
        for c in sync_on.pop(g, ()):
            p = pend_sync.get(c)
            if p is None:
                continue   # it went on without its wait (a cycle)
            p[2] -= 1
            if p[2] == 0:
                del pend_sync[c]
                synced(c, p[0], p[1])
        s = slot[g]
        if s < 0:
            launch(g, t, why)
        elif running[s]:
            push(queue[s], g)
        else:
            take_slot(s, pushpop(queue[s], g), t)

    for g in range(n):
        if left[g] == 0:
            make_ready(g, 0.0, -1)
    cycles = 0
    while True:
        while events or nheld[0]:
            if nheld[0]:
                first = min(h[0] for h in held if h)
                if not events or events[0][0] > first[0]:
                    # Nothing else happens at this moment, so the waits holding these back are
                    # met later or wait on each other: the earliest held event goes on.
                    t, u = pop(held[cls_of[first[1]]])
                    nheld[0] -= 1
                    ci = cls_of[u]
                else:
                    t, u = pop(events)
                    ci = cls_of[u]
                    if held[ci] or risky[ci] and any(g < u and lowest_end(g, t) <= t for g in risky[ci]):
                        push(held[ci], (t, u))
                        nheld[0] += 1
                        continue
            else:
                t, u = pop(events)
                ci = cls_of[u]
                if risky[ci] and any(g < u and lowest_end(g, t) <= t for g in risky[ci]):
                    push(held[ci], (t, u))
                    nheld[0] += 1
                    continue
            s = slot[u]
            if s >= 0:
                running[s] = False
                if is_comp[u]:
                    busy[ci] += dur[u]
            for v in children[u]:
                n_left = left[v] - 1
                left[v] = n_left
                if n_left:
                    continue
                # v is ready now (its last dependency ended last); the common cases inline
                if special[v]:
                    make_ready(v, t, u)
                    continue
                ready[v], ready_cause[v] = t, u
                s2 = slot[v]
                if s2 < 0:
                    end = t + dur[v]
                    finish[v], cause[v] = end, u
                    push(events, (end, v))
                elif running[s2]:
                    push(queue[s2], v)
                else:
                    take_slot(s2, pushpop(queue[s2], v), t)
            if s >= 0 and not running[s] and queue[s]:
                take_slot(s, pop(queue[s]), t)
        if not pend_wait and not pend_sync:
            break
        # Ranks that wait on each other in a cycle (ASTRA-sim would hang there): the first waiting
        # node goes on without its wait, so that every node still gets a time.
        g = min(list(pend_wait) + list(pend_sync))
        cycles += 1
        if g in pend_wait:
            settle(g, *pend_wait.pop(g))
        else:
            start, why, _ = pend_sync.pop(g)
            synced(g, start, why)
    return _Replay(finish, cause, tuple(busy), plan.offsets, cycles)


def critical_paths(d: Demand, bw_gbps: Sequence[float], net: Network,
                   model: TimeModel) -> list[tuple[float, tuple[JobNode, ...]]]:
    """Per rank class, (its finish time, a longest path that ends in it). A path's time is the
    sum of its compute and collectives, and may run through other classes via receives."""
    job_of = _plan(d).job_of
    return [(t, ((ci, -1),) if d.rank_classes[ci].dag is None else tuple(map(job_of.__getitem__, ids)))
            for ci, (t, ids) in enumerate(critical_path_nodes(d, bw_gbps, net, model))]


def critical_path_nodes(d: Demand, bw_gbps: Sequence[float], net: Network,
                        model: TimeModel) -> list[tuple[float, list[int]]]:
    """``critical_paths`` with each path as global nodes of the joint graph (``node_table``; a
    class without a DAG is its one node): the optimizer keys and merges paths by these, without
    building the (class, node) pairs."""
    r = _times(d, bw_gbps, net, model)
    out: list = []
    ends = []
    for ci, rc in enumerate(d.rank_classes):
        if rc.dag is None:
            out.append((r.finish[r.offsets[ci]], [r.offsets[ci]]))
            continue
        g = r.class_last(ci)
        if g < 0:
            out.append((0.0, []))
            continue
        out.append((r.finish[g], None))
        ends.append(g)
    found = r.path_nodes(ends)
    if found is None:
        # a tie on a path: the event-driven replay's order of events decides it
        found = _replay(d, bw_gbps, net, model, r.dur).path_nodes(ends)
    paths = iter(found)
    return [(t, next(paths) if p is None else p) for t, p in out]


def predict(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> Prediction:
    r = _times(d, bw_gbps, net, model)
    times = [0.0 if (g := r.class_last(ci)) < 0 else r.finish[g] for ci in range(len(d.rank_classes))]
    i = max(range(len(times)), key=times.__getitem__)
    return Prediction(times[i], tuple(times), times[i] - r.busy_comp[i],
                      any(rc.dag is not None for rc in d.rank_classes))
