"""Chakra ET traces + network (+ communicator groups) -> per-dimension communication demand.

Each rank file is read into a compact program (:mod:`libra_astra.trace`); every distinct
program is analysed once (topological order, compute times, its collectives in issue order);
each rank then only resolves what depends on the rank itself (the dimension its sends cross).
Ranks whose demand comes out identical -- same dependency graph, same collectives with the same
per-dimension traffic -- form one rank class, computed and written once. The job time is the
slowest class's; the optimizer takes the max over classes.

Modelling choices (they follow ASTRA-sim's workload layer and analytical network backend):

- COMP: ``duration_micros`` x 1000 ns; with ``peak_tflops`` and ``mem_bw_gbps`` the roofline
  time ``num_ops / min(peak, mem_bw * num_ops / tensor_size)``; a node without num_ops or
  tensor_size then takes 0 ns, as in ASTRA-sim. CPU ops (``is_cpu_op``) run on a separate
  resource in ASTRA-sim; they stay in the dependency graph with 0 ns and are reported, not added.
- COMM_COLL on a group: hierarchical traffic on a sub-grid, one flat ring on any other member
  set; on all ranks, over the dimensions ``involved_dim`` marks.
- COMM_SEND: a P2P transfer charged on the lowest dimension where source and destination
  differ. COMM_RECV is the other side of a send: kept in the graph with 0 ns, not charged.
- METADATA, MEM_LOAD, MEM_STORE and INVALID nodes carry no demand: counted, reported, kept in
  the graph (0 ns) so dependencies through them hold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import groups as grp
from .demand import Collective, Dag, Demand, RankClass
from .errors import LibraError
from .network import Network
from .trace import (COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMM_TYPE_NAMES, COMP_NODE, INVALID_NODE,
                    MEM_LOAD_NODE, MEM_STORE_NODE, METADATA_NODE, NODE_TYPE_NAMES, SUPPORTED_COMM_TYPES,
                    RankProgram, TraceReader, comm_type_name, is_trace_prefix, rank_files, topological_order)

__all__ = ["demand_from_traces", "is_trace_prefix", "summary_to_dict", "TraceSummary", "GroupSummary", "ClassSummary"]


# ---------------------------------------------------------------- summary values


@dataclass(frozen=True)
class GroupSummary:
    """One communicator (or all-ranks ``involved_dim`` pattern) used by the trace."""

    key: str                          # pg_name; "" = all ranks
    source: str                       # "comm-groups file", "trace METADATA", "all ranks"
    size: int                         # members
    participants: tuple[int, ...]     # per dimension (bounding box for a flat ring)
    algorithm: str                    # "hierarchical" or "flat_ring"
    ring_dims: tuple[int, ...] = ()   # dimensions a flat ring crosses
    involved_dim: tuple[bool, ...] | None = None
    collectives: int = 0              # collective nodes on it, summed over ranks


@dataclass(frozen=True)
class ClassSummary:
    num_ranks: int
    ranks: tuple[int, ...]
    compute_time_ns: float
    num_collectives: int
    traffic_bytes: tuple[float, ...]  # per NPU per dimension, all its collectives


@dataclass(frozen=True)
class TraceSummary:
    """What the reader found, for the CLI table and reports."""

    prefix: str
    num_ranks: int
    files_decoded: int                # distinct files parsed (identical files are read once)
    programs: int                     # distinct compact programs analysed
    nodes_total: int                  # summed over ranks
    node_counts: Mapping[str, int]    # by node type, summed over ranks
    skipped: Mapping[str, int]        # nodes that carry no demand, by reason, summed over ranks
    bytes_by_type: Mapping[str, tuple[float, ...]]  # bytes per NPU per dimension, mean over ranks
    groups: tuple[GroupSummary, ...]
    rank_classes: tuple[ClassSummary, ...]
    compute_time_ns: tuple[float, float]  # (min, max) over ranks
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------- program analysis


@dataclass
class _Program:
    """Everything about one distinct compact program that does not depend on the rank.

    Comm nodes are the collectives and the sends that name a destination, in issue
    (topological) order; per comm node the arrays below hold its attribute row, group key and
    physics id (sends: -1, resolved per rank).
    """

    prog: RankProgram
    ranks: list[int]
    struct: bytes = b""                 # digest of graph shape + compute times
    comm_pos: np.ndarray = None         # topo index of each comm node
    comm_is_send: np.ndarray = None
    comm_row: np.ndarray = None         # attribute row
    comm_node: np.ndarray = None        # node position in the file (for messages)
    coll_key: np.ndarray = None         # group key index (into _Ctx.keys); -1 for sends
    coll_pid: np.ndarray = None         # physics id; -1 for sends
    coll_sem: np.ndarray = None         # (type, size) id, for the member check
    coll_comm: tuple = ()               # (group key idx, involved idx or -1) arrays per comm node
    comp_ns: np.ndarray = None          # per topo node
    kinds_coll: np.ndarray = None       # bool per topo node: is a comm node
    edges_u: np.ndarray = None
    edges_v: np.ndarray = None
    topo_of: np.ndarray = None          # topo index of each file position
    seq_hash: dict = field(default_factory=dict)  # communicator -> digest of its collective sequence
    used_keys: tuple = ()
    key_node: dict = field(default_factory=dict)  # group key index -> first node position using it
    group_use: dict = field(default_factory=dict)  # (key idx, involved idx or -1) -> count
    counts: dict = field(default_factory=dict)
    compute_ns: float = 0.0
    cpu_ns: float = 0.0

    @property
    def has_sends(self) -> bool:
        return bool(self.comm_is_send.any())


class _Ctx:
    def __init__(self, net: Network, file_groups: dict[str, tuple[int, ...]], groups_source: str,
                 peak_tflops: float | None, mem_bw_gbps: float | None, reader: TraceReader) -> None:
        self.net = net
        self.file_groups = file_groups
        self.groups_source = groups_source
        self.meta_groups: dict[str, tuple[int, ...]] = {}
        self.meta_where: dict[str, str] = {}
        self.peak = peak_tflops
        self.membw = mem_bw_gbps
        self.reader = reader
        self.keys: list[str] = []
        self._key_index: dict[str, int] = {}
        self.shapes: dict[tuple[int, int], grp.GroupShape] = {}
        self.shapes_by_key: dict[bytes, Any] = {}  # program shape digest -> _Shape
        self.physics: list[Collective] = []
        self._phys_index: dict[tuple, int] = {}
        self._coll_cache: dict[tuple, int] = {}
        self._sem_index: dict[tuple, int] = {}
        self.sems: list[tuple[str, int]] = []

    def sem(self, ctype: int, size: int) -> int:
        """Id of a (collective type, size) pair: what members of a communicator must agree on."""
        k = (ctype, size)
        i = self._sem_index.get(k)
        if i is None:
            i = self._sem_index[k] = len(self.sems)
            self.sems.append((COMM_TYPE_NAMES[ctype], size))
        return i

    def key_index(self, key: str) -> int:
        i = self._key_index.get(key)
        if i is None:
            i = self._key_index[key] = len(self.keys)
            self.keys.append(key)
        return i

    def members(self, key: str) -> tuple[int, ...] | None:
        """Members of a named group, or None if it is not defined anywhere."""
        if key in self.file_groups:
            return self.file_groups[key]
        if key in self.meta_groups:
            m = self.meta_groups[key]
            return m if m else tuple(range(self.net.npus_count))
        return None

    def source(self, key: str) -> str:
        if key == grp.ALL_RANKS:
            return "all ranks"
        return self.groups_source if key in self.file_groups else "trace METADATA"

    def shape(self, kidx: int, inv_idx: int) -> grp.GroupShape:
        k = (kidx, inv_idx) if self.keys[kidx] == grp.ALL_RANKS else (kidx, -1)
        s = self.shapes.get(k)
        if s is None:
            key = self.keys[kidx]
            if key == grp.ALL_RANKS:
                s = grp.all_ranks_shape(self.net, self.reader.attrs.involved[inv_idx])
            else:
                s = grp.group_shape(self.net, key, self.members(key), self.source(key))
            self.shapes[k] = s
        return s

    def intern(self, c: Collective) -> int:
        k = (c.type, c.size_bytes, c.participants, c.traffic_bytes, c.hops, c.algorithm)
        i = self._phys_index.get(k)
        if i is None:
            i = self._phys_index[k] = len(self.physics)
            self.physics.append(c)
        return i

    def coll_pid(self, ctype: int, size: int, kidx: int, inv_idx: int) -> int:
        key = (ctype, size, kidx, inv_idx if self.keys[kidx] == grp.ALL_RANKS else -1)
        pid = self._coll_cache.get(key)
        if pid is None:
            shape = self.shape(kidx, inv_idx)
            pid = self.intern(grp.group_collective(self.net, COMM_TYPE_NAMES[ctype], float(size), shape))
            self._coll_cache[key] = pid
        return pid


def _digest(*arrays: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for a in arrays:
        h.update(str(a.dtype).encode())
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.digest()


def _compute_ns(ctx: _Ctx, prog: RankProgram, cols: dict[str, np.ndarray], comp: np.ndarray,
                counts: dict) -> np.ndarray:
    """Time of every node in ns (0 for all but GPU compute)."""
    n = prog.num_nodes
    out = np.zeros(n, dtype=np.float64)
    a = prog.attr
    cpu = comp & cols["is_cpu_op"][a]
    gpu = comp & ~cpu
    dur_ns = prog.duration_micros.astype(np.float64) * 1000.0
    counts["cpu_ops"] = int(cpu.sum())
    counts["cpu_ns"] = float(dur_ns[cpu].sum())
    if ctx.peak is None:
        out[gpu] = dur_ns[gpu]
        return out
    ops = np.maximum(cols["num_ops"][a], 0).astype(np.float64)
    tsize = np.maximum(cols["tensor_size"][a], 0).astype(np.float64)
    peak = ctx.peak * 1e3            # TFLOPS -> ops per ns
    membw = ctx.membw                # GB/s -> bytes per ns
    has = gpu & (tsize > 0) & (ops > 0)
    perf = np.minimum(peak, membw * ops[has] / tsize[has])
    out[has] = ops[has] / perf
    counts["roofline_zero"] = int((gpu & ~has).sum())
    return out


@dataclass(frozen=True)
class _Shape:
    """The part of a program's analysis that does not depend on its groups or peers: ranks of
    one pipeline stage share it even though their files differ (pg_name, comm_dst)."""

    comm_pos: np.ndarray     # topo index of each comm node
    comm_node: np.ndarray    # its file position
    comp_ns: np.ndarray      # per topo node
    kinds_coll: np.ndarray   # bool per topo node
    edges_u: np.ndarray
    edges_v: np.ndarray
    struct: bytes
    compute_ns: float
    cpu_ns: float
    counts: dict
    topo_of: np.ndarray      # topo index of each file position


def _shape(ctx: _Ctx, prog: RankProgram, cols: dict[str, np.ndarray]) -> _Shape:
    types = prog.types
    a = prog.attr
    n = prog.num_nodes
    comp = types == COMP_NODE
    is_send = types == COMM_SEND_NODE
    send_ok = is_send & (cols["comm_dst"][a] >= 0)
    comm_mask = (types == COMM_COLL_NODE) | send_ok
    # compute times depend on COMP attributes only (is_cpu_op, num_ops, tensor_size)
    key = _digest(types, prog.duration_micros, prog.dep_ptr, prog.dep_index, np.where(comp, a, -1), comm_mask)
    sh = ctx.shapes_by_key.get(key)
    if sh is not None:
        return sh
    counts: dict[str, Any] = {"types": np.bincount(types.astype(np.int64), minlength=8)}
    order = topological_order(prog)
    comp_ns_file = _compute_ns(ctx, prog, cols, comp, counts)
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
    comp_ns = comp_ns_file if order is None else comp_ns_file[order]
    cpu_ns = counts.pop("cpu_ns")
    struct = _digest(kinds_coll, np.where(kinds_coll, 0.0, comp_ns), u, v)
    sh = _Shape(comm_pos, comm_node, comp_ns, kinds_coll, u, v, struct, float(comp_ns_file.sum()), cpu_ns, counts,
                pos_of)
    ctx.shapes_by_key[key] = sh
    return sh


def _first_node(mask: np.ndarray, comm_node: np.ndarray) -> int:
    return int(comm_node[mask].min())


def _analyze(ctx: _Ctx, info: _Program) -> None:
    """Rank-independent analysis of one program (runs once per distinct program).

    Per-node work is numpy over the program's arrays; Python only loops over the distinct
    attribute rows (a handful: every all-reduce of one size on one group shares a row).
    """
    prog = info.prog
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

    # distinct attribute rows of the collectives: check and resolve each once
    used = np.zeros(nrows, dtype=bool)
    used[ca[c_coll]] = True
    rows = np.nonzero(used)[0]
    ctype_r = np.maximum(cols["comm_type"][rows], 0)  # absent comm_type reads as 0 (ALL_REDUCE), as in ASTRA-sim
    bad = ~np.isin(ctype_r, list(COMM_TYPE_NAMES))
    if bad.any():
        bad_rows = set(rows[bad].tolist())
        mask = c_coll & np.isin(ca, list(bad_rows))
        i = _first_node(mask, comm_node)
        t = int(max(cols["comm_type"][a[i]], 0))
        raise LibraError(
            f"{where}: node {int(prog.node_ids[i])} is a {comm_type_name(t)} collective, which ASTRA-sim does not "
            f"simulate; supported: {', '.join(SUPPORTED_COMM_TYPES)}; rewrite it as one of these"
        )
    row_key = {}
    undefined = []
    for row in rows.tolist():
        key = grp.normalize_key(attrs.rows[row].pg_name)
        if key != grp.ALL_RANKS and ctx.members(key) is None:
            undefined.append(row)
        row_key[row] = key
    if undefined:
        i = _first_node(c_coll & np.isin(ca, undefined), comm_node)
        key = grp.normalize_key(attrs.rows[int(a[i])].pg_name)
        have = sorted(set(ctx.file_groups) | set(ctx.meta_groups), key=lambda s: (len(s), s))
        known = f"known groups: {', '.join(have[:10])}" if have else "no groups are defined"
        raise LibraError(
            f"{where}: node {int(prog.node_ids[i])} uses communicator group {key!r}, which is not defined "
            f"({known}); give it in --comm-groups or fix pg_name"
        )
    key_lut = np.full(nrows, -1, dtype=np.int64)
    pid_lut = np.full(nrows, -1, dtype=np.int64)
    sem_lut = np.full(nrows, -1, dtype=np.int64)
    inv_lut = np.full(nrows, -1, dtype=np.int64)  # involved_dim matters on all-ranks collectives only
    for row, t in zip(rows.tolist(), ctype_r.tolist()):
        kidx = ctx.key_index(row_key[row])
        inv = int(cols["involved"][row])
        size = max(int(cols["comm_size"][row]), 0)
        key_lut[row] = kidx
        pid_lut[row] = ctx.coll_pid(int(t), size, kidx, inv)
        sem_lut[row] = ctx.sem(int(t), size)
        if row_key[row] == grp.ALL_RANKS:
            inv_lut[row] = inv
    counts["zero_size"] = int((c_coll & (np.maximum(cols["comm_size"][ca], 0) == 0)).sum())
    ckey = np.where(c_send, -1, key_lut[ca])
    info.comm_pos, info.comm_is_send, info.comm_row, info.comm_node = comm_pos, c_send, ca, comm_node
    info.coll_key = ckey
    info.coll_pid = np.where(c_send, -1, pid_lut[ca])
    info.coll_sem = np.where(c_send, -1, sem_lut[ca])
    cinv = np.where(c_send, -1, inv_lut[ca])

    # per-group issue sequences (for the member check) and usage counts (for the summary)
    per_row = np.bincount(ca[c_coll], minlength=nrows)
    comms = set()
    for row in rows.tolist():
        k = (int(key_lut[row]), int(inv_lut[row]))
        comms.add(k)
        info.group_use[k] = info.group_use.get(k, 0) + int(per_row[row])
    info.used_keys = tuple(sorted({k for k, _ in comms}))
    for kidx in info.used_keys:
        info.key_node[kidx] = _first_node(ckey == kidx, comm_node)
    info.coll_comm = (ckey, cinv)
    for k in sorted(comms):
        info.seq_hash[k] = _digest(info.coll_sem[(ckey == k[0]) & (cinv == k[1])])

    info.edges_u, info.edges_v = sh.edges_u, sh.edges_v
    info.topo_of = sh.topo_of
    info.kinds_coll = sh.kinds_coll
    info.comp_ns = sh.comp_ns
    info.compute_ns = sh.compute_ns
    info.cpu_ns = sh.cpu_ns
    info.counts = counts
    info.struct = sh.struct


def _send_pids(ctx: _Ctx, info: _Program, rank: int) -> np.ndarray:
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
        return int(prog.node_ids[_first_node(mask, info.comm_node)])

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
        key = ("P2P", s, d, h)
        pid = ctx._coll_cache.get(key)
        if pid is None:
            pid = ctx._coll_cache[key] = ctx.intern(grp.p2p_collective(ctx.net, float(s), int(d), int(h)))
        upid.append(pid)
    return np.asarray(upid, dtype=np.int64)[inverse.reshape(-1)]


def _merge_metadata(ctx: _Ctx, programs: Sequence[_Program]) -> None:
    n = ctx.net.npus_count
    for info in programs:
        for name, ranks in info.prog.pg_info:
            key = grp.normalize_key(name)
            if key == grp.ALL_RANKS:
                continue
            members = tuple(sorted(set(ranks)))
            prev = ctx.meta_groups.get(key)
            if prev is not None and prev != members:
                raise LibraError(
                    f"{info.prog.path}: METADATA defines process group {key} with ranks {list(members)[:8]} but "
                    f"{ctx.meta_where[key]} defines it with {list(prev)[:8]}; every rank must describe a group the "
                    "same way"
                )
            ctx.meta_groups[key] = members
            ctx.meta_where.setdefault(key, info.prog.path)
    check_groups = {k: v for k, v in ctx.meta_groups.items() if k not in ctx.file_groups}
    for key, members in check_groups.items():
        bad = [m for m in members if not 0 <= m < n]
        if bad:
            raise LibraError(
                f"{ctx.meta_where[key]}: METADATA process group {key} has rank(s) {bad[:5]} outside 0..{n - 1} "
                f"(the network has {n} NPUs); use the matching network"
            )


def _describe_seq(ctx: _Ctx, info: _Program, comm: tuple[int, int]) -> list[tuple[str, int]]:
    """(type, size) sequence of a program's collectives on one communicator, in issue order."""
    ckey, cinv = info.coll_comm
    return [ctx.sems[i] for i in info.coll_sem[(ckey == comm[0]) & (cinv == comm[1])].tolist()]


