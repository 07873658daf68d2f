"""Read Chakra execution traces (one ``PREFIX.RANK.et`` file per rank) into compact programs.

A rank file is a stream of varint32-length-prefixed protobuf messages (mlc-chakra's
``et_def.proto``): one ``GlobalMetadata``, then one ``Node`` per message; plain or gzipped.

Why the reader does not call ``Node.ParseFromString`` per node and read its fields: with the upb
backend the parse itself is cheap (~0.4 us per node), but every repeated field or attribute
touched from Python costs 150-300 ns, which makes such a reader 3-4x slower than a bare parse.
Instead, files are decoded in batches, and per batch:

- every message is framed and its top-level fields (id, type, duration, dependencies) read, in
  the schema's field order with tags taken from the schema's descriptors: in one compiled pass
  where it is built, else with numpy, where a file that repeats an earlier one of its batch but
  for a few messages takes that file's offsets and fields (:mod:`.batch`, :mod:`.framing`,
  :mod:`.templates`, :mod:`.wire`);
- the attribute block of each node is looked up by its wanted attributes' bytes, and decoded
  with the schema's own ``AttributeProto`` class only the first time a block (or a single
  attribute) is seen (:mod:`.attr_blocks`);
- anything unusual (METADATA nodes, repeated, unknown or out-of-order fields) falls back to a
  full ``Node`` parse of that message, so the fast path never changes the result;
- dependencies are resolved to node positions (:mod:`.graph`) and each file becomes a program.

This module is that last step and the batching: one :class:`RankProgram` per distinct file,
numpy arrays indexed by node position (file order), not a Python object per node. Attribute
values live in a table shared by all files of a read (:class:`AttrTable`), so programs of
different ranks can be compared array by array.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import LibraError
from .attr_blocks import AttrBlocks
from .attrs import AttrTable, NodeAttrs, _attrs_from_protos
from .files import read_file_bytes
from .batch import walk_batch
from .completion import DIGEST, Expected, hasher
from .graph import resolve_deps, resolve_deps_many
from .process_groups import metadata_groups
from .schema import METADATA_NODE, need_chakra, pb
from . import wire


# Files are decoded together until this many bytes: enough to amortize the array walk's fixed cost
# (4 MB costs no more CPU than 8 MB on a 4,096-rank set, and its transient arrays 12 MB less peak memory)
_BATCH_BYTES = 4 << 20


@dataclass(frozen=True, eq=False)
class RankProgram:
    """Compact form of one rank file. Arrays are indexed by node position (file order).

    ``attr`` indexes the :class:`AttrTable` of the read; ``dep_ptr``/``dep_index`` are the
    dependencies (data and control) as CSR, with node positions instead of ids.
    """

    path: str
    # uint64 node ids; None when they are 0, 1, ..., n - 1 (as generators write them), which
    # :attr:`node_ids` gives without holding 8 bytes per node of every program read
    stored_ids: np.ndarray | None
    types: np.ndarray           # int8, NodeType
    duration_micros: np.ndarray  # uint64
    attr: np.ndarray            # int32 row of the AttrTable
    dep_ptr: np.ndarray         # int64, len n + 1
    dep_index: np.ndarray       # int64 node positions
    pg_info: tuple[tuple[str, tuple[int, ...]], ...] = ()  # METADATA process groups; () ranks = all
    # dependencies on ids absent from the file, (node id, missing id): satisfied, left out of dep_*
    dangling: tuple[tuple[int, int], ...] = ()
    digest: bytes = b""        # identifies the compact program (equal digest = same program)
    version: str = ""

    @property
    def num_nodes(self) -> int:
        return int(self.types.shape[0])

    @property
    def node_ids(self) -> np.ndarray:
        return np.arange(self.num_nodes, dtype=np.uint64) if self.stored_ids is None else self.stored_ids

    def type_counts(self) -> np.ndarray:
        return np.bincount(self.types.astype(np.int64), minlength=8)


def _generic_node(frame: bytes, where: str) -> tuple[int, int, int, list[int], NodeAttrs, Any] | None:
    """Full schema parse of one Node message (the slow path)."""
    try:
        node = pb.Node.FromString(frame)
    except Exception:  # protobuf raises DecodeError (and friends) on bad bytes
        return None
    deps = list(node.data_deps) + list(node.ctrl_deps)
    attrs = _attrs_from_protos(node.attr, f"{where} node {node.id}")
    return node.id, node.type, node.duration_micros, deps, attrs, node


class TraceReader:
    """Reads rank files into :class:`RankProgram` s sharing one :class:`AttrTable`.

    Identical files (same bytes after gunzip) are decoded once.
    """

    def __init__(self) -> None:
        need_chakra()
        wire.init_tags()
        self.attrs = AttrTable()
        self.blocks = AttrBlocks(self.attrs)
        self._by_bytes: dict[bytes, RankProgram] = {}
        self.files_decoded = 0

    def read(self, path: str | Path) -> RankProgram:
        return self.read_many([path])[0]

    def read_many(self, paths: Sequence[str | Path], expect: Expected | None = None) -> list[RankProgram]:
        """Programs of ``paths`` in order. Files with identical bytes are decoded once, and small
        files are decoded in batches: the per-call overhead of the array walk is paid per batch.

        ``expect``: the digest each path's content must have (the trace set's completion marker);
        files are told apart by that digest (SHA-256 without a marker)."""
        out: list[RankProgram | bytes] = []
        batch: dict[bytes, tuple[bytes, str]] = {}
        size = 0
        digests = expect.digests if expect is not None else None
        content_hash = hasher(expect.algorithm if expect is not None else DIGEST)
        for p in paths:
            data = read_file_bytes(p)
            key = content_hash(data).digest()
            if digests is not None and digests.get(str(p), key.hex()) != key.hex():
                raise LibraError(f"{p}: content differs from the digest in the trace set's completion marker (the "
                                 "file was changed after the set was written); write the set again, or delete the "
                                 "marker PREFIX.set.json if the files are right")
            out.append(key)
            if key not in self._by_bytes and key not in batch:
                batch[key] = (data, str(p))
                size += len(data)
                if size >= _BATCH_BYTES:
                    self._decode_batch(batch)
                    batch, size = {}, 0
        if batch:
            self._decode_batch(batch)
        return [self._by_bytes[k] for k in out]

    def _decode_batch(self, batch: dict[bytes, tuple[bytes, str]]) -> None:
        keys = list(batch)
        progs = self.parse_many([batch[k][0] for k in keys], [batch[k][1] for k in keys])
        for k, prog in zip(keys, progs):
            self._by_bytes[k] = prog
        self.files_decoded += len(keys)

    def parse(self, buf: bytes, where: str) -> RankProgram:
        """Decode one rank file's bytes (already gunzipped); ``where`` names it in errors."""
        return self.parse_many([buf], [where])[0]

    def parse_many(self, bufs: Sequence[bytes], wheres: Sequence[str]) -> list[RankProgram]:
        """Decode several rank files at once (their messages are walked together)."""
        buf = bufs[0] if len(bufs) == 1 else b"".join(bufs)
        arr = np.frombuffer(buf, dtype=np.uint8)
        versions, starts, ends, first, w, rep, head_of = walk_batch(bufs, wheres, buf, arr)
        n = starts.size
        slow = w.slow | (w.types == METADATA_NODE)

        def where_of(i: int) -> tuple[int, str]:
            f = int(np.searchsorted(first, i, side="right")) - 1
            return f, wheres[f]

        # attribute blocks: one dict lookup per node, schema decode once per distinct block
        # a message whose rep is another takes that message's attribute row: the first node of
        # every distinct block is read itself, so rows are interned (and errors named) as before
        aid = np.zeros(n, dtype=np.int64)
        read = w.has_attr & ~slow
        if rep is not None:
            read &= rep == np.arange(n, dtype=np.int64)
        idx = np.nonzero(read)[0]
        if idx.size:
            got = self.blocks.ids(buf, arr, w.attr_start[idx], ends[idx], idx,
                                  lambda i: f"{where_of(i)[1]}: node {int(w.ids[i])}")
            aid[idx] = got
            if rep is None:
                slow[idx[got < 0]] = True
            else:
                aid = aid[rep]
                slow |= aid < 0

        dep_frame, dep_vals = w.dep_frame, w.dep_vals
        pg_info: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in bufs]
        slow_idx = np.nonzero(slow)[0]
        if slow_idx.size:
            keep = ~slow[dep_frame]
            frames_l, vals_l = [dep_frame[keep]], [dep_vals[keep]]
            for i in slow_idx.tolist():
                f, where = where_of(i)
                got = _generic_node(buf[int(starts[i]):int(ends[i])], where)
                if got is None:
                    raise LibraError(
                        f"{where}: corrupt node message at byte offset {head_of(f, i)} "
                        "(protobuf cannot decode it); the file is damaged or not a Chakra ET file"
                    )
                nid, typ, dur, extra, attrs, node = got
                w.ids[i], w.types[i], w.durs[i] = nid, typ, dur
                aid[i] = self.attrs.intern(attrs)
                if extra:
                    frames_l.append(np.full(len(extra), i, dtype=np.int64))
                    vals_l.append(np.asarray(extra, dtype=np.uint64))
                if typ == METADATA_NODE:
                    pg_info[f].extend(metadata_groups(node, f"{where}: node {nid} (METADATA)"))
            dep_frame = np.concatenate(frames_l)
            dep_vals = np.concatenate(vals_l)
        if dep_frame.size > 1 and not bool(np.all(dep_frame[1:] >= dep_frame[:-1])):
            order = np.argsort(dep_frame, kind="stable")
            dep_frame, dep_vals = dep_frame[order], dep_vals[order]
        dep_count = np.bincount(dep_frame, minlength=n)
        dep_first = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(dep_count, out=dep_first[1:])
        resolved, dep_pos = resolve_deps_many(w.ids, dep_vals, dep_first, first)
        bad = np.flatnonzero(_unknown_type(w.types))
        resolved[np.searchsorted(first, bad, side="right") - 1] = False     # the files holding them
        types8 = w.types.astype(np.int8)
        attr32 = aid.astype(np.int32)
        progs = []
        for f, where in enumerate(wheres):
            lo, hi = int(first[f]), int(first[f + 1])
            d_lo, d_hi = int(dep_first[lo]), int(dep_first[hi])
            dep_ptr = dep_first[lo:hi + 1] - d_lo
            if resolved[f]:  # ids strictly increasing: from 0 to n - 1 they are 0, 1, ..., n - 1
                ids = None if hi > lo and w.ids[lo] == 0 and w.ids[hi - 1] == hi - lo - 1 else w.ids[lo:hi]
                progs.append(_program(where, versions[f], ids, w.durs[lo:hi], types8[lo:hi], attr32[lo:hi],
                                      dep_ptr, dep_pos[d_lo:d_hi], tuple(pg_info[f]), ()))
            else:
                progs.append(_finish(where, versions[f], w.ids[lo:hi], w.durs[lo:hi], w.types[lo:hi],
                                          aid[lo:hi], dep_vals[d_lo:d_hi], dep_ptr, tuple(pg_info[f])))
        return progs


