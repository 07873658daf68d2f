"""Double binary trees through dependency graphs: each rank's own time, as ASTRA-sim has it.

In a double binary tree a rank's time depends on its place in the tree (leaves finish last), and
the two trees alternate, so after a tree collective the ranks run the rest of their graph from
different times, and the next tree collective starts at different times on different ranks;
its messages then wait for whichever rank is late. Neither a collective's slowest time nor a
common start is the answer.

Here every rank class is split by the ranks' places in the trees (ranks at one place run alike)
and the replay runs again and again: each pass takes the collectives in the order the ranks
issue them, each place's issue time from the last replay, and times the collective from those
issue times: a tree with astra_collective's replay of the tree's messages; a ring, direct or
halving-doubling collective on the whole network, when places issue it apart, with every rank's
messages replayed (astra_messages: the early ranks wait for the late ones' messages). The first
whose times change is updated and the replay runs again (the later ones were issued after its
old end). It stops when none changes: then every such collective is timed from the issue times
its own times lead to. Collectives on communicator groups still start together on every place
of a class and of the classes they are shared with, as in the replay of the classes whole;
sends never wait for other places.

A receive waits for the part holding the rank it names (``Dag.senders``, read from the traces):
a part whose ranks receive from ranks of different parts is split until each receive of a part
waits on one part. Without the senders (a demand file written without them), a receive of
another class waits for the send at its own place when the send crosses a dimension above every
tree dimension (ranks agree below the dimension a send crosses); other such sends are refused.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..demand.types import Dag, Demand, RankClass
from ..errors import LibraError
from ..model.collectives import P2P
from .astra_aware import aware_rank_times, rank_times_for
from .astra_collective import checked_links, collective_plan
from .astra_durations import Durations, Spec, arrival_skew, check_cycles
from .astra_messages import message_rank_times
from .plan import plan_of
from .predict import replay_ends


def split_by_place(d: Demand, offsets: Sequence[int], trees: set[int], tree_dims: Sequence[int],
                   source: str) -> tuple[Demand, list[tuple[int, list[int]]]]:
    """The demand with every class split by its ranks' places in the trees, and per new class
    (its old class, its ranks). Where a class's receives name the ranks they wait for
    (``Dag.senders``), its parts are split further until the ranks of a part wait on ranks of one
    part at every receive. Syncs of tree collectives are dropped (astra_trees times them); other
    collectives stay synced with every part of their partners' classes and of their own."""
    for ci, rc in enumerate(d.rank_classes):
        if rc.dag is None or not rc.ranks:
            raise LibraError(f"{source}: doubleBinaryTree: rank class {ci} has no dependency graph or ranks; read the "
                             "demand from the traces")
    part_of = _refined(d, tree_dims)
    parts: list[tuple[int, list[int]]] = []
    index: dict[int, int] = {}
    of: list[list[int]] = []                         # per class: its parts
    for ci, rc in enumerate(d.rank_classes):
        of.append([])
        for r in rc.ranks:
            k = index.get(int(part_of[r]))
            if k is None:
                k = index[int(part_of[r])] = len(parts)
                parts.append((ci, []))
                of[ci].append(k)
            parts[k][1].append(r)
    at: dict[tuple, list[int]] = {}                  # (class, place) -> its parts
    for k, (ci, ranks) in enumerate(parts):
        at.setdefault((ci, _place(ranks[0], d.npus_per_dim, tree_dims)), []).append(k)
    classes = []
    for k, (ci, ranks) in enumerate(parts):
        rc = d.rank_classes[ci]
        off = offsets[ci]
        syncs = [(v, sub, u) for v, c, u in rc.dag.syncs if off + v not in trees for sub in of[c]]
        # a send is no collective: each part sends when it gets there
        syncs += [(v, sub, v) for v, (kind, i) in enumerate(rc.dag.nodes)
                  if kind == "coll" and off + v not in trees and not _is_send(rc.collectives[int(i)])
                  for sub in of[ci] if sub != k]
        first = rc.ranks.index(ranks[0])
        x = _place(ranks[0], d.npus_per_dim, tree_dims)
        links = tuple((v, index[int(part_of[rc.dag.senders[j][first]])] if rc.dag.senders
                       else _sender(d, of, at, c, u, x, tree_dims, source), u)
                      for j, (v, c, u) in enumerate(rc.dag.links))
        classes.append(RankClass(rc.compute_time_ns, rc.collectives, len(ranks), tuple(ranks),
                                 Dag(rc.dag.nodes, rc.dag.deps, links, tuple(syncs))))
    return Demand(d.name, d.npus_per_dim, tuple(classes), dim_names=d.dim_names), parts


def _is_send(c) -> bool:
    return c.algorithm == "p2p" or c.type == P2P


