"""A batch of rank files framed and walked: where each message is, its top-level fields, and which
message's attribute row each one takes.

Two ways give the same :class:`Batch`: the compiled one-pass walk (``_walk.pyx``, built by
setup.py where a C compiler is at hand) and the numpy path (:mod:`.framing`, :mod:`.wire`), which
shares the messages that repeat a template file's bytes. A damaged batch, or any file the
compiled walk declines, goes the numpy way, whose framing raises the first damaged file's error.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..errors import LibraError
from .attr_blocks import _WANTED_NAMES
from .framing import frames_each, frames_together, global_metadata
from .schema import METADATA_NODE
from . import wire

try:
    # the one-pass walk compiled (setup.py builds it when it can); LIBRA_ASTRA_PYTHON_WALK=1 keeps numpy
    from . import _walk as _kernel
except ImportError:
    _kernel = None
if os.environ.get("LIBRA_ASTRA_PYTHON_WALK") == "1":
    _kernel = None


class Batch(NamedTuple):
    versions: list[str]
    starts: np.ndarray       # body start of each message, in the joined bytes
    ends: np.ndarray
    first: np.ndarray        # first message of each file (len files + 1)
    walk: wire._Walk
    # message i takes the attribute row of message rep[i] (their attribute blocks say the same);
    # None: every message its own
    rep: np.ndarray | None
    head_of: Callable[[int, int], int]   # (file, message) -> the message's header offset in its file


def walk_batch(bufs: Sequence[bytes], wheres: Sequence[str], buf: bytes, arr: np.ndarray) -> Batch:
    """Frame and walk the files ``bufs`` (joined: ``buf``, ``arr``); raises the first damaged
    file's error."""
    if _kernel is not None:
        got = _compiled(bufs, wheres, buf, arr)
        if got is not None:
            return got
    framed = None
    try:
        framed = frames_together(bufs, wheres, arr)
    except LibraError:
        pass
    if framed is None:  # a damaged file: frame file by file, which raises the first file's error
        framed = frames_each(bufs, wheres)
    versions, starts, ends, heads_l, first, rep = framed
    w = wire.walk_shared(arr, starts, ends, wire.TAGS, rep)
    return Batch(versions, starts, ends, first, w, rep, lambda f, i: int(heads_l[f][i - first[f]]))


def _compiled(bufs: Sequence[bytes], wheres: Sequence[str], buf: bytes, arr: np.ndarray) -> Batch | None:
    t = wire.TAGS
    sizes = np.fromiter((len(b) for b in bufs), dtype=np.int64, count=len(bufs))
    hi = np.cumsum(sizes)
    lo = hi - sizes
    got = _kernel.walk_batch(arr, lo, hi, bytes(tag for tag, _ in t.steps), bytes(_KINDS[k] for _, k in t.steps),
                             t.attr, METADATA_NODE, _WANTED_NAMES)
    if got is None:
        return None
    meta_s, meta_e, first, heads, starts, ends, ids, types, durs, attr_start, has_attr, slow, df, dv, rep = got
    versions: list[str] = []
    seen: dict[bytes, str] = {}
    for f, (s, e) in enumerate(zip(meta_s.tolist(), meta_e.tolist())):
        meta = buf[s:e]
        v = seen.get(meta)
        if v is None:
            try:
                v = global_metadata(bufs[f], wheres[f])[0]
            except LibraError:
                return None
            seen[meta] = v
        versions.append(v)
    w = wire._Walk(ids, types, durs, has_attr, attr_start, df, dv, slow)
    return Batch(versions, starts, ends, first, w, rep, lambda f, i: int(heads[i] - lo[f]))


# the walk's field kinds (wire._Tags.steps) as _walk.pyx numbers them
_KINDS = {"id": 0, "len": 1, "type": 2, "deps": 3, "skip": 4, "duration": 5}
