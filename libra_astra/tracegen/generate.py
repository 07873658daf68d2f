"""Turn a spec into per-rank Chakra ET files and an ASTRA-sim communicator-group file.

Output for prefix P: ``P.0.et`` ... ``P.{N-1}.et``, and ``P.groups.json`` when some collective runs
on a group smaller than all ranks. Groups get ids 1, 2, ... per axis in placement order, within an
axis by smallest member; a collective on such a group carries ``pg_name`` = its id, one on all ranks
carries none. ``involved_dim`` is set whenever the group is a set of whole network dimensions.

Ranks running the same program differ only in group ids and point-to-point peers, so each
program's nodes are serialized once and the rank-specific attributes are appended as bytes
(protobuf merges repeated fields of concatenated pieces).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..traces import chakra_io as cio
from ..traces import completion
from ..errors import LibraError
from ..files import check_writable, write_text_atomic
from .dlrm import dlrm_plan
from .placement import Layout
from .program import COLL, COMP, RECV, SEND, Op, Plan
from .resnet import resnet50_plan
from .spec import DlrmModel, ResNet50Model, TraceSpec, TransformerModel, load_spec
from .transformer import transformer_plan

_TYPE_NAMES = {COMP: "COMP_NODE", COLL: "COMM_COLL_NODE", SEND: "COMM_SEND_NODE", RECV: "COMM_RECV_NODE"}


@dataclass(frozen=True)
class GeneratedTraces:
    """What :func:`generate` wrote.

    node_counts: nodes of each type (``COMP_NODE``...) summed over all ranks.
    """

    prefix: Path
    num_ranks: int
    groups_path: Path | None
    node_counts: Mapping[str, int]
    total_bytes: int

    def et_path(self, rank: int) -> Path:
        return Path(f"{self.prefix}.{rank}.et")


def build_plan(spec: TraceSpec, *, names: bool = True) -> Plan:
    """The spec's programs. ``names=False`` may share one program object between ranks whose
    programs differ only in op names (see ``transformer_plan``): for analyses, not for writing."""
    if isinstance(spec.model, TransformerModel):
        return transformer_plan(spec, names=names)
    if isinstance(spec.model, DlrmModel):
        return dlrm_plan(spec)
    if isinstance(spec.model, ResNet50Model):
        return resnet50_plan(spec)
    raise LibraError(f"{spec.source}: model type {type(spec.model).__name__} has no generator")


def assign_groups(layout: Layout, axes: list[str]) -> dict[str, tuple[int | None, ...]]:
    """Per axis, each rank's group id (None: the group is all ranks), ids from 1 in axis order."""
    out: dict[str, tuple[int | None, ...]] = {}
    next_id = 1
    for name in axes:
        ids: list[int | None] = [None] * layout.num_ranks
        for members in layout.groups(name):
            if len(members) == layout.num_ranks:
                continue
            for r in members:
                ids[r] = next_id
            next_id += 1
        out[name] = tuple(ids)
    return out


class _ProgramEncoder:
    """Serialized pieces of one program: constant framed bytes, and nodes needing rank attributes."""

    def __init__(self, ops: tuple[Op, ...], layout: Layout, group_ids: Mapping[str, tuple[int | None, ...]]):
        self.layout = layout
        self.ops = ops
        # items: bytes (constant, framed) | (serialized node, axis) for group collectives | op index for P2P
        self.items: list[Any] = []
        const = bytearray(cio.encode_metadata())
        for i, op in enumerate(ops):
            if op.kind == COMP:
                const += cio.frame(cio.serialize_node(cio.comp_node(
                    i, op.name, op.duration_micros, num_ops=op.num_ops, tensor_size=op.tensor_bytes,
                    data_deps=op.data_deps, ctrl_deps=op.ctrl_deps)))
            elif op.kind == COLL:
                involved = layout.whole_dims(op.axis)
                node = cio.serialize_node(cio.coll_node(i, op.name, op.coll, op.size_bytes, involved_dim=involved,
                                                        data_deps=op.data_deps, ctrl_deps=op.ctrl_deps))
                if all(g is None for g in group_ids[op.axis]):
                    const += cio.frame(node)
                else:
                    self.items += [bytes(const), (node, op.axis)]
                    const = bytearray()
            else:
                self.items += [bytes(const), i]
                const = bytearray()
        self.items.append(bytes(const))
        self.rank_independent = len(self.items) == 1
        self.group_ids = group_ids
        self._pg_cache: dict[int, bytes] = {}

    def _pg(self, gid: int | None) -> bytes:
        if gid is None:
            return b""
        if gid not in self._pg_cache:
            self._pg_cache[gid] = cio.serialize_attrs([cio.make_attr("pg_name", "string_val", str(gid))])
        return self._pg_cache[gid]

    def encode(self, rank: int) -> bytes:
        parts = []
        for item in self.items:
            if isinstance(item, bytes):
                parts.append(item)
            elif isinstance(item, tuple):
                node, axis = item
                parts.append(cio.frame(node + self._pg(self.group_ids[axis][rank])))
            else:
                op = self.ops[item]
                peer = self.layout.peer(rank, op.axis, op.peer_offset)
                if peer is None:
                    raise LibraError(f"rank {rank}: {op.name} has no peer {op.peer_offset:+d} along {op.axis}")
                src, dst = (rank, peer) if op.kind == SEND else (peer, rank)
                make = cio.send_node if op.kind == SEND else cio.recv_node
                parts.append(cio.frame(cio.serialize_node(make(
                    item, op.name, op.size_bytes, src, dst, op.tag, data_deps=op.data_deps, ctrl_deps=op.ctrl_deps))))
        return b"".join(parts)


