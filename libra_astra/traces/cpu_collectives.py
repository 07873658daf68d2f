"""Collectives that PyTorch's Chakra converter leaves untyped: gloo (CPU) process groups.

The converter types a node as communication only when it is an NCCL GPU kernel, so a gloo job's
collectives, sends and receives stay CPU COMP nodes: the ``c10d::`` op the program called
(``c10d::allreduce_``, ``c10d::send``, ...) and the ``gloo:`` op that did the work. This module
finds them and, when asked, types them: the ``c10d::`` op becomes the collective (or send or
receive), with ``is_cpu_op`` false as ASTRA-sim needs, and its ``gloo:`` op becomes an INVALID
node, which carries no time and which the emitted traces leave out (its dependents inherit its
dependencies), so a collective is never counted twice.

What the trace gives and what it does not:

- kind: from the ``c10d::`` op's name;
- size: from its tensor inputs (``[id, storage, offset, numel, itemsize, device]``): the input
  tensor's bytes (all-gather: the per-rank shard, reduce-scatter: the whole input);
- peers of sends and receives: the ``dstRank``/``srcRank`` and ``tag`` arguments (ranks of the
  process group the op used, which are the global ranks on the default group; the op does not
  record its group, see below);
- group: the ``c10d::`` op records its process group only as ``<Object>``; which group each typed
  collective used is given by the user, read from what the trace does record (METADATA process
  groups, tensor sizes) or guessed, in :mod:`.cpu_groups`, which also counts the guesses.

Files that already hold typed communication (NCCL runs) are left alone: their ``c10d::`` ops
launched the GPU kernels the converter typed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .cpu_groups import GroupMap, GroupTally, RankGroups, choose
from .process_groups import metadata_group_entries, metadata_groups
from .schema import pb

# c10d op (after "c10d::") -> (kind, input argument, output argument or -1)
C10D_OPS: dict[str, tuple[str, int, int]] = {
    "allreduce_": ("ALL_REDUCE", 0, -1),
    "allreduce_coalesced_": ("ALL_REDUCE", 0, -1),
    "_allgather_base_": ("ALL_GATHER", 1, 0),
    "allgather_": ("ALL_GATHER", 1, 0),
    "allgather_into_tensor_coalesced_": ("ALL_GATHER", 1, 0),
    "_reduce_scatter_base_": ("REDUCE_SCATTER", 1, 0),
    "reduce_scatter_": ("REDUCE_SCATTER", 1, 0),
    "reduce_scatter_tensor_coalesced_": ("REDUCE_SCATTER", 1, 0),
    "alltoall_base_": ("ALL_TO_ALL", 1, 0),
    "alltoall_": ("ALL_TO_ALL", 1, 0),
    "send": ("SEND", 0, -1),
    "recv_": ("RECV", 0, -1),
}
# gloo ops that did the work of a typed c10d op (gloo runs a reduce-scatter as an all_reduce)
GLOO_WORKERS = frozenset({"all_reduce", "all_gather", "all_to_all", "alltoall", "reduce_scatter", "send", "recv"})
# The node name is field 2 of a Node message: tag 0x12, then a one-byte length for short names.
_NAME = re.compile(rb"\x12[\x01-\x7f](c10d::|gloo:)")
_COMM_TYPES = (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)


@dataclass(frozen=True)
class CpuCollectives:
    """What one rank file holds: c10d ops (typable or not) and gloo ops, by count."""

    c10d_ops: int = 0
    typable: int = 0
    gloo_ops: int = 0


def count_in_bytes(buf: bytes) -> tuple[int, int]:
    """(c10d ops, gloo ops) named in a rank file's bytes, without decoding it."""
    c10d = gloo = 0
    for m in _NAME.finditer(buf):
        if m.group(1) == b"c10d::":
            c10d += 1
        else:
            gloo += 1
    return c10d, gloo


def _is_tensor(arg: Any) -> bool:
    """Whether a recorded argument is one tensor: ``[id, storage, offset, numel, itemsize, device]``."""
    return (isinstance(arg, (list, tuple)) and len(arg) == 6
            and all(isinstance(x, int) and not isinstance(x, bool) for x in arg[:5]) and isinstance(arg[5], str))


def _tensors_bytes(arg: Any) -> int:
    """Bytes of the tensors in one recorded argument (a tensor or nested lists of them)."""
    if _is_tensor(arg):
        return max(arg[3], 0) * max(arg[4], 0)
    if isinstance(arg, (list, tuple)):
        return sum(_tensors_bytes(x) for x in arg)
    return 0


