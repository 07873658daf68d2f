"""The GPU-faithful time model: a measured step replayed as the GPU runs it, with each
collective's transfer taken from a network model.

Each rank's step is rebuilt from its profile as a graph, with the profile's own durations:

- the host threads issue their CUDA calls in recorded order, separated by the recorded host
  work between them (a thread's first call follows the call another thread made last before it);
- a kernel (or copy) starts no earlier than its launch call, after the previous one on its
  stream, and after the kernel of another stream it waited for: where the profile shows a kernel
  starting later than both, the kernel of another stream that ended last before that start is
  taken as the one it waited for (``cudaStreamWaitEvent`` in the profile names no stream);
- a synchronizing call (``cuda*Synchronize``, a synchronous ``cudaMemcpy``) blocks until the
  device work that ended last before its recorded end;
- a collective's kernels start on each rank when that rank reaches them; its transfer starts when
  the last member is there and lasts ``transfer_ns(collective)`` on every member.

What the profile shows beyond these rules (a launch's latency, a delay no rule explains) is kept
as a constant. With the measured transfers the replay reproduces the measured steps; with a
calibrated network's transfers it predicts them. The step ends where the step's thread ends it, and
not before the device work launched in it has ended, less what that work overran the step by in
the record (in a steady state the next step's kernels queue behind that work on the same streams).
"""

from __future__ import annotations

import bisect
import graphlib
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import LibraError
from .collectives import MeasuredCollective, match
from .gloo import run_comms
from .kineto import RankProfile
from .linked import require_runtime
from .settle import RankEvents, settle, settle_events
from .step import step_windows

MODEL_NAME = "GPU-faithful (measured profile replayed: stream order, launches, recorded waits and syncs)"
WAIT_TOLERANCE_NS = 2_000
_SYNC = ("synchronize",)


@dataclass(frozen=True)
class _Node:
    key: tuple
    deps: tuple
    rec_start: int
    rec_end: int
    lag_ns: int              # recorded start minus the latest recorded end of its dependencies
    dur_ns: int
    coll: int | None = None  # collective index for a communication kernel
    sync: bool = False


@dataclass(frozen=True)
class ReplayedRank:
    rank: int
    step_ns: int                     # the mean over the rank's profiled steps
    comm_ends_ns: tuple[int, ...]    # each collective kernel's end, from the rank's step start


def _is_sync(name: str) -> bool:
    low = name.lower()
    return low.endswith(_SYNC) or low in ("cudamemcpy", "cudamemcpy2d")


def _rank_graph(prof: RankProfile, coll_of: dict[tuple[int, str], int]) -> tuple[dict, tuple, list]:
    """The rank's replay graph, the span of its steps, and per step (start, end, first and last
    host call of the step's thread)."""
    windows, tid = step_windows(prof)
    lo, hi = windows[0][0], windows[-1][1]
    calls = [c for c in prof.runtime if lo <= c.start_ns <= hi]
    calls.sort(key=lambda c: (c.start_ns, c.end_ns))
    by_corr = {c.correlation: c for c in calls if c.correlation is not None}
    dev = [d for d in prof.device if d.correlation in by_corr]
    nodes: dict[tuple, _Node] = {}
    ends: dict[tuple, int] = {}
    last_on: dict[int, tuple] = {}
    host_ends: list[tuple[int, tuple]] = []
    for i, c in enumerate(calls):
        key = ("h", i)
        prev = last_on.get(c.tid)
        if prev is None:
            j = bisect.bisect_right(host_ends, (c.start_ns, ("~",))) - 1
            prev = host_ends[j][1] if j >= 0 else None
        deps = (prev,) if prev else ()
        base = ends[prev] if prev else lo
        nodes[key] = _Node(key, deps, c.start_ns, c.end_ns, c.start_ns - base, c.end_ns - c.start_ns,
                           sync=_is_sync(c.name))
        ends[key] = c.end_ns
        last_on[c.tid] = key
        bisect.insort(host_ends, (c.end_ns, key))
    call_key = {c.correlation: ("h", i) for i, c in enumerate(calls) if c.correlation is not None}
    dev.sort(key=lambda d: (d.start_ns, d.end_ns))
    by_stream: dict[int, tuple] = {}
    dev_ends: list[tuple[int, int, tuple]] = []     # (end, stream, key) of device ops so far
    for i, d in enumerate(dev):
        key = ("d", i)
        deps = [call_key[d.correlation]]
        if d.stream in by_stream:
            deps.append(by_stream[d.stream])
        ready = max(ends[k] for k in deps)
        if d.start_ns > ready + WAIT_TOLERANCE_NS:
            other = [(e, k) for e, s, k in dev_ends if s != d.stream and ready <= e <= d.start_ns + WAIT_TOLERANCE_NS]
            if other:
                deps.append(max(other)[1])
        base = max(ends[k] for k in deps)
        coll = coll_of.get((d.start_ns, d.name))
        nodes[key] = _Node(key, tuple(deps), d.start_ns, d.end_ns, max(0, d.start_ns - base), d.end_ns - d.start_ns,
                           coll=coll)
        ends[key] = d.end_ns
        by_stream[d.stream] = key
        dev_ends.append((d.end_ns, d.stream, key))
    # a synchronizing call waits for the device op that ended last before the call did
    for key, n in list(nodes.items()):
        if n.sync:
            done = [(e, k) for e, _, k in dev_ends if n.rec_start - WAIT_TOLERANCE_NS <= e <= n.rec_end]
            if done:
                e, k = max(done)
                nodes[key] = _Node(key, n.deps + (k,), n.rec_start, n.rec_end, n.lag_ns,
                                   max(0, n.rec_end - max(e, n.rec_start)), sync=True)
    # each step: its first and last call on the step's thread (any thread without a step annotation),
    # and the device ops launched in it
    bounds = []
    for w_lo, w_hi in windows:
        inside = [("h", i) for i, c in enumerate(calls) if w_lo <= c.start_ns <= w_hi and (tid is None or c.tid == tid)]
        launched = tuple(("d", i) for i, d in enumerate(dev) if w_lo <= by_corr[d.correlation].start_ns <= w_hi)
        bounds.append((w_lo, w_hi, inside[0] if inside else None, inside[-1] if inside else None, launched))
    return nodes, (lo, hi), bounds


