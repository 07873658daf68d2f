"""Per-rank Chakra ET for ASTRA-sim: user traces rewritten, or a workload synthesized from a demand.

Rewriting a user's trace (the user's files are only read):

- METADATA and INVALID nodes are removed (ASTRA-sim aborts or stops silently on them); a node that
  depended on one inherits its dependencies. Dependencies on ids absent from the file are dropped
  (ASTRA-sim would wait for them forever) and counted.
- Every collective gets ``involved_dim`` over the emitted (logical) dimensions and
  ``is_cpu_op = false``. An all-rank collective keeps the physical dimensions it named (all of them
  when it named none) as all their logical pieces. A collective on a communicator group that is a
  slice of whole logical dimensions becomes an all-rank collective over those dimensions
  (``pg_name`` removed); other groups keep ``pg_name`` (as a string) and run as flat rings.
  A collective that reaches no other NPU becomes a zero-duration compute node (ASTRA-sim never
  finishes a collective with no involved dimension).
- REDUCE_SCATTER_BLOCK becomes REDUCE_SCATTER and BARRIER a zero-byte ALL_REDUCE (ASTRA-sim aborts
  on both); REDUCE, GATHER and SCATTER have no faithful substitute and are refused.
- Collectives are chained in issue order, a control dependency from each to the one before:
  ASTRA-sim matches collectives across ranks by issue order and runs one at a time per rank
  anyway, and many ready collectives make it slow. Issue order is a topological order of the
  dependencies that follows file order where it can. Nodes are written in that order.

Synthesizing from a demand (no traces): per rank class, one compute node with the class's compute
time followed by its collectives, one after another (LIBRA's no-overlap loop), or the class's
``dag`` if it has one. A collective with ``count`` c runs ceil(c) times (at most ``max_repeats``),
each with size * c / runs bytes, so total bytes are exact and latency is paid per run. A
hierarchical collective becomes one collective over the logical dimensions of its participants.
A flat-ring collective, or one whose participants do not fit the logical network, becomes one
collective per physical dimension on that dimension's largest logical piece, sized so its bytes
per NPU equal the demand's traffic there (bandwidth time exact, no pipelining across dimensions).
Point-to-point traffic becomes a send to the next and a receive from the previous NPU of that
piece. Compute times are rounded to whole microseconds (``duration_micros`` is an integer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from chakra.schema.protobuf import et_def_pb2 as pb

from .. import chakra_io as cio
from .. import collectives as coll
from ..demand import Collective, Demand, RankClass
from ..errors import LibraError
from ..network import Network
from ..trace import file_first_order
from .logical import LogicalNetwork, Splitter

_DROP_TYPES = (pb.INVALID_NODE, pb.METADATA_NODE)
_SIMULATED = {pb.ALL_REDUCE, pb.ALL_GATHER, pb.ALL_TO_ALL, pb.REDUCE_SCATTER, pb.BROADCAST}
_REFUSED = {pb.REDUCE: "REDUCE", pb.GATHER: "GATHER", pb.SCATTER: "SCATTER"}


@dataclass
class WorkloadStats:
    """Counts of what the rewrite or synthesis changed, summed over ranks (goes to the manifest)."""

    ranks: int = 0
    nodes_written: int = 0
    nodes_removed: int = 0
    dangling_deps_dropped: int = 0
    collectives: int = 0
    group_collectives_to_dims: int = 0
    flat_ring_collectives: int = 0
    trivial_collectives_to_comp: int = 0
    converted_types: dict[str, int] = field(default_factory=dict)
    chained_deps_added: int = 0
    approximated_collectives: int = 0
    capped_repeats: int = 0
    compute_rounding_ns: float = 0.0
    empty_ranks: int = 0
    sizes_rounded_to_splits: int = 0

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v}


# ------------------------------------------------------------------ network planning


def plan_for_groups(net: Network, bw_gbps: Sequence[float],
                    groups: Mapping[int, Sequence[int]]) -> tuple[LogicalNetwork, dict[int, tuple[bool, ...] | None]]:
    """Logical network for communicator groups, and each group's involved_dim (None = flat ring)."""
    sp = Splitter(net)
    for gid in sorted(groups):
        sp.add_members(groups[gid])
    lnet = sp.network(bw_gbps)
    return lnet, {gid: lnet.slice_mask(m) for gid, m in groups.items()}