def _communicators(ctx: _Ctx, comm: tuple[int, int]) -> tuple[np.ndarray, str]:
    """Communicator id per rank (-1: not a member) for a group key, and its name for messages.

    An all-ranks collective with ``involved_dim`` runs among the ranks that share their
    coordinates in the dimensions it does not involve: one communicator per such sub-grid.
    """
    net = ctx.net
    n = net.npus_count
    kidx, inv = comm
    key = ctx.keys[kidx]
    if key != grp.ALL_RANKS:
        cid = np.full(n, -1, dtype=np.int64)
        cid[np.asarray(ctx.members(key), dtype=np.int64)] = 0
        return cid, f"group {key}"
    parts = grp.all_ranks_participants(net, ctx.reader.attrs.involved[inv])
    ranks = np.arange(n, dtype=np.int64)
    cid = np.zeros(n, dtype=np.int64)
    stride = 1
    for d, dim in enumerate(net.dims):
        coord = ranks % dim.npus
        ranks = ranks // dim.npus
        if parts[d] == 1:  # not involved: ranks that differ here are in different communicators
            cid += coord * stride
            stride *= dim.npus
    dims = [d for d, p in enumerate(parts) if p > 1]
    return cid, f"all ranks over dimension(s) {dims}"


def _check_group_sequences(ctx: _Ctx, programs: list[_Program], rank_prog: np.ndarray) -> None:
    """Members of a communicator must issue the same collectives on it in the same order."""
    # a rank that issues on a named group must be one of its members
    member_sets: dict[int, frozenset[int]] = {}
    for info in programs:
        for kidx in info.used_keys:
            key = ctx.keys[kidx]
            if key == grp.ALL_RANKS:
                continue
            ms = member_sets.get(kidx)
            if ms is None:
                ms = member_sets[kidx] = frozenset(ctx.members(key))
            outside = [r for r in info.ranks if r not in ms]
            if outside:
                r = outside[0]
                node = int(info.prog.node_ids[info.key_node[kidx]])
                shown = sorted(ms)
                raise LibraError(
                    f"{info.prog.path}: node {node} of rank {r} runs a collective on group {key}, whose "
                    f"members {shown[:8]}{'...' if len(shown) > 8 else ''} do not include rank {r}; "
                    "add the rank to the group or fix pg_name"
                )
    # every member of a communicator issues the same sequence on it (a member that never
    # issues on it has the empty sequence)
    for comm in sorted({k for info in programs for k in info.seq_hash}):
        hash_ids: dict[bytes, int] = {}
        per_prog = np.asarray([hash_ids.setdefault(info.seq_hash.get(comm, b""), len(hash_ids)) for info in programs])
        if len(hash_ids) == 1:
            continue
        cid, label = _communicators(ctx, comm)
        rank_hash = per_prog[rank_prog]
        members = np.nonzero(cid >= 0)[0]
        order = members[np.argsort(cid[members], kind="stable")]
        c_sorted = cid[order]
        starts = np.concatenate(([0], np.nonzero(c_sorted[1:] != c_sorted[:-1])[0] + 1))
        first_of = np.repeat(order[starts], np.diff(np.concatenate((starts, [order.size]))))
        bad = np.nonzero(rank_hash[order] != rank_hash[first_of])[0]
        if bad.size == 0:
            continue
        other, first = int(order[bad[0]]), int(first_of[bad[0]])
        path = programs[int(rank_prog[other])].prog.path
        sa = _describe_seq(ctx, programs[int(rank_prog[first])], comm)
        sb = _describe_seq(ctx, programs[int(rank_prog[other])], comm)
        for j, (x, y) in enumerate(zip(sa, sb)):
            if x != y:
                raise LibraError(
                    f"{path}: rank {other} issues {y[0]} of {y[1]} B as its collective #{j + 1} on {label}, but rank "
                    f"{first} issues {x[0]} of {x[1]} B; members of a group must issue the same collectives in the "
                    "same order"
                )
        raise LibraError(
            f"{path}: rank {other} issues {len(sb)} collectives on {label} but rank {first} issues {len(sa)}; "
            "members of a group must issue the same collectives in the same order"
        )


