"""Rank files' Node messages as byte spans, for a rewrite that copies what it does not change.

The schema round trip (parse every node, edit it, serialize it) costs several microseconds per
node, while emit changes few bytes: dependencies of some nodes and the attribute blocks of
collectives. Here the top-level fields of all messages of several files are located at once with
numpy (the trace reader's wire decoding, :mod:`..traces.wire`), so a node can be written back as
its original bytes or as original pieces around re-encoded dependency fields and a new attribute
block.

Copying original bytes gives what the schema path writes only when the original is what
protobuf itself would serialize (fields in number order, packed dependencies, no explicit zero
scalar, no empty name or packed field, minimal varints), and only when the schema could parse
the message at all. :func:`decode` checks the top-level fields (the caller checks names,
attribute blocks and inputs/outputs) and sets aside the files it cannot be sure of: the caller
takes the schema path for those, which also raises its errors for damaged input.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..errors import LibraError
from ..traces import wire
from ..traces.wire import _frames, _varint_more, _varints

_VARINT, _LEN, _PACKED = 0, 1, 2


class Batch(NamedTuple):
    """The Node messages of several files, concatenated (index = message; positions into ``buf``)."""

    buf: bytes
    files: np.ndarray           # int64, index into the decoded files of each message
    first: np.ndarray           # int64, first message of each file (len files + 1)
    metas: list[tuple[int, int]]   # (start, end) of each file's GlobalMetadata body
    heads: np.ndarray           # start of each message's length prefix
    starts: np.ndarray          # start of each message body
    ends: np.ndarray            # end of each message body
    ids: np.ndarray             # uint64 (0 when absent)
    types: np.ndarray           # int64 (0 when absent)
    names: tuple[np.ndarray, np.ndarray]   # (start, length) of each name
    deps_at: np.ndarray         # where ctrl_deps starts (or would)
    data_at: np.ndarray         # where data_deps starts (or would)
    deps_end: np.ndarray        # just after data_deps (or where it would be)
    attr_start: np.ndarray      # start of the attribute block (= end when none)
    ctrl: tuple[np.ndarray, np.ndarray]    # CSR (ptr, uint64 values)
    data: tuple[np.ndarray, np.ndarray]
    ctrl_values: tuple[np.ndarray, np.ndarray]   # (start, length) of the packed ctrl_deps bytes
    io: tuple[np.ndarray, np.ndarray]      # (start, end) of the inputs/outputs fields


def _steps() -> tuple[tuple[int, int, str], ...]:
    t = wire.TAGS
    return ((t.id, _VARINT, "id"), (wire._field_tag("name", 2), _LEN, "name"), (t.type, _VARINT, "type"),
            (t.ctrl_packed, _PACKED, "ctrl"), (t.data_packed, _PACKED, "data"),
            (wire._field_tag("start_time_micros", 0), _VARINT, "start"), (t.duration, _VARINT, "dur"),
            (wire._field_tag("inputs", 2), _LEN, "inputs"), (wire._field_tag("outputs", 2), _LEN, "outputs"))


def _minimal(arr: np.ndarray, begin: np.ndarray, after: np.ndarray) -> np.ndarray:
    """True where the varint in [begin, after) has no redundant trailing zero byte."""
    return (after - begin == 1) | (arr[np.maximum(after - 1, 0)] != 0)


def _packed(arr: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values, count per range and a per-range "all varints minimal" flag of packed varint ranges
    (every range non-empty and ending on a varint's last byte); a varint of more than 10 bytes
    is not minimal either."""
    vals, counts, too_long = wire._packed(arr, off, length)
    total = int(length.sum())
    if total == 0:
        return vals, counts, np.ones(off.size, bool)
    first = np.zeros(off.size, dtype=np.int64)
    np.cumsum(length[:-1], out=first[1:])
    byte_idx = np.repeat(off - first, length) + np.arange(total, dtype=np.int64)
    b = arr[byte_idx]
    # a 0x00 byte after a continuation byte of the same range ends a non-minimal varint
    prev_cont = np.zeros(total, bool)
    prev_cont[1:] = b[:-1] >= 0x80
    prev_cont[first] = False
    bad = (b == 0) & prev_cont
    minimal = np.add.reduceat(bad.astype(np.int64), first) == 0
    minimal[too_long] = False
    return vals, counts, minimal


