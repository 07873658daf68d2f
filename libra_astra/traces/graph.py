"""Dependency order of one rank's nodes: the one topological sort and the one cycle error.

Both the trace reader (for the demand's DAG) and the trace rewrite for ASTRA-sim (for the issue
order) use it, so a cycle is reported the same way wherever it is found.
"""

from __future__ import annotations

import heapq
from typing import Callable, Container, Iterable, Sequence

import numpy as np

from ..errors import LibraError


def resolve_deps(node_ids: np.ndarray, dep_ids: np.ndarray, dep_ptr: np.ndarray, where: str
                 ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, int], ...]]:
    """Dependency ids -> node positions: (dep_index, dep_ptr, dangling).

    A dependency on an id that is not in the file is satisfied (treated as already done) and
    left out: PyTorch's Chakra converter removes its root node 0 but keeps the dependencies on
    it. ``dangling`` lists those as (node id, missing id) pairs, for the report, and ``dep_ptr``
    is the CSR pointer without them. Duplicate node ids stay an error.
    """
    n = node_ids.shape[0]
    if n > 1 and bool(np.all(node_ids[1:] > node_ids[:-1])):
        order = None
        sorted_ids = node_ids
    else:
        order = np.argsort(node_ids, kind="stable")
        sorted_ids = node_ids[order]
        dup = np.nonzero(sorted_ids[1:] == sorted_ids[:-1])[0]
        if dup.size:
            raise LibraError(
                f"{where}: node id {int(sorted_ids[dup[0]])} appears twice; node ids must be unique within a file"
            )
    if dep_ids.size == 0:
        return np.zeros(0, np.int64), dep_ptr, ()
    if n == 0:
        pos = np.zeros(dep_ids.shape, np.int64)
        found = np.zeros(dep_ids.shape, bool)
    else:
        pos = np.searchsorted(sorted_ids, dep_ids)
        pos_c = np.minimum(pos, n - 1)
        found = (pos < n) & (sorted_ids[pos_c] == dep_ids)
        pos = pos_c
    dangling: tuple[tuple[int, int], ...] = ()
    if not bool(found.all()):
        miss = np.nonzero(~found)[0]
        owners = np.searchsorted(dep_ptr, miss, side="right") - 1
        dangling = tuple(zip(node_ids[owners].astype(np.int64).tolist(), dep_ids[miss].astype(np.int64).tolist()))
        kept_before = np.concatenate(([0], np.cumsum(found)))
        dep_ptr = kept_before[dep_ptr].astype(np.int64)
        pos = pos[found]
    pos = pos.astype(np.int64)
    return (pos if order is None else order[pos].astype(np.int64)), dep_ptr, dangling


def file_first_order(n: int, edges) -> tuple[list[int], list[int]]:
    """Kahn's algorithm over edges (u, v) = "v waits for u", always taking the ready node that
    comes first in the file, so the issue order stays as close to the file order as the
    dependencies allow. Returns the order and the remaining in-degrees (non-zero on a cycle)."""
    children: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for u, v in edges:
        children[u].append(v)
        indeg[v] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    out: list[int] = []
    while ready:
        u = heapq.heappop(ready)
        out.append(u)
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return out, indeg


def cycle_error(where: str, node_ids: Sequence[int], indeg: Sequence[int],
                parents: Callable[[int], Iterable[int]]) -> LibraError:
    """The error for a dependency cycle left by :func:`file_first_order` (non-zero ``indeg``).

    Walks parents inside the unfinished set until a node repeats and names that cycle's node ids,
    starting at the one that comes first in the file, so the message is stable.
    """
    left = {i for i, k in enumerate(indeg) if k > 0}
    seen: dict[int, int] = {}
    path: list[int] = []
    u = min(left)
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = next(int(p) for p in parents(u) if int(p) in left)
    cyc = path[seen[u]:][::-1]
    k = cyc.index(min(cyc))
    cyc = cyc[k:] + cyc[:k]
    ids = " -> ".join(str(int(node_ids[i])) for i in cyc + [cyc[0]])
    return LibraError(f"{where}: dependency cycle through nodes {ids}; remove one of these dependencies")