def _labels(ctx: _Ctx, infos: Sequence[_Program], names: list[str], index: dict[str, int]) -> np.ndarray:
    """Group label id (into ``names``) per comm position of a class: the group id, or the ids when
    the class's ranks use different groups at that position (e.g. one tensor-parallel group each)."""
    keys = np.stack([i.coll_key for i in infos]) if len(infos) > 1 else infos[0].coll_key[None, :]

    def label_id(text: str) -> int:
        j = index.get(text)
        if j is None:
            j = index[text] = len(names)
            names.append(text)
        return j

    table = np.asarray([label_id(grp.group_label(k)) for k in ctx.keys] + [label_id("")], dtype=np.int64)
    out = table[keys[0]]  # key -1 (a send) picks the last entry, ""
    mixed = np.nonzero(~np.all(keys == keys[0], axis=0))[0]
    if mixed.size:
        combos, inverse = np.unique(keys[:, mixed].T, axis=0, return_inverse=True)
        ids = []
        for combo in combos.tolist():
            names_k = sorted({ctx.keys[k] for k in combo}, key=lambda s: (len(s), s))
            text = (",".join(grp.group_label(x) for x in names_k) if len(names_k) <= 4 else
                    f"{grp.group_label(names_k[0])}..{grp.group_label(names_k[-1])} ({len(names_k)} groups)")
            ids.append(label_id(text))
        out[mixed] = np.asarray(ids, dtype=np.int64)[inverse.reshape(-1)]
    return out


