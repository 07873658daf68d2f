"""Per-rank Chakra ET for ASTRA-sim from the user's traces (the user's files are only read).

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
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..demand.groups import ALL_RANKS, normalize_key
from ..errors import LibraError
from ..traces import chakra_io as cio
from ..traces.cpu_collectives import infer_peers, rank_groups, typed_rank
from ..traces.cpu_groups import GroupMap
from ..traces.files import find_rank_files, read_file_bytes
from ..traces.graph import cycle_error, file_first_order, through_removed
from ..traces.schema import COMM_TYPE_NAMES, pb
from .logical import LogicalNetwork
from .stats import WorkloadStats, split_size

_DROP_TYPES = (pb.INVALID_NODE, pb.METADATA_NODE)
# The kinds the demand model knows, and BROADCAST, which is replayed from its duration.
_SIMULATED = set(COMM_TYPE_NAMES) | {pb.BROADCAST}
_REFUSED = {pb.REDUCE: "REDUCE", pb.GATHER: "GATHER", pb.SCATTER: "SCATTER"}


def set_attrs(node: pb.Node, drop: Sequence[str], add: Sequence[pb.AttributeProto] = ()) -> None:
    gone = set(drop) | {x.name for x in add}
    keep = [a for a in node.attr if a.name not in gone]
    del node.attr[:]
    node.attr.extend(keep)
    node.attr.extend(add)


def _issue_order(nodes: Sequence[pb.Node], where: str) -> list[int]:
    """Topological order of node positions, following file order where dependencies allow."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    parents = [sorted({pos[d] for d in n.data_deps} | {pos[d] for d in n.ctrl_deps}) for n in nodes]
    order, indeg = file_first_order(len(nodes), ((p, i) for i, ps in enumerate(parents) for p in ps))
    if len(order) != len(nodes):
        raise cycle_error(where, [n.id for n in nodes], indeg, parents.__getitem__)
    return order


def relink(nodes: Sequence[pb.Node], stats: WorkloadStats, drop_types: Sequence[int] = _DROP_TYPES) -> list[pb.Node]:
    """Drop nodes of ``drop_types`` (METADATA/INVALID; dependents inherit their deps), dangling
    dependencies and self dependencies."""
    by_id = {n.id: n for n in nodes}
    dropped = {n.id for n in nodes if n.type in drop_types}
    memo: dict[int, list[int]] = {}

    def through(i: int) -> list[int]:
        return through_removed(i, lambda x: list(by_id[x].data_deps) + list(by_id[x].ctrl_deps), by_id, dropped,
                               memo)

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


def to_zero_comp(node: pb.Node) -> None:
    node.type = pb.COMP_NODE
    node.duration_micros = 0
    set_attrs(node, [a.name for a in node.attr], [cio.make_attr("is_cpu_op", "bool_val", False)])


def _physical_mask(value, num_dims: int, where: str) -> list[bool]:
    if value is None:
        return [True] * num_dims
    mask = [bool(x) for x in value]
    if len(mask) < num_dims or any(mask[num_dims:]):
        raise LibraError(f"{where}: involved_dim has {len(mask)} entries but the design's network has "
                         f"{num_dims} dimensions; regenerate the trace for this network")
    return mask[:num_dims]


def rewrite_collective(n: pb.Node, rank: int, lnet: LogicalNetwork, groups: Mapping[int, Sequence[int]],
                       group_masks: Mapping[int, tuple[bool, ...] | None], where: str, stats: WorkloadStats,
                       splits: int = 1) -> str | None:
    """Rewrite one collective in place (see the module docstring); returns its communicator group
    id, None for an all-rank collective. The result depends on the node's attributes and, through
    the membership check alone, on ``rank``."""
    phys_dims = lnet.physical.num_dims
    all_true = [True] * lnet.num_dims
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
    key = normalize_key(None if pg is None else str(pg))
    gid = None if key == ALL_RANKS else key.strip()
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
            set_attrs(n, drop, add)
            stats.collectives += 1
            return gid
        stats.group_collectives_to_dims += 1
    if not any(mask):
        stats.trivial_collectives_to_comp += 1
        to_zero_comp(n)
        return gid
    add.append(cio.make_attr("involved_dim", "bool_list", list(mask)))
    set_attrs(n, drop, add)
    stats.collectives += 1
    return gid