def plan_for_demand(net: Network, bw_gbps: Sequence[float], demand: Demand) -> LogicalNetwork:
    """Logical network with pieces for the partial participations of hierarchical collectives."""
    parts = {c.participants for rc in demand.rank_classes for c in rc.collectives
             if c.algorithm == "hierarchical" and c.type != coll.P2P}
    sp = Splitter(net)
    # Larger groups first take the contiguous (innermost) block; complements become strided.
    for p in sorted(parts, key=lambda t: tuple(-x for x in t)):
        sp.add_participants(p)
    return sp.network(bw_gbps)


# ------------------------------------------------------------------ trace rewriting


def _set_attrs(node: pb.Node, drop: Sequence[str], add: Sequence[pb.AttributeProto] = ()) -> None:
    gone = set(drop) | {x.name for x in add}
    keep = [a for a in node.attr if a.name not in gone]
    del node.attr[:]
    node.attr.extend(keep)
    node.attr.extend(add)


def _issue_order(nodes: Sequence[pb.Node], where: str) -> list[int]:
    """Topological order of node positions, following file order where dependencies allow."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    edges = ((pos[d], i) for i, n in enumerate(nodes) for d in set(n.data_deps) | set(n.ctrl_deps))
    order, indeg = file_first_order(len(nodes), edges)
    if len(order) != len(nodes):
        stuck = [nodes[i].id for i, k in enumerate(indeg) if k > 0][:5]
        raise LibraError(f"{where}: dependency cycle among nodes {stuck}...; fix the trace")
    return order


def _relink(nodes: Sequence[pb.Node], stats: WorkloadStats) -> list[pb.Node]:
    """Drop METADATA/INVALID nodes (dependents inherit their deps) and dangling dependencies."""
    by_id = {n.id: n for n in nodes}
    dropped = {n.id for n in nodes if n.type in _DROP_TYPES}
    memo: dict[int, tuple[int, ...]] = {}

    def through(i: int) -> tuple[int, ...]:
        # Iterative: chains of removed nodes can be long.
        if i in memo:
            return memo[i]
        out: list[int] = []
        seen = {i}
        stack = [i]
        while stack:
            x = stack.pop()
            for d in list(by_id[x].data_deps) + list(by_id[x].ctrl_deps):
                if d in seen or d not in by_id:
                    continue
                seen.add(d)
                if d in dropped:
                    stack.append(d)
                else:
                    out.append(d)
        memo[i] = tuple(out)
        return memo[i]

    kept = []
    for n in nodes:
        if n.id in dropped:
            stats.nodes_removed += 1
            continue
        for field_name in ("data_deps", "ctrl_deps"):
            old = list(getattr(n, field_name))
            new: list[int] = []
            for d in old:
                if d not in by_id:
                    stats.dangling_deps_dropped += 1
                elif d in dropped:
                    new.extend(through(d))
                else:
                    new.append(d)
            new = [d for d in dict.fromkeys(new) if d != n.id]
            if new != old:
                del getattr(n, field_name)[:]
                getattr(n, field_name).extend(new)
        kept.append(n)
    return kept


def _to_zero_comp(node: pb.Node) -> None:
    node.type = pb.COMP_NODE
    node.duration_micros = 0
    _set_attrs(node, [a.name for a in node.attr], [cio.make_attr("is_cpu_op", "bool_val", False)])


def _physical_mask(value, num_dims: int, where: str) -> list[bool]:
    if value is None:
        return [True] * num_dims
    mask = [bool(x) for x in value]
    if len(mask) < num_dims or any(mask[num_dims:]):
        raise LibraError(f"{where}: involved_dim has {len(mask)} entries but the design's network has "
                         f"{num_dims} dimensions; regenerate the trace for this network")
    return mask[:num_dims]


def split_size(size: int, splits: int, stats: WorkloadStats) -> int:
    """comm_size rounded to a multiple of preferred-dataset-splits.

    ASTRA-sim cuts a collective into ``splits`` chunks of size // splits and charges a remainder
    as one more full chunk (measured: 25% more time at splits 4 for any size not divisible by 4),
    so sizes are rounded by less than ``splits`` bytes to keep the simulated time meaningful."""
    if splits <= 1 or size <= 0 or size % splits == 0:
        return size
    stats.sizes_rounded_to_splits += 1
    return max(splits, int(round(size / splits)) * splits)


def rewrite_rank(meta: pb.GlobalMetadata, nodes: list[pb.Node], rank: int, lnet: LogicalNetwork,
                 groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                 where: str, stats: WorkloadStats, splits: int = 1) -> bytes:
    """Rewrite one rank's nodes in place (see the module docstring); returns the ET file bytes."""
    kept = _relink(nodes, stats)
    phys_dims = lnet.physical.num_dims
    all_true = [True] * lnet.num_dims
    for n in kept:
        if n.type != pb.COMM_COLL_NODE:
            continue
        at = f"{where}: node {n.id} ({n.name!r})"
        attrs = cio.node_attrs(n)
        ctype = attrs.get("comm_type")
        if not isinstance(ctype, int) or isinstance(ctype, bool):
            raise LibraError(f"{at}: collective without an integer comm_type; fix the trace")
        if ctype in _REFUSED:
            raise LibraError(f"{at}: ASTRA-sim cannot simulate {_REFUSED[ctype]} collectives (it aborts); "
                             f"replace them in the trace, e.g. by ALL_REDUCE")
        size = attrs.get("comm_size")
        if ctype == pb.REDUCE_SCATTER_BLOCK or ctype == pb.BARRIER:
            name = "REDUCE_SCATTER_BLOCK" if ctype == pb.REDUCE_SCATTER_BLOCK else "BARRIER"
            stats.converted_types[name] = stats.converted_types.get(name, 0) + 1
            ctype, size = (pb.REDUCE_SCATTER, size) if ctype == pb.REDUCE_SCATTER_BLOCK else (pb.ALL_REDUCE, 0)
        elif ctype not in _SIMULATED:
            raise LibraError(f"{at}: unknown comm_type {ctype}; fix the trace")
        drop = ["is_cpu_op", "involved_dim", "pg_name", "comm_type", "comm_size"]
        add = [cio.make_attr("is_cpu_op", "bool_val", False), cio.make_attr("comm_type", "int64_val", ctype)]
        if size is not None or ctype != pb.BROADCAST:  # a broadcast is replayed from its duration
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise LibraError(f"{at}: collective without a non-negative integer comm_size; fix the trace")
            add.append(cio.make_attr("comm_size", "int64_val", split_size(size, splits, stats)))
        pg = attrs.get("pg_name")
        gid = None if pg in (None, "", "0", 0) else str(pg).strip()
        if gid is None:
            mask = lnet.from_physical_mask(_physical_mask(attrs.get("involved_dim"), phys_dims, at))
        else:
            if not gid.isdigit() or int(gid) not in groups:
                raise LibraError(f"{at}: uses communicator group {gid!r}, which the design's comm_groups "
                                 f"file does not define; add it or point the design to the right file")
            if rank not in groups[int(gid)]:
                raise LibraError(f"{at}: rank {rank} runs a collective on group {gid}, which does not contain it; "
                                 f"fix the trace or the comm_groups file")
            mask = group_masks[int(gid)]
            if mask is None:
                stats.flat_ring_collectives += 1
                add += [cio.make_attr("pg_name", "string_val", gid),
                        cio.make_attr("involved_dim", "bool_list", all_true)]
                _set_attrs(n, drop, add)
                stats.collectives += 1
                continue
            stats.group_collectives_to_dims += 1
        if not any(mask):
            stats.trivial_collectives_to_comp += 1
            _to_zero_comp(n)
            continue
        add.append(cio.make_attr("involved_dim", "bool_list", list(mask)))
        _set_attrs(n, drop, add)
        stats.collectives += 1

    order = _issue_order(kept, where)
    prev = None
    for i in order:
        n = kept[i]
        if n.type != pb.COMM_COLL_NODE:
            continue
        if prev is not None and prev not in n.ctrl_deps and prev not in n.data_deps:
            n.ctrl_deps.append(prev)
            stats.chained_deps_added += 1
        prev = n.id
    out = [kept[i] for i in order]
    if not out:
        stats.empty_ranks += 1
        out = [cio.comp_node(0, "empty", 0)]
    stats.ranks += 1
    stats.nodes_written += len(out)
    if not meta.version:
        meta = cio.global_metadata()
    return cio.encode_et(out, meta)