def _place(r: int, shape: Sequence[int], tree_dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(r // math.prod(shape[:k]) % shape[k] for k in tree_dims)


def _refined(d: Demand, tree_dims: Sequence[int]) -> np.ndarray:
    """Per rank, its part: its class and place, split (as demand.links.split_by_peers splits
    classes) until the ranks of a part whose receives name their senders wait on one part each."""
    part_of = np.empty(math.prod(d.npus_per_dim), dtype=np.int64)
    keys: dict[tuple, int] = {}
    for ci, rc in enumerate(d.rank_classes):
        for r in rc.ranks:
            part_of[r] = keys.setdefault((ci, _place(r, d.npus_per_dim, tree_dims)), len(keys))
    named = [(np.asarray(rc.ranks, dtype=np.int64), np.asarray(rc.dag.senders, dtype=np.int64).T)
             for rc in d.rank_classes if rc.dag.senders]
    count = len(keys)
    while named:
        sig: dict[tuple, int] = {}
        new = part_of.copy()
        for ranks, senders in named:
            rows = np.concatenate([part_of[ranks][:, None], part_of[senders]], axis=1).tolist()
            new[ranks] = [sig.setdefault(tuple(row), len(sig)) for row in rows]
        rest = np.ones(part_of.shape[0], dtype=bool)
        for ranks, _ in named:
            rest[ranks] = False
        new[rest] = [sig.setdefault((p,), len(sig)) for p in part_of[rest].tolist()]
        if len(sig) == count:
            break
        count, part_of = len(sig), new
    return part_of


def _sender(d: Demand, of: list[list[int]], at: dict, c: int, u: int, x: tuple[int, ...],
            tree_dims: Sequence[int], source: str) -> int:
    """The part of class ``c`` whose send ``u`` a receive at place ``x`` waits for, when the
    demand does not name the sending ranks. A send crosses the lowest dimension where the two
    ranks differ: below it they agree, so when every tree dimension is below it the sender is at
    the receiver's place."""
    if len(of[c]) == 1:
        return of[c][0]
    kind, idx = d.rank_classes[c].dag.nodes[u]
    crossed = [k for k, t in enumerate(d.rank_classes[c].collectives[int(idx)].traffic_bytes) if t > 0]
    if kind != "coll" or not crossed or max(tree_dims) >= crossed[0] or len(at.get((c, x), ())) != 1:
        raise LibraError(f"{source}: doubleBinaryTree: ranks at different places in the trees send to each other "
                         "across a tree dimension, and the demand does not say which rank sends (read it from the "
                         "traces, whose receives name their senders); not modeled")
    return at[(c, x)][0]


def _instances(d: Demand, offsets: Sequence[int], trees: set[int]) -> list[list[int]]:
    """Tree collective nodes (global) that are one collective: a node and its syncs' partners."""
    root = {g: g for g in trees}

    def find(g: int) -> int:
        while root[g] != g:
            root[g] = root[root[g]]
            g = root[g]
        return g
    for ci, rc in enumerate(d.rank_classes):
        for v, c, u in rc.dag.syncs:
            a, b = offsets[ci] + v, offsets[c] + u
            if a in root and b in root:
                root[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for g in sorted(trees):
        groups.setdefault(find(g), []).append(g)
    return list(groups.values())


def refine_trees(d: Demand, offsets: Sequence[int], durs: Durations, source: str,
                 backend: str = "unaware") -> tuple[dict[int, float], tuple[int, int]]:
    """({rank: finish ns}, the arrival skew at shared collectives: astra_predict.arrival_skew)
    with every tree collective timed from each place's own issue time (module docstring).
    ``offsets``: the first global node of each class (the plan's).

    Raises
    ------
    LibraError
        A demand this does not model (:func:`split_by_place`), or a tree collective whose ranks
        would issue it in different states (ASTRA-sim's counters), which the timing assumes alike.
    """
    trees = set(durs.trees)
    plans = {spec: tree_plan(spec) for spec, _ in durs.trees.values()}
    # the dimensions where some collective runs a tree: ranks that agree in them run alike
    tree_dims = sorted({p.tree[0] for plan in plans.values() for ch in plan for p in ch if p.tree})
    if backend == "aware":      # one dimension, on which contention can set every rank apart
        tree_dims = [0]
    rank_times = rank_times_for(backend)
    split, parts = split_by_place(d, offsets, trees, tree_dims, source)
    new = plan_of(split).offsets
    dur = np.concatenate([durs.dur[offsets[ci]:offsets[ci + 1]] for ci, _ in parts])
    npus = math.prod(d.npus_per_dim)
    part_of = np.empty(npus, dtype=np.int64)
    for k, (_, ranks) in enumerate(parts):
        part_of[ranks] = k
    # each instance: its spec, per part the node (-1 if the part does not issue it), its plan, how
    # its ranks are timed from their issue times, and its time when issued together (None: trees)
    jobs = []
    for inst in sorted(_instances(d, offsets, trees)):
        specs = {durs.trees[g][0] for g in inst}
        if len(specs) != 1:
            raise LibraError(f"{source}: doubleBinaryTree: a collective shared by rank classes follows different "
                             "collectives on them, so its trees differ between ranks; not modeled")
        spec = specs.pop()
        node = _nodes(inst, offsets, parts, new)
        if not _whole_groups(node, parts, spec.coll.involved, d.npus_per_dim):
            raise LibraError(f"{source}: doubleBinaryTree: a collective is missing from some of its members' "
                             "graphs; ASTRA-sim would not finish it")
        times = durs.trees[inst[0]][1]
        have = node >= 0
        dur[node[have]] = [times[ranks[0]] for (_, ranks), h in zip(parts, have) if h]
        jobs.append((spec, node, plans[spec], rank_times, None))
    # the other collectives on the whole network: places that issue them apart start them apart
    even = []
    for inst in sorted(_instances(d, offsets, set(durs.even))):
        specs = {durs.even[g] for g in inst}
        node = _nodes(inst, offsets, parts, new)
        if len(specs) == 1 and _whole_groups(node, parts, next(iter(specs)).coll.involved, d.npus_per_dim):
            spec = specs.pop()
            jobs.append((spec, node, tree_plan(spec), _skewed_times(backend), dur[node[node >= 0]].copy()))
            even.extend(inst)
    if even:
        split, _ = split_by_place(d, offsets, trees | set(even), tree_dims, source)
    memo: dict = {}
    for _ in range(len(jobs) + 1):
        r = replay_ends(split, dur)
        check_cycles(r)
        ends = np.asarray(r.finish, dtype=float)
        # parts that do not issue a collective (another stage's ranks) are timed apart, from 0, and ignored
        issues = [np.where(node >= 0, ends[node] - dur[node], np.inf) for _, node, _, _, _ in jobs]
        # in the order the ranks issue them: a collective's times depend only on what was issued before
        for j in sorted(range(len(jobs)), key=lambda j: (issues[j].min(), j)):
            spec, node, plan, timer, together = jobs[j]
            have = node >= 0
            rel = np.where(have, issues[j] - issues[j].min(), 0).astype(np.int64)
            key = (spec, rel.tobytes())
            if key not in memo:
                if together is not None and not rel.any():
                    memo[key] = together
                else:
                    timed = np.asarray(timer([plan], spec.links, spec.settings, rel[part_of].tolist()))
                    memo[key] = (timed[[ranks[0] for _, ranks in parts]] - rel).astype(float)[have]
            if not np.array_equal(memo[key], dur[node[have]]):
                # the later ones were issued after this one's old end: replay before timing them
                dur[node[have]] = memo[key]
                break
        else:
            return ({rank: r.end_ns(r.class_last(k)) for k, (_, ranks) in enumerate(parts) for rank in ranks},
                    arrival_skew(plan_of(split), r.finish))
    raise LibraError(f"{source}: doubleBinaryTree: the ranks' tree times did not settle in {len(jobs) + 1} passes")


def _skewed_times(backend: str):
    """Each rank's times of collectives whose ranks issue them apart: messages replayed per rank."""
    return aware_rank_times if backend == "aware" else message_rank_times


def _nodes(inst: list[int], offsets: Sequence[int], parts: list, new: Sequence[int]) -> np.ndarray:
    """Per part, its node of the collective ``inst`` (global nodes of the demand), or -1."""
    node = np.full(len(parts), -1, dtype=np.int64)
    for g in inst:
        ci = int(np.searchsorted(offsets, g, side="right")) - 1
        for k, (cj, _) in enumerate(parts):
            if cj == ci:
                node[k] = new[k] + g - offsets[ci]
    return node


def _whole_groups(node: np.ndarray, parts: list, involved: Sequence[bool], shape: Sequence[int]) -> bool:
    """Whether the ranks that issue a collective (parts with a node) are whole groups of it:
    with every rank that differs from one of them only in the involved dimensions."""
    issuing = {r for (_, ranks), g in zip(parts, node.tolist()) if g >= 0 for r in ranks}
    strides = [math.prod(shape[:i]) for i in range(len(shape))]
    outside = lambda r: tuple(r // st % n for st, n, inv in zip(strides, shape, involved) if not inv)  # noqa: E731
    keys = {outside(r) for r in issuing}
    return all(outside(r) not in keys for r in range(math.prod(shape)) if r not in issuing)


def tree_plan(spec: Spec) -> list:
    """The chunks' phases of a collective as its ranks issue it (astra_collective.collective_plan)."""
    return collective_plan(spec.coll, checked_links(spec.links), spec.settings, dict(spec.state))
