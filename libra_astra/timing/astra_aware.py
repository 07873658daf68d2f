"""ASTRA-sim's timing of collectives on its analytical congestion-AWARE backend (518bd51), for
any system.json: each rank's finish time, exact to the nanosecond.

The system layer is the one astra_collective.py models (chunks, phases, queues, the packet
machines of ring, direct and halving-doubling, double binary trees); what changes is the network,
which docs/astra-sim-settings.md ("The congestion-aware backend") derives from
``extern/network_backend/analytical/congestion_aware``:

- one dimension only (``construct_topology`` exits on more);
- every message is one chunk sent whole along a fixed route (Ring: the shorter way round,
  clockwise on a tie; FullyConnected: the direct link; Switch: up to the switch and down), store
  and forward: on each link it takes ``int(latency + bytes / B)`` to reach the next device and
  holds the link ``int(bytes / B)``;
- each link (one per direction) sends one message at a time, the others wait first come first
  served.

Messages of different ranks and chunks now share links, so phases no longer take a time of
their own: every rank is replayed, message by message, in ASTRA-sim's event order (events at one
time run in the order they were scheduled). A communicator group on a Switch or FullyConnected
network uses only its members' links, so it is replayed on a network of its own size
(astra_durations.py; a group on a Ring is refused there).
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from ..errors import LibraError
from ..model.collectives import ALL_REDUCE, REDUCE_SCATTER
from .astra_collective import (Coll, Link, _packets, _reduce_ns, _Replay, _tree, checked_links, collective_plan,
                               rank_times)
from .astra_settings import SystemSettings

BACKENDS = ("unaware", "aware")


def check_aware_links(links: Sequence[Link], source: str = "network") -> tuple[Link, ...]:
    """The links, refused unless one dimension: the aware backend at 518bd51 exits on more."""
    links = checked_links(links)
    if len(links) != 1:
        raise LibraError(f"{source}: {len(links)} dimensions, but ASTRA-sim's congestion-aware backend supports one "
                         "dimension only (it exits: 'only support 1-dim topology'); use --backend unaware or a 1-D network")
    if links[0].topology == "Ring" and links[0].npus == 2:
        raise LibraError(f"{source}: a Ring of 2 NPUs: ASTRA-sim's congestion-aware backend connects 0 -> 1 twice and "
                         "aborts (Device::connect assertion); use FullyConnected 2, which has the same two links")
    return links


def aware_message_ns(link: Link, hops: int, size_bytes: int) -> int:
    """One message alone on idle links: each of its ``hops`` links charges ``int(latency + bytes/B)``."""
    return hops * int(link.latency_ns + size_bytes / link.bw_gbps)


class _Net:
    """The links of one 1-D topology: per directed link, busy or not and its waiting messages."""

    def __init__(self, link: Link, at):
        self.link, self.at = link, at
        self.busy: dict[tuple[int, int], bool] = {}
        self.waiting: dict[tuple[int, int], deque] = {}

    def route(self, src: int, dst: int) -> list[int]:
        """The devices a message passes, as ``Ring/Switch/FullyConnected::route`` build them."""
        n, topo = self.link.npus, self.link.topology
        if topo == "Switch":
            return [src, n, dst]            # the switch is device n
        if topo == "FullyConnected":
            return [src, dst]
        cw = (dst - src) % n
        step = -1 if n - cw < cw else 1     # a tie goes clockwise
        path = [src]
        while path[-1] != dst:
            path.append((path[-1] + step) % n)
        return path

    def send(self, t: int, src: int, dst: int, size: int, arrived) -> None:
        """Send ``size`` bytes from NPU src to dst now; ``arrived(t)`` runs when they are there."""
        self.hop(t, [self.route(src, dst), size, arrived])

    def hop(self, t: int, msg: list) -> None:
        key = (msg[0][0], msg[0][1])
        if self.busy.get(key):
            self.waiting.setdefault(key, deque()).append(msg)
        else:
            self.transmit(t, key, msg)

    def transmit(self, t: int, key: tuple[int, int], msg: list) -> None:
        self.busy[key] = True
        size = msg[1]
        # Link::schedule_chunk_transmission: arrival first, then the link's free time
        self.at(t + int(self.link.latency_ns + size / self.link.bw_gbps), self.reach, msg)
        self.at(t + int(size / self.link.bw_gbps), self.free, key)

    def reach(self, t: int, msg: list) -> None:
        msg[0] = msg[0][1:]
        if len(msg[0]) == 1:
            msg[2](t)
        else:
            self.hop(t, msg)

    def free(self, t: int, key: tuple[int, int]) -> None:
        self.busy[key] = False
        q = self.waiting.get(key)
        if q:
            self.transmit(t, key, q.popleft())


class _Machine:
    """One rank's ring, direct or halving-doubling phase: ASTRA-sim's packet machine
    (``Ring``/``AllToAll``/``HalvingDoubling``: insert_packet, ready, run), its messages sent over
    the shared links and its receives matched to the peers' sends."""

    def __init__(self, rp: "_AwareReplay", st: list, work: tuple):
        alg, ptype, dim, m, window, ed, mem, local, self.sign = work
        self.rp, self.st, self.alg, self.ptype = rp, st, alg, ptype
        self.n, self.ed, self.mem, self.me = dim.n, ed, mem, st[0][0]
        self.who = self.me          # the rank whose Sys events these are (its position here)
        self.par, self.nonzero, sends, self.seq = _packets(alg, ptype, dim.n, m, window, local)
        self.gated = alg == "direct" and ptype == ALL_REDUCE    # its all-gather half waits for n - 1 receipts
        self.ins, self.left, self.free, self.recv = 0, sends, 0, 0
        self.unsent: deque = deque()

    def start(self, t: int) -> None:
        for _ in range(self.par):
            self.insert(t)

    def peers(self, i: int) -> tuple[int, int]:
        """(destination, source) of the i-th packet: ring and direct send ``o`` places along the
        phase's direction (anticlockwise in the upper half of a dimension's queues, and for the
        all-gather half of a multi-dimensional localBWAware all-reduce: ``QueueLevelHandler``) and
        receive from ``o`` places back; halving-doubling exchanges with one partner, clockwise
        when ``(index // o)`` is even whatever the queue (``HalvingDoubling::specify_direction``)."""
        n, me, off = self.n, self.me, self.seq[i][0]
        if self.alg == "halvingDoubling":
            p = (me + off) % n if (me // off) % 2 == 0 else (me - off) % n
            return p, p
        if self.alg == "direct":
            off = i % (n - 1) + 1
        off *= self.sign
        return (me + off) % n, (me - off) % n

    def insert(self, t: int) -> None:
        i = self.ins
        self.ins += 1
        rnd, pos = divmod(i, self.par + self.nonzero)
        done = pos >= self.par and (self.ptype == REDUCE_SCATTER or (self.ptype == ALL_REDUCE and rnd % 2 == 0))
        self.unsent.append(i)
        self.rp.bundle(self.who, t, self.ed, _reduce_ns(self.seq[i][1], self.mem) if done else -1, self.general)

    def general(self, t: int) -> None:
        self.free += 1
        if self.gated and self.left <= self.n - 1:
            if self.recv < self.n - 1:
                return
            for _ in range(self.par):       # a ready() that sends nothing leaves nothing to the next
                if not self.ready(t):
                    break
        else:
            self.ready(t)
        if self.left == 0 and self.free == self.par:
            self.rp.done(t, self.st)

    def ready(self, t: int) -> bool:
        if not (self.unsent and self.left and self.free):
            return False
        i = self.unsent.popleft()
        self.left -= 1
        self.free -= 1
        dst, src = self.peers(i)
        self.rp.message(t, self.st, self.me, dst, self.seq[i][1])
        self.rp.receive(t, self.st, src, self.me, self.received)
        return True

    def received(self, t: int) -> None:
        self.recv += 1
        self.insert(t)


class _AwareReplay(_Replay):
    """astra_collective's queue replay with every rank a class of its own, phases run as message
    replays (_Machine, double binary trees) over one shared :class:`_Net`."""

    def __init__(self, plans: list, link: Link, s: SystemSettings):
        super().__init__(plans, [link.npus], [0], s)
        self.net = _Net(link, self.at)
        self.sent: dict = {}
        self.posted: dict = {}
        self.batches: dict = {}

    def sys_at(self, rank: int, t: int, fn) -> None:
        """A Sys event (``Sys::try_register_event``): a rank's events for one tick are one batch,
        queued where the first of them was registered, run in registration order."""
        batch = self.batches.get((rank, t))
        if batch is None:
            self.batches[(rank, t)] = [fn]
            self.at(t, self.run_batch, rank)
        else:
            batch.append(fn)

    def run_batch(self, t: int, rank: int) -> None:
        batch = self.batches[(rank, t)]
        i = 0
        while i < len(batch):       # events added for this tick meanwhile run in this batch
            batch[i](t)
            i += 1
        del self.batches[(rank, t)]

    def bundle(self, rank: int, t: int, ed: int, reduce_ns: int, fn) -> None:
        """A PacketBundle: the memory bus's ``ed``, then, if it is processed (``reduce_ns`` >= 0),
        the reduction, each a Sys event; then ``fn``."""
        if reduce_ns < 0:
            self.sys_at(rank, t + ed, fn)
        else:
            self.sys_at(rank, t + ed, lambda t2: self.sys_at(rank, t2 + reduce_ns, fn))

    def fill(self, t: int, q: list) -> None:
        while q[1] and q[0] < self.limit:
            q[0] += 1
            st = q[1].popleft()
            ph = self.plans[st[1]][st[2]][st[3]]
            if ph.tree:
                self.tree(t, st, *ph.tree)
            else:
                self.machine(st, ph).start(t)

    def machine(self, st: list, ph) -> "_Machine":
        """The machine that steps a non-tree phase at one rank."""
        return _Machine(self, st, ph.work)

    def tree(self, t: int, st: list, d: int, link: Link, m: int, root_max: bool) -> None:
        """A double binary tree phase at one rank, as ``DoubleBinaryTreeAllReduce::run`` steps: a
        leaf sends its chunk up after the memory bus and ends after the memory bus once the total
        is back; an intermediate rank reduces each child's chunk (a bundle each), sends up after
        the second, and sends the reduced total down to both children; the root waits for its
        one child, reduces and sends down. Every message is the whole chunk."""
        me = st[0][0]
        parent, kids = _tree(link.npus, root_max)
        ed, red = self.s.endpoint_delay_ns, _reduce_ns(m, self.s.local_mem_bw_gbps)
        up, below = parent[me], kids[me]

        def key(a: int, b: int) -> tuple:
            return (*st[1:], (a,), (b,))

        def down(t2: int) -> None:
            for kid in below:
                self.transmit(t2, link, me, kid, m, key(me, kid))
            self.done(t2, st)

        def to_parent(t2: int, then) -> None:
            self.transmit(t2, link, me, up, m, key(me, up))
            self.post(t2, key(up, me), then)

        if not below:
            self.bundle(me, t, ed, -1, lambda t2: to_parent(t2, lambda t3: self.bundle(
                me, t3, ed, -1, lambda t4: self.done(t4, st))))
            return
        if up < 0:
            self.post(t, key(below[0], me), lambda t2: self.bundle(me, t2, ed, red, down))
            return
        reduced = []

        def child_reduced(t2: int) -> None:
            reduced.append(t2)
            if len(reduced) == len(below):
                to_parent(t2, lambda t3: self.bundle(me, t3, ed, red, down))
        for kid in below:
            self.post(t, key(kid, me), lambda t2: self.bundle(me, t2, ed, red, child_reduced))

    def transmit(self, t: int, link: Link, src: int, dst: int, size: int, key: tuple) -> None:
        self.net.send(t, src, dst, size, lambda t2: self.deliver(t2, key))

    def message(self, t: int, st: list, src: int, dst: int, size: int) -> None:
        """A phase's message: matched to the receiver's k-th receive from src in this stream
        (ASTRA-sim's chunk ids count sends and receives per tag, source and destination)."""
        base = (*st[1:], src, dst)
        k = self.sent[base] = self.sent.get(base, -1) + 1
        self.transmit(t, self.net.link, src, dst, size, (*base, k))

    def receive(self, t: int, st: list, src: int, dst: int, handler) -> None:
        base = (*st[1:], src, dst)
        k = self.posted[base] = self.posted.get(base, -1) + 1
        self.post(t, (*base, k), handler)


def aware_rank_times(plans: list, links: Sequence[Link], settings: SystemSettings,
                     starts: Sequence[int] | None = None) -> tuple[int, ...]:
    """Each rank's end (ns) of the planned collectives (``collective_plan``) issued one after the
    other on the congestion-aware backend, the first at ``starts[rank]`` (default 0)."""
    (link,) = check_aware_links(links)
    finish = _AwareReplay(plans, link, settings).run({(r,): v for r, v in enumerate(starts)} if starts else {})
    return tuple(finish[(r,)] for r in range(link.npus))


def aware_rank_finish_ns(colls: Sequence[Coll], links: Sequence[Link], settings: SystemSettings) -> tuple[int, ...]:
    """ASTRA-sim's (congestion-aware) finish time of each rank when every rank runs ``colls`` one
    after the other from time 0 (astra_collective.rank_finish_ns for the unaware backend)."""
    links = check_aware_links(links)
    state: dict = {}
    return aware_rank_times([collective_plan(c, links, settings, state) for c in colls], links, settings)


def rank_times_for(backend: str):
    """``rank_times`` of the chosen backend: astra_collective's or :func:`aware_rank_times`."""
    if backend not in BACKENDS:
        raise LibraError(f"backend {backend!r}: use one of {list(BACKENDS)}")
    return aware_rank_times if backend == "aware" else rank_times

