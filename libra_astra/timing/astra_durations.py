"""The time ASTRA-sim gives each node of a demand's rank-class DAGs, for any system.json: the
durations the dependency-aware replay (predict.py's plan) takes to answer what ASTRA-sim 518bd51
(analytical, congestion-unaware backend; or the congestion-aware one, ``AstraSystem.backend``,
timed by astra_aware.py) would print, without the pipelined time model.

- Collectives on all ranks (``involved_dim``) or on a group of every NPU: astra_collective.py,
  with the rank's earlier collectives carried (queue rotation, which double tree is next).
- Collectives on a smaller communicator group: ASTRA-sim runs them on one ring over the members
  in the group's order, with one implementation (``ring`` if the system.json lists several), its
  memory bus a fixed 10 ns instead of ``endpoint-delay``, every message charged on the lowest
  dimension where the two NPU ids differ (docs/astra-sim-settings.md). Timed exactly when every
  member's message to the member a given number of places along takes the same link and hops
  (then the group is a ring astra_collective can time); any other group is refused.
- Collectives of a kind the system.json gives a ``*-implementation-custom`` program: that
  program's replay (astra_custom.py), each rank's time from a common start; the queues' state
  is untouched (ASTRA-sim runs it outside them).
- Sends: one message, ``int(hops * latency + bytes / bandwidth)``; receives wait for it.
- Compute and CPU ops: as the demand has them (ASTRA-sim's replay of ``duration_micros``, or
  its roofline), truncated to whole ns as ASTRA-sim's are.

A collective that runs a double binary tree takes a time that depends on the rank's place in
the tree: here its class's slowest rank's, and the node is listed in :attr:`Durations.trees`
for astra_trees.py, which times each place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from ..demand.groups import p2p_dims
from ..demand.types import Collective, Demand, RankClass
from ..errors import LibraError
from ..model import collectives as coll
from ..model.network import Network
from .astra_aware import aware_message_ns, check_aware_links, rank_times_for
from .astra_collective import Coll, Link, checked_links, collective_plan, message_ns
from .astra_custom import custom_rank_times
from .astra_settings import IMPLEMENTATION_KEYS, SystemSettings, parse_implementation

_ALL = "all"      # demand's label of an all-ranks collective (demand.groups.group_label)


class AstraSystem(NamedTuple):
    """What ASTRA-sim reads besides the workload, as far as times depend on it."""

    network: Network                          # its shape, hops and latencies
    links: tuple[Link, ...]                   # the same, with the bytes/ns ASTRA-sim takes from the YAML
    settings: SystemSettings
    groups: Mapping[str, tuple[int, ...]]     # communicator groups, members in ASTRA-sim's ring order
    system_source: str = "system.json"        # for messages
    groups_source: str = "communicator groups"
    backend: str = "unaware"                  # ASTRA-sim's analytical backend: unaware | aware (astra_aware.py)
    custom: tuple[tuple[str, str], ...] = ()  # (collective kind, ET prefix): *-implementation-custom (astra_custom.py)


class Spec(NamedTuple):
    """A collective as one rank issues it: what collective_plan needs, with the rank's state."""

    coll: Coll
    links: tuple[Link, ...]
    settings: SystemSettings
    state: tuple            # ASTRA-sim's counters carried from the rank's earlier collectives


class IssueTimer:
    """One rank's collectives timed in the order it issues them, each from idle queues: what
    ASTRA-sim carries from one to the next (queue rotation, which double tree is next) is
    carried. ``memo`` may be shared by the timers of many ranks."""

    def __init__(self, memo: dict, backend: str = "unaware"):
        self.state: tuple = ()
        self.memo = memo
        self.rank_times = rank_times_for(backend)
        self.aware = backend == "aware"

    def time_ns(self, c: Coll, links: tuple[Link, ...],
                settings: SystemSettings) -> tuple[Spec, tuple[int, ...], bool]:
        """(the spec, each rank's time of ``c`` (rank order over ``links``) issued at 0 into idle
        queues, whether it runs a double binary tree or its ranks' times differ)."""
        spec = Spec(c, links, settings, self.state)
        hit = self.memo.get(spec)
        if hit is None:
            links = checked_links(links)
            state = dict(self.state)
            plan = collective_plan(c, links, settings, state)
            # only the parity of a tree's turn counts: keeps the states (and the memo) few
            after = tuple(sorted(((k, v % 2 if isinstance(k[0], str) else v) for k, v in state.items()), key=repr))
            times = self.rank_times([plan], links, settings)
            # ranks that differ (trees; on shared links, any uneven contention) are timed per rank
            tree = any(p.tree for chunk in plan for p in chunk) or (self.aware and len(set(times)) > 1)
            hit = self.memo[spec] = (times, after, tree)
        self.state = hit[1]
        return spec, hit[0], hit[2]