def rewrite_traces(prefix: str | Path, out_prefix: Path, lnet: LogicalNetwork,
                   groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                   splits: int = 1, on_progress: Callable[[int, int], None] | None = None) -> WorkloadStats:
    """Rewrite ``PREFIX.r.et`` for every rank r of the network into ``out_prefix.r.et``
    (``on_progress(ranks_done, ranks)`` after each)."""
    stats = WorkloadStats()
    for r in range(lnet.npus_count):
        src = Path(f"{prefix}.{r}.et")
        if not src.is_file() and Path(f"{src}.gz").is_file():
            src = Path(f"{src}.gz")
        if not src.is_file():
            raise LibraError(f"{src}: trace file for rank {r} not found; the network has {lnet.npus_count} NPUs "
                             f"and ASTRA-sim needs one file per NPU")
        meta, nodes = cio.read_et(src)
        data = rewrite_rank(meta, nodes, r, lnet, groups, group_masks, str(src), stats, splits)
        Path(f"{out_prefix}.{r}.et").write_bytes(data)
        if on_progress is not None:
            on_progress(r + 1, lnet.npus_count)
    extra = Path(f"{prefix}.{lnet.npus_count}.et")
    if extra.exists() or Path(f"{extra}.gz").exists():
        raise LibraError(f"{extra}: the trace has more ranks than the network's {lnet.npus_count} NPUs; "
                         f"use a network of the trace's size")
    return stats


