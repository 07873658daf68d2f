"""Time rows of many collectives at once: numpy over the collectives, one step per dimension.

Collective i gets one row per dimension it uses (ascending; one zero row if it uses none) of
``time_ns = max_r (A[r] @ (1/B) + const[r])``; timing/model.py states the models. The arithmetic
is the one a collective-at-a-time loop does, operation for operation and in the same order, so
the rows are equal bit for bit whatever the batch: the problem build merges collectives whose
rows are equal, and a batch must not split or join them by round-off.
"""

from __future__ import annotations

import itertools
import operator
import struct
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from ..model import collectives as coll
from ..demand.types import ALGORITHMS, Collective
from ..model.network import Network

_KIND = {kind: i for i, kind in enumerate(coll.TYPES)}
_AR, _RS, _AG, _A2A = (_KIND[k] for k in (coll.ALL_REDUCE, coll.REDUCE_SCATTER, coll.ALL_GATHER, coll.ALL_TO_ALL))
_ALG = {name: i for i, name in enumerate(ALGORITHMS)}
_HIER, _FLAT, _P2P = (_ALG[a] for a in ("hierarchical", "flat_ring", "p2p"))
_BLOCK = 4096
_DEDUPE_FROM = 40_000


class Rows(NamedTuple):
    """Stacked rows of a sequence of collectives."""

    A: np.ndarray          # (M, D) bytes: coefficient of 1/B_d in GB/s (= bytes/ns)
    const_ns: np.ndarray   # (M,)
    starts: np.ndarray     # (N,) first row of each collective; rows of one collective are contiguous


def column(colls: Sequence[Collective], field: str, dtype, num_dims: int) -> np.ndarray:
    """A per-dimension field of every collective as an (N, num_dims) array (read-only)."""
    return _stacked(map(operator.attrgetter(field), colls), len(colls), dtype, num_dims)


def repeated_column(colls: Sequence[Collective], field: str, dtype, num_dims: int) -> np.ndarray:
    """``column`` of a field whose tuples repeat (participants, hops: a few hundred distinct ones
    among 100k collectives): each distinct tuple is read once, then gathered."""
    if len(colls) < _DEDUPE_FROM:
        # Hashing every tuple pays only at many collectives: measured a fifth slower than packing
        # them all at 10k, a fifth faster at 100k.
        return column(colls, field, dtype, num_dims)
    first_at: dict = {}
    # Each collective's tuple by the position where it first occurs (hashing a tuple costs less
    # than reading its values).
    first = np.fromiter(map(first_at.setdefault, map(operator.attrgetter(field), colls), itertools.count()),
                        np.int64, count=len(colls))
    number = np.empty(len(colls), dtype=np.int64)
    number[np.fromiter(first_at.values(), np.int64, count=len(first_at))] = np.arange(len(first_at))
    return _stacked(first_at, len(first_at), dtype, num_dims).take(number.take(first), axis=0)


def _stacked(tuples: Iterable[tuple], count: int, dtype, num_dims: int) -> np.ndarray:
    # Each tuple packed whole by struct and the bytes read by numpy at once: faster than fromiter
    # over the chained tuples, which takes a third of the time of np.array on a list of tuples.
    # The format is the dtype's C type, so numpy reads what struct wrote.
    record = struct.Struct(f"{num_dims}{np.dtype(dtype).char}")
    packed = b"".join(itertools.starmap(record.pack, tuples))
    return np.frombuffer(packed, dtype, count=count * num_dims).reshape(count, num_dims)