def _frame_file(buf: bytes, where: str) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray] | None:
    try:
        if not buf:
            return None
        size = buf[0]
        pos = 1
        if size >= 0x80:
            size, pos = _varint_more(buf, pos, size)
        if size == 0 or pos + size > len(buf):
            return None
        starts, ends, heads = _frames(buf, pos + size, where)
    except (IndexError, ValueError, LibraError):
        return None
    return pos, pos + size, starts, ends, heads


def decode(bufs: Sequence[bytes], wheres: Sequence[str]) -> tuple[Batch | None, list[int], list[int]]:
    """The files' messages, decoded together: (batch, indices of the files in it, indices of the
    files the schema path must handle). Files are dropped from the batch, not the batch refused."""
    wire.init_tags()
    framed = [_frame_file(b, w) for b, w in zip(bufs, wheres)]
    good = [i for i, f in enumerate(framed) if f is not None]
    bad = [i for i, f in enumerate(framed) if f is None]
    while good:
        batch, bad_msgs = _walk([bufs[i] for i in good], [framed[i] for i in good])
        if not bad_msgs.any():
            return batch, good, bad
        worse = set(np.unique(batch.files[bad_msgs]).tolist())
        bad += [good[i] for i in worse]
        good = [g for i, g in enumerate(good) if i not in worse]
    return None, [], sorted(bad)


def _walk(bufs: list[bytes], framed: list) -> tuple[Batch, np.ndarray]:
    """Top-level fields of every message, in the schema's field order, in lockstep (as
    :func:`..traces.wire._walk`); also which messages are not what protobuf would write."""
    base = 0
    st, en, hd, fl, metas = [], [], [], [], []
    for f, (buf, (m0, m1, s, e, h)) in enumerate(zip(bufs, framed)):
        st.append(s + base)
        en.append(e + base)
        hd.append(h + base)
        fl.append(np.full(s.size, f, np.int64))
        metas.append((m0 + base, m1 + base))
        base += len(buf)
    buf = bufs[0] if len(bufs) == 1 else b"".join(bufs)
    starts, ends, heads, files = (np.concatenate(x) for x in (st, en, hd, fl))
    first = np.zeros(len(bufs) + 1, np.int64)
    np.cumsum([x.size for x in st], out=first[1:])
    arr = np.frombuffer(buf, dtype=np.uint8)
    n = starts.size
    last = max(arr.size - 1, 0)
    bad = ~_minimal(arr, heads, starts)     # the length prefix too is minimal as protolib writes it
    cur = starts.copy()
    ids = np.zeros(n, np.uint64)
    types = np.zeros(n, np.int64)
    name_at = np.zeros(n, np.int64)
    name_len = np.zeros(n, np.int64)
    deps_at = np.zeros(n, np.int64)
    data_at = np.zeros(n, np.int64)
    deps_end = np.zeros(n, np.int64)
    ctrl_at = np.zeros(n, np.int64)
    ctrl_len = np.zeros(n, np.int64)
    io_at = np.zeros(n, np.int64)
    csr = {"ctrl": (np.zeros(n + 1, np.int64), np.zeros(0, np.uint64)),
           "data": (np.zeros(n + 1, np.int64), np.zeros(0, np.uint64))}

    for tag, kind, field in _steps():
        if field == "ctrl":
            deps_at[:] = cur
        elif field == "data":
            data_at[:] = cur
        elif field == "start":
            deps_end[:] = cur
        elif field == "inputs":
            io_at[:] = cur
        peek = arr[np.minimum(cur, last)].astype(np.int64)
        peek[cur >= ends] = -1
        idx = np.nonzero(peek == tag)[0]
        if idx.size == 0:
            continue
        lim = ends[idx]
        v, p, ok = _varints(arr, cur[idx] + 1, lim)
        ok &= _minimal(arr, cur[idx] + 1, p)
        if kind == _VARINT:
            ok &= v != 0               # protobuf never writes a zero scalar: the schema path drops it
        else:
            length = v.astype(np.int64)
            if kind == _PACKED or field == "name":
                ok &= length > 0       # nor an empty name or packed field
            body = p
            p = p + length
            ok &= p <= lim
            if kind == _PACKED:
                ok &= arr[np.minimum(np.maximum(p - 1, 0), last)] < 0x80
        if not ok.all():
            bad[idx[~ok]] = True
            idx, v, p = idx[ok], v[ok], p[ok]
            if kind != _VARINT:
                body, length = body[ok], length[ok]
        cur[idx] = p
        if field == "id":
            ids[idx] = v
        elif field == "type":
            types[idx] = v.astype(np.int64)
        elif field == "name":
            name_at[idx], name_len[idx] = body, length
        elif kind == _PACKED and idx.size:
            vals, counts, minimal = _packed(arr, body, length)
            bad[idx[~minimal]] = True
            full = np.zeros(n, np.int64)
            full[idx] = counts
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(full, out=ptr[1:])
            csr[field] = (ptr, vals)
            if field == "ctrl":
                ctrl_at[idx], ctrl_len[idx] = body, length
    peek = arr[np.minimum(cur, last)].astype(np.int64)
    peek[cur >= ends] = -1
    # anything else before the attribute block (repeated, unknown or out-of-order fields)
    bad |= (peek != -1) & (peek != wire.TAGS.attr)
    batch = Batch(buf, files, first, metas, heads, starts, ends, ids, types, (name_at, name_len), deps_at, data_at,
                  deps_end, cur, csr["ctrl"], csr["data"], (ctrl_at, ctrl_len), (io_at, cur))
    return batch, bad


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def framed(body: bytes) -> bytes:
    """A message with its varint32 length prefix (protolib.encodeMessage)."""
    return varint(len(body)) + body


