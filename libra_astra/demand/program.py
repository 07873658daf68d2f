"""Rank-independent analysis of one distinct compact program: issue order, compute times, and
its collectives resolved to demand (sends are resolved per rank, by :func:`send_pids`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

from . import groups as grp
from ..errors import LibraError
from ..traces.graph import topological_order
from ..traces.reader import RankProgram
from ..traces.schema import COMM_COLL_NODE, COMM_SEND_NODE, COMM_TYPE_NAMES, COMP_NODE, SUPPORTED_COMM_TYPES, comm_type_name
from .context import Context
from .row_memo import UNRESOLVED


@dataclass(frozen=True, eq=False)
class Program:
    """Everything about one distinct compact program that does not depend on the rank.

    Comm nodes are the collectives and the sends that name a destination, in issue
    (topological) order; per comm node the arrays below hold its attribute row, group key and
    physics id (sends: -1, resolved per rank).
    """

    prog: RankProgram
    ranks: tuple[int, ...]
    struct: bytes                       # digest of graph shape + compute times
    comm_pos: np.ndarray                # topo index of each comm node
    comm_is_send: np.ndarray
    comm_row: np.ndarray                # attribute row
    comm_node: np.ndarray               # node position in the file (for messages)
    coll_key: np.ndarray                # group key index (into Context.keys); -1 for sends
    coll_pid: np.ndarray                # physics id; -1 for sends
    coll_sem: np.ndarray                # (type, size) id, for the member check
    coll_comm: tuple                    # (group key idx, involved idx or -1) arrays per comm node
    comp_ns: np.ndarray                 # per topo node
    kinds_coll: np.ndarray              # bool per topo node: is a comm node
    kinds: np.ndarray                   # int8 per topo node: which slot it takes (KIND_*)
    edges_u: np.ndarray
    edges_v: np.ndarray
    topo_of: np.ndarray                 # topo index of each file position
    seq_hash: Mapping                   # communicator -> digest of its collective sequence
    used_keys: tuple
    key_node: Mapping                   # group key index -> first node position using it
    group_use: Mapping                  # (key idx, involved idx or -1) -> count
    counts: Mapping
    compute_ns: float
    cpu_ns: float
    # the shape analysis this program shares with every program of its dependency graph shape
    # (equal node types, dependencies, compute attributes): what sits at each position is the same
    shape: Any

    @property
    def has_sends(self) -> bool:
        # the comm nodes' sends are the sends that name a destination; counted with the shape,
        # which is cheaper to ask than comm_is_send.any() once per program of a large read
        return int(self.counts["types"][COMM_SEND_NODE]) > self.counts["send_no_dst"]


_PROGRAM_FIELDS = tuple(f.name for f in fields(Program))


def program_of(*values: Any) -> Program:
    """``Program(*values)``, set in one step: the frozen dataclass's ``__init__`` sets its fields one
    ``object.__setattr__`` at a time, which dominated building the thousands of a pipeline's read."""
    if len(values) != len(_PROGRAM_FIELDS):
        raise TypeError(f"Program has {len(_PROGRAM_FIELDS)} fields, got {len(values)} values")
    p = object.__new__(Program)
    p.__dict__.update(zip(_PROGRAM_FIELDS, values))
    return p


_DTYPE_NAMES: dict[np.dtype, bytes] = {}