def _args(node: pb.Node) -> list[Any] | None:
    try:
        v = ast.literal_eval(node.inputs.values) if node.inputs.values else []
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return list(v) if isinstance(v, (list, tuple)) else None


@dataclass(frozen=True)
class CpuComm:
    """One typable c10d op."""

    kind: str           # ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SEND or RECV
    size_bytes: int
    group_size: int     # fixed by the tensor sizes, or 0
    peer: int = -1      # destination of a send, source of a receive
    tag: int = 0


def describe(node: pb.Node) -> CpuComm | None:
    """The communication a ``c10d::`` CPU op stands for, or None if it is none we can type."""
    if not node.name.startswith("c10d::"):
        return None
    spec = C10D_OPS.get(node.name[len("c10d::"):])
    args = _args(node)
    if spec is None or args is None:
        return None
    kind, i_in, i_out = spec
    if i_in >= len(args):
        return None
    size = _tensors_bytes(args[i_in])
    out = _tensors_bytes(args[i_out]) if 0 <= i_out < len(args) else 0
    group_size = 0
    if kind == "ALL_GATHER" and size > 0 and out % size == 0:
        group_size = out // size
    elif kind == "REDUCE_SCATTER" and out > 0 and size % out == 0:
        group_size = size // out
    elif kind == "ALL_TO_ALL":
        group_size = _alltoall_size(node.name, args)
    if kind in ("SEND", "RECV"):
        ints = [a for a in args[2:4] if isinstance(a, int) and not isinstance(a, bool)]
        if len(ints) < 2:
            return None
        return CpuComm(kind, size, 0, ints[0], ints[1])
    return CpuComm(kind, size, group_size)


def _alltoall_size(name: str, args: list[Any]) -> int:
    """Ranks of an all-to-all's group as its arguments give them, or 0: the split sizes of
    ``alltoall_base_`` (one per rank; empty for even splits, which say nothing), the tensors of
    ``alltoall_`` (one per rank)."""
    if name == "c10d::alltoall_base_":
        splits = [a for a in args[3:5] if isinstance(a, list) and a]
        return len(splits[0]) if splits and all(len(x) == len(splits[0]) for x in splits) else 0
    tensors = args[1] if len(args) > 1 and isinstance(args[1], list) else []
    return len(tensors) if tensors and all(_is_tensor(t) for t in tensors) else 0


def has_typed_comm(nodes: Sequence[pb.Node]) -> bool:
    return any(n.type in _COMM_TYPES for n in nodes)


def type_cpu_collectives(nodes: list[pb.Node], rg: RankGroups, group_map: GroupMap | None = None,
                         tally: GroupTally | None = None) -> int:
    """Type the c10d ops of one rank's nodes in place (see the module docstring); returns how
    many were typed. ``rg``: the rank's process groups; ``group_map``: the user's mapping of ops
    to groups; ``tally`` adds up how each collective's group was settled (:mod:`.cpu_groups`)."""
    if has_typed_comm(nodes):
        return 0
    typed = 0
    absorb = False
    seen: dict[str, int] = {}
    for n in nodes:
        if n.name.startswith("gloo:") and absorb and n.name[len("gloo:"):] in GLOO_WORKERS:
            n.type = pb.INVALID_NODE
            n.duration_micros = 0
            continue
        c = describe(n)
        if c is None:
            continue
        named = next((str(a.string_val if a.HasField("string_val") else a.int64_val) for a in n.attr
                      if a.name == "pg_name" and (a.HasField("string_val") or a.HasField("int64_val"))), None)
        keep = [a for a in n.attr if a.name not in ("is_cpu_op", "comm_type", "comm_size", "pg_name", "comm_src",
                                                     "comm_dst", "comm_tag", "involved_dim")]
        del n.attr[:]
        n.attr.extend(keep)
        n.attr.add(name="is_cpu_op", bool_val=False)
        n.attr.add(name="comm_size", int64_val=c.size_bytes)
        if c.kind == "SEND":
            n.type = pb.COMM_SEND_NODE
            n.attr.add(name="comm_src", int64_val=rg.rank)
            n.attr.add(name="comm_dst", int64_val=c.peer)
            n.attr.add(name="comm_tag", int64_val=c.tag)
        elif c.kind == "RECV":
            n.type = pb.COMM_RECV_NODE
            n.attr.add(name="comm_src", int64_val=c.peer)
            n.attr.add(name="comm_dst", int64_val=rg.rank)
            n.attr.add(name="comm_tag", int64_val=c.tag)
        else:
            n.type = pb.COMM_COLL_NODE
            n.attr.add(name="comm_type", int64_val=pb.CollectiveCommType.Value(c.kind))
            nth = seen[n.name] = seen.get(n.name, 0) + 1
            choice = choose(n.name, nth, c.size_bytes, c.group_size, named, rg, group_map)
            if tally is not None:
                tally.add(n.name, nth, c.size_bytes, rg.rank, choice)
            if choice.pg_name is not None:
                n.attr.add(name="pg_name", string_val=choice.pg_name)
        n.duration_micros = 0
        typed += 1
        absorb = True
    return typed


