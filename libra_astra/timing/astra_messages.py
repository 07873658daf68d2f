"""Every rank of a collective replayed message by message on the congestion-unaware network,
for ranks that issue it at different times.

astra_collective times a ring, direct or halving-doubling phase once: issued together, every
rank's peers send when it does, so the phase takes the same time everywhere. Issued apart (after
a double binary tree the leaves are late), a rank that starts early sends at once but waits for
its peers' messages: ``AllToAll``/``Ring``/``HalvingDoubling`` move a packet on only when the
peer's message has arrived (``CommonNetworkApi::sim_recv`` matches it on tag, source,
destination and count), so each rank's phase ends when its own machine, fed by the others',
does. Here each rank runs astra_aware's packet machine (ASTRA-sim's, with its Sys event
batching) on the phase's dimension, its messages charged as the unaware backend charges them
(``int(hops * latency + bytes / bandwidth)``, every link to itself); tree phases step as
astra_collective's. Issued together, the times are astra_collective's (tests cross-check).
"""

from __future__ import annotations

import math
from typing import Sequence

from .astra_aware import _AwareReplay, _Machine
from .astra_collective import Link, _Replay, checked_links, message_ns
from .astra_settings import SystemSettings


class _RankMachine(_Machine):
    """A phase's packet machine at one rank of a multi-dimensional network: its position is its
    coordinate on the phase's dimension (on a flattened one, its rank)."""

    def __init__(self, rp: "_MessageReplay", st: list, work: tuple, position: int):
        super().__init__(rp, st, work)
        self.me, self.who = position, st[0]


class _MessageReplay(_AwareReplay):
    """astra_collective's queue replay with every rank its own class (its coordinates), ring,
    direct and halving-doubling phases as message replays between ranks."""

    def __init__(self, plans: list, links: tuple[Link, ...], s: SystemSettings):
        sizes = [link.npus for link in links]
        _Replay.__init__(self, plans, sizes, list(range(len(links))), s)
        self.queues_per_dim = s.queues_per_dim
        self.coords = [tuple(r // math.prod(sizes[:d]) % sizes[d] for d in range(len(sizes)))
                       for r in range(math.prod(sizes))]
        self.strides = [math.prod(sizes[:d]) for d in range(len(sizes))]
        self.sent: dict = {}
        self.posted: dict = {}
        self.batches: dict = {}

    # trees step as the congestion-unaware backend runs them; other phases message by message
    tree = _Replay.tree

    def machine(self, st: list, ph) -> _RankMachine:
        return _RankMachine(self, st, ph.work, self.position(st, st[0]))

    transmit = _Replay.transmit

    def dim_of(self, st: list) -> tuple[int, object]:
        ph = self.plans[st[1]][st[2]][st[3]]
        return ph.queue // self.queues_per_dim, ph.work[2]

    def position(self, st: list, x: tuple) -> int:
        d, dim = self.dim_of(st)
        return sum(c * s for c, s in zip(x, self.strides)) if dim.flat else x[d]

    def rank_at(self, st: list, pos: int) -> tuple:
        """The coordinates of the member at ``pos`` of the phase's dimension, seen from ``st``'s rank."""
        d, dim = self.dim_of(st)
        if dim.flat:
            return self.coords[pos]
        x = st[0]
        return x[:d] + (pos,) + x[d + 1:]

    def message(self, t: int, st: list, src: int, dst: int, size: int) -> None:
        _, dim = self.dim_of(st)
        base = (*st[1:], self.rank_at(st, src), self.rank_at(st, dst))
        k = self.sent[base] = self.sent.get(base, -1) + 1
        link, hops = dim.route((dst - src) % dim.n)
        self.at(t + message_ns(link, hops, size), self.deliver, (*base, k))

    def receive(self, t: int, st: list, src: int, dst: int, handler) -> None:
        base = (*st[1:], self.rank_at(st, src), self.rank_at(st, dst))
        k = self.posted[base] = self.posted.get(base, -1) + 1
        self.post(t, (*base, k), handler)


def message_rank_times(plans: list, links: Sequence[Link], settings: SystemSettings,
                       starts: Sequence[int] | None = None) -> tuple[int, ...]:
    """Each rank's end (ns, rank order) of the planned collectives (``collective_plan``) issued
    one after the other, the first at ``starts[rank]`` (default 0), every rank replayed message
    by message on the congestion-unaware network."""
    links = checked_links(links)
    rp = _MessageReplay(plans, links, settings)
    finish = rp.run({x: int(v) for x, v in zip(rp.coords, starts)} if starts else {})
    return tuple(finish[x] for x in rp.coords)
