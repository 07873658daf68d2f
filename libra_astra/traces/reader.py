"""Read Chakra execution traces (one ``PREFIX.RANK.et`` file per rank) into compact programs.

A rank file is a stream of varint32-length-prefixed protobuf messages (mlc-chakra's
``et_def.proto``): one ``GlobalMetadata``, then one ``Node`` per message; plain or gzipped.

Why the reader does not call ``Node.ParseFromString`` per node and read its fields: with the upb
backend the parse itself is cheap (~0.4 us per node), but every repeated field or attribute
touched from Python costs 150-300 ns, which makes such a reader 3-4x slower than a bare parse.
Instead:

- one Python loop finds where each message starts (the length prefixes chain);
- the top-level fields of all messages (id, type, duration, dependencies) are read in lockstep
  with numpy, in the schema's field order, with tags taken from the schema's descriptors;
- the attribute block of each node is looked up by its bytes, and decoded with the schema's own
  ``AttributeProto`` class only the first time a block (or a single attribute) is seen: every
  all-reduce of one size on one group carries the same bytes;
- anything unusual (METADATA nodes, repeated, unknown or out-of-order fields) falls back to a
  full ``Node`` parse of that message, so the fast path never changes the result;
- the rank files of one job repeat each other byte for byte but for a few group names and
  peers: a file as long as an earlier one of its batch, differing from it in few messages and
  in no length prefix, takes that file's message offsets, and only its differing messages are
  read (the others take the fields of the same message in that file).

The output is one :class:`RankProgram` per distinct file: numpy arrays indexed by node position
(file order), not a Python object per node. Attribute values live in a table shared by all files
of a read (:class:`AttrTable`), so programs of different ranks can be compared array by array.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import LibraError
from .attrs import _WANTED, _WANTED_BYTES, AttrTable, NodeAttrs, _attr_value, _attrs_from_protos, _normalize
from .files import read_file_bytes
from .graph import resolve_deps, resolve_deps_many
from .process_groups import metadata_groups
from .schema import METADATA_NODE, need_chakra, pb
from . import wire
from .wire import _bodies, _frames, _heads, _varint_more




# Bound on the per-read cache of distinct attribute blocks: PyTorch traces carry per-node
# attributes (rf_id, seq_id) that never repeat, and caching those would only cost memory.
_BLOCK_CACHE_LIMIT = 1 << 18
# Files are decoded together until this many bytes: enough to amortize the array walk's fixed cost
_BATCH_BYTES = 8 << 20
# Earlier files of one length a file is compared with before its own messages are walked
_TEMPLATE_TRIES = 3
# ... or only the latest one, after this many files in a row fit none
_TEMPLATE_MISSES = 8


@dataclass(frozen=True, eq=False)
class RankProgram:
    """Compact form of one rank file. Arrays are indexed by node position (file order).

    ``attr`` indexes the :class:`AttrTable` of the read; ``dep_ptr``/``dep_index`` are the
    dependencies (data and control) as CSR, with node positions instead of ids.
    """

    path: str
    node_ids: np.ndarray        # uint64
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


def _distinct(arr: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group the byte strings ``arr[start:start + length]`` by content, exactly.

    Returns (index of each group's first member, group of each string); groups are numbered in
    no particular order."""
    firsts_l, inv = [], np.empty(start.size, dtype=np.int64)
    base = 0
    for size in np.unique(length).tolist():
        sel = np.nonzero(length == size)[0]
        if size == 0:
            u_first, u_inv = np.zeros(1, dtype=np.int64), np.zeros(sel.size, dtype=np.int64)
        else:
            u_first, u_inv = wire.group_rows(wire.byte_rows(arr, start[sel], size))
        firsts_l.append(sel[u_first])
        inv[sel] = u_inv + base
        base += u_first.size
    return np.concatenate(firsts_l), inv


