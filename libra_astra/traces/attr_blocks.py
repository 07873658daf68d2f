"""Attribute blocks of Node messages -> rows of the read's :class:`.attrs.AttrTable`.

A node's attributes are consecutive ``attr`` fields (one block of bytes). Traces repeat a few
distinct blocks millions of times (every all-reduce of one size on one group carries the same
bytes), so blocks are grouped by their bytes and only the first of each group is decoded, with
the schema's own ``AttributeProto`` class: all distinct blocks together with numpy
(:meth:`AttrBlocks.bulk`), or block by block where one is not plain (:meth:`AttrBlocks.block`).
Single attributes are cached too, since blocks of different nodes often differ in one
attribute only (pg_name, comm_dst).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from ..errors import LibraError
from .attrs import _WANTED, _WANTED_BYTES, AttrTable, NodeAttrs, _attr_value, _normalize
from .schema import pb
from . import wire
from .wire import _varint_more

try:
    # The per-block keys compiled (setup.py builds them when it can); LIBRA_ASTRA_PYTHON_ATTRS=1 keeps numpy.
    from . import _attr_keys as _kernel
except ImportError:
    _kernel = None
if os.environ.get("LIBRA_ASTRA_PYTHON_ATTRS") == "1":
    _kernel = None


# Bound on the per-read cache of distinct attribute blocks: PyTorch traces carry per-node
# attributes (rf_id, seq_id) that never repeat, and caching those would only cost memory.
_BLOCK_CACHE_LIMIT = 1 << 18


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


_WANTED_NAMES = tuple(sorted(_WANTED_BYTES))
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


class AttrBlocks:
    """Decodes attribute blocks into rows of one :class:`AttrTable` (its caches of distinct
    blocks and single attributes live in the table, shared by every batch of a read)."""

    def __init__(self, attrs: AttrTable) -> None:
        self.attrs = attrs
        self.keyed: dict[bytes, int] = {}    # a block's wanted attributes -> row (the compiled ids)

    def ids(self, buf: bytes, arr: np.ndarray, bs: np.ndarray, be: np.ndarray, idx: np.ndarray,
            where) -> np.ndarray:
        """Attribute id of each block ``buf[bs:be]`` (-1: the node needs the schema's parse).

        Traces repeat a few distinct blocks millions of times, so blocks are grouped by their
        bytes in bulk and only the first block of each group is decoded: all together
        (:meth:`bulk`), or one by one (looked up, decoded on first sight) when a block
        is not plain."""
        blocks = self.attrs.blocks
        length = be - bs

        def lookup(j: int) -> int:
            s, e = int(bs[j]), int(be[j])
            blk = buf[s:e]
            a = blocks.get(blk)
            if a is None:
                i = int(idx[j])
                a = self.block(blk, lambda i=i: where(i))
                if a >= 0 and len(blocks) < _BLOCK_CACHE_LIMIT:
                    blocks[blk] = a
            return a

        if _kernel is not None:  # every block in node order, each key decoded once: the same ids and errors
            def decode(j: int, key: bytes) -> int:
                return self.block(buf[int(bs[j]):int(be[j])], lambda i=int(idx[j]): where(i))

            return _kernel.block_ids(arr, np.ascontiguousarray(bs, dtype=np.int64),
                                     np.ascontiguousarray(be, dtype=np.int64), wire.TAGS.attr, _WANTED_NAMES,
                                     self.keyed, _BLOCK_CACHE_LIMIT, decode, lookup)
        # Look blocks up in node order, so attribute ids (and errors) come in first-seen order.
        first, inv = _distinct(arr, bs, length)
        order = np.sort(first)
        ids = self.bulk(arr, bs[order], be[order], idx[order], where)
        if ids is None:  # something unusual in a block: the per-block decode below decides, as it always did
            ids = np.asarray([lookup(j) for j in order.tolist()], dtype=np.int64)
        found = np.empty(bs.size, dtype=np.int64)
        found[order] = ids
        return found[first][inv]

    def bulk(self, arr: np.ndarray, bs: np.ndarray, be: np.ndarray, idx: np.ndarray,
             where) -> np.ndarray | None:
        """Attribute ids of the distinct blocks ``arr[bs:be]`` (in node order), decoded together.

        Why: generated traces give every send and receive a unique ``comm_tag``, so nearly every
        such block is distinct and decoding blocks one by one in Python (:meth:`block`) cost
        more than the whole bare parse. Here the attributes of all blocks are split with numpy,
        the unwanted ones are dropped by their name bytes, each distinct wanted attribute is
        decoded once (:meth:`single`, cached across batches) and each distinct sequence of
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
        # the name (field 1, written first) decides most attributes without decoding them, as in single()
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
                        hit = self.single(ab, lambda node=node: where(node))
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

    def block(self, blk: bytes, where: Callable[[], str]) -> int:
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
                hit = self.single(ab, where)
                if hit is None:
                    return -1
                if len(cache) < _BLOCK_CACHE_LIMIT:
                    cache[ab] = hit
            if hit:
                vals[hit[0]] = hit[1]
            pos = end
        return self.attrs.intern(NodeAttrs(**vals)) if vals else 0

    @staticmethod
    def single(ab: bytes, where: str | Callable[[], str]) -> tuple | None:
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