@dataclass(frozen=True)
class Durations:
    """Per global node of the plan, its time in ns (a collective's slowest rank's in its class);
    and the collective nodes that run a double binary tree."""

    dur: np.ndarray
    # global node -> (the collective as its ranks issue it, each rank's time from a common start, rank order)
    trees: dict[int, tuple[Spec, tuple[int, ...]]] = field(default_factory=dict)
    # global node -> spec: the other collectives on the whole network (ring, direct, halving-doubling),
    # which astra_trees times per rank when tree places issue them at different times
    even: dict[int, Spec] = field(default_factory=dict)


class _Timing:
    """The collective times of one demand: one memo over every rank class."""

    def __init__(self, d: Demand, system: AstraSystem):
        self.system = system
        self.net = system.network
        self.npus = self.net.npus_count
        d.check_network(self.net)
        if system.backend == "aware":
            check_aware_links(system.links)
        self.memo: dict = {}
        self.groups: dict[tuple, tuple] = {}

    def p2p_ns(self, c: Collective) -> int:
        dims = [i for i, t in enumerate(c.traffic_bytes) if t > 0]
        if not dims:
            return 0
        link = self.system.links[dims[0]]
        if self.system.backend == "aware":      # alone on its links (concurrent messages are not modeled)
            return aware_message_ns(link, c.hops[dims[0]], int(c.size_bytes))
        return message_ns(link, c.hops[dims[0]], int(c.size_bytes))

    def class_times(self, rc: RankClass, order: Sequence[int]) -> list[tuple[Spec | None, tuple[int, ...], bool]]:
        """(spec, each rank's time: rank order, or one value; whether ranks differ: IssueTimer) of
        the class's collectives ``order`` (indexes, in issue order); no spec for sends and custom ones."""
        timer = IssueTimer(self.memo, self.system.backend)
        out = []
        for i in order:
            c = rc.collectives[i]
            if c.algorithm == "p2p" or c.type == coll.P2P:
                out.append((None, (self.p2p_ns(c),), False))
                continue
            if c.type in dict(self.system.custom):
                out.append((None, self.custom_ns(c, rc), False))
                continue
            out.append(timer.time_ns(*self.astra_coll(c, rc)))
        return out

    def custom_ns(self, c: Collective, rc: RankClass) -> tuple[int, ...]:
        """Each rank's time of a collective ASTRA-sim runs as a custom ET program (astra_custom.py)."""
        where = f"{self.system.system_source}: {IMPLEMENTATION_KEYS[c.type]}-custom"
        if c.group != _ALL:
            raise LibraError(f"{where}: the {c.type} of communicator group {c.group} runs the custom program on the "
                             "group's members: not modeled; run it on all ranks or use the native implementation")
        if self.system.backend != "unaware":
            raise LibraError(f"{where}: custom collectives are timed on the congestion-unaware backend only; "
                             "use --backend unaware")
        if self.system.settings.splits != 1:
            raise LibraError(f"{where}: preferred-dataset-splits is {self.system.settings.splits}: ASTRA-sim waits for "
                             "that many streams of a custom collective but runs one, and never finishes it; set it to 1")
        times = custom_rank_times(dict(self.system.custom)[c.type], where, self.net, self.system.links)
        mine = {times[r] for r in rc.ranks or range(rc.num_ranks)}
        if len(mine) > 1:
            raise LibraError(f"{where}: the custom program's ranks finish {min(mine)} to {max(mine)} ns after it "
                             "starts: ranks that differ are not modeled (the ring and direct programs are even)")
        return times

    def astra_coll(self, c: Collective, rc: RankClass) -> tuple[Coll, tuple[Link, ...], SystemSettings]:
        s, links = self.system.settings, self.system.links
        size = int(c.size_bytes)
        if c.group == _ALL:
            return Coll(c.type, size, tuple(p > 1 for p in c.participants)), links, s
        # a label naming groups by range picks those holding the class's ranks
        key = (c.group, c.type, rc.ranks if ".." in c.group else ())
        if key not in self.groups:
            self.groups[key] = self.group_ring(c, rc)
        vlink, settings = self.groups[key]
        if vlink is None:       # a group of every NPU: ASTRA-sim's full topology, every dimension
            return Coll(c.type, size, (True,) * len(links)), links, s
        if c.type != coll.ALL_GATHER and self.npus > size // s.splits:
            size = s.splits * self.npus     # ASTRA-sim's smallest chunk is the NPU count, not the group's
        return Coll(c.type, size, (True,), True), (vlink,), settings

    def group_ring(self, c: Collective, rc: RankClass) -> tuple[Link | None, SystemSettings | None]:
        """The one-dimensional network and settings a communicator group's collective runs on."""
        rings = {key: self.members(key) for key in self.keys(c.group, rc)}
        if any(len(m) == self.npus for m in rings.values()):
            return None, None
        s = self.system.settings
        names = s.implementations(c.type)
        where = f"{self.system.system_source}: {IMPLEMENTATION_KEYS[c.type]}"
        if not names:
            raise LibraError(f"{where} is empty; ASTRA-sim has no implementation for the {c.type} of group "
                             f"{c.group}; give one per dimension")
        alg, _, window = parse_implementation("ring" if len(names) > 1 else names[0], where)
        if alg == "doubleBinaryTree":
            raise LibraError(f"{where}: doubleBinaryTree on communicator group {c.group}: ASTRA-sim crashes (it takes "
                             "the group's ring for a tree); use ring or direct")
        links = {self.aware_link(m, key) if self.system.backend == "aware" else self.ring_link(m, alg, key)
                 for key, m in rings.items()}
        if len(links) != 1:
            raise LibraError(f"{self.system.groups_source}: the groups behind {c.group!r} are rings of different "
                             f"shapes for one rank class; predict cannot time them as one")
        name = alg if window < 0 else f"{alg}{window}"
        names = (name,)
        return links.pop(), replace(s, all_reduce=names, reduce_scatter=names, all_gather=names, all_to_all=names)

    def keys(self, label: str, rc: RankClass) -> list[str]:
        groups = self.system.groups
        if label in groups:
            return [label]
        parts = label.split(",")
        if all(p in groups for p in parts):
            return parts
        if ".." in label:       # "a..b (n groups)": the groups between a and b holding ranks of the class
            lo, hi = label.split(" ", 1)[0].split("..")
            order = lambda k: (len(k), k)      # noqa: E731  (demand's order of group names)
            ranks = set(rc.ranks)
            found = [k for k in groups if order(lo) <= order(k) <= order(hi) and ranks & set(groups[k])]
            if found:
                return found
        raise LibraError(f"{self.system.groups_source}: no communicator group {label!r}, which the traces' "
                         "collectives name; give the group file the traces were made with")

    def members(self, key: str) -> tuple[int, ...]:
        m = tuple(self.system.groups[key])
        if len(m) < 2:
            raise LibraError(f"{self.system.groups_source}: group {key} has {len(m)} member(s); ASTRA-sim never "
                             f"finishes a collective on it; give the group two members or more")
        return m

    def aware_link(self, members: tuple[int, ...], label: str) -> Link:
        """On the congestion-aware backend a group on a Switch or FullyConnected network uses its
        members' links only (no other group's), so it runs as on a network of its own size."""
        link = self.system.links[0]
        if link.topology == "Ring":
            raise LibraError(f"{self.system.groups_source}: group {label} on a Ring network with the congestion-aware "
                             "backend: its messages pass other NPUs' links, which other groups share; not modeled "
                             "(use --backend unaware, or a Switch or FullyConnected network)")
        return Link(link.topology, len(members), link.bw_gbps, link.latency_ns)

    def ring_link(self, members: tuple[int, ...], alg: str, label: str) -> Link:
        """A link of ``len(members)`` NPUs on which every offset's message costs what ASTRA-sim
        charges between the group's members that far apart, if there is one."""
        n = len(members)
        if alg == "halvingDoubling" and n & (n - 1):
            raise LibraError(f"{self.system.system_source}: halvingDoubling on communicator group {label} of {n} "
                             "members: ASTRA-sim needs a power of two there (it hangs); use ring or direct")
        offsets = [1] if alg == "ring" else ([1 << i for i in range(int(math.log2(n)))] if alg == "halvingDoubling"
                                            else range(1, n))
        ids = np.asarray(members, dtype=np.int64)
        per_offset = []
        for o in offsets:
            # (dimension, hops) ASTRA-sim charges each member's message to the member o places along
            dim, hops = p2p_dims(self.net, ids, np.roll(ids, -o))
            routes = list(zip(dim.tolist(), hops.tolist()))
            if len(set(routes)) != 1:
                a = next(i for i, r in enumerate(routes) if r != routes[0])
                (d0, h0), (d1, h1) = routes[0], routes[a]
                raise LibraError(
                    f"{self.system.groups_source}: group {label}: ASTRA-sim's {alg} over its members {list(members)[:8]} "
                    f"sends {members[0]} -> {members[o % n]} {h0} hop(s) on dimension {d0} but {members[a]} -> "
                    f"{members[(a + o) % n]} {h1} on dimension {d1}; such a ring's time is not modeled (predict the "
                    "directory 'emit' writes, where the group is a whole dimension)")
            per_offset.append((o, routes[0]))
        dims = {d for _, (d, _) in per_offset}
        if len(dims) == 1:
            d = dims.pop()
            link = self.system.links[d]
            hops = {h for _, (_, h) in per_offset}
            if len(hops) == 1:
                return Link("FullyConnected", n, link.bw_gbps, hops.pop() * link.latency_ns)
            if link.topology == "Ring" and all(h == min(o % n, n - o % n) for o, (_, h) in per_offset):
                return Link("Ring", n, link.bw_gbps, link.latency_ns)
        raise LibraError(f"{self.system.groups_source}: group {label}: ASTRA-sim's {alg} over its members "
                         f"{list(members)[:8]} sends to members at different distances over different links or "
                         "hops; its time is not modeled (predict the directory 'emit' writes, or use ring)")


