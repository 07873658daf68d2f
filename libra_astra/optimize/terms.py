"""The terms of the convex program: collectives whose time rows are equal up to a positive scale
merge into one term, weighted by the summed scale times count (exact, since s max_r(a_r v) =
max_r(s a_r v) for s > 0).

A collective's rows are scaled so their largest coefficient is 1, unless a row has a constant
(then they stay as they are: a constant does not scale with the bandwidth terms). Two collectives
merge when they have as many rows, the same scaled rows rounded to 12 decimals and bit-equal
constants. A term keeps the scaled rows of its first collective; terms come in the order of their
first collective. Everything is done with numpy over all collectives of a class (or a dependency
path) at once: collectives are grouped by a hash of their rows, and the rows of every group are
compared before it merges. With one chunk per collective, a collective first loses the rows its
largest row bounds in every coefficient and constant (``_undominated``): its time is the same.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from ..demand.types import Demand
from ..model.network import Network
from ..ranges import concat_ranges
from ..timing.model import TimeModel, demand_rows, rows_key
from ..timing.plan import node_table


@dataclass(frozen=True)
class Terms:
    """Merged terms: term k is weight[k] * max over its rows r of A[r] @ (1/B) + g_ns[r]."""

    A: np.ndarray          # (M, D) bytes per scale unit, coefficients of 1/B_d (GB/s)
    g_ns: np.ndarray       # (M,)
    starts: np.ndarray     # (K,) first row of each term
    weight: np.ndarray     # (K,) summed count x scale of the term's collectives

    @property
    def num_terms(self) -> int:
        return self.starts.shape[0]


class _Scaled(NamedTuple):
    """Rows of a sequence of collectives, their scales, and what merging compares. The scaled
    rows (rows / scale of their collective) and their rounded bits are computed for the rows a
    step needs, a slice at a time: at 100k collectives each whole (M, D) copy is fresh memory,
    whose first touch costs more than the arithmetic."""

    A: np.ndarray          # (M, D) rows as built
    g_ns: np.ndarray       # (M,)
    starts: np.ndarray     # (N,)
    nrows: np.ndarray      # (N,)
    scale: np.ndarray      # (N,)
    row_scale: np.ndarray | None   # (M,) scale of each row's collective; None if every scale is 1
    g_bits: np.ndarray     # (M,) uint64: each row's constant
    hash: np.ndarray       # (N,) uint64: a hash of each collective's row count and bits
    whole: dict            # the scaled rows and groups (_group_ids) of all collectives, once a step needed them


_PRIME = np.uint64(0x9E3779B97F4A7C15)
_SLICE_ROWS = 1 << 15


def _multipliers(count: int) -> np.ndarray:
    # Fixed odd multipliers: a hash is a dot product with them, modulo 2^64. Drawn once per count
    # (a generator costs more to seed than a small optimization spends hashing), read-only.
    m = _MULTIPLIERS.get(count)
    if m is None:
        rng = np.random.default_rng(0x5EED)
        m = rng.integers(1, 2 ** 62, size=count, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        m.flags.writeable = False
        _MULTIPLIERS[count] = m
    return m


_MULTIPLIERS: dict[int, np.ndarray] = {}


def _scaled(A: np.ndarray, g: np.ndarray, starts: np.ndarray) -> _Scaled:
    M, D = A.shape
    N = starts.shape[0]
    nrows = np.diff(np.concatenate((starts, [M]))).astype(np.int64)
    has_const = np.logical_or.reduceat(g != 0, starts).astype(bool) if N else np.zeros(0, dtype=bool)
    scale = np.ones(N)
    if not has_const.all():
        amax = np.maximum.reduceat(_row_max(A), starts)
        scale = np.where(~has_const & (amax > 0), amax, 1.0)
    row_scale = None if np.all(scale == 1.0) else np.repeat(scale, nrows)
    g_bits = np.ascontiguousarray(g, dtype=float).view(np.uint64)
    mult = _multipliers(D + 2)
    row_hash = np.empty(M, dtype=np.uint64)
    buf = np.empty((min(M, _SLICE_ROWS), D))
    with np.errstate(over="ignore"):
        for lo in range(0, M, _SLICE_ROWS):
            rows = slice(lo, min(lo + _SLICE_ROWS, M))
            bits = _round_bits(A[rows] if row_scale is None else A[rows] / row_scale[rows, None],
                               buf[:rows.stop - lo])
            np.matmul(bits, mult[:D], out=row_hash[rows])        # integer matmul: wraps modulo 2^64
        row_hash += g_bits * mult[D]
        # A row's place in its collective counts: rows (a, b) and (b, a) differ.
        place = np.arange(M, dtype=np.int64) - np.repeat(starts, nrows)
        row_hash *= place.astype(np.uint64) * _PRIME + mult[D + 1]
        h = np.add.reduceat(row_hash, starts) if N else np.zeros(0, np.uint64)
        h += nrows.astype(np.uint64) * _PRIME
    return _Scaled(A, g, starts, nrows, scale, row_scale, g_bits, h, {})


def _round_bits(An: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The scaled coefficients rounded to 12 decimals, as uint64 bits (what merging compares)."""
    return np.round(An, 12, out=out).view(np.uint64)


