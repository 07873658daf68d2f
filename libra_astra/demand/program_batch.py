"""All distinct programs of a read analysed together: ``analyze_many`` gives what
``[analyze(ctx, p, r) for p, r in ...]`` gives, with numpy passes over programs of one shape.

A pipeline's rank files are all distinct (every rank names its own peers and groups), but only a
handful of dependency-graph shapes occur, one per pipeline stage. Per shape, the attribute rows
of the comm nodes of all its programs form one matrix (program x comm node), and group keys,
physics ids, per-communicator counts and issue sequences come out of a few operations on it,
where one call per program cost more in numpy overhead than in work.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import groups as grp
from ..errors import LibraError
from ..traces.reader import RankProgram
from ..traces.schema import COMM_COLL_NODE, COMM_SEND_NODE, COMM_TYPE_NAMES, COMP_NODE
from ..traces.wire import row_groups
from .context import Context
from .program import Program, _shape, analyze, digest, program_of, resolve_rows
from .row_memo import UNRESOLVED

# Programs are fingerprinted in chunks of about this many nodes, so the temporary arrays of a
# 10 M-node read stay small next to the programs themselves (at 1 << 20 they were the peak of a
# 4,096-rank prediction, 8 MB over this, for no less CPU).
_CHUNK_NODES = 1 << 18

_FIELDS = ("types", "duration_micros", "attr", "dep_ptr", "dep_index")


def _one_by_one(ctx: Context, progs: Sequence[RankProgram], ranks_of: Sequence[Sequence[int]]) -> list[Program]:
    return [analyze(ctx, prog, ranks) for prog, ranks in zip(progs, ranks_of)]


def analyze_many(ctx: Context, progs: Sequence[RankProgram], ranks_of: Sequence[Sequence[int]]) -> list[Program]:
    """``[analyze(ctx, prog, ranks) for prog, ranks in zip(progs, ranks_of)]``, the same Programs
    and the same ids interned in the same order.

    Any problem with the input is left to the one-by-one analysis, so the error is the one it
    raises (the first program, in order, that has one): rows and groups are checked before
    anything is interned, and what is interned before a later error is interned in the order
    the one-by-one analysis would intern it."""
    if not progs:
        return []
    # concatenating mixed dtypes would convert values (uint64 with int64 gives float64)
    if any(len({getattr(p, f).dtype for p in progs}) > 1 for f in _FIELDS) \
            or any(p.dep_ptr.shape[0] != p.num_nodes + 1 for p in progs):
        return _one_by_one(ctx, progs, ranks_of)
    cols = ctx.reader.attrs.columns()
    classes = _shape_classes(progs, cols)
    if classes is None:
        return _one_by_one(ctx, progs, ranks_of)
    try:
        return _analyze_classes(ctx, progs, ranks_of, classes, cols)
    except (LibraError, _OneByOne):
        return _one_by_one(ctx, progs, ranks_of)  # raises the error the one-by-one order meets first


def _shape_fields(progs: Sequence[RankProgram], comm_dst: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray,
                                                                               np.ndarray]:
    """The arrays :func:`program._shape` keys a program's shape on, concatenated over ``progs``:
    per node (type, duration, COMP attribute row or -1, is a comm node, dependency count), then
    each program's first dep_ptr entry and the dep_index arrays (with the counts: dep_ptr)."""
    types = np.concatenate([p.types for p in progs])
    attr = np.concatenate([p.attr for p in progs])
    comm = types == COMM_COLL_NODE
    send = np.flatnonzero(types == COMM_SEND_NODE)
    comm[send] = comm_dst[attr[send]] >= 0
    ptr = np.concatenate([p.dep_ptr for p in progs])
    ends = np.cumsum([p.dep_ptr.shape[0] for p in progs])
    deg = np.delete(np.diff(ptr), ends[:-1] - 1)  # the steps between one program's pointer and the next's
    node = (types, np.concatenate([p.duration_micros for p in progs]), np.where(types == COMP_NODE, attr, -1), comm, deg)
    return node, ptr[ends - np.diff(ends, prepend=0)], np.concatenate([p.dep_index for p in progs])