def _words(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of a (k, size) uint8 array (size <= 16) as two integers that tell rows of one
    size apart: its first and its last 8 bytes (zero-padded below 8 bytes: then 0)."""
    k, size = rows.shape
    if size < 8:
        padded = np.zeros((k, 8), dtype=np.uint8)
        padded[:, :size] = rows
        return padded.view(np.uint64).reshape(-1), np.zeros(k, dtype=np.uint64)
    return (np.ascontiguousarray(rows[:, :8]).view(np.uint64).reshape(-1),
            np.ascontiguousarray(rows[:, size - 8:]).view(np.uint64).reshape(-1))


# the wanted attribute names by length, as :func:`_words` gives them: (length, (first words, last words))
assert max(len(n) for n in _WANTED_BYTES) <= 16
_WANTED_WORDS = tuple(
    (size, _words(np.frombuffer(b"".join(sorted(n for n in _WANTED_BYTES if len(n) == size)),
                                dtype=np.uint8).reshape(-1, size)))
    for size in sorted({len(n) for n in _WANTED_BYTES}))


def _wanted_names(arr: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Whether each name ``arr[start:start + length]`` is one of the wanted attributes' names:
    names of one length compared with the wanted ones of that length as two integers each (a
    few names, many attributes)."""
    out = np.zeros(start.size, dtype=bool)
    for size, (w0, w1) in _WANTED_WORDS:
        sel = np.flatnonzero(length == size)
        if sel.size:
            a, b = _words(wire.byte_rows(arr, start[sel], size))
            hit = np.zeros(sel.size, dtype=bool)
            for x, y in zip(w0.tolist(), w1.tolist()):
                hit |= (a == np.uint64(x)) & (b == np.uint64(y))
            out[sel] = hit
    return out


def _differing(arr: np.ndarray, base: int, t_base: int, size: int, meta_end: int,
               heads: np.ndarray) -> np.ndarray | None:
    """Offsets where the file at ``base`` differs from a template at ``t_base`` (both ``size``
    bytes long); None when the template does not fit: a differing GlobalMetadata message (it
    ends at ``meta_end``), or differing bytes in more than half of its messages (at ``heads``),
    where reading the file's own messages costs less than the few it would share."""
    ne = arr[base:base + size] != arr[t_base:t_base + size]
    # more differing bytes than messages, twice over: rejected before listing them (files that
    # differ everywhere, e.g. in every node id, would otherwise cost more than they share)
    if int(np.count_nonzero(ne)) > 2 * heads.size:
        return None
    d = np.flatnonzero(ne)
    if d.size and int(d[0]) < meta_end:
        return None
    if d.size > heads.size // 2:
        j = np.searchsorted(heads, d, side="right")
        if int(np.count_nonzero(j[1:] != j[:-1])) + 1 > heads.size // 2:
            return None
    return d


def _tries(misses: int) -> int:
    """How many templates a file is compared with after ``misses`` files of its length in a row
    fit none: after a run of them, the latest only (such files differ throughout)."""
    return _TEMPLATE_TRIES if misses < _TEMPLATE_MISSES else min(_TEMPLATE_TRIES, 1)


def _template(arr: np.ndarray, base: int, size: int, candidates: list[int], tries: int, bases: list[int],
              meta_end: list[int], heads_l: list[np.ndarray]) -> tuple[int, np.ndarray | None]:
    """(the first of the first ``tries`` ``candidates`` -- earlier files of this length, most
    recently fitting first -- that the file at ``base`` fits, and the differing offsets; -1, None
    if none does). A fitting template moves to the front: neighbouring ranks tend to share a
    pipeline stage, hence bytes."""
    for k, t in enumerate(candidates[:tries]):
        d = _differing(arr, base, bases[t], size, meta_end[t], heads_l[t])
        if d is not None:
            if k:
                candidates.insert(0, candidates.pop(k))
            return t, d
    return -1, None


def _twins(follow: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the messages of files with a template, each one's counterpart in the template);
    ``follow``: each file's template (-1: none), ``first``: each file's first message."""
    msg_file = np.repeat(np.arange(follow.size, dtype=np.int64), np.diff(first))
    mine = np.flatnonzero(follow[msg_file] >= 0)
    f = msg_file[mine]
    return mine, mine - first[f] + first[follow[f]]


def _repeats(follow: np.ndarray, diffs: list[np.ndarray], off: np.ndarray, first: np.ndarray, h: np.ndarray,
             starts: np.ndarray, twins: tuple[np.ndarray, np.ndarray]) -> np.ndarray | None:
    """Per message, the template message with the same bytes, or itself (see
    :meth:`TraceReader._frames_together`). ``follow``: each file's template (-1: none); ``diffs``:
    the differing byte offsets of each file that has one, in file order; ``h``/``starts``: every
    message's header and body offset; ``twins``: what :func:`_twins` gives. None if a differing
    byte is in a length prefix."""
    files = np.flatnonzero(follow >= 0)
    d_file = np.repeat(files, [d.size for d in diffs])
    d_at = np.concatenate(diffs)
    t_at = d_at - off[d_file] + off[follow[d_file]]   # the same byte in the template
    j = np.searchsorted(h, t_at, side="right") - 1     # the template's message holding it
    if bool((t_at < starts[j]).any()):
        return None
    n = h.size
    differs = np.zeros(n, dtype=bool)
    differs[j - first[follow[d_file]] + first[d_file]] = True
    mine, twin = twins
    same = ~differs[mine]
    rep = np.arange(n, dtype=np.int64)
    rep[mine[same]] = twin[same]
    return rep


class TraceReader:
    """Reads rank files into :class:`RankProgram` s sharing one :class:`AttrTable`.

    Identical files (same bytes after gunzip) are decoded once.
    """

    def __init__(self) -> None:
        need_chakra()
        wire.init_tags()
        self.attrs = AttrTable()
        self._by_bytes: dict[bytes, RankProgram] = {}
        self.files_decoded = 0

    def read(self, path: str | Path) -> RankProgram:
        return self.read_many([path])[0]

    def read_many(self, paths: Sequence[str | Path], expect: Mapping[str, str] | None = None) -> list[RankProgram]:
        """Programs of ``paths`` in order. Files with identical bytes are decoded once, and small
        files are decoded in batches: the per-call overhead of the array walk is paid per batch.

        ``expect`` maps a path to the hex blake2b-160 digest its content must have (the trace
        set's completion marker)."""
        out: list[RankProgram | bytes] = []
        batch: dict[bytes, tuple[bytes, str]] = {}
        size = 0
        for p in paths:
            data = read_file_bytes(p)
            key = hashlib.blake2b(data, digest_size=20).digest()
            if expect is not None and expect.get(str(p), key.hex()) != key.hex():
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
        framed = None
        try:
            framed = self._frames_together(bufs, wheres, arr)
        except LibraError:
            pass
        if framed is None:  # a damaged file: frame file by file, which raises the first file's error
            framed = self._frames_each(bufs, wheres)
        versions, starts, ends, heads_l, first, rep = framed
        n = starts.size
        w = wire.walk_shared(arr, starts, ends, wire.TAGS, rep)
        slow = w.slow | (w.types == METADATA_NODE)

        def where_of(i: int) -> tuple[int, str]:
            f = int(np.searchsorted(first, i, side="right")) - 1
            return f, wheres[f]

        # attribute blocks: one dict lookup per node, schema decode once per distinct block
        # a message that repeats an earlier one (rep) takes its attribute row: the first node of
        # every distinct block is read itself, so rows are interned (and errors named) as before
        aid = np.zeros(n, dtype=np.int64)
        read = w.has_attr & ~slow
        if rep is not None:
            read &= rep == np.arange(n, dtype=np.int64)
        idx = np.nonzero(read)[0]
        if idx.size:
            got = self._block_ids(buf, arr, w.attr_start[idx], ends[idx], idx,
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
                        f"{where}: corrupt node message at byte offset {int(heads_l[f][i - first[f]])} "
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
            if resolved[f]:
                progs.append(_program(where, versions[f], w.ids[lo:hi], w.durs[lo:hi], types8[lo:hi], attr32[lo:hi],
                                      dep_ptr, dep_pos[d_lo:d_hi], tuple(pg_info[f]), ()))
            else:
                progs.append(self._finish(where, versions[f], w.ids[lo:hi], w.durs[lo:hi], w.types[lo:hi],
                                          aid[lo:hi], dep_vals[d_lo:d_hi], dep_ptr, tuple(pg_info[f])))
        return progs

    def _frames_each(self, bufs: Sequence[bytes], wheres: Sequence[str]) -> tuple:
        """(versions, body starts, body ends, header offsets per file, first message of each file,
        None): file by file, raising the first damaged file's error."""
        versions, starts_l, ends_l, heads_l = [], [], [], []
        base = 0
        for buf, where in zip(bufs, wheres):
            if len(buf) == 0:
                raise LibraError(f"{where}: empty file; a trace file starts with a GlobalMetadata message")
            version, pos = self._global_metadata(buf, where)
            s, e, h = _frames(buf, pos, where)
            versions.append(version)
            starts_l.append(s + base)
            ends_l.append(e + base)
            heads_l.append(h)
            base += len(buf)
        counts = np.asarray([x.size for x in starts_l], dtype=np.int64)
        first = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        return versions, np.concatenate(starts_l), np.concatenate(ends_l), heads_l, first, None

    def _frames_together(self, bufs: Sequence[bytes], wheres: Sequence[str], arr: np.ndarray,
                         share: bool = True) -> tuple | None:
        """As :meth:`_frames_each`, with the length prefixes of all files decoded in one numpy pass
        (per-file numpy calls cost more than the decode on small rank files); None, or a raised
        error, when a file is damaged: the caller then frames file by file for the right error.

        Rank files of one job are mostly the same bytes: a file as long as an earlier one of the
        batch (its template) whose differing bytes are few, outside the GlobalMetadata message and
        outside every length prefix has the template's message offsets (the prefixes chain
        through the same bytes), so the Python walk of the prefixes runs once per template. The
        last item maps each message of such a file whose bytes are all the template's to the
        template's message (else to itself), for :func:`wire.walk_shared`."""
        versions, heads_l, bases, counts, meta_end = [], [], [], [], []
        follow: list[int] = []
        diffs: list[np.ndarray] = []
        templates: dict[int, list[int]] = {}
        misses: dict[int, int] = {}
        base = 0
        for f, (buf, where) in enumerate(zip(bufs, wheres)):
            if len(buf) == 0:
                return None
            candidates = templates.setdefault(len(buf), [])
            tries = _tries(misses.get(len(buf), 0)) if share else 0
            t, d = _template(arr, base, len(buf), candidates, tries, bases, meta_end, heads_l)
            misses[len(buf)] = 0 if d is not None else misses.get(len(buf), 0) + 1
            if d is None:
                version, pos = self._global_metadata(buf, where)
                h = _heads(buf, pos, where)
                candidates.insert(0, f)
            else:
                version, pos, h = versions[t], meta_end[t], heads_l[t]
                diffs.append(d + base)
            follow.append(t)
            versions.append(version)
            meta_end.append(pos)
            heads_l.append(h)
            bases.append(base)
            counts.append(h.size)
            base += len(buf)
        cnt = np.asarray(counts, dtype=np.int64)
        off = np.asarray(bases, dtype=np.int64)
        file_end = off + np.asarray([len(b) for b in bufs], dtype=np.int64)
        h = np.concatenate(heads_l) + np.repeat(off, cnt)
        first = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum(cnt, out=first[1:])
        limit = np.repeat(file_end, cnt)
        fol = np.asarray(follow, dtype=np.int64)
        twins = _twins(fol, first) if diffs else None
        if twins is None:
            starts, ends = _bodies(arr, h, limit)
        else:  # a template's length prefixes are its followers': decoded once, moved to each
            mine, twin = twins
            lead = np.ones(h.size, dtype=bool)
            lead[mine] = False
            starts, ends = np.empty_like(h), np.empty_like(h)
            starts[lead], ends[lead] = _bodies(arr, h[lead], limit[lead])
            shift = h[mine] - h[twin]
            starts[mine], ends[mine] = starts[twin] + shift, ends[twin] + shift
        last = first[1:][cnt > 0] - 1
        if bool((ends[last] > limit[last]).any()) or bool((ends == starts).any()):
            return None
        rep = None
        if twins is not None:
            rep = _repeats(fol, diffs, off, first, h, starts, twins)
            if rep is None:  # a length prefix differs from its template's: walk every file's own
                return self._frames_together(bufs, wheres, arr, share=False)
        return versions, starts, ends, heads_l, first, rep

    def _block_ids(self, buf: bytes, arr: np.ndarray, bs: np.ndarray, be: np.ndarray, idx: np.ndarray,
                   where) -> np.ndarray:
        """Attribute id of each block ``buf[bs:be]`` (-1: the node needs the schema's parse).

        Traces repeat a few distinct blocks millions of times, so blocks are grouped by their
        bytes in bulk and only the first block of each group is decoded: all together
        (:meth:`_blocks_bulk`), or one by one (looked up, decoded on first sight) when a block
        is not plain."""
        blocks = self.attrs.blocks
        got = np.full(bs.size, -1, dtype=np.int64)
        length = be - bs

        def lookup(j: int) -> int:
            s, e = int(bs[j]), int(be[j])
            blk = buf[s:e]
            a = blocks.get(blk)
            if a is None:
                i = int(idx[j])
                a = self._block(blk, lambda i=i: where(i))
                if a >= 0 and len(blocks) < _BLOCK_CACHE_LIMIT:
                    blocks[blk] = a
            return a

        # Look blocks up in node order, so attribute ids (and errors) come in first-seen order.
        first, inv = _distinct(arr, bs, length)
        order = np.sort(first)
        ids = self._blocks_bulk(arr, bs[order], be[order], idx[order], where)
        if ids is None:  # something unusual in a block: the per-block decode below decides, as it always did
            ids = np.asarray([lookup(j) for j in order.tolist()], dtype=np.int64)
        found = np.empty(bs.size, dtype=np.int64)
        found[order] = ids
        return found[first][inv]

    def _blocks_bulk(self, arr: np.ndarray, bs: np.ndarray, be: np.ndarray, idx: np.ndarray,
                     where) -> np.ndarray | None:
        """Attribute ids of the distinct blocks ``arr[bs:be]`` (in node order), decoded together.

        Why: generated traces give every send and receive a unique ``comm_tag``, so nearly every
        such block is distinct and decoding blocks one by one in Python (:meth:`_block`) cost
        more than the whole bare parse. Here the attributes of all blocks are split with numpy,
        the unwanted ones are dropped by their name bytes, each distinct wanted attribute is
        decoded once (:meth:`_single`, cached across batches) and each distinct sequence of
        wanted attributes is interned once, in first-seen order (so row ids match the
        per-block decode). Returns None when any block is not plain (a tag other than ``attr``,
        a length of 3+ bytes, a torn attribute, or an attribute the schema rejects or that
        raises): the caller then runs the per-block decode, which keeps every result and error
        exactly as before.
        """
        m = bs.size
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        t_attr = wire.TAGS.attr
        last = arr.size - 1
        cur = bs.copy()
        alive = np.arange(m, dtype=np.int64)
        a_blk, a_k, a_s, a_e = [], [], [], []
        k = 0
        while True:
            live = cur[alive] < be[alive]
            alive = alive[live]
            if alive.size == 0:
                break
            c, end = cur[alive], be[alive]
            b1 = arr[np.minimum(c + 1, last)].astype(np.int64)
            b2 = arr[np.minimum(c + 2, last)].astype(np.int64)
            two = b1 >= 0x80
            ok = (arr[c] == t_attr) & (c + 1 < end) & (~two | ((c + 2 < end) & (b2 < 0x80)))
            if not ok.all():
                return None
            body = c + 2 + two
            aend = body + np.where(two, (b1 & 0x7F) | (b2 << 7), b1)
            if (aend > end).any():
                return None
            a_blk.append(alive)
            a_k.append(np.full(alive.size, k, dtype=np.int64))
            a_s.append(body)
            a_e.append(aend)
            cur[alive] = aend
            k += 1
        if not a_blk:  # only empty blocks (cannot happen: a block holds at least one attr tag)
            return np.zeros(m, dtype=np.int64)
        ablk, ak = np.concatenate(a_blk), np.concatenate(a_k)
        ast, aen = np.concatenate(a_s), np.concatenate(a_e)
        # node order, then attribute order: first sight below follows the per-block decode's order
        o = np.lexsort((ak, ablk))
        ablk, ast, aen = ablk[o], ast[o], aen[o]
        alen = aen - ast
        # the name (field 1, written first) decides most attributes without decoding them, as in _single
        nl = arr[np.minimum(ast + 1, last)].astype(np.int64)
        quick = (alen >= 2) & (arr[np.minimum(ast, last)] == 0x0A) & (nl < 0x80) & (2 + nl <= alen)
        wanted = ~quick
        qi = np.nonzero(quick)[0]
        if qi.size:
            wanted[qi] = _wanted_names(arr, ast[qi] + 2, nl[qi])
        wi = np.nonzero(wanted)[0]
        sid = np.zeros(0, dtype=np.int64)
        hits: list[tuple] = []
        if wi.size:
            firsts, inv = _distinct(arr, ast[wi], alen[wi])
            cache = self.attrs.single
            # decode distinct attributes in first-seen order (errors then name the first node)
            hits = [()] * firsts.size
            for g in np.argsort(firsts, kind="stable").tolist():
                j = int(wi[firsts[g]])
                ab = arr[int(ast[j]):int(aen[j])].tobytes()
                hit = cache.get(ab)
                if hit is None:
                    node = int(idx[int(ablk[j])])
                    try:
                        hit = self._single(ab, lambda node=node: where(node))
                    except LibraError:
                        return None
                    if hit is None:
                        return None
                    if len(cache) < _BLOCK_CACHE_LIMIT:
                        cache[ab] = hit
                hits[g] = hit
            useful = np.asarray([bool(h) for h in hits], dtype=bool)[inv]
            wi, sid = wi[useful], inv[useful]
        # per block, the sequence of its wanted attributes (-1 padded); one NodeAttrs per distinct sequence
        wb = ablk[wi]
        count = np.bincount(wb, minlength=m)
        width = int(count.max()) if count.size else 0
        if width == 0:
            return np.zeros(m, dtype=np.int64)
        start = np.zeros(m, dtype=np.int64)
        np.cumsum(count[:-1], out=start[1:])
        seq = np.full((m, width), -1, dtype=np.int64)
        seq[wb, np.arange(wb.size, dtype=np.int64) - start[wb]] = sid
        first, inv = wire.row_groups(seq)
        rows = seq[first]
        ids = np.zeros(rows.shape[0], dtype=np.int64)
        intern = self.attrs.intern
        for r in np.argsort(first, kind="stable").tolist():
            vals: dict[str, Any] = {}
            for g in rows[r].tolist():
                if g >= 0:
                    vals[hits[g][0]] = hits[g][1]
            ids[r] = intern(NodeAttrs(**vals)) if vals else 0
        return ids[inv]

    def _global_metadata(self, buf: bytes, where: str) -> tuple[str, int]:
        try:
            size = buf[0]
            pos = 1
            if size >= 0x80:
                size, pos = _varint_more(buf, pos, size)
        except (IndexError, ValueError):
            raise LibraError(f"{where}: truncated at byte offset 0 (no complete GlobalMetadata message)") from None
        if pos + size > len(buf):
            raise LibraError(
                f"{where}: truncated: the GlobalMetadata message at byte offset 0 needs {size} bytes but only "
                f"{len(buf) - pos} remain; re-create or re-copy the file"
            )
        try:
            meta = pb.GlobalMetadata.FromString(buf[pos:pos + size])
        except Exception:
            raise LibraError(
                f"{where}: corrupt GlobalMetadata message at byte offset 0; not a Chakra ET file"
            ) from None
        return meta.version, pos + size

    def _block(self, blk: bytes, where: Callable[[], str]) -> int:
        """Decode an attribute block (consecutive ``attr`` fields) with the schema; -1 if not one.

        Blocks of different nodes often differ in one attribute only (pg_name, comm_dst), so
        single attributes are cached too.
        """
        vals: dict[str, Any] = {}
        pos = 0
        n = len(blk)
        t_attr = wire.TAGS.attr
        cache = self.attrs.single
        while pos < n:
            if blk[pos] != t_attr or pos + 1 >= n:   # a bare tag at the end: let the schema judge it
                return -1
            ln = blk[pos + 1]
            pos += 2
            if ln >= 0x80:
                try:
                    ln, pos = _varint_more(blk, pos, ln)
                except (IndexError, ValueError):
                    return -1
            end = pos + ln
            if end > n:
                return -1
            ab = blk[pos:end]
            hit = cache.get(ab)
            if hit is None:
                hit = self._single(ab, where)
                if hit is None:
                    return -1
                if len(cache) < _BLOCK_CACHE_LIMIT:
                    cache[ab] = hit
            if hit:
                vals[hit[0]] = hit[1]
            pos = end
        return self.attrs.intern(NodeAttrs(**vals)) if vals else 0

    @staticmethod
    def _single(ab: bytes, where: str | Callable[[], str]) -> tuple | None:
        """(field, value) of one serialized AttributeProto; () if not wanted; None if undecodable."""
        # the name is field 1, written first: skip attributes we do not need without parsing them
        if len(ab) >= 2 and ab[0] == 0x0A and ab[1] < 0x80 and ab[2:2 + ab[1]] not in _WANTED_BYTES:
            return ()
        try:
            a = pb.AttributeProto.FromString(ab)
        except Exception:
            return None
        if a.name not in _WANTED:
            return ()
        v = _normalize(a.name, _attr_value(a), where)
        return () if v is None else (a.name, v)

    def _finish(self, where: str, version: str, node_ids: np.ndarray, durations: np.ndarray, types: np.ndarray,
                aid: np.ndarray, dep_ids: np.ndarray, dep_ptr: np.ndarray, pg_info: tuple) -> RankProgram:
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


def _program(where: str, version: str, node_ids: np.ndarray, durations: np.ndarray, types: np.ndarray,
             attr: np.ndarray, dep_ptr: np.ndarray, dep_index: np.ndarray, pg_info: tuple, dangling: tuple
             ) -> RankProgram:
    """The program of checked, resolved arrays, with its digest."""
    h = hashlib.blake2b(digest_size=20)
    for a in (types, durations, attr, dep_ptr, dep_index):
        h.update(np.ascontiguousarray(a))
        h.update(b"|")
    h.update(repr(pg_info).encode())
    h.update(repr(dangling).encode())
    return RankProgram(where, node_ids, types, durations, attr, dep_ptr, dep_index, pg_info, dangling,
                       h.digest(), version)