def topological_order(prog) -> np.ndarray | None:
    """Node positions of a RankProgram in an order where every dependency comes first; None if
    file order is one. Raises LibraError naming the nodes of a dependency cycle.
    """
    n = prog.num_nodes
    ptr, dep = prog.dep_ptr, prog.dep_index
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    if bool(np.all(dep < owner)):
        return None
    out, indeg = file_first_order(n, zip(dep.tolist(), owner.tolist()))
    if len(out) < n:
        raise cycle_error(prog.path, prog.node_ids, indeg, lambda u: dep[ptr[u]:ptr[u + 1]])
    return np.asarray(out, dtype=np.int64)


def through_removed(start: int, deps_of: Callable[[int], Iterable[int]], present: Container[int],
                    removed: Container[int], memo: dict[int, list[int]]) -> list[int]:
    """The kept dependencies a removed node stands for: its dependencies, followed through other
    removed nodes depth first, each once; ids not ``present`` are dangling and skipped.

    Iterative, since chains of removed nodes can be long; ``memo`` caches per removed node."""
    got = memo.get(start)
    if got is not None:
        return got
    out: list[int] = []
    seen = {start}
    stack = [start]
    while stack:
        for d in deps_of(stack.pop()):
            if d in seen or d not in present:
                continue
            seen.add(d)
            if d in removed:
                stack.append(d)
            else:
                out.append(d)
    memo[start] = out
    return out


def resolve_deps_many(node_ids: np.ndarray, dep_ids: np.ndarray, dep_first: np.ndarray, first: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`resolve_deps` of several files at once, for the files it needs no more for: node
    ids strictly increasing and every dependency on a node of the file (no error, nothing
    dangling). File f has nodes ``first[f]:first[f + 1]``; node i has dependencies
    ``dep_ids[dep_first[i]:dep_first[i + 1]]``.

    Returns (per file whether it was resolved here, per dependency its node position within its
    file; meaningful for resolved files). Why: on thousands of small rank files the per-file
    numpy calls cost more than the lookups."""
    files = first.size - 1
    counts = np.diff(first)
    pos = np.zeros(dep_ids.size, dtype=np.int64)
    if node_ids.size == 0:
        return np.zeros(files, dtype=bool), pos
    msg_file = np.repeat(np.arange(files, dtype=np.int64), counts)
    rising = np.ones(node_ids.size, dtype=bool)
    rising[1:] = node_ids[1:] > node_ids[:-1]
    rising[first[:-1][counts > 0]] = True
    ok = (counts > 0) & (np.bincount(msg_file[~rising], minlength=files) == 0)
    nonempty = np.flatnonzero(counts > 0)
    lo = np.zeros(files, dtype=np.uint64)
    hi = np.zeros(files, dtype=np.uint64)
    lo[nonempty] = node_ids[first[nonempty]]
    hi[nonempty] = node_ids[first[nonempty + 1] - 1]
    dep_file = np.repeat(msg_file, np.diff(dep_first))
    found = (dep_ids >= lo[dep_file]) & (dep_ids <= hi[dep_file]) & ok[dep_file]
    pos[found] = (dep_ids[found] - lo[dep_file[found]]).astype(np.int64)
    # ids lo, lo + 1, ..., hi (as generators write them): the offset from lo is the position
    dense = ok & (hi - lo == (counts - 1).astype(np.uint64))
    sparse = np.flatnonzero(found & ~dense[dep_file])
    if sparse.size:
        f = dep_file[sparse]
        at = np.empty(sparse.size, dtype=np.int64)
        for g in np.unique(f).tolist():  # a few files with gaps in their ids: one lookup each
            sel = np.flatnonzero(f == g)
            ids = node_ids[int(first[g]):int(first[g + 1])]
            at[sel] = np.minimum(np.searchsorted(ids, dep_ids[sparse[sel]]), ids.size - 1)
            found[sparse[sel]] = ids[at[sel]] == dep_ids[sparse[sel]]
        pos[sparse] = at
    ok &= np.bincount(dep_file[~found], minlength=files) == 0
    return ok, pos