def node_durations(d: Demand, plan, system: AstraSystem) -> Durations:
    """Per node of ``plan`` (the demand's joint graph, timing.plan.plan_of), ASTRA-sim's time.

    Raises
    ------
    LibraError
        A collective ASTRA-sim never finishes or exits on, or one this model does not time
        (the message names the system.json key or the group and why).
    """
    try:
        return _node_durations(d, plan, system)
    except LibraError as e:
        # astra_collective's refusals name the key; the user needs the file too
        msg = str(e)
        if msg.startswith((system.system_source, system.groups_source)):
            raise
        raise LibraError(f"{system.system_source}: {msg.removeprefix('system settings: ')}") from None


def _node_durations(d: Demand, plan, system: AstraSystem) -> Durations:
    t = _Timing(d, system)
    # ASTRA-sim truncates a roofline compute time to whole ns (the recorded ones are whole already)
    dur = np.floor(plan.base_ns)
    trees: dict[int, tuple[Spec, tuple[int, ...]]] = {}
    even: dict[int, Spec] = {}
    for ci, rc in enumerate(d.rank_classes):
        off = plan.offsets[ci]
        if rc.dag is None:
            times = t.class_times(rc, range(len(rc.collectives)))
            dur[off] = rc.compute_time_ns + sum(c.count * max(x) for c, (_, x, _) in zip(rc.collectives, times))
            continue
        nodes = [i for i, (kind, _) in enumerate(rc.dag.nodes) if kind == "coll"]
        times = t.class_times(rc, [int(rc.dag.nodes[i][1]) for i in nodes])
        ranks = rc.ranks or range(rc.num_ranks)
        # a collective timed on every rank (the full network) takes the class's slowest rank's time
        pick = itemgetter(*ranks) if len(ranks) > 1 else (lambda x: [x[r] for r in ranks])  # one call per node
        dur[[off + i for i in nodes]] = [max(pick(x)) if len(x) == t.npus else max(x) for _, x, _ in times]
        trees.update((off + i, (spec, x)) for i, (spec, x, tree) in zip(nodes, times) if tree)
        even.update((off + i, spec) for i, (spec, _, tree) in zip(nodes, times)
                    if spec is not None and not tree and not spec.coll.group)
    return Durations(dur, trees, even)