def digest(*arrays: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    names = _DTYPE_NAMES
    for a in arrays:
        # str(dtype) costs more than hashing a small array; the same bytes, looked up once per dtype
        name = names.get(a.dtype)
        if name is None:
            name = names[a.dtype] = str(a.dtype).encode()
        h.update(name)
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.digest()


# What each node occupies while it runs, as ASTRA-sim's HardwareResource allots it per rank: one
# GPU compute slot, one CPU-op slot, one communication slot (collectives and sends); receives and
# the nodes the emitted trace leaves out (METADATA, INVALID, ...) take none.
KIND_GPU, KIND_CPU, KIND_COMM, KIND_FREE = 0, 1, 2, 3
KIND_NAMES = ("comp", "cpu", "coll", "free")


def _compute_ns(ctx: Context, prog: RankProgram, cols: dict[str, np.ndarray], comp: np.ndarray,
                counts: dict) -> tuple[np.ndarray, np.ndarray]:
    """(time in ns, is a CPU op) of every node; time 0 for all but COMP nodes.

    A COMP node runs ``duration_micros`` x 1000 ns, and 1 ns when that is 0, as ASTRA-sim
    replays it; CPU ops (``is_cpu_op``) the same, on the rank's CPU-op slot."""
    n = prog.num_nodes
    out = np.zeros(n, dtype=np.float64)
    a = prog.attr
    cpu = comp & cols["is_cpu_op"][a]
    gpu = comp & ~cpu
    dur_ns = np.maximum(prog.duration_micros.astype(np.float64) * 1000.0, 1.0)
    counts["cpu_ops"] = int(cpu.sum())
    counts["cpu_ns"] = float(dur_ns[cpu].sum())
    counts["zero_duration"] = int((comp & (prog.duration_micros == 0)).sum())
    out[cpu] = dur_ns[cpu]
    if ctx.peak is None:
        out[gpu] = dur_ns[gpu]
        return out, cpu
    ops = np.maximum(cols["num_ops"][a], 0).astype(np.float64)
    tsize = np.maximum(cols["tensor_size"][a], 0).astype(np.float64)
    peak = ctx.peak * 1e3            # TFLOPS -> ops per ns
    membw = ctx.membw                # GB/s -> bytes per ns
    has = gpu & (tsize > 0) & (ops > 0)
    perf = np.minimum(peak, membw * ops[has] / tsize[has])
    out[has] = ops[has] / perf
    counts["roofline_zero"] = int((gpu & ~has).sum())
    return out, cpu


@dataclass(frozen=True)
class _Shape:
    """The part of a program's analysis that does not depend on its groups or peers: ranks of
    one pipeline stage share it even though their files differ (pg_name, comm_dst)."""

    comm_pos: np.ndarray     # topo index of each comm node
    comm_node: np.ndarray    # its file position
    comp_ns: np.ndarray      # per topo node
    kinds_coll: np.ndarray   # bool per topo node
    kinds: np.ndarray        # int8 per topo node: KIND_GPU, KIND_CPU, KIND_COMM or KIND_FREE
    edges_u: np.ndarray
    edges_v: np.ndarray
    struct: bytes
    compute_ns: float
    cpu_ns: float
    counts: dict
    topo_of: np.ndarray      # topo index of each file position


def _shape(ctx: Context, prog: RankProgram, cols: dict[str, np.ndarray]) -> _Shape:
    types = prog.types
    a = prog.attr
    n = prog.num_nodes
    comp = types == COMP_NODE
    is_send = types == COMM_SEND_NODE
    send_ok = is_send & (cols["comm_dst"][a] >= 0)
    comm_mask = (types == COMM_COLL_NODE) | send_ok
    # compute times depend on COMP attributes only (is_cpu_op, num_ops, tensor_size)
    key = digest(types, prog.duration_micros, prog.dep_ptr, prog.dep_index, np.where(comp, a, -1), comm_mask)
    sh = ctx.shapes_by_key.get(key)
    if sh is not None:
        return sh
    counts: dict[str, Any] = {"types": np.bincount(types.astype(np.int64), minlength=8)}
    order = topological_order(prog)
    comp_ns_file, cpu_file = _compute_ns(ctx, prog, cols, comp, counts)
    counts["send_no_dst"] = int(is_send.sum() - send_ok.sum())
    if order is None:
        comm_pos = np.nonzero(comm_mask)[0]
        comm_node = comm_pos
    else:
        comm_pos = np.nonzero(comm_mask[order])[0]
        comm_node = order[comm_pos]
    # dependency graph in topo order, edges deduplicated
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(prog.dep_ptr))
    dep = prog.dep_index
    pos_of = np.arange(n, dtype=np.int64)
    if order is None:
        u, v = dep, owner
    else:
        pos_of[order] = np.arange(n, dtype=np.int64)
        u, v = pos_of[dep], pos_of[owner]
    if u.size:
        k = v * n + u
        if order is not None or not bool(np.all(k[1:] > k[:-1])):
            k = np.unique(k)
        u, v = k % n, k // n
    kinds_coll = np.zeros(n, dtype=bool)
    kinds_coll[comm_pos] = True
    kinds_file = np.full(n, KIND_FREE, dtype=np.int8)
    kinds_file[comp & ~cpu_file] = KIND_GPU
    kinds_file[cpu_file] = KIND_CPU
    kinds = kinds_file if order is None else kinds_file[order]
    kinds[comm_pos] = KIND_COMM
    comp_ns = comp_ns_file if order is None else comp_ns_file[order]
    cpu_ns = counts.pop("cpu_ns")
    struct = digest(kinds, np.where(kinds_coll, 0.0, comp_ns), u, v)
    gpu_ns = float(comp_ns_file[comp & ~cpu_file].sum())
    sh = _Shape(comm_pos, comm_node, comp_ns, kinds_coll, kinds, u, v, struct, gpu_ns, cpu_ns, counts, pos_of)
    ctx.shapes_by_key[key] = sh
    return sh


