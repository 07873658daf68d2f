"""The per-node pieces of the trace rewrite (its rules: :mod:`.rewrite`), shared by its schema
path, its byte path and ``doctor --fix``: relinking around removed nodes, a collective's new
attributes, a collective that becomes zero-time compute.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..demand.groups import ALL_RANKS, normalize_key
from ..errors import LibraError
from ..traces import chakra_io as cio
from ..traces.graph import through_removed
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
    """Rewrite one collective in place (the rules: :mod:`.rewrite`); returns its communicator group
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