def _scaled_rows(s: _Scaled, rows: np.ndarray) -> np.ndarray:
    """Scaled rows ``rows``: the division of the whole array, element by element."""
    A = s.A.take(rows, axis=0)
    return A if s.row_scale is None else A / s.row_scale.take(rows)[:, None]


def _all_scaled_rows(s: _Scaled) -> np.ndarray:
    if s.row_scale is None:
        return s.A
    if "A" not in s.whole:
        s.whole["A"] = s.A / s.row_scale[:, None]
    return s.whole["A"]


def _row_bits(s: _Scaled, rows: np.ndarray) -> np.ndarray:
    return _round_bits(_scaled_rows(s, rows), np.empty((rows.shape[0], s.A.shape[1])))


def _row_max(A: np.ndarray) -> np.ndarray:
    """Largest coefficient of each row, and 0: one pass per column, where a max over each short
    row (A.max(axis=1)) costs twice as much. Maxima are exact, so the order does not matter."""
    out = np.zeros(A.shape[0])
    for j in range(A.shape[1]):
        np.maximum(out, A[:, j], out=out)
    return out


def _same_rows(s: _Scaled, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether collectives a[i] and b[i] have the same row count and bits, for every i."""
    if not np.array_equal(s.nrows[a], s.nrows[b]):
        return False
    # Many a[i] share one b[i] (a group's first collective): b's rows are scaled and rounded once.
    ub, inv = np.unique(b, return_inverse=True)
    rows_u, first_u, _ = _rows_of(s, ub)
    bits_u, g_u = _row_bits(s, rows_u), s.g_bits.take(rows_u)
    rows_a, _, within = _rows_of(s, a)
    ref = np.repeat(first_u.take(inv.ravel()), s.nrows[a]) + within
    for lo in range(0, rows_a.shape[0], _SLICE_ROWS):
        ra, rr = rows_a[lo:lo + _SLICE_ROWS], ref[lo:lo + _SLICE_ROWS]
        if not (np.array_equal(s.g_bits.take(ra), g_u.take(rr))
                and np.array_equal(_row_bits(s, ra), bits_u.take(rr, axis=0))):
            return False
    return True


def _rows_of(s: _Scaled, items: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of collectives ``items``, listed in order; where each collective's rows begin in
    that list; each row's place within its collective."""
    nr = s.nrows[items]
    first = np.cumsum(nr) - nr
    within = np.arange(int(nr.sum())) - np.repeat(first, nr)
    return np.repeat(s.starts[items], nr) + within, first, within


def _groups(s: _Scaled, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of the first item of each group, group of each item): items whose rows are
    equal form a group; groups are numbered in the order of their first item."""
    first, inv = _distinct(s.hash[items])
    dup = np.flatnonzero(first[inv] != np.arange(items.shape[0]))
    if dup.shape[0] and not _same_rows(s, items[dup], items[first[inv[dup]]]):
        # Two collectives share a hash without having equal rows: compare rows whole instead.
        first, inv = _exact_groups(s, items)
    return _numbered(first, inv)


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique's return_index and return_inverse: the first position of each distinct key (in
    key order) and each position's key among them. From the default sort, not the stable one
    np.unique takes for return_index (three times as fast at 100k keys): a key's first position
    is the least of its positions, whichever order the sort left them in."""
    order = np.argsort(keys)
    ordered = keys[order]
    new = np.ones(keys.shape[0], dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    inv = np.empty(keys.shape[0], dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    first = np.minimum.reduceat(order, np.flatnonzero(new)) if keys.shape[0] else order
    return first, inv


def _numbered(first: np.ndarray, inv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_groups' answer from each group's first position (in any order) and each item's group."""
    # The first positions are distinct: marking them orders them without a sort.
    is_first = np.zeros(inv.shape[0], dtype=bool)
    is_first[first] = True
    number = np.cumsum(is_first) - 1        # a group's number at its first position
    return np.flatnonzero(is_first), number[first][inv]


def _group_ids(s: _Scaled) -> np.ndarray:
    """Every collective's group (_groups over all of them), found once, when a dependency path
    first needs it: the paths of an optimization, many and each with a long stretch of the same
    few collectives, then group theirs by these numbers. A subset's groups are the same either way."""
    if "groups" not in s.whole:
        s.whole["groups"] = _groups(s, np.arange(s.starts.shape[0]))[1]
    return s.whole["groups"]


def _exact_groups(s: _Scaled, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    inv = np.empty(items.shape[0], dtype=np.int64)
    firsts: list[int] = []
    nr = s.nrows[items]
    for r in np.unique(nr).tolist():
        sel = np.flatnonzero(nr == r)
        rows = _rows_of(s, items[sel])[0]
        keys = np.concatenate([_row_bits(s, rows), s.g_bits[rows][:, None]], axis=1).reshape(sel.shape[0], -1)
        _, first, k = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        inv[sel] = k.ravel() + len(firsts)
        firsts.extend(sel[first].tolist())
    return np.asarray(firsts, dtype=np.int64), inv


def _merge(s: _Scaled, items: np.ndarray, count: np.ndarray, ids: np.ndarray | None = None) -> Terms:
    """Terms of the collectives ``items`` (indices into ``s``, in order) run ``count`` times each;
    ``ids``: every collective's group (_group_ids), if found already."""
    keep = count > 0
    items, count = items[keep], count[keep]
    if ids is None:
        first, term = _groups(s, items)
    else:
        first, term = _numbered(*_distinct(ids[items]))
    weight = np.bincount(term, weights=count * s.scale[items], minlength=first.shape[0])
    rep = items[first]
    if rep.shape[0] == s.starts.shape[0] and np.array_equal(rep, np.arange(rep.shape[0])):
        return Terms(_all_scaled_rows(s), s.g_ns, s.starts, weight)       # nothing merged, every collective kept
    rows, starts, _ = _rows_of(s, rep)
    return Terms(_scaled_rows(s, rows), s.g_ns.take(rows), starts, weight)


def _demand_scaled(demand: Demand, net: Network, model: TimeModel,
                   cache: dict) -> tuple[_Scaled, np.ndarray, np.ndarray]:
    """Scaled rows of every collective of the demand's classes (classes in order), the index of
    each class's first collective and every collective's count; kept in ``cache`` for the calls
    of one optimization."""
    # Rows do not depend on overlap: the overlap optimize's paths reuse its no-overlap start's.
    key = (id(demand), net, rows_key(model))
    hit = cache.get(key)
    if hit is not None:
        return hit[1:]
    sizes = np.array([len(rc.collectives) for rc in demand.rank_classes], dtype=np.int64)
    first = np.zeros(sizes.shape[0], dtype=np.int64)
    np.cumsum(sizes[:-1], out=first[1:])
    every = itertools.chain.from_iterable(rc.collectives for rc in demand.rank_classes)
    counts = np.fromiter(map(operator.attrgetter("count"), every), float, count=int(sizes.sum()))
    A, g, starts = demand_rows(demand, net, model)
    if model.stages_add_up:
        A, g, starts = _undominated(A, g, starts)
    s = _scaled(A, g, starts)
    cache[key] = (demand, s, first, counts)   # the demand is kept so its id names it while cached
    return s, first, counts


def _undominated(A: np.ndarray, g: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each collective's rows without those its row c of largest coefficient sum (then largest
    constant) bounds from above everywhere: row r goes when A[c] >= A[r] in every column and
    g[c] >= g[r]. With every coefficient and constant >= 0, row c's time A[c] @ (1/B) + g[c] is
    then >= row r's at every bandwidth, in floating point too (the products and the sums, taken in
    the same order, are monotone), so the maximum over the rows, the collective's time, stays what
    it was to the last bit. Fewer rows make a smaller problem, and a term of one row is smooth in
    B: the interior-point method needs fewer Newton steps (4 instead of 6-16 on the benchmark's
    one-chunk family, 100 to 100k collectives)."""
    M, N = A.shape[0], starts.shape[0]
    if M == N or (A < 0).any() or (g < 0).any():
        return A, g, starts            # one row each already, or the bound above would not hold
    nrows = np.diff(np.concatenate((starts, [M])))
    # The candidate: the first row of largest coefficient sum and, among those, largest constant
    # (rows equal in A whose constants, summed in another order, differ in the last bit). A
    # matrix product sums the rows (A.sum(axis=1) takes six times as long at 600k rows).
    asum = A @ np.ones(A.shape[1])
    g_top = np.where(asum == np.repeat(np.maximum.reduceat(asum, starts), nrows), g, -np.inf)
    at_max = g_top == np.repeat(np.maximum.reduceat(g_top, starts), nrows)
    top_of = np.minimum.reduceat(np.where(at_max, np.arange(M), M), starts)     # per collective
    top = np.repeat(top_of, nrows)
    above = A.take(top, axis=0) >= A
    gone = g.take(top) >= g
    for j in range(A.shape[1]):        # a pass per column: all(axis=1) over short rows is 3x slower
        gone &= above[:, j]
    gone[top_of] = False               # the candidate bounds itself, and stays
    if not gone.any():
        return A, g, starts
    keep = ~gone
    new_starts = np.zeros(N, dtype=np.int64)
    np.cumsum(np.add.reduceat(keep.astype(np.int64), starts)[:-1], out=new_starts[1:])
    return A[keep], g[keep], new_starts


def class_terms(demand: Demand, net: Network, model: TimeModel, cache: dict) -> list[tuple[float, Terms]]:
    """Per rank class (no overlap): compute time and merged terms."""
    s, first, counts = _demand_scaled(demand, net, model, cache)
    out = []
    for rc, f in zip(demand.rank_classes, first.tolist()):
        n = len(rc.collectives)
        out.append((rc.compute_time_ns, _merge(s, f + np.arange(n), counts[f:f + n])))
    return out


def path_terms(demand: Demand, path: Sequence[tuple[int, int]], net: Network, model: TimeModel,
               cache: dict) -> tuple[float, Terms]:
    """Compute time and merged terms of one dependency path (its nodes run in sequence). Nodes
    are (rank class, node index); node -1 is a whole class without a dependency graph."""
    offsets = node_table(demand)[0]
    p = np.asarray(path, dtype=np.int64).reshape(-1, 2)
    # a class without a DAG is its one node in the joint graph
    return node_path_terms(demand, offsets[p[:, 0]] + np.maximum(p[:, 1], 0), net, model, cache)


def node_path_terms(demand: Demand, nodes: np.ndarray, net: Network, model: TimeModel,
                    cache: dict) -> tuple[float, Terms]:
    """``path_terms`` of a path given as global nodes of the replay's joint graph (``node_table``)."""
    s, first, every = _demand_scaled(demand, net, model, cache)
    _, value, coll_item, whole_of = node_table(demand)
    g = np.asarray(nodes, dtype=np.int64)
    ci = whole_of[g]
    whole = ci >= 0
    item = coll_item[g]
    is_coll = item >= 0
    # Compute time summed in path order, from 0.0, as a loop over the nodes adds it (cumsum is
    # sequential): GPU compute, CPU ops and free nodes are constants, a whole class its compute.
    comp_ns = value[g]
    if whole.any():
        comp_ns[whole] = [demand.rank_classes[c].compute_time_ns for c in ci[whole].tolist()]
    comp = float(np.cumsum(np.concatenate(([0.0], comp_ns[~is_coll])))[-1])
    if not whole.any():
        items = item[is_coll]
        counts = np.ones(items.shape[0])
    else:
        # A whole class stands for all its collectives, in order, each run its count times.
        sizes = np.diff(np.r_[first, every.shape[0]])
        lengths = np.where(whole, sizes[ci], is_coll.astype(np.int64))
        begin = np.where(whole, first[ci], item)
        items = concat_ranges(begin, lengths)
        counts = np.ones(items.shape[0])
        in_whole = np.repeat(whole, lengths)
        counts[in_whole] = every[items[in_whole]]
    return comp, _merge(s, items, counts, _group_ids(s))


def item_terms(demand: Demand, items: np.ndarray, counts: np.ndarray, net: Network, model: TimeModel,
               cache: dict) -> Terms:
    """Merged terms of some collectives of a one-class demand, by index, each run ``counts`` times."""
    s, first, _ = _demand_scaled(demand, net, model, cache)
    return _merge(s, first[0] + np.asarray(items, dtype=np.int64), np.asarray(counts, dtype=float), _group_ids(s))
