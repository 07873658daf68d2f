"""ASTRA-sim's own timing of collectives, for any system.json: the time, in ns, that ASTRA-sim
518bd51 with its analytical congestion-unaware backend gives a collective, or a chain of
collectives issued one after the other on every rank. docs/astra-sim-settings.md derives each
rule from ASTRA-sim's sources. In short:

- a collective of S bytes becomes K chunks of ``S // splits`` bytes (at least the NPU count, except all-gather);
  each chunk runs one *phase* per dimension (all-reduce with localBWAware: reduce-scatter up, all-reduce on the
  last dimension, all-gather down);
- a phase waits in its dimension's queue, which runs ``ceil(active_chunks / queues_per_dim)`` phases at once,
  first come first served; phases on one rank never slow each other down (the congestion-unaware backend gives
  every message the full link);
- a phase is a sequence of messages, each paying ``endpoint_delay`` before it leaves, ``int(hops * latency +
  bytes / bandwidth)`` in the network and, where data is reduced, ``3 * int(bytes / local_mem_bw)``.

Ring, direct and halving-doubling phases take the same time on every rank (timed once); double
binary tree phases differ per position (ranks simulated per position). Times are exact to the ns;
ranks that would wait on each other for ever raise ``NeverEnds``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from functools import lru_cache
from typing import Any, NamedTuple, Sequence

from ..errors import LibraError, NeverEnds
from ..model.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from .astra_settings import IMPLEMENTATION_KEYS, KINDS, SystemSettings, parse_implementation
from .rank_coords import tree_coords

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")


class Link(NamedTuple):
    """One network dimension as the analytical backend reads it."""

    topology: str       # Ring | FullyConnected | Switch
    npus: int
    bw_gbps: float      # bytes per ns; from a YAML value: astra_bw_gbps(value)
    latency_ns: float   # per hop


class Coll(NamedTuple):
    """One collective node: kind, ``comm_size``, ``involved_dim``; ``group``: on a communicator group's
    ring (a Local dimension: a fixed 10 ns memory bus, direct reduces (n - 1) x more packets)."""

    kind: str
    size_bytes: int
    involved: tuple[bool, ...]
    group: bool = False


def astra_bw_gbps(yaml_value: float) -> float:
    """Bytes per ns ASTRA-sim takes from a network YAML ``bandwidth`` value (it reads GiB/s)."""
    return yaml_value * (1 << 30) / 1000000000


def _hops(link: Link, dist: int) -> int:
    """Hops of the analytical backend between coordinates ``dist`` apart in one dimension."""
    if link.topology == "Ring":
        d = dist % link.npus
        return min(d, link.npus - d)
    return 2 if link.topology == "Switch" else 1


def message_ns(link: Link, hops: int, msg: int) -> int:
    """One message's network time, truncated as ASTRA-sim's analytical backend does."""
    return int(hops * link.latency_ns + msg / link.bw_gbps)


class _Dim(NamedTuple):
    """One dimension of a collective's logical topology: a ring of ``n`` members."""

    n: int
    links: tuple[Link, ...]     # one link; a flattened ring keeps every dimension's
    flat: bool

    def route(self, offset: int) -> tuple[Link, int]:
        """(link, hops) to the member ``offset`` places along (flattened: the lowest dimension that differs)."""
        if not self.flat:
            return self.links[0], _hops(self.links[0], offset)
        for link in self.links:
            if offset % link.npus:
                return link, _hops(link, offset % link.npus)
            offset //= link.npus
        raise AssertionError("offset 0")


