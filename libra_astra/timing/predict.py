"""Dependency-aware time prediction: the ranks' DAGs replayed the way ASTRA-sim runs them.

Per rank at most one GPU compute node, one CPU op and one collective (or send) run at a time,
as in ASTRA-sim's HardwareResource; receives take no slot. Compute, CPU ops and communication
overlap when the dependencies allow it. When a slot frees, the ready node of its kind that comes
first in the DAG gets it (ASTRA-sim issues ready nodes in ascending node id); collectives keep
their DAG order, so a node starts at max(its dependencies' finish, its slot's free time).
A receive also waits for the matching send of another rank class (the DAG's ``links``, from
pipeline parallelism) and a collective shared with ranks of other classes starts when they are
ready for it too (``syncs``), so all classes are replayed together, in one event-driven
simulation (events.py) over their joint graph (plan.py). When every slot of the graph runs its
nodes in node order (forced by dependencies, or checked against the times found), the same times
come from one pass over it in a fixed order instead (fixed_order.py), and the event-driven
simulation runs only where that order does not hold or a tie on a critical path needs its order
of events. This module picks between them and answers with times and critical paths.
Collective durations come from a time model (model.py), normally the ``pipelined`` model with
the simulator's chunk count, latency and local memory bandwidth.

A class without a DAG falls back to the no-overlap sum. The job time is the slowest class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..demand.types import Demand
from ..model.network import Network
from .causes import path_nodes as fixed_path_nodes
from .events import Replay, simulate
from .fixed_order import FixedOrder, finish_times, fixed_order
from .model import TimeModel, class_time_ns, demand_times_ns
from .plan import JobNode, Plan, no_cycle_collection, plan_of


@dataclass(frozen=True)
class Prediction:
    time_ns: float                   # slowest class
    class_times_ns: tuple[float, ...]
    # Of the slowest class: its time minus its summed GPU compute, what ASTRA-sim prints as
    # "exposed communication" (CPU-op time and idle time are in it).
    exposed_comm_ns: float
    overlap_aware: bool


@dataclass(frozen=True)
class Times:
    """A replay's ends from the fixed order (fixed_order.py); its causes are found along the
    critical paths only, when asked for."""

    busy_comp: tuple[float, ...]
    offsets: tuple[int, ...]
    fixed: FixedOrder
    dur: np.ndarray
    ends_ns: np.ndarray                 # every node's end
    # path_nodes' answers by their ends: the optimizer asks again at the design it settles on
    walked: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def finish(self) -> list[float]:
        """Every node's end, as Replay.finish."""
        return self.ends_ns.tolist()

    def end_ns(self, g: int) -> float:
        return float(self.ends_ns[g])

    def class_last(self, ci: int) -> int:
        """As Replay.class_last (argmax takes the first of equal ends, and no end is NaN)."""
        lo, hi = self.offsets[ci], self.offsets[ci + 1]
        return lo + int(np.argmax(self.ends_ns[lo:hi])) if hi > lo else -1

    def path_nodes(self, ends: Sequence[int]) -> list[np.ndarray] | None:
        """As Replay.path_nodes, or None where two causes of a node on a path tie."""
        key = tuple(ends)
        if key not in self.walked:
            self.walked[key] = fixed_path_nodes(self.fixed, self.ends_ns, self.dur, ends)
        found = self.walked[key]
        return None if found is None else list(found)