def rewrite_rank(meta: pb.GlobalMetadata, nodes: list[pb.Node], rank: int, lnet: LogicalNetwork,
                 groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                 where: str, stats: WorkloadStats, splits: int = 1) -> bytes:
    """Rewrite one rank's nodes in place (see the module docstring); returns the ET file bytes."""
    kept = relink(nodes, stats)
    for n in kept:
        if n.type == pb.COMM_COLL_NODE:
            rewrite_collective(n, rank, lnet, groups, group_masks, where, stats, splits)
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


# Files are rewritten on their bytes in batches of about this size: numpy's per-call cost is paid per batch.
_BATCH_BYTES = 8 << 20


def rewrite_traces(prefix: str | Path, out_prefix: Path, lnet: LogicalNetwork,
                   groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                   splits: int = 1, on_progress: Callable[[int, int], None] | None = None,
                   type_cpu_collectives: bool = False, byte_level: bool = True, cpu_groups: GroupMap | None = None,
                   file_groups: Mapping[str, Sequence[int]] | None = None) -> WorkloadStats:
    """Rewrite ``PREFIX.r.et`` for every rank r of the network into ``out_prefix.r.et``
    (``on_progress(ranks_done, ranks)`` after each); with ``type_cpu_collectives`` the gloo
    collectives are typed first (traces/cpu_collectives.py), on the process groups ``cpu_groups``
    gives (traces/cpu_groups.py; ``file_groups``: the comm-groups file's, as the demand read them).

    Files are rewritten on their bytes (:mod:`.rewrite_bytes`) where that gives the same output,
    else node by node with the schema; ``byte_level=False`` takes the schema path for every file
    (the reference the byte-level path is tested against)."""
    from .rewrite_bytes import Rewriter   # here, not at the top: it builds on this module
    type_cpu_collectives = type_cpu_collectives or cpu_groups is not None
    stats = WorkloadStats()
    n = lnet.npus_count
    found = find_rank_files(prefix)
    fast = Rewriter(lnet, groups, group_masks, splits, type_cpu_collectives) if byte_level else None
    batch: list[tuple[int, Path, bytes]] = []

    def flush() -> None:
        got = (fast.rewrite([b for _, _, b in batch], [r for r, _, _ in batch], [str(p) for _, p, _ in batch])
               if fast is not None else [None] * len(batch))
        for (r, src, buf), done in zip(batch, got):
            if done is None:
                data = _schema_rank(buf, src, r, n, lnet, groups, group_masks, stats, splits, type_cpu_collectives,
                                    cpu_groups, file_groups)
            else:
                data = done[0]
                stats.add(done[1])
            Path(f"{out_prefix}.{r}.et").write_bytes(data)
            if on_progress is not None:
                on_progress(r + 1, n)
        batch.clear()

    size = 0
    for r in range(n):
        try:
            src = found.get(r)
            if src is None:
                raise LibraError(f"{prefix}.{r}.et: trace file for rank {r} not found; the network has {n} NPUs "
                                 f"and ASTRA-sim needs one file per NPU")
            if not Path(src).is_file():
                raise LibraError(f"{src}: ET file not found")
            buf = read_file_bytes(src)
        except LibraError:
            flush()     # the ranks before this one are rewritten (and may fail) first, as one by one
            raise
        batch.append((r, src, buf))
        size += len(buf)
        if size >= _BATCH_BYTES or fast is None:
            flush()
            size = 0
    flush()
    extra = sorted(r for r in found if r >= n)
    if extra:
        raise LibraError(f"{found[extra[0]]}: the trace has more ranks than the network's {n} NPUs; "
                         f"use a network of the trace's size")
    return stats


def _schema_rank(buf: bytes, src: Path, r: int, n: int, lnet: LogicalNetwork, groups: Mapping[int, Sequence[int]],
                 group_masks: Mapping[int, tuple[bool, ...] | None], stats: WorkloadStats, splits: int,
                 type_cpu_collectives: bool, cpu_groups: GroupMap | None = None,
                 file_groups: Mapping[str, Sequence[int]] | None = None) -> bytes:
    """One rank file rewritten node by node with the schema."""
    meta, nodes = cio.parse_et(buf, src)
    if type_cpu_collectives or cpu_groups is not None:
        typed_rank(nodes, r, n, str(src), cpu_groups, file_groups=file_groups)
    infer_peers(nodes, r, rank_groups(nodes, str(src)))
    return rewrite_rank(meta, nodes, r, lnet, groups, group_masks, str(src), stats, splits)