def arrival_skew(plan, finish) -> tuple[int, int]:
    """(collectives shared by rank classes whose ranks arrive at different times, the widest
    spread in ns) of a replay of ``plan``: a node arrives when the last of its dependencies ends.
    The replay starts such a collective when its last rank arrives, ASTRA-sim's early ranks
    begin at once: what the durations here cannot say."""
    if not plan.syncs:
        return 0, 0
    ends = np.asarray(finish, dtype=float)
    u, v = plan.edges[0], plan.edges[1]
    ready = np.zeros(ends.shape[0])
    np.maximum.at(ready, v, ends[u])
    shared = {tuple(sorted({g, *partners})) for g, partners in plan.syncs.items()}   # each collective once
    spreads = [np.ptp(ready[list(nodes)]) for nodes in shared]
    hit = [x for x in spreads if x > 0]
    return len(hit), int(round(max(hit, default=0.0)))


def gpu_compute_ns(rc: RankClass) -> int:
    """A rank's summed GPU compute as ASTRA-sim counts it (each node truncated to whole ns)."""
    if rc.dag is None:
        return int(rc.compute_time_ns)
    return int(sum(math.floor(v) for kind, v in rc.dag.nodes if kind == "comp"))


def check_cycles(replay) -> None:
    """Refuse a replay in which ranks waited on each other in a cycle (ASTRA-sim hangs there)."""
    if getattr(replay, "cycles", 0):
        raise LibraError("ranks wait on each other in a cycle (a receive whose send waits for it, or a collective "
                         "whose members issue it in different orders): ASTRA-sim would never finish them")


