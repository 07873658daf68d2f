"""Where each message of a batch of rank files starts and ends.

A rank file is a stream of varint32-length-prefixed protobuf messages (mlc-chakra's
``et_def.proto``): one ``GlobalMetadata``, then one ``Node`` per message. The length prefixes
of all files of a batch are decoded together (:func:`frames_together`), a file that repeats an
earlier one's bytes taking that file's offsets (:mod:`.templates`); a damaged batch is framed
file by file (:func:`frames_each`), which raises the first damaged file's error.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import LibraError
from .schema import pb
from . import templates as tpl
from .wire import _bodies, _frames, _heads, _varint_more


def global_metadata(buf: bytes, where: str) -> tuple[str, int]:
    """(version, offset of the first Node message) of one rank file's bytes; ``where`` names the
    file in the error a torn or corrupt GlobalMetadata message raises."""
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


def frames_each(bufs: Sequence[bytes], wheres: Sequence[str]) -> tuple:
    """(versions, body starts, body ends, header offsets per file, first message of each file,
    None): file by file, raising the first damaged file's error."""
    versions, starts_l, ends_l, heads_l = [], [], [], []
    base = 0
    for buf, where in zip(bufs, wheres):
        if len(buf) == 0:
            raise LibraError(f"{where}: empty file; a trace file starts with a GlobalMetadata message")
        version, pos = global_metadata(buf, where)
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


def frames_together(bufs: Sequence[bytes], wheres: Sequence[str], arr: np.ndarray,
                    share: bool = True) -> tuple | None:
    """As :func:`frames_each`, with the length prefixes of all files decoded in one numpy pass
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
        tries = tpl.tries_after(misses.get(len(buf), 0)) if share else 0
        t, d = tpl.find_template(arr, base, len(buf), candidates, tries, bases, meta_end, heads_l)
        misses[len(buf)] = 0 if d is not None else misses.get(len(buf), 0) + 1
        if d is None:
            version, pos = global_metadata(buf, where)
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
    twins = tpl.twin_messages(fol, first) if diffs else None
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
        rep = tpl.repeated_messages(fol, diffs, off, first, h, starts, twins)
        if rep is None:  # a length prefix differs from its template's: walk every file's own
            return frames_together(bufs, wheres, arr, share=False)
    return versions, starts, ends, heads_l, first, rep