# ---------------------------------------------------------------- entry point


def demand_from_traces(prefix: str | Path, network: Network,
                       comm_groups: str | Path | Mapping[str, Sequence[int]] | None = None,
                       peak_tflops: float | None = None, mem_bw_gbps: float | None = None,
                       on_progress: Callable[[int, int], None] | None = None) -> tuple[Demand, TraceSummary]:
    """Per-dimension communication demand of a Chakra ET trace set on ``network``.

    Parameters
    ----------
    prefix
        Trace set prefix: rank r is ``PREFIX.r.et`` (or ``.et.gz``); one file per NPU.
    network
        The network the demand is computed for (its NPU count must match the trace set).
    comm_groups
        ASTRA-sim comm-group JSON file (or the mapping it holds); overrides process groups
        found in METADATA nodes.
    peak_tflops, mem_bw_gbps
        Both given: COMP nodes are timed with ASTRA-sim's roofline from num_ops/tensor_size
        instead of duration_micros.
    on_progress
        Called as ``on_progress(ranks_read, ranks)`` while the rank files are read.

    Returns
    -------
    (Demand, TraceSummary)

    Raises
    ------
    LibraError
        Any problem with the input, naming the file, node or byte offset and the fix.
    """
    if (peak_tflops is None) != (mem_bw_gbps is None):
        raise LibraError("roofline timing needs both peak_tflops and mem_bw_gbps (or neither, to use duration_micros)")
    for what, v in (("peak_tflops", peak_tflops), ("mem_bw_gbps", mem_bw_gbps)):
        if v is not None and not v > 0:
            raise LibraError(f"{what} must be > 0, got {v!r}")
    n_npus = network.npus_count
    paths = rank_files(prefix, n_npus, f"network {network.name!r}")

    if comm_groups is None:
        file_groups: dict[str, tuple[int, ...]] = {}
        source = "comm-groups file"
    elif isinstance(comm_groups, Mapping):
        file_groups = grp.comm_groups_from_dict(comm_groups, "comm groups")
        source = "comm groups"
    else:
        file_groups = grp.load_comm_groups(comm_groups)
        source = "comm-groups file"
    grp.check_members(file_groups, n_npus, str(comm_groups) if comm_groups is not None else "comm groups")

    reader = TraceReader()
    ctx = _Ctx(network, file_groups, source, peak_tflops, mem_bw_gbps, reader)

    # 1. read: one compact program per distinct file content
    programs: list[_Program] = []
    by_digest: dict[bytes, int] = {}
    rank_prog = np.zeros(n_npus, dtype=np.int64)
    for r, prog in enumerate(reader.read_many(paths)):
        pi = by_digest.get(prog.digest)
        if pi is None:
            pi = by_digest[prog.digest] = len(programs)
            programs.append(_Program(prog, []))
        programs[pi].ranks.append(r)
        rank_prog[r] = pi
        if on_progress is not None:
            on_progress(r + 1, n_npus)

    # 2. groups from METADATA, then analyse each distinct program once
    _merge_metadata(ctx, programs)
    for info in programs:
        _analyze(ctx, info)
    _check_group_sequences(ctx, programs, rank_prog)

    # 3. per rank: sends -> classes of identical demand
    classes: dict[tuple[bytes, bytes], list[int]] = {}
    class_pids: dict[tuple[bytes, bytes], np.ndarray] = {}
    for info in programs:
        has_send = info.has_sends
        base = info.coll_pid
        for r in info.ranks:
            if has_send:
                pids = base.copy()
                pids[info.comm_is_send] = _send_pids(ctx, info, r)
            else:
                pids = base
            key = (info.struct, pids.tobytes())
            lst = classes.get(key)
            if lst is None:
                classes[key] = lst = []
                class_pids[key] = pids
            lst.append(r)

    # 3b. pipeline stages: ranks of one class that wait on different classes are timed apart
    groups = _split_by_peers(ctx, programs, list(classes.items()))

    # 4. build rank classes
    phys_traffic = np.asarray([c.traffic_bytes for c in ctx.physics], dtype=np.float64).reshape(-1, network.num_dims)
    label_names: list[str] = []
    label_index: dict[str, int] = {}
    coll_obj: dict[tuple[int, int], Collective] = {}
    rank_classes: list[RankClass] = []
    class_summaries: list[ClassSummary] = []
    for key, ranks in groups:
        pids = class_pids[key]
        infos = [programs[p] for p in sorted({int(rank_prog[r]) for r in ranks})]
        rep = infos[0]
        labels = _labels(ctx, infos, label_names, label_index)
        # one Collective object per distinct (physics, label); positions index into them
        combo = pids * (len(label_names) + 1) + labels
        uniq, inverse = np.unique(combo, return_inverse=True)
        objs = np.empty(uniq.size, dtype=object)
        for j, c in enumerate(uniq.tolist()):
            pid, lab = divmod(c, len(label_names) + 1)
            obj = coll_obj.get((pid, lab))
            if obj is None:
                obj = coll_obj[(pid, lab)] = replace(ctx.physics[pid], group=label_names[lab])
            objs[j] = obj
        colls = tuple(objs[inverse.reshape(-1)].tolist())
        n = rep.kinds_coll.size
        coll_index = np.zeros(n, dtype=np.float64)
        coll_index[rep.comm_pos] = np.arange(rep.comm_pos.size, dtype=np.float64)
        kinds = np.where(rep.kinds_coll, "coll", "comp").astype(object).tolist()
        values = np.where(rep.kinds_coll, coll_index, rep.comp_ns).tolist()
        dag = Dag(tuple(zip(kinds, values)), tuple(zip(rep.edges_u.tolist(), rep.edges_v.tolist())))
        rank_classes.append(RankClass(rep.compute_ns, colls, len(ranks), tuple(ranks), dag))
        up, cnt = np.unique(pids, return_counts=True)
        traffic = (phys_traffic[up] * cnt[:, None]).sum(axis=0) if up.size else np.zeros(network.num_dims)
        class_summaries.append(ClassSummary(len(ranks), tuple(ranks), rep.compute_ns, len(colls),
                                            tuple(traffic.tolist())))
    order = sorted(range(len(rank_classes)), key=lambda i: rank_classes[i].ranks[0])
    rank_classes = [rank_classes[i] for i in order]
    class_summaries = [class_summaries[i] for i in order]
    rank_classes = _with_links(ctx, programs, rank_prog, rank_classes)

    summary, notes = _summarize(ctx, str(prefix), programs, rank_classes, class_summaries, reader)
    name = Path(str(prefix)).name
    demand = Demand(name, network.npus_per_dim, tuple(rank_classes), tuple(notes))
    return demand, summary


