"""The host-faithful time model: the GPU-faithful model's counterpart for a CPU-only (gloo) run.

There is no device and no launch: the host threads are the run. Each rank's steps are rebuilt
from its profile with the profile's own durations:

- the step's thread runs its outermost operators in recorded order, each after the previous
  one by the recorded gap;
- a gloo collective's operator starts on its worker thread as long after its ``c10d::``
  operator started as recorded (that operator only queues it), and after the worker thread's
  previous collective ended; one gloo runs in place on the step's thread (a send, a receive)
  ends the operator around it as long after its own end as recorded;
- its transfer starts when the last member's operator has started and lasts
  ``transfer_ns(collective)``; each member's operator ends as long after that as it did in the
  profile after the last start plus the measured transfer (its shortest instance): the delay
  of a rank that the OS ran late, up to milliseconds when the ranks and gloo's worker threads
  share few cores, is kept as measured, as the GPU replay keeps what no rule explains;
- the step's thread waited for a collective where the collective ended in the gap before one of
  its operators (``work.wait()`` is not an operator): that operator starts as long after the
  collective's end as recorded, or after its predecessor, whichever is later.

An operator keeps its recorded duration, so a wait recorded inside an operator stays as it was
measured. With the measured transfers the replay gives back the measured steps (where the step
thread's waits are the gaps the rules read); with a network's transfers it predicts them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Sequence

from ..traces.cpu_groups import GroupMap
from .collectives import MeasuredCollective
from .comms import RankComm
from .gloo import run_comms
from .kineto import HostOp, RankProfile
from .replay import ReplayedRank, collective_keys
from .settle import RankEvents, settle, settle_events
from .step import step_windows

MODEL_NAME = ("host-faithful (CPU run replayed: the step thread's operators in recorded order, gloo collectives "
              "after their c10d call, each transfer from when the last member starts it)")
WAIT_TOLERANCE_NS = 2_000


@dataclass(frozen=True)
class _Node:
    deps: tuple[tuple[int, bool], ...]   # (node, from its start?) it follows
    lag_ns: int                          # recorded start minus the latest recorded reference of its deps
    dur_ns: int
    coll: int | None = None


def _outermost(ops: list[HostOp]) -> list[HostOp]:
    out: list[HostOp] = []
    for o in sorted(ops, key=lambda o: (o.start_ns, -o.end_ns)):
        if not out or o.start_ns >= out[-1].end_ns:
            out.append(o)
    return out


def _rank_graph(prof: RankProfile, comms: list[RankComm], coll_of: dict[tuple[int, str], int]):
    """The rank's nodes (each after its dependencies), their recorded (start, end), the span of the
    steps, and per step (start, end, its first node, the node that ends its last operator)."""
    windows, tid = step_windows(prof)
    lo, hi = windows[0][0], windows[-1][1]
    main = _outermost([o for o in prof.host if (tid is None or o.tid == tid) and lo <= o.start_ns <= hi
                       and not o.name.startswith("ProfilerStep#")])
    gloo = [c for c in comms if not c.on_gpu and (c.start_ns, c.name) in coll_of
            and c.end_ns >= lo and c.start_ns <= hi]
    # events in recorded time order: main operators by start, gloo operators by start
    events = sorted([(o.start_ns, 0, i) for i, o in enumerate(main)] + [(c.start_ns, 1, i) for i, c in enumerate(gloo)])
    main_ends = [o.end_ns for o in main]
    gloo_ends: list[tuple[int, int]] = []    # (end, node) of the gloo operators so far
    rec: dict[int, tuple[int, int]] = {}
    nodes: list[_Node] = []
    key_main, end_main = {}, {}
    last_on: dict[tuple, int] = {}
    prev_main = None
    for _, kind, i in events:
        k = len(nodes)
        if kind == 0:
            o = main[i]
            deps = [(prev_main, False)] if prev_main is not None else []
            lo_gap = rec[prev_main][1] if prev_main is not None else lo
            # the gloo operator that ended last in the gap before this operator
            at = bisect.bisect_right(gloo_ends, (o.start_ns + WAIT_TOLERANCE_NS, len(nodes)))
            if at and gloo_ends[at - 1][0] >= lo_gap:
                deps.append((gloo_ends[at - 1][1], False))
            start, end = o.start_ns, o.end_ns
            prev_main = k
            key_main[i] = end_main[i] = k
        else:
            c = gloo[i]
            deps = []
            # the step thread's operator that made the c10d:: call (none for an unpaired gloo operator)
            j_caller = None
            if c.caller:
                # outermost operators do not overlap: their ends rise with their starts
                j = bisect.bisect_left(main_ends, c.launch_ns)
                while j < len(main) and main[j].start_ns <= c.launch_ns:
                    if j in key_main:
                        j_caller = j
                        break
                    j += 1
            if j_caller is not None:
                deps.append((key_main[j_caller], True))
            if c.thread in last_on:
                deps.append((last_on[c.thread], False))
            start, end = c.start_ns, c.end_ns
            last_on[c.thread] = k
            bisect.insort(gloo_ends, (c.end_ns, k))
        refs = [rec[j][0] if from_start else rec[j][1] for j, from_start in deps]
        base = max(refs, default=lo)
        coll = coll_of.get((c.start_ns, c.name)) if kind == 1 else None
        nodes.append(_Node(tuple(deps), start - base, end - start, coll))
        rec[k] = (start, end)
        if kind == 1 and j_caller is not None and main[j_caller].tid == c.thread[1] and c.end_ns <= main[j_caller].end_ns:
            # run in place on the step thread (a send, a receive): the operator around it ends as
            # long after the collective as recorded
            o = main[j_caller]
            nodes.append(_Node(((k, False),), 0, o.end_ns - c.end_ns))
            rec[k + 1] = (c.end_ns, o.end_ns)
            end_main[j_caller] = prev_main = k + 1
    bounds = []
    main_starts = [o.start_ns for o in main]
    for w_lo, w_hi in windows:
        a, b = bisect.bisect_left(main_starts, w_lo), bisect.bisect_right(main_starts, w_hi)
        bounds.append((w_lo, w_hi, key_main[a] if a < b else None, end_main[b - 1] if a < b else None))
    return nodes, rec, (lo, hi), bounds


def _times(nodes: list[_Node], lo: int, release: dict[int, int], transfer: dict[int, int], tail: dict[int, int]):
    start, end, ready = [], [], {}
    for n in nodes:
        refs = [start[j] if from_start else end[j] for j, from_start in n.deps]
        s = max(refs, default=lo) + n.lag_ns
        start.append(s)
        if n.coll is not None:
            ready[n.coll] = s
            end.append(max(s, max(s, release.get(n.coll, s)) + transfer[n.coll] + tail.get(n.coll, 0)))
        else:
            end.append(s + n.dur_ns)
    return start, end, ready


def _events(nodes: list[_Node], lo: int, transfer: dict[int, int], tail: dict[int, int]) -> RankEvents:
    """The rank's nodes for :func:`settle_events`, timed as :func:`_times` times them."""
    def start_of(k: int, start: list, end: list) -> int:
        return max((start[j] if from_start else end[j] for j, from_start in nodes[k].deps), default=lo) + nodes[k].lag_ns

    def end_of(k: int, start: list, end: list, release: int | None) -> int:
        n, s = nodes[k], start[k]
        if n.coll is None:
            return s + n.dur_ns
        return max(s, max(s, release) + transfer[n.coll] + tail.get(n.coll, 0))

    return RankEvents([[2 * j + (not from_start) for j, from_start in n.deps] for n in nodes],
                      [()] * len(nodes), [n.coll for n in nodes], start_of, end_of)