def _weights(size: int) -> np.ndarray:
    """A fixed pseudo-random odd uint64 per position (splitmix64 of the position)."""
    with np.errstate(over="ignore"):
        z = (np.arange(1, size + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) | np.uint64(1)


_MIX = np.asarray([0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD,
                   0xC4CEB9FE1A85EC53], dtype=np.uint64)


def _segment_sums(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per consecutive segment of ``lengths`` elements, the wrapping uint64 sum (empty: 0)."""
    cs = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(x, dtype=np.uint64)))
    ends = np.cumsum(lengths)
    return cs[ends] - cs[ends - lengths]


def _shape_classes(progs: Sequence[RankProgram], cols: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """Programs with equal shape arrays, as index arrays in order of first member; None if a
    fingerprint collision put unequal programs together (then nothing is grouped).

    Programs are put with the first program of their node and dependency counts and compared
    with it element by element; the few that differ (pipeline stages of equal size) are grouped
    by a position-weighted fingerprint of their arrays and compared the same way, so classes are
    exact."""
    groups, odd = _group(progs, np.arange(len(progs), dtype=np.int64), cols, False)
    if odd.size:
        more, still = _group(progs, odd, cols, True)
        if still.size:
            return None
        groups = sorted(groups + more, key=lambda g: int(g[0]))
    return groups


def _group(progs: Sequence[RankProgram], idx: np.ndarray, cols: dict[str, np.ndarray],
           fingerprint: bool) -> tuple[list[np.ndarray], np.ndarray]:
    """(classes of the programs ``idx`` whose arrays equal their class's first member's, as index
    arrays in order of first member; the programs that differ from theirs)."""
    comm_dst = cols["comm_dst"]
    sub = [progs[i] for i in idx.tolist()]
    nodes = np.asarray([p.num_nodes for p in sub], dtype=np.int64)
    ndeps = np.asarray([p.dep_index.shape[0] for p in sub], dtype=np.int64)
    weight = _weights(int(max(int(nodes.max()), int(ndeps.max()), 1)))
    first: dict[tuple, int] = {}
    cls = np.empty(len(sub), dtype=np.int64)
    bad = np.zeros(len(sub), dtype=bool)
    reps: list[tuple[tuple[np.ndarray, ...], int, np.ndarray]] = []
    for lo, hi in _chunks(nodes + ndeps):
        node, ptr0, dep_index = _shape_fields(sub[lo:hi], comm_dst)
        n, nd = nodes[lo:hi], ndeps[lo:hi]
        p_n, p_nd = _positions(n), _positions(nd)
        keys = [n.tolist(), nd.tolist(), ptr0.tolist()]
        if fingerprint:
            with np.errstate(over="ignore"):
                v = node[0].astype(np.uint64) * _MIX[0]
                for f, mix in zip(node[1:], _MIX[1:]):
                    v ^= f.astype(np.int64).astype(np.uint64) * mix
                    v *= _MIX[4]
                keys.append(_segment_sums(v * weight[p_n], n).tolist())
                keys.append(_segment_sums(dep_index.astype(np.uint64) * weight[p_nd], nd).tolist())
        s_n, s_nd = np.cumsum(n) - n, np.cumsum(nd) - nd
        for i, key in enumerate(zip(*keys)):
            c = first.setdefault(key, len(first))
            if c == len(reps):
                a, b = int(s_n[i]), int(s_nd[i])
                reps.append((tuple(f[a:a + n[i]].copy() for f in node), int(ptr0[i]), dep_index[b:b + nd[i]].copy()))
            cls[lo + i] = c
        # exact check: each program against its class's first member, gathered from a copy of it
        mine = cls[lo:hi]
        wrong = np.asarray([r[1] for r in reps])[mine] != ptr0
        at = _gather_index([r[0][0].size for r in reps], mine, n, p_n)
        for k, f in enumerate(node):
            wrong |= _any_per_segment(np.concatenate([r[0][k] for r in reps])[at] != f, n)
        at = _gather_index([r[2].size for r in reps], mine, nd, p_nd)
        wrong |= _any_per_segment(np.concatenate([r[2] for r in reps])[at] != dep_index, nd)
        bad[lo:hi] = wrong
    ok = ~bad
    order = np.argsort(cls[ok], kind="stable")
    cuts = np.cumsum(np.bincount(cls[ok], minlength=len(first)))[:-1]
    return [g for g in np.split(idx[ok][order], cuts) if g.size], idx[bad]


def _any_per_segment(flags: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per consecutive segment of ``lengths`` elements, whether any flag in it is set."""
    out = np.zeros(lengths.size, dtype=bool)
    out[np.searchsorted(np.cumsum(lengths), np.flatnonzero(flags), side="right")] = True
    return out


def _gather_index(sizes: list[int], cls: np.ndarray, lengths: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Index into the concatenated class arrays (of ``sizes``) that lays them out like the programs
    of ``cls``: class ``cls[i]``'s array in program i's place."""
    size = np.asarray(sizes, dtype=np.int64)
    return np.repeat((np.cumsum(size) - size)[cls], lengths) + pos


def _positions(lengths: np.ndarray) -> np.ndarray:
    """0..len-1 for each consecutive segment of ``lengths``."""
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


def _chunks(sizes: np.ndarray) -> list[tuple[int, int]]:
    out, lo, acc = [], 0, 0
    for i, s in enumerate(sizes.tolist()):
        acc += s
        if acc >= _CHUNK_NODES:
            out.append((lo, i + 1))
            lo, acc = i + 1, 0
    if lo < sizes.size:
        out.append((lo, int(sizes.size)))
    return out


class _OneByOne(Exception):
    """The input has a problem the one-by-one analysis reports (it finds which comes first)."""


def _runs(sorted_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal values along each row of a row-sorted matrix: (flat start, length) in
    row-major order."""
    new = np.ones(sorted_rows.shape, dtype=bool)
    new[:, 1:] = sorted_rows[:, 1:] != sorted_rows[:, :-1]
    starts = np.flatnonzero(new)
    return starts, np.diff(np.append(starts, sorted_rows.size))


def _seq_digests(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    """``digest(values[s:s + n])`` per run, each distinct sequence hashed once."""
    out: list[bytes] = [b""] * starts.size
    for size in np.unique(lengths).tolist():
        sel = np.flatnonzero(lengths == size)
        seqs = np.ascontiguousarray(values[starts[sel][:, None] + np.arange(size)])
        first, inv = row_groups(seqs)
        hashes = [digest(seqs[i]) for i in first.tolist()]
        for k, h in zip(sel.tolist(), inv.tolist()):
            out[k] = hashes[h]
    return out


# Program x comm-node cells worked on at a time, so the temporaries of a 10 M-node read stay small
# (at 1 << 20, 8 MB each, they were the peak of a 4,096-rank prediction)
_BLOCK_CELLS = 1 << 17


def _blocks(count: int, width: int) -> list[slice]:
    step = max(1, _BLOCK_CELLS // max(width, 1))
    return [slice(lo, min(lo + step, count)) for lo in range(0, count, step)]


def _analyze_classes(ctx: Context, progs: Sequence[RankProgram], ranks_of: Sequence[Sequence[int]],
                     classes: list[np.ndarray], cols: dict[str, np.ndarray]) -> list[Program]:
    attrs = ctx.reader.attrs
    nrows = cols["comm_type"].size
    memo = ctx.rows
    if memo.key.size < nrows:
        memo.grow(nrows)
    shapes = [_shape(ctx, progs[int(members[0])], cols) for members in classes]

    # attribute row of every comm node, a matrix per shape; the distinct collective rows of each
    # program ascending, programs in order: the order the one-by-one analysis resolves rows in
    mats = []
    run_prog, run_row = [], []
    for members, sh in zip(classes, shapes):
        c_send = progs[int(members[0])].types[sh.comm_node] == COMM_SEND_NODE
        ca = np.stack([progs[j].attr[sh.comm_node] for j in members.tolist()]).astype(np.int64)
        mats.append((c_send, ca))
        for part in _blocks(*ca.shape):
            cc = np.sort(ca[part][:, ~c_send], axis=1)
            starts, _ = _runs(cc)
            run_prog.append(members[part][starts // max(cc.shape[1], 1)])
            run_row.append(cc.reshape(-1)[starts])
    rp, rv = np.concatenate(run_prog), np.concatenate(run_row)
    rv = rv[np.argsort(rp, kind="stable")]
    rv = rv[memo.key[rv] == UNRESOLVED]
    _, first = np.unique(rv, return_index=True)
    new = rv[np.sort(first)]
    if new.size and not np.isin(np.maximum(cols["comm_type"][new], 0), list(COMM_TYPE_NAMES)).all():
        raise _OneByOne
    new_rows = new.tolist()
    row_key = {}
    for row in new_rows:
        key = grp.normalize_key(attrs.rows[row].pg_name)
        if key != grp.ALL_RANKS and ctx.members(key) is None:
            raise _OneByOne
        row_key[row] = key
    resolve_rows(ctx, cols, new_rows, row_key)

    out: list[Program | None] = [None] * len(progs)
    for members, sh, (c_send, ca) in zip(classes, shapes, mats):
        for part in _blocks(*ca.shape):
            _programs_of_block(ctx, progs, ranks_of, members[part], sh, c_send, ca[part], cols, out)
    return out  # type: ignore[return-value]


def _programs_of_block(ctx: Context, progs: Sequence[RankProgram], ranks_of: Sequence[Sequence[int]],
                       members: np.ndarray, sh, c_send: np.ndarray, ca: np.ndarray, cols: dict[str, np.ndarray],
                       out: list) -> None:
    """The Programs of ``members`` (programs of shape ``sh``; ``ca``: their comm nodes' attribute rows)."""
    memo = ctx.rows
    ckey = np.where(c_send, -1, memo.key[ca])
    cpid = np.where(c_send, -1, memo.pid[ca])
    csem = np.where(c_send, -1, memo.sem[ca])
    cinv = np.where(c_send, -1, memo.inv[ca])
    c_coll = ~c_send
    zero = (c_coll & (np.maximum(cols["comm_size"][ca], 0) == 0)).sum(axis=1).tolist()
    # per program and communicator (group key, involved): count, first node, issue sequence
    kc, ic = ckey[:, c_coll], cinv[:, c_coll]
    n_p, m = kc.shape
    base = int(ic.max()) + 2 if ic.size else 1
    code = kc * base + (ic + 1)
    order = np.argsort(code, axis=1, kind="stable")
    code_s = np.take_along_axis(code, order, axis=1)
    starts, lengths = _runs(code_s)
    run_p = starts // max(m, 1)
    run_code = code_s.reshape(-1)[starts]
    run_key = run_code // base
    nodes_s = sh.comm_node[c_coll][order].reshape(-1)
    run_first = np.minimum.reduceat(nodes_s, starts) if starts.size else starts
    hashes = _seq_digests(np.take_along_axis(csem[:, c_coll], order, axis=1).reshape(-1), starts, lengths)
    key_new = np.ones(starts.size, dtype=bool)
    key_new[1:] = (run_p[1:] != run_p[:-1]) | (run_key[1:] != run_key[:-1])
    key_at = np.flatnonzero(key_new)
    key_first = np.minimum.reduceat(run_first, key_at) if key_at.size else key_at
    comm_bounds = np.concatenate(([0], np.cumsum(np.bincount(run_p, minlength=n_p)))).tolist()
    key_bounds = np.concatenate(([0], np.cumsum(np.bincount(run_p[key_at], minlength=n_p)))).tolist()
    comms = list(zip(run_key.tolist(), (run_code % base - 1).tolist()))
    counts_l, keys_l, firsts_l = lengths.tolist(), run_key[key_at].tolist(), key_first.tolist()
    pids, sems, invs = _shared_rows(cpid), _shared_rows(csem), _shared_rows(cinv)
    for li, j in enumerate(members.tolist()):
        a0, a1 = comm_bounds[li], comm_bounds[li + 1]
        b0, b1 = key_bounds[li], key_bounds[li + 1]
        used = tuple(keys_l[b0:b1])
        counts = dict(sh.counts)
        counts["zero_size"] = zero[li]
        out[j] = program_of(progs[j], tuple(ranks_of[j]), sh.struct, sh.comm_pos, c_send, ca[li], sh.comm_node,
                            ckey[li], pids[li], sems[li], (ckey[li], invs[li]), sh.comp_ns, sh.kinds_coll, sh.kinds,
                            sh.edges_u, sh.edges_v, sh.topo_of, dict(zip(comms[a0:a1], hashes[a0:a1])), used,
                            dict(zip(used, firsts_l[b0:b1])), dict(zip(comms[a0:a1], counts_l[a0:a1])), counts,
                            sh.compute_ns, sh.cpu_ns, sh)


def _shared_rows(mat: np.ndarray) -> list[np.ndarray]:
    """Each row of ``mat``, equal rows one array: the programs of a shape mostly share their physics
    ids, (type, size) ids and involved dimensions, held once rather than once per program
    (megabytes at thousands of ranks)."""
    if 0 in mat.shape:
        return list(mat)
    first, inv = row_groups(mat)
    shared = mat[first]
    return [shared[g] for g in inv.tolist()]