def _split_by_peers(ctx: _Ctx, programs: list[_Program],
                    groups: list[tuple[Any, list[int]]]) -> list[tuple[Any, list[int]]]:
    """Refine classes until the ranks of a class send to and receive from the same classes.

    Ranks with identical demand may still run at different times: the middle stages of a
    pipeline have the same program, but stage k waits for stage k - 1. Splitting by the classes
    of the peers, repeated until nothing splits, gives one class per stage, so a receive always
    waits on another class and the joint replay times every stage."""
    cols = ctx.reader.attrs.columns()
    n = ctx.net.npus_count
    peers: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for info in programs:
        prog = info.prog
        recv = np.flatnonzero(prog.types == COMM_RECV_NODE)
        send = np.flatnonzero(prog.types == COMM_SEND_NODE)
        if not recv.size and not send.size:
            continue
        recv = recv[np.argsort(info.topo_of[recv], kind="stable")]
        send = send[np.argsort(info.topo_of[send], kind="stable")]
        srcs = tuple(int(s) for s in cols["comm_src"][prog.attr[recv]].tolist() if 0 <= s < n)
        dsts = tuple(int(d) for d in cols["comm_dst"][prog.attr[send]].tolist() if 0 <= d < n)
        for r in info.ranks:
            peers[r] = (srcs, dsts)
    if not peers:
        return groups
    cls_of = np.zeros(n, dtype=np.int64)
    for gi, (_, ranks) in enumerate(groups):
        cls_of[ranks] = gi
    count = len(groups)
    while True:
        sig: dict[tuple, int] = {}
        new = np.zeros(n, dtype=np.int64)
        for r in range(n):
            s, d = peers.get(r, ((), ()))
            k = (int(cls_of[r]), tuple(int(cls_of[x]) for x in s), tuple(int(cls_of[x]) for x in d))
            new[r] = sig.setdefault(k, len(sig))
        cls_of = new
        if len(sig) == count:
            break
        count = len(sig)
    # Refined classes only ever split the original ones, so each keeps its original key.
    key_of = {r: key for key, ranks in groups for r in ranks}
    members: dict[int, list[int]] = {}
    for r in range(n):
        members.setdefault(int(cls_of[r]), []).append(r)
    return [(key_of[rs[0]], rs) for _, rs in sorted(members.items())]