def _packets(alg: str, ptype: str, n: int, m: int, window: int,
             local: bool = False) -> tuple[int, int, int, list[tuple[int, int]]]:
    """(parallel packets P, non-zero packets per round, messages sent, [(offset, bytes)] of each
    packet in insertion order) of a ring, direct or halving-doubling phase."""
    if alg == "halvingDoubling":
        steps = int(math.log2(n))
        sends = 2 * steps if ptype == ALL_REDUCE else steps
        off, mult, msg = (n // 2, 0.5, m) if ptype == ALL_GATHER else (1, 2.0, m // 2)
        seq = []
        for _ in range(sends + 2):
            seq.append((off, msg))
            off, msg = int(off * mult), int(msg / mult)
            if off == n and ptype == ALL_REDUCE:
                mult = 0.5
                off, msg = int(off * mult), int(msg / mult)
        return 1, int(math.log2(n) - 1), sends, seq
    msg = m if ptype == ALL_GATHER else m // n
    if alg == "ring":
        sends = {ALL_REDUCE: 2 * (n - 1), ALL_TO_ALL: (n - 1) * n // 2}.get(ptype, n - 1)
        return 1, n - 1, sends, [(1, msg)] * (sends + 2)
    par = n - 1 if window < 0 else min(window, n - 1)
    sends = 2 * (n - 1) if ptype == ALL_REDUCE else n - 1
    return par, par * (n - 1 if local else 1), sends, [(i % (n - 1) + 1, msg) for i in range(sends + par + 1)]


@lru_cache(maxsize=4096)
def _phase_ns(alg: str, ptype: str, dim: _Dim, m: int, window: int, ed: int, mem: float, local: bool = False) -> int:
    """Time of one ring, direct or halving-doubling phase (the same on every rank): a replay of
    the algorithm's packet machine, each peer's message arriving when the rank's own would."""
    par, nonzero, sends, seq = _packets(alg, ptype, dim.n, m, window, local)
    gated = alg == "direct" and ptype == ALL_REDUCE     # its all-gather half waits for n - 1 receipts
    heap: list = []
    order = itertools.count()
    unsent: deque = deque()
    st = {"ins": 0, "left": sends, "free": 0, "recv": 0}

    def insert(t: int) -> None:
        i = st["ins"]
        st["ins"] += 1
        rnd, pos = divmod(i, par + nonzero)
        done = pos >= par and (ptype == REDUCE_SCATTER or (ptype == ALL_REDUCE and rnd % 2 == 0))
        heapq.heappush(heap, (t + ed + (_reduce_ns(seq[i][1], mem) if done else 0), next(order), -1))
        unsent.append(i)

    def ready(t: int) -> None:
        if unsent and st["left"] and st["free"]:
            i = unsent.popleft()
            st["left"] -= 1
            st["free"] -= 1
            link, hops = dim.route(seq[i][0])
            heapq.heappush(heap, (t + message_ns(link, hops, seq[i][1]), next(order), i))

    for _ in range(par):
        insert(0)
    while heap:
        t, _, what = heapq.heappop(heap)
        if what >= 0:               # a message arrived: its reply packet goes to the memory bus
            st["recv"] += 1
            insert(t)
            continue
        st["free"] += 1
        if gated and st["left"] <= dim.n - 1:
            if st["recv"] < dim.n - 1:
                continue
            for _ in range(par):
                ready(t)
        else:
            ready(t)
        if st["left"] == 0 and st["free"] == par:
            return t
    raise AssertionError("phase never ended")


def _reduce_ns(msg: int, mem: float) -> int:
    if not mem > 0:
        raise LibraError("system settings: local-mem-bw is 0 or absent but this collective reduces data "
                         "(ASTRA-sim divides by 0); set local-mem-bw > 0")
    return 3 * int(msg / (mem * 1000000000) * 1e9)


@lru_cache(maxsize=64)
def _tree(n: int, root_max: bool) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(parent, children) per position of ASTRA-sim's binary tree over n (a power of two) positions: a
    complete tree of n - 1 positions numbered in order, under the last position (root_max) or the first."""
    parent, kids = [-1] * n, [[] for _ in range(n)]

    def build(lo: int, hi: int, up: int) -> None:
        if lo <= hi:
            mid = (lo + hi) // 2
            parent[mid] = up
            kids[up].append(mid)
            build(lo, mid - 1, mid)
            build(mid + 1, hi, mid)
    build(0, n - 2, n - 1) if root_max else build(1, n - 1, 0)
    return tuple(parent), tuple(map(tuple, kids))


class _Phase(NamedTuple):
    queue: int
    duration_ns: int            # -1: a double binary tree phase, timed per position
    tree: tuple | None = None   # (network dimension, link, bytes, root_max)
    work: tuple = ()            # _phase_ns's arguments: astra_aware replays the phase's messages


def collective_plan(c: Coll, links: Sequence[Link], s: SystemSettings, state: dict) -> list[list[_Phase]]:
    """The phases of each chunk of one collective (``state``, updated, carries ASTRA-sim's per-rank counters
    from one collective to the next: queue allocators, which double tree is next)."""
    if c.kind not in KINDS:
        raise LibraError(f"collective type {c.kind!r}: ASTRA-sim simulates only {list(KINDS)}")
    if len(c.involved) != len(links):
        raise LibraError(f"collective {c.kind}: involved_dim has {len(c.involved)} entries for {len(links)} "
                         "dimensions; give one per dimension")
    names = s.implementations(c.kind)
    if not names or len(names) > len(links):
        raise LibraError(f"system settings: {IMPLEMENTATION_KEYS[c.kind]} has {len(names)} entries for a network "
                         f"of {len(links)} dimensions; give one per dimension")
    impls = [parse_implementation(n) for n in names]
    total = math.prod(link.npus for link in links)
    dims: list[tuple[_Dim, tuple]] = []
    for d, impl in enumerate(impls):
        if impl[1]:
            dims.append((_Dim(total, tuple(links), True), impl))
            break
        dims.append((_Dim(links[d].npus, (links[d],), False), impl))
    if c.kind == ALL_TO_ALL and any(a[0] == "halvingDoubling" for _, a in dims):
        raise LibraError("all-to-all-implementation: halvingDoubling has no all-to-all (ASTRA-sim exits on the "
                         "first one); use ring or direct")
    for dim, (alg, flat, _) in dims:
        if alg in ("halvingDoubling", "doubleBinaryTree") and dim.n & (dim.n - 1):
            raise LibraError(f"{alg} on a dimension of {dim.n} NPUs: ASTRA-sim needs a power of two there "
                             "(it hangs or crashes); use ring or direct")
    if any(a[0] == "doubleBinaryTree" for a in impls) and (any(a[1] for a in impls) or len(impls) < len(links)):
        raise LibraError("doubleBinaryTree beside a flattened (one*) implementation or a short implementation list "
                         "is not modeled; give one non-flattened entry per dimension")
    size, k = c.size_bytes, s.splits
    chunk = size // k
    if c.kind != ALL_GATHER and total > chunk:
        chunk, size = total, k * total
    if chunk == 0:
        raise LibraError(f"all-gather of {size} bytes in {k} chunks: ASTRA-sim makes 0-byte chunks and never ends; "
                         f"use a size of at least {k} bytes")
    order = list(range(len(dims)))[::-1] if c.kind == ALL_GATHER else list(range(len(dims)))
    active = [t for t in order if dims[t][0].n > 1 and c.involved[t]]
    if not active:
        raise LibraError(f"collective {c.kind} involves no dimension: ASTRA-sim never finishes it; fix involved_dim")
    if c.kind == ALL_REDUCE and s.collective_optimization == "localBWAware":
        steps = ([(t, REDUCE_SCATTER, "first") for t in active[:-1]] + [(active[-1], ALL_REDUCE, "first")]
                 + [(t, ALL_GATHER, "last") for t in active[-2::-1]])
    else:
        steps = [(t, c.kind, "any") for t in active]
    q = s.queues_per_dim
    plans = []
    for _ in range(-(-size // chunk)):
        m, phases = chunk, []
        for t, ptype, pick in steps:
            dim, (alg, _, window) = dims[t]
            lo, span = {"first": (0, max(q // 2, 1)), "last": (q // 2, q - q // 2), "any": (0, q)}[pick]
            slot = state.setdefault((t, pick), 0)
            state[(t, pick)] = (slot + 1) % span
            queue = t * q + lo + slot
            if alg == "doubleBinaryTree":
                turn = state[(c.kind, t)] = state.get((c.kind, t), -1) + 1
                _reduce_ns(m, s.local_mem_bw_gbps)      # refused now, not mid-replay
                phases.append(_Phase(queue, -1, (t, dim.links[0], m, turn % 2 == 0)))
                continue
            work = (alg, ptype, dim, m, window, 10 if c.group else s.endpoint_delay_ns, s.local_mem_bw_gbps, c.group,
                    -1 if pick == "last" or (pick == "any" and q > 1 and slot >= q // 2) else 1)   # ring direction
            phases.append(_Phase(queue, _phase_ns(*work[:8]), None, work))
            m = {ALL_GATHER: m * dim.n, REDUCE_SCATTER: m // dim.n}.get(ptype, m)
        plans.append(phases)
    return plans


def rank_finish_ns(colls: Sequence[Coll], links: Sequence[Link], settings: SystemSettings) -> tuple[int, ...]:
    """ASTRA-sim's finish time of each rank (ns, rank order) when every rank runs ``colls`` one
    after the other from time 0, each issued when the previous one ends on that rank. (With
    ``endpoint_delay_ns`` 0 ASTRA-sim aborts on an event at time 0; these are the times of
    collectives issued later.)"""
    links = checked_links(links)
    state: dict = {}
    return rank_times([collective_plan(c, links, settings, state) for c in colls], links, settings)


def checked_links(links: Sequence[Link]) -> tuple[Link, ...]:
    links = tuple(Link(*link) for link in links)
    for i, link in enumerate(links):
        if link.topology not in TOPOLOGIES or link.npus < 2 or not link.bw_gbps > 0 or not link.latency_ns >= 0:
            raise LibraError(f"network dimension {i}: need a topology in {list(TOPOLOGIES)}, npus >= 2, bandwidth "
                             f"> 0 and latency >= 0; got {tuple(link)}")
    return links


def rank_times(plans: list, links: tuple[Link, ...], settings: SystemSettings,
               starts: Sequence[int] | None = None) -> tuple[int, ...]:
    """Each rank's end (ns) of the planned collectives (``collective_plan``) issued one after
    the other, the first at ``starts[rank]`` (default 0 on every rank)."""
    trees = sorted({p.tree[0] for plan in plans for ch in plan for p in ch if p.tree})
    sizes = [link.npus for link in links]
    place, outside = tree_coords(tuple(sizes), tuple(trees))
    if not starts:
        finish = _Replay(plans, [sizes[d] for d in trees], trees, settings).run({})
        return tuple(finish[x] for x in place)
    # ranks that differ outside the tree dimensions are in other trees: each set apart
    sets: dict = {}
    for r, key in enumerate(outside):
        sets.setdefault(key, {})[place[r]] = starts[r]
    seen: dict = {}
    for key, first in sets.items():
        pattern = tuple(sorted(first.items()))
        if pattern not in seen:
            seen[pattern] = _Replay(plans, [sizes[d] for d in trees], trees, settings).run(first)
        sets[key] = seen[pattern]
    return tuple(sets[key][place[r]] for r, key in enumerate(outside))


def chain_time_ns(colls: Sequence[Coll], links: Sequence[Link], settings: SystemSettings) -> int:
    """The slowest rank's finish time (:func:`rank_finish_ns`)."""
    return max(rank_finish_ns(colls, links, settings))


def collective_time_ns(kind: str, size_bytes: int, involved: Sequence[bool], links: Sequence[Link],
                       settings: SystemSettings) -> int:
    """ASTRA-sim's time of one collective issued at 0 on every rank (its slowest rank)."""
    return chain_time_ns([Coll(kind, int(size_bytes), tuple(bool(x) for x in involved))], links, settings)


class _Replay:
    """The chunks' walk through the queues of every class of ranks, in ASTRA-sim's event order.
    Ranks are alike but for their positions in double binary trees: a class is one position per
    dimension that runs a tree."""

    def __init__(self, plans: list, sizes: list[int], trees: list[int], s: SystemSettings):
        self.plans, self.s = plans, s
        self.limit = -(-s.active_chunks // s.queues_per_dim)
        self.slot = {d: i for i, d in enumerate(trees)}
        self.classes = list(itertools.product(*(range(n) for n in sizes)))
        self.heap: list = []
        self.order = itertools.count()
        self.queues: dict = {}
        self.left: dict = {}
        self.finish: dict = {}
        self.waiting: dict = {}     # receive posted, message not yet there: its handler
        self.arrived: set = set()   # message there, receive not yet posted

    def at(self, t: int, fn, *args: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.order), fn, args))

    def run(self, starts: dict) -> dict:
        for x in self.classes:
            if starts:      # issued as events: a class issuing later must not take earlier messages
                self.at(starts.get(x, 0), self.issue, x, 0)
            else:
                self.issue(0, x, 0)
        while self.heap:
            t, _, fn, args = heapq.heappop(self.heap)
            fn(t, *args)
        if len(self.finish) < len(self.classes):
            raise NeverEnds("doubleBinaryTree: ranks take their chunks' tree phases through a shared queue in "
                            "different orders and wait on each other for ever (ASTRA-sim exits with ranks "
                            "unfinished); use fewer splits, more active chunks or ring on that dimension")
        return self.finish

    def issue(self, t: int, x: tuple, ci: int) -> None:
        self.left[(x, ci)] = len(self.plans[ci])
        for ch in range(len(self.plans[ci])):
            st = [x, ci, ch, 0]
            q = self.queue(st)
            q[1].append(st)
            self.fill(t, q)

    def queue(self, st: list) -> list:
        """[running, waiting] of the queue of a stream's current phase on its class."""
        return self.queues.setdefault((st[0], self.plans[st[1]][st[2]][st[3]].queue), [0, deque()])

    def fill(self, t: int, q: list) -> None:
        while q[1] and q[0] < self.limit:
            q[0] += 1
            st = q[1].popleft()
            ph = self.plans[st[1]][st[2]][st[3]]
            if ph.duration_ns >= 0:
                self.at(t + ph.duration_ns, self.done, st)
            else:
                self.tree(t, st, *ph.tree)

    def done(self, t: int, st: list) -> None:
        # ASTRA-sim's order: the next collective is issued while the finished phase still holds
        # its queue; a moving chunk joins its next queue before the old queue admits the next.
        q = self.queue(st)
        x, ci, ch, pi = st
        nxt = None
        if pi + 1 < len(self.plans[ci][ch]):
            st[3] += 1
            nxt = self.queue(st)
            nxt[1].append(st)
        else:
            self.left[(x, ci)] -= 1
            if not self.left[(x, ci)]:
                self.finish[x] = t
                if ci + 1 < len(self.plans):
                    self.issue(t, x, ci + 1)
        q[0] -= 1
        self.fill(t, q)
        if nxt is not None:
            self.fill(t, nxt)

    def tree(self, t: int, st: list, d: int, link: Link, m: int, root_max: bool) -> None:
        """A double binary tree phase at one position: wait for the children's sums, send the
        sum up, wait for the total, send it down; every message is the whole chunk."""
        x, i = st[0], self.slot[d]
        me = x[i]
        parent, kids = _tree(link.npus, root_max)
        ed, red = self.s.endpoint_delay_ns, _reduce_ns(m, self.s.local_mem_bw_gbps)

        def peer(pos: int) -> tuple:
            return x[:i] + (pos,) + x[i + 1:]

        def send(t2: int, pos: int) -> None:
            self.transmit(t2, link, me, pos, m, (*st[1:], x, peer(pos)))

        def down(t2: int) -> None:
            for kid in kids[me]:
                send(t2, kid)
            self.done(t2, st)

        def total(t2: int) -> None:     # the total arrived from the parent
            self.at(t2 + ed + red, down) if kids[me] else self.at(t2 + ed, self.done, st)

        def up(t2: int) -> None:
            send(t2, parent[me])
            self.post(t2, (*st[1:], peer(parent[me]), x), total)

        if not kids[me]:                # a leaf sends its own data up after the memory bus
            self.at(t + ed, up)
            return
        got = []

        def child(t2: int) -> None:
            got.append(t2)
            if len(got) == len(kids[me]):
                self.at(t2 + ed + red, up if parent[me] >= 0 else down)
        for kid in kids[me]:
            self.post(t, (*st[1:], peer(kid), x), child)

    def transmit(self, t: int, link: Link, src: int, dst: int, size: int, key: tuple) -> None:
        self.at(t + message_ns(link, _hops(link, dst - src), size), self.deliver, key)

    def deliver(self, t: int, key: tuple) -> None:
        handler = self.waiting.pop(key, None)
        if handler is None:
            self.arrived.add(key)
        else:
            handler(t)

    def post(self, t: int, key: tuple, handler) -> None:
        if key in self.arrived:         # already there: handled later in this tick
            self.arrived.discard(key)
            self.at(t, handler)
        else:
            self.waiting[key] = handler