def rank_groups(nodes: Sequence[pb.Node], where: str) -> dict[str, tuple[int, ...]]:
    """Process groups of one rank's METADATA nodes (name -> members; the world group left out)."""
    out: dict[str, tuple[int, ...]] = {}
    for n in nodes:
        if n.type == pb.METADATA_NODE:
            for name, ranks in metadata_groups(n, f"{where}: node {n.id} (METADATA)"):
                if ranks:
                    out[str(name)] = tuple(ranks)
    return out


def rank_process_groups(nodes: Sequence[pb.Node], rank: int, npus: int, where: str,
                        file_groups: Mapping[str, Sequence[int]] | None = None) -> RankGroups:
    """What one rank's METADATA nodes (and the comm-groups file) say about its process groups."""
    groups: dict[str, tuple[int, ...]] = {}
    world: set[str] = set()
    descs: dict[str, str] = {}
    recorded = False
    for n in nodes:
        if n.type == pb.METADATA_NODE:
            for name, ranks, desc in metadata_group_entries(n, f"{where}: node {n.id} (METADATA)"):
                recorded = True
                if ranks and len(ranks) < npus:
                    groups[str(name)] = tuple(ranks)
                else:
                    world.add(str(name))
                if desc is not None:
                    descs[name] = desc
    files = {str(k): tuple(v) for k, v in (file_groups or {}).items()}
    return RankGroups(rank, npus, recorded, groups, frozenset(world), descs, files)


def typed_rank(nodes: list[pb.Node], rank: int, npus: int, where: str, group_map: GroupMap | None = None,
               tally: GroupTally | None = None, file_groups: Mapping[str, Sequence[int]] | None = None) -> int:
    """Type one rank file's CPU collectives in place, with the groups of its own METADATA (and
    ``file_groups``, the comm-groups file's) and the user's ``group_map``."""
    rg = rank_process_groups(nodes, rank, npus, where, file_groups)
    return type_cpu_collectives(nodes, rg, group_map, tally)


def _p2p_launcher(node: pb.Node, by_id: Mapping[int, pb.Node], depth: int = 3) -> CpuComm | None:
    """The c10d::send / c10d::recv_ op a GPU send or receive kernel was launched by, if any."""
    frontier = [node]
    seen = {node.id}
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for d in list(n.data_deps) + list(n.ctrl_deps):
                p = by_id.get(d)
                if p is None or d in seen:
                    continue
                seen.add(d)
                c = describe(p)
                if c is not None and c.kind in ("SEND", "RECV"):
                    return c
                nxt.append(p)
        frontier = nxt
    return None


def infer_peers(nodes: list[pb.Node], rank: int, groups: Mapping[str, Sequence[int]]) -> tuple[int, int]:
    """Give SEND/RECV nodes without a peer (PyTorch's converter writes NCCL sends and receives
    without comm_src/comm_dst) the peer the trace shows, in place: the dstRank/srcRank argument
    of the c10d::send / c10d::recv_ op that launched them, else the other member of a two-rank
    process group named by pg_name. Returns (peers inferred, peers still unknown)."""
    by_id = {n.id: n for n in nodes}
    done = left = 0
    for n in nodes:
        if n.type not in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            continue
        attrs = {a.name: a for a in n.attr}
        want = "comm_dst" if n.type == pb.COMM_SEND_NODE else "comm_src"
        if want in attrs:
            continue
        peer, tag = -1, None
        c = _p2p_launcher(n, by_id)
        if c is not None:
            peer, tag = c.peer, c.tag
        else:
            pg = attrs.get("pg_name")
            members = groups.get(pg.string_val) if pg is not None and pg.HasField("string_val") else None
            if members is not None and len(members) == 2 and rank in members:
                peer = [m for m in members if m != rank][0]
        if peer < 0:
            left += 1
            continue
        n.attr.add(name=want, int64_val=peer)
        other = "comm_src" if want == "comm_dst" else "comm_dst"
        if other not in attrs:
            n.attr.add(name=other, int64_val=rank)
        if "comm_tag" not in attrs:
            n.attr.add(name="comm_tag", int64_val=tag if tag is not None else 0)
        done += 1
    return done, left