# ------------------------------------------------------------------ synthesis from a demand


def _equivalent_size(kind: str, traffic_bytes: float, n: int) -> float:
    """Size of a single-ring collective over n NPUs whose bytes per NPU are ``traffic_bytes``."""
    if kind == coll.ALL_REDUCE:
        return traffic_bytes * n / (2 * (n - 1))
    if kind == coll.ALL_GATHER:
        return traffic_bytes / (n - 1)
    return traffic_bytes * n / (n - 1)


def _largest_piece(lnet: LogicalNetwork, physical_dim: int) -> int:
    pieces = lnet.pieces(physical_dim)
    return max(pieces, key=lambda i: (lnet.dims[i].npus, -i))


@dataclass(frozen=True)
class _Part:
    """One emitted communication: a collective (mask) or a ring shift on one logical dim (p2p_dim)."""

    kind: str
    size_bytes: float
    mask: tuple[bool, ...] = ()
    p2p_dim: int = -1


def _collective_parts(c: Collective, lnet: LogicalNetwork, stats: WorkloadStats) -> list[_Part]:
    D = lnet.num_dims
    if c.type == coll.P2P or c.algorithm == "p2p":
        return [_Part(coll.P2P, t, p2p_dim=_largest_piece(lnet, d)) for d, t in enumerate(c.traffic_bytes) if t > 0]
    if c.algorithm == "hierarchical":
        mask = [False] * D
        ok = True
        for d, p in enumerate(c.participants):
            run = lnet.run_for(d, p)
            if run is None:
                ok = False
                break
            for i in run:
                mask[i] = True
        if ok:
            return [_Part(c.type, c.size_bytes, tuple(mask))] if any(mask) else []
    stats.approximated_collectives += 1
    parts = []
    for d, t in enumerate(c.traffic_bytes):
        if t <= 0:
            continue
        i = _largest_piece(lnet, d)
        parts.append(_Part(c.type, _equivalent_size(c.type, t, lnet.dims[i].npus),
                           tuple(j == i for j in range(D))))
    return parts


