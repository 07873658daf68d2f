"""Rank files that repeat an earlier file's bytes: which earlier file (its template) a file
follows, and which of its messages are the template's messages byte for byte.

The rank files of one job repeat each other but for a few group names and peers. A file as long
as an earlier one of its batch, differing from it in few messages and in no length prefix, has
the template's message offsets, and only its differing messages need reading
(:mod:`.framing` uses these to frame a batch; :func:`.wire.walk_shared` to skip the rest).
"""

from __future__ import annotations

import numpy as np


# Earlier files of one length a file is compared with before its own messages are walked
_TEMPLATE_TRIES = 3
# ... or only the latest one, after this many files in a row fit none
_TEMPLATE_MISSES = 8


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


def tries_after(misses: int) -> int:
    """How many templates a file is compared with after ``misses`` files of its length in a row
    fit none: after a run of them, the latest only (such files differ throughout)."""
    return _TEMPLATE_TRIES if misses < _TEMPLATE_MISSES else min(_TEMPLATE_TRIES, 1)


def find_template(arr: np.ndarray, base: int, size: int, candidates: list[int], tries: int, bases: list[int],
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


def twin_messages(follow: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the messages of files with a template, each one's counterpart in the template);
    ``follow``: each file's template (-1: none), ``first``: each file's first message."""
    msg_file = np.repeat(np.arange(follow.size, dtype=np.int64), np.diff(first))
    mine = np.flatnonzero(follow[msg_file] >= 0)
    f = msg_file[mine]
    return mine, mine - first[f] + first[follow[f]]


def repeated_messages(follow: np.ndarray, diffs: list[np.ndarray], off: np.ndarray, first: np.ndarray,
                      h: np.ndarray, starts: np.ndarray, twins: tuple[np.ndarray, np.ndarray]) -> np.ndarray | None:
    """Per message, the template message with the same bytes, or itself (see
    :func:`.framing.frames_together`). ``follow``: each file's template (-1: none); ``diffs``:
    the differing byte offsets of each file that has one, in file order; ``h``/``starts``: every
    message's header and body offset; ``twins``: what :func:`twin_messages` gives. None if a differing
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
