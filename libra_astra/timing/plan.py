"""The joint graph of a demand's rank classes, as the replays walk it: every class's nodes numbered
one after the other, with everything that does not depend on bandwidth (dependencies, the GPU and
CPU slot of each node, the receives that wait for another class's send, the collectives shared
with other classes). Built once per demand object: the optimizer replays the same demand at many
bandwidths.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import chain
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np

from ..demand.types import Demand
from .fixed_order import FixedOrder

# A node of the job: (rank class, node index); node -1 stands for a whole class without a DAG.
JobNode = tuple[int, int]

_COMP, _CPU, _COLL, _FREE = 0, 1, 2, 3
_KIND_CODE = {"comp": _COMP, "cpu": _CPU, "coll": _COLL, "free": _FREE}
# Why a node cannot take the replay's fast path (flags of Plan.special).
_AWAITED_READY, _AWAITED_END, _WAITS, _SYNCS = 1, 2, 4, 8


@dataclass
class Plan:
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
    last: tuple | None = None           # ((bandwidths, network, model), its Replay)
    node_table: tuple | None = None     # node_table(), once asked for
    fixed: FixedOrder | None | bool = False   # fixed_order(), False until asked for
    last_times: tuple | None = None     # ((bandwidths, network, model), its Times)

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


# Per demand object (not per equal demand: a demand read again builds its plan again, as a new
# command would); an entry goes when its demand does.
_PLANS: dict[int, Plan] = {}


@contextmanager
def no_cycle_collection() -> Iterator[None]:
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


def plan_of(d: Demand) -> Plan:
    # Built once per demand: the optimizer replays the same demand at many bandwidths.
    plan = _PLANS.get(id(d))
    if plan is None:
        with no_cycle_collection():
            plan = _PLANS[id(d)] = _build_plan(d)
        weakref.finalize(d, _PLANS.pop, id(d), None)
    return plan


def node_table(d: Demand) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What each global node of the joint graph stands for, from the plan the replays built
    already: (first global node of each class and the total, each node's duration if it is not
    a collective, each node's collective in the classes' concatenation or -1, the class a node
    stands for whole (a class without a DAG) or -1)."""
    plan = plan_of(d)
    if plan.node_table is None:
        item = np.full(plan.offsets[-1], -1, dtype=np.int64)
        item[plan.coll_pos] = plan.coll_idx
        whole = np.full(plan.offsets[-1], -1, dtype=np.int64)
        whole[[plan.offsets[ci] for ci in plan.no_dag]] = plan.no_dag
        plan.node_table = (np.asarray(plan.offsets, dtype=np.int64), plan.base_ns, item, whole)
    return plan.node_table


def _build_plan(d: Demand) -> Plan:
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
        kinds, deps, colls, values, zeros = shape[1:]
        code[off:end] = kinds
        value[off:end] = values
        if shape[0] is not dag and zeros.size:
            # equal nodes have equal values, but -0.0 == 0.0: a DAG reads its own zero durations
            nodes = dag.nodes
            value[off + zeros] = [nodes[i][1] for i in zeros.tolist()]
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
    return Plan(tuple(offsets), cls, waits, syncs, base, coll_pos,
                coll_base[coll_pos] + value[coll_pos].astype(np.int64), tuple(no_dag),
                (u_all, v_all, np.where(slotted, 2 * cls + code, -1), code == _COMP))


def _dag_shape(dag) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A DAG's node kinds, its dependencies (u, v rows), its collectives (numbered within the DAG),
    its node values and the nodes whose duration is zero (its sign is not in an equality of nodes).
    Equal DAGs have equal shapes (a pipeline's middle stages often do): the plan reuses the last."""
    kinds = np.array([_KIND_CODE[kind] for kind, _ in dag.nodes], dtype=np.int64)
    values = np.array([v for _, v in dag.nodes], dtype=float)
    deps = np.fromiter(chain.from_iterable(dag.deps), dtype=np.int64, count=2 * len(dag.deps)).reshape(-1, 2)
    # A node's children in the order a replay of its class alone visits them (dependants by
    # node, then the next collective): ties in readiness and slot dispatch resolve alike.
    deps = deps[np.argsort(deps[:, 1], kind="stable")]
    # the emitted traces chain a rank's collectives: each waits for the one before
    is_coll = kinds == _COLL
    return kinds, deps, np.flatnonzero(is_coll), values, np.flatnonzero(~is_coll & (values == 0.0))
