"""Per-rank Chakra ET for ASTRA-sim synthesized from a demand (no traces).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..demand.types import Collective, Demand, RankClass
from ..errors import LibraError
from ..model import collectives as coll
from ..traces import chakra_io as cio
from ..traces.schema import pb
from .logical import LogicalNetwork
from .stats import WorkloadStats, split_size


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
    # a count below the rounding slack (1e-12, say) still runs once, scaled down: not zero times
    runs = max(1, math.ceil(count - 1e-9))
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

    def comp(self, time_ns: float, name: str, deps: Sequence[int], stats: WorkloadStats | None,
             cpu: bool = False) -> tuple[list[int], list[int]]:
        micros = max(0, round(time_ns / 1000.0))
        if stats is not None:
            # ASTRA-sim runs a 0 us node for 1 ns
            stats.compute_rounding_ns += abs(max(micros * 1000.0, 1.0) - time_ns)
        i = self._id()
        self.nodes.append(cio.comp_node(i, name, micros, ctrl_deps=deps, is_cpu_op=cpu))
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
        if kind in ("comp", "cpu"):
            segs.append(b.comp(value, f"{kind}{k}", deps, stats, cpu=kind == "cpu"))
            continue
        if kind == "free":
            # No slot in ASTRA-sim either: its dependents wait directly on its dependencies.
            segs.append(([], list(dict.fromkeys(deps))))
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
