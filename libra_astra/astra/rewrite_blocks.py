"""What distinct byte strings of rank files mean to the byte rewrite (:mod:`.rewrite_bytes`),
each worked out once with the schema and kept across the files of a workload.

An attribute block must be what the schema writes, and then only its send/receive peers matter;
an inputs/outputs span must be what the schema writes; a collective's attribute block maps to its
new block by the schema path's own :func:`.rewrite_rules.rewrite_collective`. The rare nodes
the byte path does not copy (relinked dependencies, collectives that become compute) are built
here with the schema, as the schema path builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import LibraError
from ..traces.schema import pb
from . import node_bytes as nb
from .logical import LogicalNetwork
from .rewrite_rules import rewrite_collective
from .stats import WorkloadStats

# Bound on each cache of distinct byte strings: PyTorch traces carry per-node attributes
# (rf_id, seq_id) that never repeat, and keeping those would only cost memory.
_CACHE_LIMIT = 1 << 18


class HandBack(Exception):
    """This distinct block, span or file needs the schema path."""


@dataclass(frozen=True, eq=False)
class CollRewrite:
    """A collective's rewrite, a function of its attribute block (and, for membership, the rank)."""

    block: bytes                 # new attribute block (b"" when it became a zero-time compute node)
    to_comp: bool
    gid: str | None
    stats: WorkloadStats


@dataclass
class BlockMeanings:
    """Caches of what distinct byte strings mean, for one workload's network, groups and splits."""

    lnet: LogicalNetwork
    groups: Mapping[int, Sequence[int]]
    group_masks: Mapping[int, tuple[bool, ...] | None]
    splits: int = 1
    _blocks: dict[bytes, tuple[bool, bool]] = field(default_factory=dict)   # verified block -> peers named
    _colls: dict[bytes, CollRewrite] = field(default_factory=dict)
    _io: set[bytes] = field(default_factory=set)
    _members: dict[str, frozenset[int]] = field(default_factory=dict)

    def block(self, blk: bytes) -> tuple[bool, bool]:
        """(has comm_src, has comm_dst) of an attribute block, once it is known to be what the
        schema writes (all the rewrite needs to know of blocks that are not collectives')."""
        got = self._blocks.get(blk)
        if got is None:
            try:
                node = pb.Node.FromString(blk)
            except Exception:   # protobuf raises assorted errors on bad bytes
                raise HandBack from None
            if node.SerializeToString() != blk:
                raise HandBack
            if b"comm_s" in blk or b"comm_d" in blk:
                names = {a.name for a in node.attr}
                got = ("comm_src" in names, "comm_dst" in names)
            else:
                got = (False, False)
            if len(self._blocks) < _CACHE_LIMIT:
                self._blocks[blk] = got
        return got

    def check_io(self, span: bytes) -> None:
        """inputs/outputs fields must parse and be what the schema writes."""
        if span in self._io:
            return
        try:
            ok = pb.Node.FromString(span).SerializeToString() == span
        except Exception:
            ok = False
        if not ok:
            raise HandBack
        if len(self._io) < _CACHE_LIMIT:
            self._io.add(span)

    def collective(self, blk: bytes, rank: int, where: str) -> CollRewrite:
        """The rewrite of a collective's attribute block (its group's membership checked for ``rank``)."""
        c = self._colls.get(blk)
        if c is None:
            node = pb.Node.FromString(blk)
            node.type = pb.COMM_COLL_NODE
            s = WorkloadStats()
            try:
                gid = rewrite_collective(node, rank, self.lnet, self.groups, self.group_masks, where, s,
                                         self.splits)
            except LibraError:
                raise HandBack from None   # the schema path names the node in its error
            to_comp = node.type != pb.COMM_COLL_NODE
            node.ClearField("type")
            c = CollRewrite(b"" if to_comp else node.SerializeToString(), to_comp, gid, s)
            if len(self._colls) < _CACHE_LIMIT:
                self._colls[blk] = c
        elif c.gid is not None:
            members = self._members.get(c.gid)
            if members is None:
                members = self._members[c.gid] = frozenset(self.groups[int(c.gid)])
            if rank not in members:
                raise HandBack
        return c

    def one(self, node: pb.Node, coll: bool, deps: tuple[list[int], list[int]] | None, prev: int | None,
            rank: int, where: str) -> bytes:
        """One framed node built with the schema, as the schema path builds it (rare nodes only)."""
        if deps is not None:
            del node.ctrl_deps[:]
            node.ctrl_deps.extend(deps[0])
            del node.data_deps[:]
            node.data_deps.extend(deps[1])
        if coll:
            rewrite_collective(node, rank, self.lnet, self.groups, self.group_masks, where, WorkloadStats(),
                               self.splits)
        if prev is not None:
            node.ctrl_deps.append(prev)
        return nb.framed(node.SerializeToString())

