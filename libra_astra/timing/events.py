"""The event-driven replay of a plan's joint graph (plan.py): every rank class at once, the way
ASTRA-sim runs the ranks' DAGs, for graphs or durations the fixed order (fixed_order.py) cannot
take, and for ties on a critical path that need its order of events.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..demand.types import Demand
from .causes import walk_causes
from .plan import Plan


@dataclass(frozen=True)
class Replay:
    """Per node of the joint graph (classes one after the other from ``offsets[ci]``)."""

    finish: list[float]
    cause: list[int]                    # what each node waited for last, -1 for nothing
    busy_comp: tuple[float, ...]        # per class
    offsets: tuple[int, ...]
    cycles: int                         # waits dropped because ranks waited on each other in a cycle

    def end_ns(self, g: int) -> float:
        return self.finish[g]

    def class_finish(self, ci: int) -> list[float]:
        return self.finish[self.offsets[ci]:self.offsets[ci + 1]]

    def class_last(self, ci: int) -> int:
        """The first node of class ``ci`` to end last, as max() picks it; -1 if it has none."""
        f = self.class_finish(ci)
        return self.offsets[ci] + f.index(max(f)) if f else -1

    def path_nodes(self, ends: Sequence[int]) -> list[np.ndarray]:
        """The path of causes that ends in each global node of ``ends``, first node first (read-only
        int64 arrays)."""
        found = walk_causes(self.cause, ends)
        assert found is not None     # the event-driven replay's causes never tie
        return found


def simulate(plan: Plan, dur: list[float], d: Demand) -> Replay:
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
    return Replay(finish, cause, tuple(busy), plan.offsets, cycles)
