"""Pipeline links: ranks with the same program that wait on different peers become different
rank classes, and each class's receives and shared collectives wait on the other classes."""

from __future__ import annotations

from dataclasses import replace
from itertools import chain
from typing import Any

import numpy as np

from ..traces.schema import COMM_RECV_NODE, COMM_SEND_NODE
from ..traces.wire import row_groups
from .context import Context
from .group_check import communicators
from .program import Program
from .types import RankClass


def split_by_peers(ctx: Context, programs: list[Program],
                    groups: list[tuple[Any, list[int]]]) -> list[tuple[Any, list[int]]]:
    """Refine classes until the ranks of a class send to and receive from the same classes.

    Ranks with identical demand may still run at different times: the middle stages of a
    pipeline have the same program, but stage k waits for stage k - 1. Splitting by the classes
    of the peers, repeated until nothing splits, gives one class per stage, so a receive always
    waits on another class and the joint replay times every stage."""
    cols = ctx.reader.attrs.columns()
    n = ctx.net.npus_count
    peers: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    # programs of one shape have their receives and sends at the same positions: their peers are
    # read as one matrix (program x receive, program x send)
    by_shape: dict[int, list[Program]] = {}
    for info in programs:
        types = info.counts["types"]
        if types[COMM_RECV_NODE] or types[COMM_SEND_NODE]:
            by_shape.setdefault(id(info.shape), []).append(info)
    for infos in by_shape.values():
        rep = infos[0]
        recv = np.flatnonzero(rep.prog.types == COMM_RECV_NODE)
        recv = recv[np.argsort(rep.topo_of[recv], kind="stable")]
        s = cols["comm_src"][np.stack([i.prog.attr[recv] for i in infos])]
        # the program's comm nodes already list its sends that name a destination (comm_dst >= 0)
        # in topological order; those without one never count as a peer
        d = cols["comm_dst"][np.stack([i.comm_row for i in infos])[:, rep.comm_is_send]]
        for info, srcs, dsts in zip(infos, _kept(s, (s >= 0) & (s < n)), _kept(d, d < n)):
            for r in info.ranks:
                peers[r] = (srcs, dsts)
    if not peers:
        return groups
    cls_of = np.zeros(n, dtype=np.int64)
    for gi, (_, ranks) in enumerate(groups):
        cls_of[ranks] = gi
    count = len(groups)
    none = ((), ())
    plist = [peers.get(r, none) for r in range(n)]
    src_m, dst_m = _padded([s for s, _ in plist]), _padded([d for _, d in plist])
    if src_m is not None and dst_m is not None:
        # one row per rank, (class, classes of its sources, of its destinations), -1 past the end
        cls_a = cls_of
        while True:
            sig = np.concatenate((cls_a[:, None], np.where(src_m >= 0, cls_a[src_m], -1),
                                  np.where(dst_m >= 0, cls_a[dst_m], -1)), axis=1)
            cls_a, found = _first_seen_ids(sig)
            if found == count:
                break
            count = found
        cls = cls_a.tolist()
        return _regrouped(groups, cls)
    # Plain lists and map(): the loop runs over every rank and peer each round, and indexing a
    # list from C is several times cheaper than a generator over numpy scalars.
    cls = cls_of.tolist()
    while True:
        sig: dict[tuple, int] = {}
        at = cls.__getitem__
        new = [sig.setdefault((c, tuple(map(at, s)), tuple(map(at, d))), len(sig)) for c, (s, d) in zip(cls, plist)]
        cls = new
        if len(sig) == count:
            break
        count = len(sig)
    return _regrouped(groups, cls)


# rank x peer cells up to which the refinement runs on padded matrices (32 MiB of int64 each)
_PADDED_CELLS = 1 << 22


def _padded(lists: list[tuple[int, ...]]) -> np.ndarray | None:
    """The lists as rows of a matrix padded with -1; None when it would be too large."""
    lens = np.asarray([len(x) for x in lists], dtype=np.int64)
    width = int(lens.max()) if lens.size else 0
    if lens.size * width > _PADDED_CELLS:
        return None
    out = np.full((lens.size, width), -1, dtype=np.int64)
    total = int(lens.sum())
    if total:
        flat = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=total)
        starts = np.cumsum(lens) - lens
        out[np.repeat(np.arange(lens.size), lens), np.arange(total) - np.repeat(starts, lens)] = flat
    return out


def _first_seen_ids(rows: np.ndarray) -> tuple[np.ndarray, int]:
    """Id of each row, equal rows equal ids, numbered in order of first appearance; and the count."""
    first, inv = row_groups(rows)
    rank = np.empty_like(first)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[inv], int(first.size)


def _regrouped(groups: list[tuple[Any, list[int]]], cls: list[int]) -> list[tuple[Any, list[int]]]:
    # Refined classes only ever split the original ones, so each keeps its original key.
    key_of = {r: key for key, ranks in groups for r in ranks}
    members: dict[int, list[int]] = {}
    for r, c in enumerate(cls):
        members.setdefault(c, []).append(r)
    return [(key_of[rs[0]], rs) for _, rs in sorted(members.items())]


def _kept(values: np.ndarray, keep: np.ndarray) -> list[tuple[int, ...]]:
    """Per row of ``values``, the entries ``keep`` marks, as a tuple."""
    if keep.all():
        return list(map(tuple, values.tolist()))
    return [tuple(v[k].tolist()) for v, k in zip(values, keep)]