def _finish(where: str, version: str, node_ids: np.ndarray, durations: np.ndarray, types: np.ndarray,
            aid: np.ndarray, dep_ids: np.ndarray, dep_ptr: np.ndarray, pg_info: tuple) -> RankProgram:
    """The program of one file the batch's resolution left out (node ids not increasing, or a
    dependency on an absent node, or a node of unknown type): an unknown type or a duplicate id
    raises here, dependencies on absent nodes are satisfied and reported."""
    bad = _unknown_type(types)
    if bad.any():
        i = int(np.argmax(bad))
        raise LibraError(
            f"{where}: node {int(node_ids[i])} has unknown node type {int(types[i])}; the schema defines 0..7"
        )
    dep_index, dep_ptr, dangling = resolve_deps(node_ids, dep_ids, dep_ptr, where)
    return _program(where, version, node_ids, durations, types.astype(np.int8), aid.astype(np.int32), dep_ptr,
                    dep_index, pg_info, dangling)


def _unknown_type(types: np.ndarray) -> np.ndarray:
    """Whether each node's type is outside the schema's 0..7 (such a file goes to _finish, which
    names the first)."""
    return (types < 0) | (types > 7)


def _program(where: str, version: str, node_ids: np.ndarray | None, durations: np.ndarray, types: np.ndarray,
             attr: np.ndarray, dep_ptr: np.ndarray, dep_index: np.ndarray, pg_info: tuple, dangling: tuple
             ) -> RankProgram:
    """The program of checked, resolved arrays, with its digest (SHA-256: hashed in hardware,
    about half blake2b's time on the ~36 bytes per node of a 4,096-rank set)."""
    h = hashlib.sha256()
    for a in (types, durations, attr, dep_ptr, dep_index):
        h.update(np.ascontiguousarray(a))
        h.update(b"|")
    h.update(repr(pg_info).encode())
    h.update(repr(dangling).encode())
    return RankProgram(where, node_ids, types, durations, attr, dep_ptr, dep_index, pg_info, dangling,
                       h.digest(), version)