def _order(nodes: dict, source: str) -> tuple:
    """The rank's nodes in topological order; a profile whose times make them wait on each other
    in a cycle is an error that names the first node out of time order."""
    try:
        return tuple(graphlib.TopologicalSorter({k: n.deps for k, n in nodes.items()}).static_order())
    except graphlib.CycleError as e:
        cycle = e.args[1]
    # The usual cause: a device op recorded before the call that launched it (a real kernel starts
    # microseconds after its launch), which the stream order then feeds back to the host thread.
    early = [k for k in cycle if k[0] == "d" and nodes[k].rec_start < nodes[nodes[k].deps[0]].rec_start]
    what = (f"the device op at ts {nodes[early[0]].rec_start / 1000:g} us starts before the call that launched "
            f"it, at ts {nodes[nodes[early[0]].deps[0]].rec_start / 1000:.0f} us") if early else \
        f"{len(set(cycle))} events from ts {nodes[cycle[0]].rec_start / 1000:.0f} us on wait on each other"
    raise LibraError(f"{source}: the profile's times order its events in a cycle ({what}); the trace is "
                     "inconsistent, export it again") from None


def _times(nodes: dict, order: Sequence[tuple], lo: int, release: dict[int, int],
           transfer: dict[int, int]) -> tuple[dict, dict, dict]:
    """Replayed (start, end) of every node (``order``: topological); the ready time of each collective kernel."""
    start, end, ready = {}, {}, {}
    for k in order:
        n = nodes[k]
        base = max((end[d] for d in n.deps), default=lo)
        if n.sync and len(n.deps) > 1:      # blocked: starts after its thread, ends after the device op
            s = (end[n.deps[0]] if n.deps else lo) + n.lag_ns
            start[k], end[k] = s, max(s, end[n.deps[-1]]) + n.dur_ns
            continue
        s = base + n.lag_ns
        start[k] = s
        if n.coll is not None:
            ready[n.coll] = s
            end[k] = max(s, release.get(n.coll, s)) + transfer[n.coll]
        else:
            end[k] = s + n.dur_ns
    return start, end, ready


def rank_graphs(profiles: Sequence[RankProfile], collectives: Sequence[MeasuredCollective],
                world: int) -> dict[int, tuple[dict, tuple, list]]:
    """Per rank: its replay graph (nodes by key), the span of its steps, and per step (start, end,
    first and last host call of the step's thread); collective kernels carry the index of their
    measured collective."""
    require_runtime(profiles, "the GPU-faithful replay")
    comms = run_comms(profiles, world, [])
    coll_of, _ = collective_keys(profiles, comms, collectives, world)
    return {p.rank: _rank_graph(p, coll_of[p.rank]) for p in profiles}


