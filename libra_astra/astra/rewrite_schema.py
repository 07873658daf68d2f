"""The schema path of the trace rewrite: one rank file parsed node by node with the schema,
rewritten (the rules: :mod:`.rewrite`) and encoded again.

It is the reference the byte path (:mod:`.rewrite_bytes`) is tested against, and it rewrites
every file the byte path hands back, so it raises the errors users see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from ..traces import chakra_io as cio
from ..traces.cpu_collectives import infer_peers, rank_groups, typed_rank
from ..traces.cpu_groups import GroupMap
from ..traces.graph import cycle_error, file_first_order
from ..traces.schema import pb
from .logical import LogicalNetwork
from .rewrite_rules import relink, rewrite_collective
from .stats import WorkloadStats


def _issue_order(nodes: Sequence[pb.Node], where: str) -> list[int]:
    """Topological order of node positions, following file order where dependencies allow."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    parents = [sorted({pos[d] for d in n.data_deps} | {pos[d] for d in n.ctrl_deps}) for n in nodes]
    order, indeg = file_first_order(len(nodes), ((p, i) for i, ps in enumerate(parents) for p in ps))
    if len(order) != len(nodes):
        raise cycle_error(where, [n.id for n in nodes], indeg, parents.__getitem__)
    return order


def rewrite_rank(meta: pb.GlobalMetadata, nodes: list[pb.Node], rank: int, lnet: LogicalNetwork,
                 groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                 where: str, stats: WorkloadStats, splits: int = 1) -> bytes:
    """Rewrite one rank's nodes in place (the rules: :mod:`.rewrite`); returns the ET file bytes."""
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


def rewrite_rank_file(buf: bytes, src: Path, r: int, n: int, lnet: LogicalNetwork,
                      groups: Mapping[int, Sequence[int]], group_masks: Mapping[int, tuple[bool, ...] | None],
                      stats: WorkloadStats, splits: int, type_cpu_collectives: bool,
                      cpu_groups: GroupMap | None = None,
                      file_groups: Mapping[str, Sequence[int]] | None = None) -> bytes:
    """One rank file rewritten node by node with the schema."""
    meta, nodes = cio.parse_et(buf, src)
    if type_cpu_collectives or cpu_groups is not None:
        typed_rank(nodes, r, n, str(src), cpu_groups, file_groups=file_groups)
    infer_peers(nodes, r, rank_groups(nodes, str(src)))
    return rewrite_rank(meta, nodes, r, lnet, groups, group_masks, str(src), stats, splits)