def collective_rows_of(colls: Sequence[Collective], net: Network, model) -> Rows:
    """Rows of every collective of ``colls`` under a time model (timing.model.TimeModel)."""
    N, D = len(colls), net.num_dims
    if not N:
        return Rows(np.zeros((0, D)), np.zeros(0), np.zeros(0, dtype=np.int64))
    traffic = column(colls, "traffic_bytes", float, D)
    used = traffic > 0
    nrows = used.sum(axis=1)
    # A collective that uses no dimension takes no time: one zero row (on dimension 0).
    none = nrows == 0
    take = used.copy()
    take[none, 0] = True
    nrows[none] = 1
    # Each row's collective and dimension, in row order: from the flat positions, a third of the
    # time of a 2-d nonzero.
    coll_of = np.repeat(np.arange(N), nrows)
    dim_of = np.flatnonzero(take) - coll_of * D
    starts = np.zeros(N, dtype=np.int64)
    np.cumsum(nrows[:-1], out=starts[1:])
    if model.kind == "libra":
        A = _own_rows(traffic, coll_of, dim_of)
        const = np.zeros(coll_of.shape[0])
    else:
        A, const = _pipelined(colls, net, model, traffic, used, coll_of, dim_of, starts)
    A[starts[none]] = 0.0
    const[starts[none]] = 0.0
    if model.efficiency is not None:
        A /= np.asarray(model.efficiency, dtype=float)     # A is ours: divided in place, no copy
    # Row-major, as one collective's rows are: sums and products over a row then round off as
    # they did, so times and the problem's scales stay equal to the last bit.
    return Rows(np.ascontiguousarray(A), const, starts)


def _own_rows(traffic: np.ndarray, coll_of: np.ndarray, dim_of: np.ndarray) -> np.ndarray:
    """(M, D) rows, each with its collective's traffic on its own dimension only."""
    M, D = coll_of.shape[0], traffic.shape[1]
    A = np.zeros((M, D))
    # Flat positions: faster than indexing with (row, column) pairs.
    A.reshape(-1)[np.arange(0, M * D, D) + dim_of] = traffic.take(coll_of * D + dim_of)
    return A


def _pipelined(colls, net: Network, model, traffic, used, coll_of, dim_of, starts):
    """(M, D) rows and (M,) constants of the pipelined model for rows (collective, dimension)."""
    N, D = traffic.shape
    kind = np.fromiter(map(_KIND.__getitem__, map(operator.attrgetter("type"), colls)), np.int64, count=N)
    alg = np.fromiter(map(_ALG.__getitem__, map(operator.attrgetter("algorithm"), colls)), np.int64, count=N)
    # Reading the fields is much of the time at 100k collectives, so only what the model uses is
    # read: sizes and participants size the reduce copies with a memory bandwidth, participants
    # also scale the ring all-to-all; hops only count with latency (else they are multiplied by 0).
    # Participants and hops are small integers (read as such, each distinct tuple once: faster),
    # exact as floats: the arithmetic below is then the scalar code's.
    size = None
    if model.local_mem_bw_gbps is not None:
        size = np.fromiter(map(operator.attrgetter("size_bytes"), colls), float, count=N)
        parts = repeated_column(colls, "participants", np.int64, D).astype(float)
    else:
        parts = np.ones((N, D))
        a2a = np.flatnonzero(kind == _A2A)
        if a2a.shape[0]:
            parts[a2a] = repeated_column([colls[i] for i in a2a.tolist()], "participants", np.int64, D)
    hops = repeated_column(colls, "hops", np.int64, D).astype(float) if model.latency else np.zeros((N, D))
    lat = np.array([dim.latency_ns for dim in net.dims]) if model.latency else np.zeros(D)
    cols = (kind, alg, size, parts, traffic, hops, used)
    args = (lat, model.splits, model.local_mem_bw_gbps)
    M = coll_of.shape[0]
    A = np.empty((M, D))
    const = np.empty(M)
    row_end = np.r_[starts[1:], M]
    # A block of collectives at a time: their rows are contiguous, and a block's temporaries stay
    # in cache where whole (M, D) ones are fresh memory (first touch costs more than arithmetic).
    for lo in range(0, N, _BLOCK):
        hi = min(lo + _BLOCK, N)
        r0, r1 = int(starts[lo]), int(row_end[hi - 1])
        block = tuple(None if c is None else c[lo:hi] for c in cols)
        A[r0:r1], const[r0:r1] = _block_rows(block, coll_of[r0:r1] - lo, dim_of[r0:r1], args)
    return A, const


def _block_rows(cols, coll_of, dim_of, args):
    """Rows of a block of collectives (columns ``cols``; ``coll_of`` indexes the block)."""
    alg = cols[1]
    flat = alg != _HIER
    with np.errstate(divide="ignore", invalid="ignore"):
        if not flat.any():
            return _hierarchical(*cols, coll_of, dim_of, *args)
        flat_row = flat[coll_of]
        A = np.empty((coll_of.shape[0], cols[4].shape[1]))
        const = np.empty(coll_of.shape[0])
        for rows, build in ((flat_row, _flat), (~flat_row, _hierarchical)):
            if rows.any():
                A[rows], const[rows] = build(*cols, coll_of[rows], dim_of[rows], *args)
    return A, const