def _with_links(ctx: _Ctx, programs: list[_Program], rank_prog: np.ndarray,
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
    out = []
    for ci, rc in enumerate(rank_classes):
        if rc.dag is None:
            out.append(rc)
            continue
        r = rc.ranks[0]
        info = reps[ci]
        links = _recv_links(ctx, cols, programs, rank_prog, class_of, info, r)
        syncs = []
        ckey, cinv = info.coll_comm
        for comm in sorted({(int(k), int(i)) for k, i in zip(ckey.tolist(), cinv.tolist()) if k >= 0}):
            cid = comm_ids.get(comm)
            if cid is None:
                cid = comm_ids[comm] = _communicators(ctx, comm)[0]
            others = sorted(set(class_of[cid == cid[r]].tolist()) - {ci})
            mine = info.comm_pos[(ckey == comm[0]) & (cinv == comm[1])]
            for cj in others:
                bkey, binv = reps[cj].coll_comm
                theirs = reps[cj].comm_pos[(bkey == comm[0]) & (binv == comm[1])]
                syncs.extend((int(a), cj, int(b)) for a, b in zip(mine.tolist(), theirs.tolist()))
        if links or syncs:
            rc = replace(rc, dag=replace(rc.dag, links=tuple(links), syncs=tuple(sorted(syncs))))
        out.append(rc)
    return out


def _recv_links(ctx: _Ctx, cols, programs: list[_Program], rank_prog: np.ndarray, class_of: np.ndarray,
                info: _Program, r: int) -> list[tuple[int, int, int]]:
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
        sinfo = programs[int(rank_prog[src])]
        sprog = sinfo.prog
        sends = np.flatnonzero((sprog.types == COMM_SEND_NODE) & (cols["comm_dst"][sprog.attr] == r))
        k = taken.get(src, 0)
        if k >= sends.size:
            continue
        sends = sends[np.argsort(sinfo.topo_of[sends], kind="stable")]
        taken[src] = k + 1
        links.append((int(info.topo_of[pos]), int(class_of[src]), int(sinfo.topo_of[sends[k]])))
    return links


def _summarize(ctx: _Ctx, prefix: str, programs: list[_Program], rank_classes: list[RankClass],
               class_summaries: list[ClassSummary], reader: TraceReader) -> tuple[TraceSummary, list[str]]:
    net = ctx.net
    n_npus = net.npus_count
    type_counts = np.zeros(8, dtype=np.int64)
    agg = {"zero_size": 0, "send_no_dst": 0, "cpu_ops": 0, "roofline_zero": 0}
    cpu_ns = 0.0
    use: dict[tuple[int, int], int] = {}
    for info in programs:
        m = len(info.ranks)
        type_counts += info.counts["types"] * m
        for k in agg:
            agg[k] += info.counts.get(k, 0) * m
        cpu_ns += info.cpu_ns * m
        for k, c in info.group_use.items():
            use[k] = use.get(k, 0) + c * m
    node_counts = {NODE_TYPE_NAMES[t]: int(type_counts[t]) for t in range(8) if type_counts[t]}
    skipped: dict[str, int] = {}
    for t, label in ((METADATA_NODE, "METADATA"), (MEM_LOAD_NODE, "MEM_LOAD"), (MEM_STORE_NODE, "MEM_STORE"),
                     (INVALID_NODE, "INVALID")):
        if type_counts[t]:
            skipped[label] = int(type_counts[t])
    if type_counts[COMM_RECV_NODE]:
        skipped["COMM_RECV (charged on the send side)"] = int(type_counts[COMM_RECV_NODE])
    if agg["send_no_dst"]:
        skipped["COMM_SEND without comm_dst (not charged)"] = agg["send_no_dst"]
    if agg["cpu_ops"]:
        skipped["COMP on CPU (is_cpu_op; not in compute time)"] = agg["cpu_ops"]
    if agg["roofline_zero"]:
        skipped["COMP without num_ops or tensor_size (0 ns under roofline, as in ASTRA-sim)"] = agg["roofline_zero"]

    # bytes per NPU per dimension by collective type, mean over ranks
    by_type: dict[str, np.ndarray] = {}
    for rc in rank_classes:
        per: dict[int, tuple[Collective, int]] = {}
        for c in rc.collectives:  # few distinct objects per class: count them, then weigh once
            got = per.get(id(c))
            per[id(c)] = (c, 1 if got is None else got[1] + 1)
        for c, k in per.values():
            acc = by_type.setdefault(c.type, np.zeros(net.num_dims))
            acc += np.asarray(c.traffic_bytes) * c.count * k * rc.num_ranks
    bytes_by_type = {k: tuple((v / n_npus).tolist()) for k, v in sorted(by_type.items())}

    group_summaries = []
    def order(item: tuple) -> tuple:
        (kidx, inv), _ = item
        return len(ctx.keys[kidx]), ctx.keys[kidx], inv

    for (kidx, inv), count in sorted(use.items(), key=order):
        s = ctx.shape(kidx, inv if inv >= 0 else 0)
        key = ctx.keys[kidx]
        involved = reader.attrs.involved[inv] if key == grp.ALL_RANKS else None
        size = n_npus if key == grp.ALL_RANKS else s.size
        group_summaries.append(GroupSummary(key, s.source, size, s.participants or s.box, s.algorithm,
                                            s.ring_dims, involved, count))

    notes: list[str] = []
    for g in group_summaries:
        if g.algorithm == "flat_ring":
            members = ctx.members(g.key) or ()
            shown = ", ".join(map(str, members[:8])) + (", ..." if len(members) > 8 else "")
            notes.append(
                f"group {g.key} (members {shown}) is not a sub-grid of the network: modelled as ASTRA-sim runs it, "
                f"one flat ring over the sorted members, charged on dimension(s) {list(g.ring_dims)}"
            )
    if agg["zero_size"]:
        notes.append(
            f"{agg['zero_size']} zero-size collective(s) (Chakra's Text converter writes NONE as a zero-size "
            "ALL_REDUCE): kept, they cost latency only"
        )
    if type_counts[COMM_RECV_NODE]:
        notes.append("receives are the other side of sends: each transfer is charged once, on the sender")
    if agg["cpu_ops"]:
        notes.append(
            f"{agg['cpu_ops']} CPU op(s) ({cpu_ns / 1e6:.3f} ms over all ranks) kept as dependencies with 0 ns; "
            "ASTRA-sim runs them on a separate CPU resource"
        )
    if agg["send_no_dst"]:
        notes.append(f"{agg['send_no_dst']} send(s) without comm_dst are not charged (their dimension is unknown)")
    if ctx.peak is not None:
        notes.append(f"compute timed with the roofline model: peak {ctx.peak:g} TFLOPS, memory {ctx.membw:g} GB/s")

    computes = [c.compute_time_ns for c in class_summaries]
    summary = TraceSummary(
        prefix=prefix, num_ranks=n_npus, files_decoded=reader.files_decoded, programs=len(programs),
        nodes_total=int(type_counts.sum()), node_counts=node_counts, skipped=skipped,
        bytes_by_type=bytes_by_type, groups=tuple(group_summaries), rank_classes=tuple(class_summaries),
        compute_time_ns=(min(computes), max(computes)) if computes else (0.0, 0.0), notes=tuple(notes),
    )
    return summary, notes


def summary_to_dict(s: TraceSummary) -> dict[str, Any]:
    """Plain-JSON form of a :class:`TraceSummary`."""
    return {
        "prefix": s.prefix,
        "num_ranks": s.num_ranks,
        "files_decoded": s.files_decoded,
        "programs": s.programs,
        "nodes_total": s.nodes_total,
        "node_counts": dict(s.node_counts),
        "skipped": dict(s.skipped),
        "bytes_by_type": {k: list(v) for k, v in s.bytes_by_type.items()},
        "groups": [{"key": g.key, "source": g.source, "size": g.size, "participants": list(g.participants),
                    "algorithm": g.algorithm, "ring_dims": list(g.ring_dims),
                    "involved_dim": None if g.involved_dim is None else list(g.involved_dim),
                    "collectives": g.collectives} for g in s.groups],
        "rank_classes": [{"ranks": list(c.ranks), "num_ranks": c.num_ranks, "compute_time_ns": c.compute_time_ns,
                          "num_collectives": c.num_collectives, "traffic_bytes": list(c.traffic_bytes)}
                         for c in s.rank_classes],
        "compute_time_ns": list(s.compute_time_ns),
        "notes": list(s.notes),
    }


def default_groups_path(prefix: str | Path) -> str | None:
    """PREFIX.groups.json beside the traces (as the trace generator writes it), if present."""
    p = Path(f"{prefix}.groups.json")
    return str(p) if p.is_file() else None