def _duration_array(d: Demand, plan: Plan, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> np.ndarray:
    # Collective times do not depend on overlap: the rows are the ones the no-overlap optimum
    # (the optimizer's start) has built already, stacked once per demand, network and model.
    dur = plan.base_ns.copy()
    if plan.coll_pos.size:
        dur[plan.coll_pos] = demand_times_ns(d, bw_gbps, net, model)[plan.coll_idx]
    for ci in plan.no_dag:
        comp, comm = class_time_ns(d.rank_classes[ci], bw_gbps, net, model)
        dur[plan.offsets[ci]] = comp + comm
    return dur


def _design_key(bw_gbps: Sequence[float], net: Network, model: TimeModel) -> tuple:
    """What the plan's last answers are kept under."""
    return tuple(float(b) for b in bw_gbps), net, model


def _replay(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel,
            dur: np.ndarray | None = None) -> Replay:
    """The event-driven replay at a design; ``dur``: its durations, if the caller has them."""
    plan = plan_of(d)
    key = _design_key(bw_gbps, net, model)
    # The optimizer takes the critical paths at a design and then evaluates that same design.
    last = plan.last
    if last is not None and last[0] == key:
        return last[1]
    if dur is None:
        dur = _duration_array(d, plan, bw_gbps, net, model)
    r = _simulate(d, plan, dur)
    plan.last = (key, r)
    return r


def _fixed_times(d: Demand, plan: Plan, dur: np.ndarray) -> Times | None:
    """The ends from the fixed order, or None where the plan has none or these durations break it."""
    if plan.fixed is False:
        plan.fixed = fixed_order(plan.offsets, *plan.edges, plan.base_ns, plan.waits, plan.syncs,
                                 plan.busy_start(d))
    fo = plan.fixed
    if fo is None:
        return None
    ends = finish_times(fo, dur)
    return None if ends is None else Times(fo.busy_comp, plan.offsets, fo, dur, ends)


def _times(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> Replay | Times:
    """The replay's ends (and busy compute), from the fixed order when the plan has one and the
    durations allow it, else from the event-driven replay: the same numbers either way."""
    plan = plan_of(d)
    key = _design_key(bw_gbps, net, model)
    for cached in (plan.last_times, plan.last):
        if cached is not None and cached[0] == key:
            return cached[1]
    r = replay_ends(d, _duration_array(d, plan, bw_gbps, net, model))
    if isinstance(r, Times):
        plan.last_times = (key, r)
    else:
        plan.last = (key, r)
    return r


def replay_ends(d: Demand, dur: np.ndarray) -> Replay | Times:
    """The replay's ends and busy compute for durations the caller made, one per node of the
    joint graph (``plan_of(d)``; timing/astra_predict.py times them as ASTRA-sim would): from the
    fixed order when it holds, else from the event-driven replay."""
    plan = plan_of(d)
    t = _fixed_times(d, plan, dur)
    return _simulate(d, plan, dur) if t is None else t


def _simulate(d: Demand, plan: Plan, dur: np.ndarray) -> Replay:
    with no_cycle_collection():
        return simulate(plan, dur.tolist(), d)


def critical_paths(d: Demand, bw_gbps: Sequence[float], net: Network,
                   model: TimeModel) -> list[tuple[float, tuple[JobNode, ...]]]:
    """Per rank class, (its finish time, a longest path that ends in it). A path's time is the
    sum of its compute and collectives, and may run through other classes via receives."""
    job_of = plan_of(d).job_of
    return [(t, ((ci, -1),) if d.rank_classes[ci].dag is None else tuple(map(job_of.__getitem__, ids.tolist())))
            for ci, (t, ids) in enumerate(critical_path_nodes(d, bw_gbps, net, model))]


def critical_path_nodes(d: Demand, bw_gbps: Sequence[float], net: Network,
                        model: TimeModel) -> list[tuple[float, np.ndarray]]:
    """``critical_paths`` with each path as global nodes of the joint graph (``node_table``; a
    class without a DAG is its one node), as read-only int64 arrays: the optimizer keys and merges
    paths by these, without building the (class, node) pairs."""
    r = _times(d, bw_gbps, net, model)
    out: list = []
    ends = []
    for ci, rc in enumerate(d.rank_classes):
        if rc.dag is None:
            out.append((r.end_ns(r.offsets[ci]), _read_only([r.offsets[ci]])))
            continue
        g = r.class_last(ci)
        if g < 0:
            out.append((0.0, _read_only([])))
            continue
        out.append((r.end_ns(g), None))
        ends.append(g)
    found = r.path_nodes(ends)
    if found is None:
        # a tie on a path: the event-driven replay's order of events decides it
        found = _replay(d, bw_gbps, net, model, r.dur).path_nodes(ends)
    paths = iter(found)
    return [(t, next(paths) if p is None else p) for t, p in out]


def _read_only(nodes: list[int]) -> np.ndarray:
    a = np.array(nodes, dtype=np.int64)
    a.flags.writeable = False
    return a


def predict(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel) -> Prediction:
    r = _times(d, bw_gbps, net, model)
    times = [0.0 if (g := r.class_last(ci)) < 0 else r.end_ns(g) for ci in range(len(d.rank_classes))]
    i = max(range(len(times)), key=times.__getitem__)
    return Prediction(times[i], tuple(times), times[i] - r.busy_comp[i],
                      any(rc.dag is not None for rc in d.rank_classes))