def _repeats(count: float, max_repeats: int, stats: WorkloadStats) -> tuple[int, float]:
    """Runs and the size factor per run for a collective that runs ``count`` times."""
    if count <= 0:
        return 0, 0.0
    runs = math.ceil(count - 1e-9)
    if runs > max_repeats:
        stats.capped_repeats += 1
        runs = max_repeats
    return runs, count / runs


class _RankBuilder:
    """Builds one rank's node list; segments are (entry ids, exit ids) for dependency wiring."""

    def __init__(self, rank: int, lnet: LogicalNetwork, splits: int = 1, stats: WorkloadStats | None = None):
        self.rank = rank
        self.lnet = lnet
        self.splits = splits
        self.stats = stats if stats is not None else WorkloadStats()
        self.nodes: list[pb.Node] = []
        self.tag = 0

    def _id(self) -> int:
        return len(self.nodes)

    def comp(self, time_ns: float, name: str, deps: Sequence[int], stats: WorkloadStats | None) -> tuple[list[int], list[int]]:
        micros = max(0, round(time_ns / 1000.0))
        if stats is not None:
            stats.compute_rounding_ns += abs(micros * 1000.0 - time_ns)
        i = self._id()
        self.nodes.append(cio.comp_node(i, name, micros, ctrl_deps=deps))
        return [i], [i]

    def part(self, p: _Part, size: float, name: str, deps: Sequence[int]) -> tuple[list[int], list[int]]:
        nbytes = max(1, round(size)) if size > 0 else 0
        i = self._id()
        if p.kind == coll.P2P:
            c = list(self.lnet.coords(self.rank))
            n = self.lnet.dims[p.p2p_dim].npus
            c[p.p2p_dim] = (c[p.p2p_dim] + 1) % n
            nxt = self.lnet.npu_id(c)
            c[p.p2p_dim] = (c[p.p2p_dim] - 2) % n
            prv = self.lnet.npu_id(c)
            self.tag += 1
            self.nodes.append(cio.send_node(i, name + ".send", nbytes, self.rank, nxt, self.tag, ctrl_deps=deps))
            self.nodes.append(cio.recv_node(i + 1, name + ".recv", nbytes, prv, self.rank, self.tag, ctrl_deps=deps))
            return [i, i + 1], [i, i + 1]
        nbytes = split_size(nbytes, self.splits, self.stats)
        self.nodes.append(cio.coll_node(i, name, p.kind, nbytes, involved_dim=list(p.mask), ctrl_deps=deps))
        return [i], [i]

    def collective(self, c: Collective, idx: int, parts: list[_Part], deps: Sequence[int], max_repeats: int,
                   stats: WorkloadStats) -> tuple[list[int], list[int]] | None:
        runs, factor = _repeats(c.count, max_repeats, stats)
        entry: list[int] | None = None
        exits = list(deps)
        for r in range(runs):
            for j, p in enumerate(parts):
                name = c.name or f"coll{idx}"
                if runs > 1:
                    name += f"#{r}"
                if len(parts) > 1:
                    name += f".{j}"
                e, x = self.part(p, p.size_bytes * factor, name, exits)
                entry = e if entry is None else entry
                exits = x
        if entry is None:
            return None
        return entry, exits