def with_links(ctx: Context, programs: list[Program], rank_prog: np.ndarray,
                rank_classes: list[RankClass]) -> list[RankClass]:
    """Waits between rank classes, from each class's first rank: a receive waits for the matching
    send (same source and destination, k-th receive to k-th send); a collective whose
    communicator has ranks of other classes starts with their k-th collective on it."""
    cols = ctx.reader.attrs.columns()
    class_of = np.zeros(ctx.net.npus_count, dtype=np.int64)
    for ci, rc in enumerate(rank_classes):
        class_of[list(rc.ranks)] = ci
    reps = [programs[int(rank_prog[rc.ranks[0]])] for rc in rank_classes]
    comm_ids: dict[tuple[int, int], np.ndarray] = {}
    sends_to: dict[int, dict[int, list[int]]] = {}
    out = []
    for ci, rc in enumerate(rank_classes):
        if rc.dag is None:
            out.append(rc)
            continue
        r = rc.ranks[0]
        info = reps[ci]
        links = _recv_links(ctx, cols, programs, rank_prog, class_of, info, r, sends_to)
        syncs = []
        ckey, cinv = info.coll_comm
        for comm in sorted({(int(k), int(i)) for k, i in zip(ckey.tolist(), cinv.tolist()) if k >= 0}):
            cid = comm_ids.get(comm)
            if cid is None:
                cid = comm_ids[comm] = communicators(ctx, comm)[0]
            others = sorted(set(class_of[cid == cid[r]].tolist()) - {ci})
            mine = info.comm_pos[(ckey == comm[0]) & (cinv == comm[1])]
            for cj in others:
                bkey, binv = reps[cj].coll_comm
                theirs = reps[cj].comm_pos[(bkey == comm[0]) & (binv == comm[1])]
                syncs.extend((int(a), cj, int(b)) for a, b in zip(mine.tolist(), theirs.tolist()))
        if links or syncs:
            senders = _senders(cols, programs, rank_prog, rc.ranks, [v for v, _, _ in links], ctx.net.npus_count)
            rc = replace(rc, dag=replace(rc.dag, links=tuple(links), syncs=tuple(sorted(syncs)), senders=senders))
        out.append(rc)
    return out


def _recv_links(ctx: Context, cols, programs: list[Program], rank_prog: np.ndarray, class_of: np.ndarray,
                info: Program, r: int, sends_to: dict[int, dict[int, list[int]]]) -> list[tuple[int, int, int]]:
    prog = info.prog
    recv = np.flatnonzero(prog.types == COMM_RECV_NODE)
    if not recv.size:
        return []
    recv = recv[np.argsort(info.topo_of[recv], kind="stable")]
    srcs = cols["comm_src"][prog.attr[recv]]
    links = []
    taken: dict[int, int] = {}
    for pos, src in zip(recv.tolist(), srcs.tolist()):
        if not 0 <= src < ctx.net.npus_count or src == r:
            continue
        pi = int(rank_prog[src])
        by_dst = sends_to.get(pi)
        if by_dst is None:
            by_dst = sends_to[pi] = _sends_by_dst(cols, programs[pi])
        sends = by_dst.get(r, ())
        k = taken.get(src, 0)
        if k >= len(sends):
            continue
        taken[src] = k + 1
        links.append((int(info.topo_of[pos]), int(class_of[src]), sends[k]))
    return links


def _senders(cols, programs: list[Program], rank_prog: np.ndarray, ranks: tuple[int, ...], nodes: list[int],
             npus: int) -> tuple[tuple[int, ...], ...]:
    """Per receive node (topological index) of a class's links, the rank each of its ranks
    receives from: the class's ranks run one program shape, each names its own source. Empty
    when some rank's source is not a valid other rank (the links then say only the class)."""
    if not nodes:
        return ()
    at = np.asarray(nodes, dtype=np.int64)
    progs, inv = np.unique(rank_prog[list(ranks)], return_inverse=True)
    # programs sharing a shape have their receives at the same positions: their sources are read
    # as one matrix, not program by program (every rank of a large set can run its own program)
    by_shape: dict[int, list[int]] = {}
    for k, p in enumerate(progs.tolist()):
        by_shape.setdefault(id(programs[p].shape), []).append(k)
    got = np.full((progs.size, at.size), -1, dtype=np.int64)
    for ks in by_shape.values():
        info = programs[int(progs[ks[0]])]
        recv = np.flatnonzero(info.prog.types == COMM_RECV_NODE)
        which = np.full(max(int(info.topo_of.max(initial=-1)), int(at.max())) + 1, -1, dtype=np.int64)
        which[info.topo_of[recv]] = np.arange(recv.size)
        j = which[at]     # the receive at each wanted node, or -1
        if (j >= 0).any():
            rows = np.stack([programs[p].prog.attr[recv] for p in progs[ks].tolist()])
            src = cols["comm_src"][rows[:, np.maximum(j, 0)]]
            src[:, j < 0] = -1
            got[ks] = src
    m = got[inv.reshape(-1)]
    if ((m < 0) | (m >= npus) | (m == np.asarray(ranks, dtype=np.int64)[:, None])).any():
        return ()
    return tuple(map(tuple, m.T.tolist()))


def _sends_by_dst(cols, info: Program) -> dict[int, list[int]]:
    """Topological positions of a program's sends, in order, per destination: built once per
    distinct program, so matching the receives stays linear in the trace."""
    prog = info.prog
    send = np.flatnonzero(prog.types == COMM_SEND_NODE)
    send = send[np.argsort(info.topo_of[send], kind="stable")]
    out: dict[int, list[int]] = {}
    for dst, pos in zip(cols["comm_dst"][prog.attr[send]].tolist(), info.topo_of[send].tolist()):
        out.setdefault(int(dst), []).append(int(pos))
    return out