def resolve_rows(ctx: Context, cols: dict[str, np.ndarray], rows: Sequence[int], row_key: Mapping[int, str]) -> None:
    """Group key, physics and (type, size) ids of checked attribute rows into ``ctx.rows``, interned
    in the order of ``rows``."""
    memo = ctx.rows
    for row in rows:
        t = max(int(cols["comm_type"][row]), 0)
        kidx = ctx.key_index(row_key[row])
        inv = int(cols["involved"][row])
        size = max(int(cols["comm_size"][row]), 0)
        pid = ctx.coll_pid(t, size, kidx, inv)
        memo.key[row] = kidx
        memo.pid[row] = pid
        memo.sem[row] = ctx.sem(t, size)
        memo.inv[row] = inv if row_key[row] == grp.ALL_RANKS else -1


def first_node(mask: np.ndarray, comm_node: np.ndarray) -> int:
    return int(comm_node[mask].min())


def analyze(ctx: Context, prog: RankProgram, ranks: Sequence[int]) -> Program:
    """Rank-independent analysis of one program (runs once per distinct program).

    Per-node work is numpy over the program's arrays; Python only loops over the distinct
    attribute rows (a handful: every all-reduce of one size on one group shares a row).
    """
    where = prog.path
    attrs = ctx.reader.attrs
    cols = attrs.columns()
    nrows = cols["comm_type"].size
    a = prog.attr

    sh = _shape(ctx, prog, cols)
    comm_pos, comm_node = sh.comm_pos, sh.comm_node
    counts = dict(sh.counts)
    c_send = prog.types[comm_node] == COMM_SEND_NODE
    ca = a[comm_node].astype(np.int64)
    c_coll = ~c_send

    # distinct attribute rows of the collectives (sorted), and how often each is used: a sort of
    # this program's few hundred rows, not arrays as long as the read's row table
    rows, per_row = np.unique(ca[c_coll], return_counts=True)
    # Rows are shared by all files of the read, so each is checked and resolved once per read
    # (ctx.rows): a row resolved for an earlier program passed both checks below, so only this
    # program's new rows are looked at. They are resolved in the same order as a fresh resolution
    # would (sorted, after both checks), so the group, physics and (type, size) ids come out
    # numbered exactly as before.
    memo = ctx.rows
    if memo.key.size < nrows:
        memo.grow(nrows)
    new = rows[memo.key[rows] == UNRESOLVED]
    new_rows = new.tolist()
    ctype_r = np.maximum(cols["comm_type"][new], 0)  # absent comm_type reads as 0 (ALL_REDUCE), as in ASTRA-sim
    if new.size and (bad := ~np.isin(ctype_r, list(COMM_TYPE_NAMES))).any():
        bad_rows = set(new[bad].tolist())
        mask = c_coll & np.isin(ca, list(bad_rows))
        i = first_node(mask, comm_node)
        t = int(max(cols["comm_type"][a[i]], 0))
        raise LibraError(
            f"{where}: node {int(prog.node_ids[i])} is a {comm_type_name(t)} collective, which ASTRA-sim does not "
            f"simulate; supported: {', '.join(SUPPORTED_COMM_TYPES)}; rewrite it as one of these"
        )
    row_key = {}
    undefined = []
    for row in new_rows:
        key = grp.normalize_key(attrs.rows[row].pg_name)
        if key != grp.ALL_RANKS and ctx.members(key) is None:
            undefined.append(row)
        row_key[row] = key
    if undefined:
        i = first_node(c_coll & np.isin(ca, undefined), comm_node)
        key = grp.normalize_key(attrs.rows[int(a[i])].pg_name)
        have = sorted(set(ctx.file_groups) | set(ctx.meta_groups), key=lambda s: (len(s), s))
        known = f"known groups: {', '.join(have[:10])}" if have else "no groups are defined"
        raise LibraError(
            f"{where}: node {int(prog.node_ids[i])} uses communicator group {key!r}, which is not defined "
            f"({known}); give it in --comm-groups or fix pg_name"
        )
    resolve_rows(ctx, cols, new_rows, row_key)
    key_lut, pid_lut, sem_lut, inv_lut = memo.key, memo.pid, memo.sem, memo.inv
    counts["zero_size"] = int((c_coll & (np.maximum(cols["comm_size"][ca], 0) == 0)).sum())
    ckey = np.where(c_send, -1, key_lut[ca])
    coll_pid = np.where(c_send, -1, pid_lut[ca])
    coll_sem = np.where(c_send, -1, sem_lut[ca])
    cinv = np.where(c_send, -1, inv_lut[ca])

    # per-group issue sequences (for the member check) and usage counts (for the summary)
    comms = set()
    group_use: dict[tuple[int, int], int] = {}
    for k, c in zip(zip(key_lut[rows].tolist(), inv_lut[rows].tolist()), per_row.tolist()):
        comms.add(k)
        group_use[k] = group_use.get(k, 0) + c
    used_keys = tuple(sorted({k for k, _ in comms}))
    key_node = {kidx: first_node(ckey == kidx, comm_node) for kidx in used_keys}
    seq_hash = {k: digest(coll_sem[(ckey == k[0]) & (cinv == k[1])]) for k in sorted(comms)}
    return Program(prog, tuple(ranks), sh.struct, comm_pos, c_send, ca, comm_node, ckey, coll_pid, coll_sem,
                   (ckey, cinv), sh.comp_ns, sh.kinds_coll, sh.kinds, sh.edges_u, sh.edges_v, sh.topo_of, seq_hash, used_keys,
                   key_node, group_use, counts, sh.compute_ns, sh.cpu_ns, sh)


