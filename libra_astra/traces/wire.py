"""The protobuf wire format of rank files, decoded for all messages at once with numpy.

Only the top-level fields of ``Node`` are read here (id, type, duration, dependencies, where the
attribute block starts), with tags taken from the schema's descriptors; anything unusual marks
the message "slow" so that the reader parses it with the schema instead.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import LibraError
from ..ranges import concat_ranges
from .schema import pb


# No length is this long: a longer one is a damaged file (and would not fit numpy's int64 offsets)
MAX_LENGTH = 1 << 62


def _varint_more(buf: bytes, pos: int, first: int) -> tuple[int, int]:
    """Finish a length varint whose first byte (``first`` >= 0x80) was at pos - 1."""
    result = first & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= MAX_LENGTH:
                raise ValueError("length beyond 2**62")
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _field_tag(name: str, wire: int) -> int:
    return (pb.Node.DESCRIPTOR.fields_by_name[name].number << 3) | wire


class _Tags:
    """Wire tags of the Node fields read on the fast path (from the schema's descriptor)."""

    def __init__(self) -> None:
        self.id = _field_tag("id", 0)
        self.type = _field_tag("type", 0)
        self.duration = _field_tag("duration_micros", 0)
        self.ctrl = _field_tag("ctrl_deps", 0)
        self.ctrl_packed = _field_tag("ctrl_deps", 2)
        self.data = _field_tag("data_deps", 0)
        self.data_packed = _field_tag("data_deps", 2)
        self.attr = _field_tag("attr", 2)
        # top-level fields in field-number order, with how to read them
        self.steps = (
            (self.id, "id"), (_field_tag("name", 2), "len"), (self.type, "type"),
            (self.ctrl_packed, "deps"), (self.data_packed, "deps"), (_field_tag("start_time_micros", 0), "skip"),
            (self.duration, "duration"), (_field_tag("inputs", 2), "len"), (_field_tag("outputs", 2), "len"),
        )
        assert max(tag for tag, _ in self.steps) < 0x80 and self.attr < 0x80, "the walk assumes one-byte tags"


TAGS: _Tags | None = None


def init_tags() -> None:
    """Read the tags from the schema once (needs mlc-chakra, hence not at import)."""
    global TAGS
    if TAGS is None:
        TAGS = _Tags()


def _heads(buf: bytes, pos: int, where: str) -> np.ndarray:
    """Header offset of every length-prefixed message from ``pos`` on.

    The only per-message Python loop of the reader: the length prefixes chain, so they
    cannot be found in bulk.
    """
    n = len(buf)
    heads = array("q")
    ha = heads.append
    try:
        while pos < n:
            ha(pos)
            size = buf[pos]
            if size < 0x80:
                pos += 1 + size
            else:
                size, pos = _varint_more(buf, pos + 1, size)
                pos += size
    except (IndexError, ValueError):
        raise LibraError(
            f"{where}: truncated or corrupt length prefix at byte offset {heads[-1]}; the file was cut short or "
            "damaged, re-create or re-copy it"
        ) from None
    return np.frombuffer(heads, dtype=np.int64) if len(heads) else np.zeros(0, np.int64)


def _bodies(arr: np.ndarray, h: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Body start and end of the messages whose headers are at ``h`` (limit: the end of each one's file);
    the length prefixes are decoded in bulk."""
    size, s, _ = _varints(arr, h, limit)
    return s, s + size.astype(np.int64)


def _frames(buf: bytes, pos: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Body start, body end and header offset of every length-prefixed message from ``pos`` on."""
    n = len(buf)
    h = _heads(buf, pos, where)
    arr = np.frombuffer(buf, dtype=np.uint8)
    s, e = _bodies(arr, h, np.full(h.shape, n, dtype=np.int64))
    if e.size and e[-1] > n:
        raise LibraError(
            f"{where}: truncated: the message at byte offset {int(h[-1])} needs "
            f"{int(e[-1] - s[-1])} bytes but only {n - int(s[-1])} remain; the file was cut short, re-create or "
            "re-copy it"
        )
    empty = np.nonzero(e == s)[0]
    if empty.size:
        raise LibraError(
            f"{where}: zero-length message at byte offset {int(h[empty[0]])}; readers (and "
            "ASTRA-sim) stop there, so the rest of the file would be lost; never write a node with all fields "
            "at their defaults"
        )
    return s, e, h


def _varints(arr: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode one varint at each position (all at once); also the position after it and an ok flag."""
    val = np.zeros(pos.size, dtype=np.uint64)
    ok = np.ones(pos.size, dtype=bool)
    pos = pos.copy()
    active = np.arange(pos.size)
    for k in range(10):
        q = pos[active]
        inside = q < limit[active]
        if not inside.all():
            ok[active[~inside]] = False
            active, q = active[inside], q[inside]
        if active.size == 0:
            break
        b = arr[q]
        val[active] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        pos[active] = q + 1
        active = active[b >= 0x80]
        if active.size == 0:
            break
    else:
        ok[active] = False
    return val, pos, ok


def _packed(arr: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode packed varint ranges [off, off + length); returns (values, count per range, the
    ranges holding a varint of more than 10 bytes: protobuf rejects those).

    Every range must end on a varint's last byte (checked by the caller).
    """
    total = int(length.sum())
    if total == 0:
        return np.zeros(0, np.uint64), np.zeros(off.size, np.int64), np.zeros(0, np.int64)
    first = np.zeros(off.size, dtype=np.int64)
    np.cumsum(length[:-1], out=first[1:])
    byte_idx = np.repeat(off - first, length) + np.arange(total, dtype=np.int64)
    b = arr[byte_idx]
    term = b < 0x80
    # varint v covers bytes (end of varint v - 1, end of varint v]
    ends = np.nonzero(term)[0]
    vstart = np.empty(ends.size, dtype=np.int64)
    vstart[0] = 0
    vstart[1:] = ends[:-1] + 1
    k = np.arange(total, dtype=np.int64) - np.repeat(vstart, ends - vstart + 1)
    contrib = (b & 0x7F).astype(np.uint64) << (7 * k).astype(np.uint64)
    values = np.bitwise_or.reduceat(contrib, vstart)
    cum = np.concatenate(([0], np.cumsum(term, dtype=np.int64)))
    counts = cum[first + length] - cum[first]
    too_long = vstart[ends - vstart >= 10]
    return values, counts, np.searchsorted(first, too_long, side="right") - 1


class _Walk(NamedTuple):
    ids: np.ndarray
    types: np.ndarray
    durs: np.ndarray
    has_attr: np.ndarray
    attr_start: np.ndarray
    dep_frame: np.ndarray
    dep_vals: np.ndarray
    slow: np.ndarray


def _walk(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray, t: "_Tags") -> _Walk:
    """Read the top-level fields of all messages in lockstep, in the schema's field order.

    Serializers write fields in field-number order, so one pass over the fields in that order
    reads every canonical message. A message that still has bytes left before its attribute
    block (repeated or unknown fields, other order) is flagged ``slow`` and re-read by the schema.
    """
    n = starts.size
    last = max(arr.size - 1, 0)
    cur = starts.copy()
    ids = np.zeros(n, np.uint64)
    types = np.zeros(n, np.int64)
    durs = np.zeros(n, np.uint64)
    bad = np.zeros(n, bool)
    dep_frames: list[np.ndarray] = []
    dep_vals: list[np.ndarray] = []

    def peek() -> np.ndarray:
        tag = arr[np.minimum(cur, last)].astype(np.int64)
        tag[cur >= ends] = -1
        return tag

    for tag, kind in t.steps:
        idx = np.nonzero(peek() == tag)[0]
        if idx.size == 0:
            continue
        lim = ends[idx]
        v, p, ok = _varints(arr, cur[idx] + 1, lim)
        if kind == "len" or kind == "deps":
            ok &= v < np.uint64(MAX_LENGTH)
            p = p + np.where(ok, v, 0).astype(np.int64)
            ok &= p <= lim
        if not ok.all():
            bad[idx[~ok]] = True
            idx, v, p = idx[ok], v[ok], p[ok]
        cur[idx] = p
        if kind == "deps":
            length = v.astype(np.int64)
            off = p - length
            nz = length > 0
            idx, off, length = idx[nz], off[nz], length[nz]
            if idx.size:
                torn = arr[off + length - 1] >= 0x80
                if torn.any():
                    bad[idx[torn]] = True
                    idx, off, length = idx[~torn], off[~torn], length[~torn]
                vals, counts, too_long = _packed(arr, off, length)
                bad[idx[too_long]] = True
                dep_frames.append(np.repeat(idx, counts))
                dep_vals.append(vals)
        elif kind == "id":
            ids[idx] = v
        elif kind == "type":
            types[idx] = v.astype(np.int64)
        elif kind == "duration":
            durs[idx] = v
    tag = peek()
    has_attr = tag == t.attr
    slow = bad | ((tag != -1) & ~has_attr)
    df = np.concatenate(dep_frames) if dep_frames else np.zeros(0, np.int64)
    dv = np.concatenate(dep_vals) if dep_vals else np.zeros(0, np.uint64)
    return _Walk(ids, types, durs, has_attr, cur, df.astype(np.int64), dv, slow)


def byte_rows(arr: np.ndarray, start: np.ndarray, size: int) -> np.ndarray:
    """The byte strings ``arr[start:start + size]`` as the rows of a (len(start), size) array.

    Rows of a sliding-window view are gathered as whole rows: no (n, size) index array."""
    return sliding_window_view(arr, size)[start]


def row_groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal rows of a 2-D array (at least one column) grouped by their raw bytes: (first row of
    each group, group of each row). One sort of fixed-size byte strings, where
    ``np.unique(axis=0)`` sorts column by column."""
    rows = np.ascontiguousarray(rows)
    raw = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    _, first, inv = np.unique(raw, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def group_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact grouping of the rows of a (k, size) uint8 array: (first member of each group, group of
    each row), groups numbered in no particular order.

    Rows of up to 8 bytes are compared as one integer; longer rows by a hash of their 8-byte words,
    checked against their group's first row: rows that differ from it (a collision) are grouped
    again by their bytes, so the result never depends on the hash."""
    k, size = rows.shape
    words = -(-size // 8)
    if size % 8:
        padded = np.zeros((k, words * 8), dtype=np.uint8)
        padded[:, :size] = rows
    else:
        padded = np.ascontiguousarray(rows)
    w64 = padded.view(np.uint64)
    h = w64[:, 0].copy()
    for j in range(1, words):  # array arithmetic wraps modulo 2**64, as a hash should
        h = (h * np.uint64(0x9E3779B97F4A7C15)) ^ w64[:, j]
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if words > 1:
        other = np.nonzero(~(w64 == w64[first[inv]]).all(axis=1))[0]
        if other.size:
            f2, i2 = row_groups(padded[other])
            inv[other] = i2 + first.size
            first = np.concatenate((first, other[f2]))
    return first, inv


def walk_shared(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray, t: "_Tags", rep: np.ndarray | None) -> _Walk:
    """:func:`_walk` of every message, reading only the messages with ``rep[i] == i``; message i
    takes the fields of message ``rep[i]``, whose bytes are the same (None: read them all).

    Rank files of one job repeat each other's messages byte for byte; reading each once makes
    the walk's cost follow the distinct messages instead of all of them."""
    n = starts.size
    if rep is None:
        return _walk(arr, starts, ends, t)
    own = np.flatnonzero(rep == np.arange(n, dtype=np.int64))
    if own.size == n:
        return _walk(arr, starts, ends, t)
    w = _walk(arr, starts[own], ends[own], t)
    at = np.empty(n, dtype=np.int64)
    at[own] = np.arange(own.size, dtype=np.int64)
    sub = at[rep]
    # dependencies in the order _walk lists a message's own (by message, then field order)
    order = np.argsort(w.dep_frame, kind="stable")
    vals = w.dep_vals[order]
    count = np.bincount(w.dep_frame, minlength=own.size)
    ptr = np.zeros(own.size + 1, dtype=np.int64)
    np.cumsum(count, out=ptr[1:])
    per = count[sub]
    dep_frame = np.repeat(np.arange(n, dtype=np.int64), per)
    src = concat_ranges(ptr[sub], per)
    attr_start = w.attr_start[sub] - starts[rep] + starts
    return _Walk(w.ids[sub], w.types[sub], w.durs[sub], w.has_attr[sub], attr_start, dep_frame, vals[src],
                 w.slow[sub])