def _class_nodes(rc: RankClass, rank: int, lnet: LogicalNetwork, parts: list[list[_Part]], max_repeats: int,
                 stats: WorkloadStats, splits: int = 1) -> list[pb.Node]:
    """Nodes of one rank of a class."""
    b = _RankBuilder(rank, lnet, splits, stats)
    if rc.dag is None:
        last: list[int] = []
        if rc.compute_time_ns > 0:
            _, last = b.comp(rc.compute_time_ns, "compute", last, stats)
        for idx, c in enumerate(rc.collectives):
            seg = b.collective(c, idx, parts[idx], last, max_repeats, stats)
            if seg is not None:
                last = seg[1]
        return b.nodes
    segs: list[tuple[list[int], list[int]]] = []
    preds: list[list[int]] = [[] for _ in rc.dag.nodes]
    for u, v in rc.dag.deps:
        preds[v].append(u)
    last_comm: list[int] = []
    for k, (kind, value) in enumerate(rc.dag.nodes):
        deps = [x for u in preds[k] for x in segs[u][1]]
        if kind == "comp":
            segs.append(b.comp(value, f"comp{k}", deps, stats))
            continue
        idx = int(value)
        seg = b.collective(rc.collectives[idx], idx, parts[idx], list(dict.fromkeys(deps + last_comm)),
                           max_repeats, stats)
        if seg is None:
            seg = b.comp(0.0, f"empty{k}", deps, None)
        else:
            last_comm = seg[1]
        segs.append(seg)
    return b.nodes


def rank_classes_by_rank(demand: Demand, npus: int, source: str) -> list[int]:
    """Index of the rank class of every NPU."""
    if len(demand.rank_classes) == 1:
        return [0] * npus
    owner = [-1] * npus
    for ci, rc in enumerate(demand.rank_classes):
        if not rc.ranks:
            raise LibraError(f"{source}: rank_classes[{ci}] has no 'ranks' list; emitting a workload with several "
                             f"rank classes needs to know which NPUs run each")
        for r in rc.ranks:
            if not 0 <= r < npus:
                raise LibraError(f"{source}: rank_classes[{ci}] names rank {r}, outside 0..{npus - 1}")
            if owner[r] != -1:
                raise LibraError(f"{source}: rank {r} is in rank_classes[{owner[r]}] and rank_classes[{ci}]")
            owner[r] = ci
    missing = [r for r, o in enumerate(owner) if o < 0]
    if missing:
        raise LibraError(f"{source}: ranks {missing[:8]} are in no rank class; list every NPU in some class's 'ranks'")
    return owner


def synthesize(demand: Demand, out_prefix: Path, lnet: LogicalNetwork, source: str, *,
               max_repeats: int = 256, splits: int = 1,
               on_progress: Callable[[int, int], None] | None = None) -> WorkloadStats:
    """Write ``out_prefix.r.et`` for every rank from the demand (see the module docstring;
    ``on_progress(ranks_done, ranks)`` after each)."""
    stats = WorkloadStats()
    owner = rank_classes_by_rank(demand, lnet.npus_count, source)
    parts = [[_collective_parts(c, lnet, stats) for c in rc.collectives] for rc in demand.rank_classes]
    cache: dict[int, bytes] = {}
    counted: set[int] = set()
    for r in range(lnet.npus_count):
        ci = owner[r]
        rc = demand.rank_classes[ci]
        if ci in cache:
            data = cache[ci]
        else:
            first = ci not in counted
            counted.add(ci)
            # Counts describe one rank per class.
            nodes = _class_nodes(rc, r, lnet, parts[ci], max_repeats, stats if first else WorkloadStats(), splits)
            if not nodes:
                stats.empty_ranks += 1
                nodes = [cio.comp_node(0, "empty", 0)]
            if first:
                stats.nodes_written += len(nodes) * owner.count(ci)
            data = cio.encode_et(nodes)
            if not any(n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE) for n in nodes):
                cache[ci] = data  # rank-independent: reuse the bytes for the class's other ranks
        Path(f"{out_prefix}.{r}.et").write_bytes(data)
        if on_progress is not None:
            on_progress(r + 1, lnet.npus_count)
    stats.ranks = lnet.npus_count
    stats.collectives = sum(len(rc.collectives) * owner.count(ci) for ci, rc in enumerate(demand.rank_classes))
    return stats