def check_start_at_zero(d: Demand, plan, dur: np.ndarray, system: AstraSystem) -> None:
    """Refuse endpoint-delay 0 with a collective on the whole network issued at t = 0: its
    memory bus schedules an event at t = 0, which fails EventQueue::proceed's assertion and
    ASTRA-sim aborts (later it is fine, and a group's ring pays a fixed 10 ns). A node is issued
    at t = 0 when every node it waits for takes 0 ns and is issued at t = 0 too."""
    if system.settings.endpoint_delay_ns:
        return
    n = dur.shape[0]
    waits = np.asarray(list(plan.waits.items()), dtype=np.int64).reshape(-1, 2)
    src = np.concatenate([plan.edges[0], waits[:, 1]])
    dst = np.concatenate([plan.edges[1], waits[:, 0]])
    indeg = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    first = np.searchsorted(src, np.arange(n + 1))
    at_zero = indeg == 0
    met = np.zeros(n, dtype=np.int64)
    stack = np.flatnonzero(at_zero & (dur == 0)).tolist()
    while stack:        # only the nodes of 0 ns reachable from the start: a few
        g = stack.pop()
        for s in dst[first[g]:first[g + 1]].tolist():
            met[s] += 1
            if met[s] == indeg[s]:
                at_zero[s] = True
                if dur[s] == 0:
                    stack.append(s)
    flat = [(rc, c) for rc in d.rank_classes for c in rc.collectives]
    t = _Timing(d, system)
    starts = [(g, flat[k]) for g, k in zip(plan.coll_pos.tolist(), plan.coll_idx.tolist()) if at_zero[g]]
    starts += [(plan.offsets[ci], (d.rank_classes[ci], c)) for ci in plan.no_dag
               if d.rank_classes[ci].compute_time_ns == 0 for c in d.rank_classes[ci].collectives[:1]]
    for _, (rc, c) in starts:
        if c.algorithm != "p2p" and c.type != coll.P2P and c.type not in dict(system.custom) \
                and not t.astra_coll(c, rc)[0].group:
            raise LibraError(f"{system.system_source}: endpoint-delay 0, and rank {rc.ranks[0] if rc.ranks else 0} "
                             f"issues {c.type} at time 0: ASTRA-sim aborts (an event at t = 0 fails "
                             "EventQueue::proceed's assertion); set endpoint-delay to 1 or more")