def send_pids(ctx: Context, info: Program, rank: int) -> np.ndarray:
    """Physics ids of a rank's sends (they depend on where the rank sits in the network)."""
    rows = info.comm_row[info.comm_is_send]
    uniq, inverse = np.unique(rows, return_inverse=True)
    cols = ctx.reader.attrs.columns()
    dst, src = cols["comm_dst"][uniq], cols["comm_src"][uniq]
    prog = info.prog
    n_npus = ctx.net.npus_count

    def node_of(j: int) -> int:
        mask = np.zeros(info.comm_row.size, dtype=bool)
        mask[info.comm_is_send] = rows == uniq[j]
        return int(prog.node_ids[first_node(mask, info.comm_node)])

    bad_src = (src >= 0) & (src != rank)
    if bad_src.any():
        j = int(np.argmax(bad_src))
        raise LibraError(
            f"{prog.path}: send node {node_of(j)} has comm_src {int(src[j])} but the file is rank {rank}; "
            "a send is issued by its sender, fix comm_src"
        )
    bad = (dst >= n_npus) | (dst == rank)
    if bad.any():
        j = int(np.argmax(bad))
        why = "is the sending rank itself" if int(dst[j]) == rank else f"is outside 0..{n_npus - 1}"
        raise LibraError(f"{prog.path}: send node {node_of(j)} has comm_dst {int(dst[j])}, which {why}; fix comm_dst")
    dims, hops = grp.p2p_dims(ctx.net, np.full(dst.shape, rank), dst)
    sizes = np.maximum(cols["comm_size"][uniq], 0)
    upid = []
    for s, d, h in zip(sizes.tolist(), dims.tolist(), hops.tolist()):
        upid.append(ctx.p2p_pid(s, d, h))
    return np.asarray(upid, dtype=np.int64)[inverse.reshape(-1)]


def send_pids_many(ctx: Context, pairs: Sequence[tuple[Program, int]]) -> list[np.ndarray]:
    """``[send_pids(ctx, info, rank) for info, rank in pairs]`` in a few numpy passes.

    With thousands of distinct rank programs (every rank of a pipeline sends to its own peers)
    the per-call numpy overhead outweighs the work. Physics ids are interned in the same order
    as the calls one by one would (pair by pair, rows ascending), so ids are unchanged; a pair
    with a bad source or destination is handed to :func:`send_pids`, which raises its error."""
    if not pairs:
        return []
    cols = ctx.reader.attrs.columns()
    n_npus = ctx.net.npus_count
    rows_of = [info.comm_row[info.comm_is_send] for info, _ in pairs]
    lens = np.asarray([r.size for r in rows_of], dtype=np.int64)
    which = np.repeat(np.arange(len(pairs), dtype=np.int64), lens)
    rows = np.concatenate(rows_of).astype(np.int64)
    nrows = int(rows.max()) + 1 if rows.size else 1
    # sorted by pair, then row: each pair's distinct rows in the order np.unique gives them alone
    uniq, inverse = np.unique(which * nrows + rows, return_inverse=True)
    upair, urow = uniq // nrows, uniq % nrows
    rank = np.asarray([r for _, r in pairs], dtype=np.int64)[upair]
    dst, src = cols["comm_dst"][urow], cols["comm_src"][urow]
    bad = ((src >= 0) & (src != rank)) | (dst >= n_npus) | (dst == rank)
    if bad.any():
        info, r = pairs[int(upair[int(np.argmax(bad))])]
        send_pids(ctx, info, r)  # raises the error the first bad pair gives alone
        raise AssertionError("send_pids accepted a send send_pids_many rejects")
    dims, hops = grp.p2p_dims(ctx.net, rank, dst)
    sizes = np.maximum(cols["comm_size"][urow], 0)
    p2p = ctx.p2p_pid
    upid = np.asarray([p2p(s, d, h) for s, d, h in zip(sizes.tolist(), dims.tolist(), hops.tolist())],
                      dtype=np.int64)
    flat = upid[inverse.reshape(-1)]
    ends = np.cumsum(lens)
    return [flat[e - k:e] for k, e in zip(lens.tolist(), ends.tolist())]
