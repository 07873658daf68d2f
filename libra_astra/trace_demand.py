"""Chakra ET traces + network (+ communicator groups) -> per-dimension communication demand.

Each rank file is read into a compact program (:mod:`libra_astra.trace`); every distinct
program is analysed once (topological order, compute times, its collectives in issue order);
each rank then only resolves what depends on the rank itself (the dimension its sends cross).
Ranks whose demand comes out identical -- same dependency graph, same collectives with the same
per-dimension traffic -- form one rank class, computed and written once. The job time is the
slowest class's; the optimizer takes the max over classes.

Modelling choices (they follow ASTRA-sim, see docs/astra-sim.md):

- COMP: ``duration_micros`` x 1000 ns; with ``peak_tflops`` and ``mem_bw_gbps`` the roofline
  time ``num_ops / min(peak, mem_bw * num_ops / tensor_size)``; a node without tensor_size
  then takes 0 ns, as in ASTRA-sim. CPU ops (``is_cpu_op``) run on a separate resource in
  ASTRA-sim; they stay in the dependency graph with 0 ns and are reported, not added.
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
from typing import Any, Mapping, Sequence

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

    @property
    def dims(self) -> int:
        return len(next(iter(self.bytes_by_type.values()), ()))


# ---------------------------------------------------------------- program analysis


@dataclass
class _Program:
    """Everything about one distinct compact program that does not depend on the rank."""

    prog: RankProgram
    ranks: list[int]
    struct: bytes = b""                 # digest of graph shape + compute times
    comm_pos: np.ndarray = None         # topo index of each comm node (COLL or charged SEND), in order
    comm_is_send: np.ndarray = None     # bool per comm node
    coll_key: np.ndarray = None         # group key index (into _Ctx.keys) per comm node; -1 for sends
    coll_pid: np.ndarray = None         # physics id per COLL comm node (sends: -1)
    send_size: np.ndarray = None
    send_dst: np.ndarray = None
    send_src: np.ndarray = None
    send_node: np.ndarray = None        # node position (file order) of each send, for errors
    comp_ns: np.ndarray = None          # per topo node
    kinds_coll: np.ndarray = None       # bool per topo node: is a comm node
    edges_u: np.ndarray = None
    edges_v: np.ndarray = None
    seq_hash: dict = field(default_factory=dict)  # group key index -> digest of its (type, size, dims) sequence
    used_keys: tuple = ()
    key_node: dict = field(default_factory=dict)  # group key index -> first node position using it
    group_use: dict = field(default_factory=dict)  # (key idx, involved idx) -> count
    counts: dict = field(default_factory=dict)
    compute_ns: float = 0.0
    cpu_ns: float = 0.0


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
        self.physics: list[Collective] = []
        self._phys_index: dict[tuple, int] = {}
        self._coll_cache: dict[tuple, int] = {}

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
    counts["roofline_zero"] = int((gpu & (tsize <= 0)).sum())
    return out


def _analyze(ctx: _Ctx, info: _Program) -> None:
    """Rank-independent analysis of one program (runs once per distinct program)."""
    prog = info.prog
    where = prog.path
    n = prog.num_nodes
    cols = ctx.reader.attrs.columns()
    types = prog.types.astype(np.int64)
    a = prog.attr
    counts: dict[str, Any] = {"types": np.bincount(types, minlength=8)}

    order = topological_order(prog)
    comp = types == COMP_NODE
    comp_ns_file = _compute_ns(ctx, prog, cols, comp, counts)

    # collectives: supported types, known groups
    is_coll = types == COMM_COLL_NODE
    coll_idx = np.nonzero(is_coll)[0]
    ctype = cols["comm_type"][a[coll_idx]]
    ctype = np.where(ctype < 0, 0, ctype)  # absent comm_type reads as 0 (ALL_REDUCE), as in ASTRA-sim
    ok = np.isin(ctype, list(COMM_TYPE_NAMES))
    if not ok.all():
        i = int(coll_idx[np.argmin(ok)])
        bad = int(ctype[np.argmin(ok)])
        raise LibraError(
            f"{where}: node {int(prog.node_ids[i])} is a {comm_type_name(bad)} collective, which ASTRA-sim does not "
            f"simulate; supported: {', '.join(SUPPORTED_COMM_TYPES)}; rewrite it as one of these"
        )
    csize = np.maximum(cols["comm_size"][a[coll_idx]], 0)
    counts["zero_size"] = int((csize == 0).sum())
    pg_local = cols["pg"][a[coll_idx]]
    inv = cols["involved"][a[coll_idx]]
    pg_names = ctx.reader.attrs.pg_names
    # map attribute pg indices to group keys (and check they are defined)
    uniq_pg = np.unique(pg_local)
    key_of_pg = {}
    for pgi in uniq_pg.tolist():
        key = grp.normalize_key(pg_names[pgi])
        if key != grp.ALL_RANKS and ctx.members(key) is None:
            i = int(coll_idx[np.argmax(pg_local == pgi)])
            have = sorted(set(ctx.file_groups) | set(ctx.meta_groups), key=lambda s: (len(s), s))
            known = f"known groups: {', '.join(have[:10])}" if have else "no groups are defined"
            raise LibraError(
                f"{where}: node {int(prog.node_ids[i])} uses communicator group {key!r}, which is not defined "
                f"({known}); give it in --comm-groups or fix pg_name"
            )
        key_of_pg[pgi] = ctx.key_index(key)
    lut = np.zeros(int(uniq_pg.max()) + 1 if uniq_pg.size else 1, dtype=np.int64)
    for pgi, k in key_of_pg.items():
        lut[pgi] = k
    ckey = lut[pg_local] if coll_idx.size else np.zeros(0, np.int64)

    # sends: charged when they name a destination
    is_send = types == COMM_SEND_NODE
    send_all = np.nonzero(is_send)[0]
    dst = cols["comm_dst"][a[send_all]]
    has_dst = dst >= 0
    counts["send_no_dst"] = int((~has_dst).sum())
    send_idx = send_all[has_dst]

    # topo positions
    pos_of = np.empty(n, dtype=np.int64)
    if order is None:
        pos_of = np.arange(n, dtype=np.int64)
    else:
        pos_of[order] = np.arange(n, dtype=np.int64)
    comm_nodes = np.concatenate([coll_idx, send_idx])
    comm_is_send = np.concatenate([np.zeros(coll_idx.size, bool), np.ones(send_idx.size, bool)])
    comm_topo = pos_of[comm_nodes]
    srt = np.argsort(comm_topo, kind="stable")
    info.comm_pos = comm_topo[srt]
    info.comm_is_send = comm_is_send[srt]

    # physics ids of collectives (rank independent)
    pids = np.full(comm_nodes.size, -1, dtype=np.int64)
    if coll_idx.size:
        combo = np.stack([ctype, csize, ckey, inv.astype(np.int64)], axis=1)
        uniq, inverse = np.unique(combo, axis=0, return_inverse=True)
        upid = np.asarray([ctx.coll_pid(int(t), int(s), int(k), int(v)) for t, s, k, v in uniq.tolist()], dtype=np.int64)
        pids[:coll_idx.size] = upid[inverse.reshape(-1)]
    info.coll_pid = pids[srt]
    keys_all = np.concatenate([ckey, np.full(send_idx.size, -1, dtype=np.int64)])
    info.coll_key = keys_all[srt]

    # per-group issue sequences, for the consistency check across members
    info.used_keys = tuple(sorted(set(ckey.tolist())))
    if coll_idx.size:
        cpos = pos_of[coll_idx]
        corder = np.argsort(cpos, kind="stable")
        sig = np.stack([ctype, csize, inv.astype(np.int64)], axis=1)[corder]
        skey = ckey[corder]
        for k in info.used_keys:
            sel = skey == k
            info.seq_hash[k] = _digest(sig[sel])
            info.key_node[k] = int(coll_idx[corder][np.argmax(sel)])
        pairs, cnt = np.unique(np.stack([ckey, inv.astype(np.int64)], axis=1), axis=0, return_counts=True)
        for (k, v), c in zip(pairs.tolist(), cnt.tolist()):
            info.group_use[(k, v if ctx.keys[k] == grp.ALL_RANKS else -1)] = info.group_use.get(
                (k, v if ctx.keys[k] == grp.ALL_RANKS else -1), 0) + c

    sorder = np.argsort(pos_of[send_idx], kind="stable")
    info.send_size = np.maximum(cols["comm_size"][a[send_idx]], 0)[sorder]
    info.send_dst = cols["comm_dst"][a[send_idx]][sorder]
    info.send_src = cols["comm_src"][a[send_idx]][sorder]
    info.send_node = send_idx[sorder]

    # dependency graph in topo order
    kinds_coll = np.zeros(n, dtype=bool)
    kinds_coll[info.comm_pos] = True
    comp_ns = np.empty(n, dtype=np.float64)
    comp_ns[pos_of] = comp_ns_file
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(prog.dep_ptr))
    u = pos_of[prog.dep_index]
    v = pos_of[owner]
    if u.size:
        e = np.unique(u * max(n, 1) + v)
        u, v = e // max(n, 1), e % max(n, 1)
    info.edges_u, info.edges_v = u, v
    info.kinds_coll = kinds_coll
    info.comp_ns = comp_ns
    info.compute_ns = float(comp_ns_file.sum())
    info.cpu_ns = counts.pop("cpu_ns")
    info.counts = counts
    info.struct = _digest(kinds_coll, np.where(kinds_coll, 0.0, comp_ns), u, v)


def _send_pids(ctx: _Ctx, info: _Program, rank: int) -> np.ndarray:
    """Physics ids of a rank's sends (they depend on where the rank sits in the network)."""
    dst = info.send_dst
    if dst.size == 0:
        return np.zeros(0, dtype=np.int64)
    prog = info.prog
    n_npus = ctx.net.npus_count
    bad_src = (info.send_src >= 0) & (info.send_src != rank)
    if bad_src.any():
        i = int(np.argmax(bad_src))
        raise LibraError(
            f"{prog.path}: send node {int(prog.node_ids[info.send_node[i]])} has comm_src {int(info.send_src[i])} but "
            f"the file is rank {rank}; a send is issued by its sender, fix comm_src"
        )
    bad = (dst >= n_npus) | (dst == rank)
    if bad.any():
        i = int(np.argmax(bad))
        why = "is the sending rank itself" if int(dst[i]) == rank else f"is outside 0..{n_npus - 1}"
        raise LibraError(
            f"{prog.path}: send node {int(prog.node_ids[info.send_node[i]])} has comm_dst {int(dst[i])}, which {why}; "
            "fix comm_dst"
        )
    dims, hops = grp.p2p_dims(ctx.net, np.full(dst.shape, rank), dst)
    combo = np.stack([info.send_size, dims, hops], axis=1)
    uniq, inverse = np.unique(combo, axis=0, return_inverse=True)
    upid = []
    for s, d, h in uniq.tolist():
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
            if not key.isdigit():
                raise LibraError(
                    f"{info.prog.path}: METADATA process group {name!r} does not have an integer name; "
                    "ASTRA-sim needs integer group ids, give the groups with --comm-groups"
                )
            members = tuple(sorted(set(ranks)))
            prev = ctx.meta_groups.get(key)
            if prev is not None and prev != members:
                raise LibraError(
                    f"{info.prog.path}: METADATA defines process group {key} with ranks {list(members)[:8]} but "
                    f"{ctx.meta_where[key]} defines it with {list(prev)[:8]}; every rank must describe a group the same way"
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


def _describe_seq(ctx: _Ctx, info: _Program, kidx: int) -> list[tuple[str, int]]:
    """(type, size) sequence of a program's collectives on one group, in issue order."""
    sel = (info.coll_key == kidx) & ~info.comm_is_send
    pids = info.coll_pid[sel]
    return [(ctx.physics[p].type, int(ctx.physics[p].size_bytes)) for p in pids.tolist()]


def _check_group_sequences(ctx: _Ctx, programs: list[_Program], rank_prog: np.ndarray) -> None:
    """Members of a group must issue the same collectives on it in the same order."""
    n = ctx.net.npus_count
    used = sorted({k for info in programs for k in info.used_keys})
    for kidx in used:
        key = ctx.keys[kidx]
        members = np.arange(n) if key == grp.ALL_RANKS else np.asarray(ctx.members(key), dtype=np.int64)
        member_mask = np.zeros(n, dtype=bool)
        member_mask[members] = True
        # ranks that issue on the group but are not members
        if key != grp.ALL_RANKS:
            for pi, info in enumerate(programs):
                if kidx in info.seq_hash:
                    ranks = np.asarray(info.ranks)
                    outside = ranks[~member_mask[ranks]]
                    if outside.size:
                        r = int(outside[0])
                        node = int(info.prog.node_ids[info.key_node[kidx]])
                        raise LibraError(
                            f"{info.prog.path}: node {node} of rank {r} runs a collective on group {key}, whose "
                            f"members {list(ctx.members(key))[:8]}{'...' if len(ctx.members(key)) > 8 else ''} do not "
                            f"include rank {r}; add the rank to the group or fix pg_name"
                        )
        progs = rank_prog[members]
        uniq = np.unique(progs)
        hashes = {int(p): programs[int(p)].seq_hash.get(kidx, b"") for p in uniq.tolist()}
        if len(set(hashes.values())) <= 1:
            continue
        first = int(members[0])
        ref = hashes[int(rank_prog[first])]
        other = next(int(r) for r in members.tolist() if hashes[int(rank_prog[r])] != ref)
        sa = _describe_seq(ctx, programs[int(rank_prog[first])], kidx)
        sb = _describe_seq(ctx, programs[int(rank_prog[other])], kidx)
        label = "all ranks" if key == grp.ALL_RANKS else f"group {key}"
        for j, (x, y) in enumerate(zip(sa, sb)):
            if x != y:
                raise LibraError(
                    f"{programs[int(rank_prog[other])].prog.path}: rank {other} issues {y[0]} of {y[1]} B as its "
                    f"collective #{j + 1} on {label}, but rank {first} issues {x[0]} of {x[1]} B; members of a group "
                    "must issue the same collectives in the same order"
                )
        if len(sa) != len(sb):
            raise LibraError(
                f"{programs[int(rank_prog[other])].prog.path}: rank {other} issues {len(sb)} collectives on {label} "
                f"but rank {first} issues {len(sa)}; members of a group must issue the same collectives in the same order"
            )
        # same types and sizes, different involved_dim
        raise LibraError(
            f"{programs[int(rank_prog[other])].prog.path}: rank {other} issues its collectives on {label} over "
            f"different dimensions (involved_dim) than rank {first}; members must agree"
        )


def _labels(ctx: _Ctx, infos: Sequence[_Program]) -> list[str]:
    """Group label per comm position of a class: the group id, or the ids when members differ."""
    keys = np.stack([i.coll_key for i in infos]) if len(infos) > 1 else infos[0].coll_key[None, :]
    out: list[str] = []
    same = np.all(keys == keys[0], axis=0)
    first = keys[0].tolist()
    cache: dict[tuple, str] = {}
    for j, k in enumerate(first):
        if k < 0:
            out.append("")
        elif same[j]:
            out.append(grp.group_label(ctx.keys[k]))
        else:
            ks = tuple(sorted({int(x) for x in keys[:, j].tolist()}))
            lab = cache.get(ks)
            if lab is None:
                names = sorted((ctx.keys[x] for x in ks), key=lambda s: (len(s), s))
                lab = ",".join(grp.group_label(s) for s in names) if len(names) <= 4 else \
                    f"{grp.group_label(names[0])}..{grp.group_label(names[-1])} ({len(names)} groups)"
                cache[ks] = lab
            out.append(lab)
    return out


# ---------------------------------------------------------------- entry point


def demand_from_traces(prefix: str | Path, network: Network,
                       comm_groups: str | Path | Mapping[str, Sequence[int]] | None = None,
                       peak_tflops: float | None = None, mem_bw_gbps: float | None = None
                       ) -> tuple[Demand, TraceSummary]:
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
    for r, path in enumerate(paths):
        prog = reader.read(path)
        pi = by_digest.get(prog.digest)
        if pi is None:
            pi = by_digest[prog.digest] = len(programs)
            programs.append(_Program(prog, []))
        programs[pi].ranks.append(r)
        rank_prog[r] = pi

    # 2. groups from METADATA, then analyse each distinct program once
    _merge_metadata(ctx, programs)
    for info in programs:
        _analyze(ctx, info)
    _check_group_sequences(ctx, programs, rank_prog)

    # 3. per rank: sends -> classes of identical demand
    classes: dict[tuple[bytes, bytes], list[int]] = {}
    class_pids: dict[tuple[bytes, bytes], np.ndarray] = {}
    for pi, info in enumerate(programs):
        has_send = info.send_dst.size > 0
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

    # 4. build rank classes
    phys_traffic = np.asarray([c.traffic_bytes for c in ctx.physics], dtype=np.float64).reshape(-1, network.num_dims)
    rank_classes: list[RankClass] = []
    class_summaries: list[ClassSummary] = []
    coll_obj: dict[tuple[int, str], Collective] = {}
    for key, ranks in classes.items():
        pids = class_pids[key]
        member_progs = sorted({int(rank_prog[r]) for r in ranks})
        infos = [programs[p] for p in member_progs]
        rep = infos[0]
        labels = _labels(ctx, infos)
        colls = []
        for pid, lab in zip(pids.tolist(), labels):
            c = coll_obj.get((pid, lab))
            if c is None:
                c = coll_obj[(pid, lab)] = replace(ctx.physics[pid], group=lab)
            colls.append(c)
        n = rep.kinds_coll.size
        coll_index = np.full(n, -1, dtype=np.int64)
        coll_index[rep.comm_pos] = np.arange(rep.comm_pos.size)
        kinds = np.where(rep.kinds_coll, "coll", "comp").astype(object).tolist()
        values = np.where(rep.kinds_coll, coll_index.astype(np.float64), rep.comp_ns).tolist()
        dag = Dag(tuple(zip(kinds, values)), tuple(zip(rep.edges_u.tolist(), rep.edges_v.tolist())))
        rc = RankClass(rep.compute_ns, tuple(colls), len(ranks), tuple(ranks), dag)
        rank_classes.append(rc)
        uniq, cnt = np.unique(pids, return_counts=True)
        traffic = (phys_traffic[uniq] * cnt[:, None]).sum(axis=0) if uniq.size else np.zeros(network.num_dims)
        class_summaries.append(ClassSummary(len(ranks), tuple(ranks), rep.compute_ns, len(colls), tuple(traffic.tolist())))
    order = sorted(range(len(rank_classes)), key=lambda i: rank_classes[i].ranks[0])
    rank_classes = [rank_classes[i] for i in order]
    class_summaries = [class_summaries[i] for i in order]

    summary, notes = _summarize(ctx, str(prefix), programs, rank_classes, class_summaries, reader)
    name = Path(str(prefix)).name
    demand = Demand(name, network.npus_per_dim, tuple(rank_classes), tuple(notes))
    return demand, summary


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
        skipped["COMP without tensor_size (0 ns under roofline)"] = agg["roofline_zero"]

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
    for (kidx, inv), count in sorted(use.items(), key=lambda kv: (len(ctx.keys[kv[0][0]]), ctx.keys[kv[0][0]], kv[0][1])):
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