def _reduced_bytes(reduces: np.ndarray, carried: np.ndarray, p: np.ndarray) -> np.ndarray:
    # Reduce steps of a ring over p members add (p-1) chunks of carried/p bytes each.
    return np.where(reduces & (p > 1), carried * (p - 1) / p, 0.0)


def _flat(kind, alg, size, parts, traffic, hops, used, coll_of, dim_of, lat, k, mem):
    # One stage over all crossed dimensions (flat ring or P2P): the slowest crossed link sets the pace.
    steps_lat = np.where(used, hops * lat, -np.inf).max(axis=1)
    red = np.zeros(kind.shape[0])
    if mem is not None:
        p = np.prod(np.maximum(parts, 1), axis=1)
        red = np.where(alg == _FLAT, 3.0 * _reduced_bytes((kind == _AR) | (kind == _RS), size, p) / mem, 0.0)
    chunks = np.where(alg == _P2P, 1, k)
    return _own_rows(traffic, coll_of, dim_of), (red + chunks * steps_lat)[coll_of]


def _hierarchical(kind, alg, size, parts, traffic, hops, used, coll_of, dim_of, lat, k, mem):
    # Row-major (collectives, dimensions) throughout, as the rows are returned: every step is a
    # pass over contiguous memory and no (M, D) array is transposed.
    N, D = traffic.shape
    # ASTRA-sim's ring all-to-all forwards each block hop by hop round the ring: every link
    # carries m (p - 1) / 2 bytes, p / 2 times the table's m (p - 1) / p, and the ring pays
    # p (p - 1) / 2 hop latencies instead of p - 1 (both measured).
    a2a = (kind == _A2A)[:, None]
    if a2a.any():
        ring_factor = np.maximum(parts, 2) / 2.0
        traffic = np.where(a2a, traffic * ring_factor, traffic)
        hops = np.where(a2a, hops * ring_factor, hops)
    reduces = (kind == _AR) | (kind == _RS)
    red = np.zeros((N, D))
    if mem is not None:
        # Size carried into each dimension, in the algorithm's order of dimensions.
        carried_in = np.empty((N, D))
        m = size
        for d in range(D):
            carried_in[:, d] = m
            m = np.where(reduces, m / parts[:, d], m)
        gather = kind == _AG
        if gather.any():
            m = size
            for d in reversed(range(D)):
                carried_in[:, d] = np.where(gather, m, carried_in[:, d])
                m = m * parts[:, d]
        red = 3.0 * _reduced_bytes(reduces[:, None], carried_in, parts) / mem
    stage_lat = hops * lat
    # Chunks flow through the stages. As measured on ASTRA-sim, the stages that add a chunk's
    # share to the bottleneck stage d are the lower dimensions for all-reduce and every other
    # dimension for reduce-scatter, all-gather and all-to-all.
    M = coll_of.shape[0]
    rows = np.arange(M)
    # Which stages add, by (all-reduce or not, bottleneck d): a (2 D, D) table read row by row.
    lower = np.tri(D, D, -1, dtype=bool)
    others = ~np.eye(D, dtype=bool)
    adds = np.vstack([lower, others]).take((kind != _AR).take(coll_of) * D + dim_of, axis=0)
    adds &= used.take(coll_of, axis=0)
    # Multiplying by the mask is where(adds, x, 0.0) (the values are finite and >= 0), and cheaper.
    A = (traffic / k).take(coll_of, axis=0)
    A *= adds
    own = coll_of * D + dim_of
    A[rows, dim_of] = traffic.take(own)
    # Summed one dimension at a time, in order, as the scalar code does (same round-off); the
    # dimensions not added contribute exact zeros.
    const = red.take(own) + k * stage_lat.take(own)
    share = np.ascontiguousarray((red / k + stage_lat).T)
    adds_by_dim = np.ascontiguousarray(adds.T)     # contiguous per dimension: faster than a transposed walk
    for e in range(D):
        const += share[e].take(coll_of) * adds_by_dim[e]
    return A, const