def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of uint64 values, all at once: a (len, 10) byte matrix and each one's length."""
    v = values.astype(np.uint64)
    length = np.ones(v.size, np.int64)
    for k in range(1, 10):
        more = v >= np.uint64(1 << (7 * k))
        if not more.any():
            break
        length += more
    width = int(length.max()) if v.size else 1
    out = np.zeros((v.size, 10), np.uint8)
    for k in range(width):
        b = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[:, k] = b | ((k < length - 1) * 0x80).astype(np.uint8)
    return out, length


def distinct_spans(buf: bytes, at: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Spans ``buf[at:end]`` grouped by content: a group number per span (-1 for empty ones) and a
    representative span per group.

    Spans of one length are grouped in bulk (wire.group_rows: exact, whatever the hash). Lengths
    with few spans (PyTorch traces have many lengths, each rare) are grouped by a dictionary
    instead: numpy's per-call cost would exceed the per-span one."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    length = end - at
    group = np.full(at.size, -1, np.int64)
    reps: list[int] = []
    sizes, counts = np.unique(length[length > 0], return_counts=True)
    few = sizes[counts < _FEW]
    if few.size:
        seen: dict[bytes, int] = {}
        sel = np.nonzero(np.isin(length, few))[0]
        for j, a, e in zip(sel.tolist(), at[sel].tolist(), end[sel].tolist()):
            g = seen.get(buf[a:e])
            if g is None:
                g = seen[buf[a:e]] = len(reps)
                reps.append(j)
            group[j] = g
    for size in sizes[counts >= _FEW].tolist():
        sel = np.nonzero(length == size)[0]
        first, inv = wire.group_rows(wire.byte_rows(arr, at[sel], size))
        group[sel] = len(reps) + inv
        reps.extend(sel[first].tolist())
    return group, reps


# Below this many spans of one length, a dictionary groups them faster than numpy.
_FEW = 256