def cpu_replay(profiles: Sequence[RankProfile], collectives: Sequence[MeasuredCollective],
               transfer_ns: Callable[[MeasuredCollective], int], world: int,
               offsets_ns: Sequence[int] | None = None, group_map: GroupMap | None = None) -> list[ReplayedRank]:
    """Every rank's step under the host-faithful model (module docstring), ns."""
    comms = run_comms(profiles, world, [], group_map)
    coll_of, instances = collective_keys(profiles, comms, collectives, world)
    transfer = {i: int(transfer_ns(c)) for i, c in enumerate(collectives)}
    graphs = {p.rank: _rank_graph(p, comms[p.rank], coll_of[p.rank]) for p in profiles}
    off = dict(zip((p.rank for p in profiles), offsets_ns or [0] * len(profiles)))
    # each member's recorded end after the last member's recorded start plus the measured transfer
    tails: dict[int, dict[int, int]] = {p.rank: {} for p in profiles}
    for i, inst in enumerate(instances):
        last = max(c.start_ns - off[r] for r, c in inst)
        for r, c in inst:
            tails[r][i] = (c.end_ns - off[r]) - (last + collectives[i].transfer_ns)
    results = settle_events({r: _events(g[0], g[2][0], transfer, tails[r]) for r, g in graphs.items()}, off)
    if results is None:
        results = settle(lambda r, release: _times(graphs[r][0], graphs[r][2][0], release, transfer, tails[r]),
                         list(graphs), len(collectives), off)
    out = []
    for p in profiles:
        nodes, rec, (lo, _), bounds = graphs[p.rank]
        start, end = results[p.rank]
        steps = []
        for w_lo, w_hi, first, last in bounds:
            s0 = start[first] - (rec[first][0] - w_lo) if first is not None else w_lo
            s1 = end[last] + (w_hi - rec[last][1]) if last is not None else w_hi
            steps.append(s1 - s0)
        out.append(ReplayedRank(p.rank, round(sum(steps) / len(steps)),
                                tuple(end[k] - lo for k, n in enumerate(nodes) if n.coll is not None)))
    return out