def generate(spec: str | Path | Mapping[str, Any], out_prefix: str | Path, overwrite: bool = False,
             on_progress: Callable[[int, int], None] | None = None) -> GeneratedTraces:
    """Write ``out_prefix.{rank}.et`` for every rank (and ``out_prefix.groups.json`` if needed).

    Parameters
    ----------
    spec : path of a spec YAML file, or the parsed mapping.
    out_prefix : path prefix of the outputs; its directory is created if missing.
    overwrite : replace existing files; otherwise an existing output raises LibraError.
    on_progress : called as ``on_progress(ranks_written, ranks)`` after each file.

    Raises
    ------
    LibraError : invalid spec, or outputs that exist (without ``overwrite``).
    """
    sp = load_spec(spec)
    plan = build_plan(sp)
    layout = sp.layout
    n = layout.num_ranks
    prefix = Path(out_prefix)
    if prefix.name in ("", ".", "..") or str(out_prefix).endswith(("/", "\\")):
        raise LibraError(f"{out_prefix}: output prefix needs a file-name part, e.g. {prefix / sp.name}")
    prefix.parent.mkdir(parents=True, exist_ok=True)

    axes = [a.name for a in layout.axes if any(op.kind == COLL and op.axis == a.name
                                               for ops in plan.programs.values() for op in ops)]
    group_ids = assign_groups(layout, axes)
    groups: dict[int, list[int]] = {}
    for name in axes:
        for r, gid in enumerate(group_ids[name]):
            if gid is not None:
                groups.setdefault(gid, []).append(r)
    groups_path = Path(f"{prefix}.groups.json") if groups else None

    paths = [Path(f"{prefix}.{r}.et") for r in range(n)]
    for p in paths + ([groups_path] if groups_path else []) + [completion.marker_path(prefix)]:
        check_writable(p, overwrite)
    stale = [Path(f"{prefix}.{n}.et")] + ([] if groups_path else [Path(f"{prefix}.groups.json")])
    for p in stale:
        if p.exists():
            raise LibraError(f"{p}: left from an earlier, different trace set with prefix {prefix}; delete the "
                             f"old files (or choose another prefix) so readers do not mix the two")

    encoders = {key: _ProgramEncoder(ops, layout, group_ids) for key, ops in plan.programs.items()}
    shared: dict[Any, bytes] = {}
    total = 0
    # Marked "writing" before the first rank file changes, "complete" after the last.
    completion.begin(prefix, n, "libra-astra generate", overwrite)
    records: list[dict[str, Any]] = []
    shared_records: dict[Any, dict[str, Any]] = {}
    for r, path in enumerate(paths):
        enc = encoders[plan.rank_program[r]]
        if enc.rank_independent:
            data = shared.setdefault(plan.rank_program[r], enc.encode(r))
        else:
            data = enc.encode(r)
        write_text_atomic(path, data, overwrite)
        if enc.rank_independent:   # same bytes for every rank of this program: digest once
            rec = shared_records.get(plan.rank_program[r])
            if rec is None:
                rec = shared_records[plan.rank_program[r]] = completion.record(path, data)
            records.append({**rec, "file": path.name})
        else:
            records.append(completion.record(path, data))
        total += len(data)
        if on_progress is not None:
            on_progress(r + 1, n)
    if groups_path is not None:
        cio.write_comm_groups(groups_path, groups, overwrite)
    completion.finish(prefix, records, "libra-astra generate",
                    {"groups": groups_path.name if groups_path is not None else None})

    counts: dict[str, int] = {}
    for key, ranks in Counter(plan.rank_program).items():
        for op in plan.programs[key]:
            counts[_TYPE_NAMES[op.kind]] = counts.get(_TYPE_NAMES[op.kind], 0) + ranks
    return GeneratedTraces(prefix, n, groups_path, counts, total)