def collective_keys(profiles: Sequence[RankProfile], comms: dict, collectives: Sequence[MeasuredCollective],
                    world: int) -> tuple[dict[int, dict[tuple[int, str], int]], list]:
    """Per rank: each of its communication records (start, name) -> the index of its measured
    collective; and the matched instances. The profiles must be the measured ones."""
    instances = match(profiles, comms, world, [])
    if len(instances) != len(collectives):
        raise LibraError(f"{profiles[0].source}: the replay matched {len(instances)} collectives, the measurement "
                         f"{len(collectives)}; measure the same profiles")
    coll_of: dict[int, dict[tuple[int, str], int]] = {p.rank: {} for p in profiles}
    for i, inst in enumerate(instances):
        for r, c in inst:
            coll_of[r][(c.start_ns, c.name)] = i
    return coll_of, instances


def _settle_keyed(graphs: dict, orders: dict, transfer: dict[int, int], off: dict[int, int]) -> dict | None:
    """:func:`settle_events` on the keyed graphs, timed as :func:`_times` times them; per rank
    (start, end) by node key, or None for a cycle."""
    events, keys = {}, {}
    for r, (nodes, (lo, _), _) in graphs.items():
        order = orders[r]
        index = {k: i for i, k in enumerate(order)}
        items = [nodes[k] for k in order]
        blocked = [n.sync and len(n.deps) > 1 for n in items]
        start_needs = [[2 * index[n.deps[0]] + 1] if b else [2 * index[d] + 1 for d in n.deps]
                       for n, b in zip(items, blocked)]
        end_needs = [[2 * index[n.deps[-1]] + 1] if b else () for n, b in zip(items, blocked)]

        def start_of(i, start, end, items=items, blocked=blocked, index=index, lo=lo):
            n = items[i]
            deps = n.deps[:1] if blocked[i] else n.deps
            return max((end[index[d]] for d in deps), default=lo) + n.lag_ns

        def end_of(i, start, end, release, items=items, blocked=blocked, index=index):
            n, s = items[i], start[i]
            if blocked[i]:      # a synchronizing call: ends after the device op it waits for
                return max(s, end[index[n.deps[-1]]]) + n.dur_ns
            if n.coll is not None:
                return max(s, release) + transfer[n.coll]
            return s + n.dur_ns

        events[r] = RankEvents(start_needs, end_needs, [n.coll for n in items], start_of, end_of)
        keys[r] = order
    solved = settle_events(events, off)
    if solved is None:
        return None
    return {r: (dict(zip(keys[r], s)), dict(zip(keys[r], e))) for r, (s, e) in solved.items()}


def replay(profiles: Sequence[RankProfile], collectives: Sequence[MeasuredCollective],
           transfer_ns: Callable[[MeasuredCollective], int], world: int,
           offsets_ns: Sequence[int] | None = None) -> list[ReplayedRank]:
    """Every rank's step under the GPU-faithful model (module docstring), ns."""
    transfer = {i: int(transfer_ns(c)) for i, c in enumerate(collectives)}
    graphs = rank_graphs(profiles, collectives, world)
    # the graphs stay the same while the releases iterate: sort each once
    source = {p.rank: p.source for p in profiles}
    orders = {r: _order(g[0], source[r]) for r, g in graphs.items()}
    # the release of a collective is when its last member is ready; iterate to the fixed point
    # each rank starts its step when it did; a release is on the shared (corrected) clock
    off = dict(zip((p.rank for p in profiles), offsets_ns or [0] * len(profiles)))
    results = _settle_keyed(graphs, orders, transfer, off)
    if results is None:
        results = settle(lambda r, release: _times(graphs[r][0], orders[r], graphs[r][1][0], release, transfer),
                         list(graphs), len(collectives), off)
    out = []
    for p in profiles:
        nodes, (lo, hi), bounds = graphs[p.rank]
        start, end = results[p.rank]
        steps = []
        for w_lo, w_hi, first, last, launched in bounds:
            # A step starts as long before its first call, and ends as long after its last, as recorded;
            # and not before the device work it launched has ended, less what that work overran the
            # step by in the record: work that ends later delays the step's end, as the next step's
            # kernels queue behind it.
            s0 = start[first] - (nodes[first].rec_start - w_lo) if first is not None else w_lo
            s1 = end[last] + (w_hi - nodes[last].rec_end) if last is not None else w_hi
            steps.append(max([s1] + [end[k] + min(0, w_hi - nodes[k].rec_end) for k in launched]) - s0)
        out.append(ReplayedRank(p.rank, round(sum(steps) / len(steps)), tuple(end[k] - lo for k, n in nodes.items()
                                                                if n.coll is not None)))
    return out
