"""What a trace read found, for the ``demand`` report and its JSON: node counts, bytes per
dimension by collective type, the communicator groups, the rank classes and notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from . import groups as grp
from ..traces.cpu_groups import GuessedOp
from ..traces.reader import TraceReader
from ..traces.schema import (COMM_RECV_NODE, INVALID_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, METADATA_NODE,
                             NODE_TYPE_NAMES)
from .context import Context
from .program import Program
from .types import Collective, RankClass


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
    # dependencies on nodes absent from their file, summed over ranks, and some of them as
    # (rank, node id, missing id): satisfied (treated as done), dropped from emitted traces
    missing_deps: int = 0
    missing_dep_examples: tuple[tuple[int, int, int], ...] = ()
    cpu_time_ns: tuple[float, float] = (0.0, 0.0)  # summed CPU-op time per rank, (min, max)
    # process groups read from METADATA nodes (not overridden by a comm-groups file): name -> ranks
    metadata_groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    untyped_cpu_collectives: int = 0   # c10d:: CPU ops left as CPU ops (gloo runs), summed over ranks
    # typed CPU collectives (--type-cpu-collectives) by how their process group was settled
    # (given, named, fixed, guessed; traces/cpu_groups.py), summed over ranks; {} when not typed
    cpu_groups: Mapping[str, int] = field(default_factory=dict)
    cpu_groups_guessed: tuple[GuessedOp, ...] = ()   # the guessed ones, by op, occurrence, size and guess
    gzipped_files: int = 0             # rank files read gunzipped (ASTRA-sim opens PREFIX.RANK.et only)


def summarize(ctx: Context, prefix: str, programs: list[Program], rank_classes: list[RankClass],
               class_summaries: list[ClassSummary], reader: TraceReader) -> tuple[TraceSummary, list[str]]:
    net = ctx.net
    n_npus = net.npus_count
    type_counts = np.zeros(8, dtype=np.int64)
    agg = {"zero_size": 0, "send_no_dst": 0, "cpu_ops": 0, "roofline_zero": 0, "zero_duration": 0}
    cpu_ns = 0.0
    use: dict[tuple[int, int], int] = {}
    missing = 0
    examples: list[tuple[int, int, int]] = []
    # one program per distinct rank file: thousands on a large set, so the per-type counts are summed at once
    weights = np.asarray([len(info.ranks) for info in programs], dtype=np.int64)
    if programs:
        type_counts = weights @ np.stack([np.asarray(info.counts["types"], dtype=np.int64) for info in programs])
    for info, m in zip(programs, weights.tolist()):
        if info.prog.dangling:
            missing += len(info.prog.dangling) * m
            for r in info.ranks[:8]:
                examples.extend((r, node, dep) for node, dep in info.prog.dangling[:8])
        counts = info.counts
        for k in agg:
            agg[k] += counts.get(k, 0) * m
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

    examples = sorted(examples)[:8]
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
    if missing:
        shown = ", ".join(f"rank {r} node {v} -> {d}" for r, v, d in examples)
        notes.append(
            f"{missing} dependenc{'y' if missing == 1 else 'ies'} on nodes not in their file ({shown}"
            f"{', ...' if missing > len(examples) else ''}): treated as already done (PyTorch's Chakra converter "
            "removes its root node 0 and keeps the dependencies on it); emitted traces leave them out"
        )
    if agg["cpu_ops"]:
        notes.append(
            f"{agg['cpu_ops']} CPU op(s) ({cpu_ns / 1e6:.3f} ms over all ranks) timed from duration_micros on each "
            "rank's CPU-op slot, as ASTRA-sim runs them: they count in the overlap model (--overlap), not in "
            "the compute time"
        )
    if agg.get("zero_duration"):
        notes.append(f"{agg['zero_duration']} COMP node(s) with duration 0 cost 1 ns each, as in ASTRA-sim")
    if agg["send_no_dst"]:
        notes.append(f"{agg['send_no_dst']} send(s) without comm_dst are not charged (their dimension is unknown)")
    if ctx.peak is not None:
        notes.append(f"compute timed with the roofline model: peak {ctx.peak:g} TFLOPS, memory {ctx.membw:g} GB/s")

    computes = [c.compute_time_ns for c in class_summaries]
    cpus = [info.cpu_ns for info in programs]
    summary = TraceSummary(
        prefix=prefix, num_ranks=n_npus, files_decoded=reader.files_decoded, programs=len(programs),
        nodes_total=int(type_counts.sum()), node_counts=node_counts, skipped=skipped,
        bytes_by_type=bytes_by_type, groups=tuple(group_summaries), rank_classes=tuple(class_summaries),
        compute_time_ns=(min(computes), max(computes)) if computes else (0.0, 0.0), notes=tuple(notes),
        missing_deps=missing, missing_dep_examples=tuple(examples),
        metadata_groups={k: (ctx.members(k) or ()) for k in sorted(ctx.meta_groups, key=lambda x: (len(x), x))
                         if k not in ctx.file_groups},
        cpu_time_ns=(min(cpus), max(cpus)) if cpus else (0.0, 0.0),
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
        "cpu_time_ns": list(s.cpu_time_ns),
        "untyped_cpu_collectives": s.untyped_cpu_collectives,
        "cpu_collective_groups": None if not s.cpu_groups else {
            **s.cpu_groups,
            "guessed_ops": [{"op": g.op, "nth": g.nth, "size_bytes": g.size_bytes, "ranks": list(g.ranks),
                             "group": g.pg_name} for g in s.cpu_groups_guessed]},
        "missing_deps": {"count": s.missing_deps,
                         "examples": [{"rank": r, "node": v, "missing": d} for r, v, d in s.missing_dep_examples]},
        "notes": list(s.notes),
    }
