"""Time models T(B): how long a demand takes for per-dimension bandwidths B (GB/s = bytes/ns).

Every model writes the time of one collective as a *max of affine functions of 1/B*::

    time_ns(B) = max_r ( sum_d A[r, d] / B_d + c[r] )      A >= 0 in bytes, c in ns

which is convex in B, so the optimizer can solve every model exactly. Models:

``libra``
    LIBRA's reference: one row per used dimension, A[r] = traffic in that dimension, no constants.
    Collective time = max over dimensions of traffic_d / B_d (dimensions perfectly pipelined).
``pipelined``
    What ASTRA-sim's analytical backend does with the hierarchical ring algorithm and k =
    preferred-dataset-splits chunks. Dimension stages i (in the algorithm's order) take
    T_i = traffic_i / B_i plus a local reduction R_i = 3 * reduced bytes / local-mem-bw and
    per-chunk ring latency L_i = steps * hops * latency; chunks flow through the stages, so::

        time = max_i ( T_i + R_i + k L_i + sum_{j in F(i)} ((T_j + R_j) / k + L_j) )

    with F(i) the dimensions below i for all-reduce and all dimensions but i for reduce-scatter,
    all-gather and all-to-all (measured on ASTRA-sim). k = 1 gives the sum over dimensions; large
    k tends to LIBRA's max.
    All-to-all uses the ring algorithm's link load m (p - 1) / 2 (see collective_rows).

The job time without overlap is compute + sum of count * collective time per rank class, and the
slowest class sets the job time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..model import collectives as coll
from ..demand.types import Collective, Demand, RankClass
from ..errors import LibraError
from ..model.network import Network

MODELS = ("libra", "pipelined")


@dataclass(frozen=True)
class TimeModel:
    """Which time model, and the simulator parameters the pipelined model needs."""

    kind: str = "libra"
    splits: int = 1
    latency: bool = True
    local_mem_bw_gbps: float | None = None
    # Fraction of its bandwidth each dimension delivers (fitted from the simulator by the loop);
    # None means 1 everywhere.
    efficiency: tuple[float, ...] | None = None
    # Follow each rank's dependency graph (compute/communication overlap) instead of summing.
    overlap: bool = False

    def __post_init__(self) -> None:
        if self.kind not in MODELS:
            raise LibraError(f"unknown time model {self.kind!r}; use one of {list(MODELS)}")
        if self.splits < 1:
            raise LibraError(f"splits must be >= 1, got {self.splits}")
        if self.local_mem_bw_gbps is not None and self.local_mem_bw_gbps <= 0:
            raise LibraError(f"local_mem_bw_gbps must be > 0, got {self.local_mem_bw_gbps}")
        if self.efficiency is not None and not all(e > 0 for e in self.efficiency):
            raise LibraError(f"dimension efficiencies must be > 0, got {list(self.efficiency)}")


LIBRA = TimeModel()


def simulator_model(splits: int, local_mem_bw_gbps: float, *, efficiency: Sequence[float] | None = None,
                    overlap: bool = True) -> TimeModel:
    """The model of what ASTRA-sim computes with the settings libra_astra emits (ring algorithm,
    one active chunk, ``splits`` chunks, per-hop latency, this local memory bandwidth)."""
    return TimeModel("pipelined", splits=splits, latency=True, local_mem_bw_gbps=local_mem_bw_gbps,
                     efficiency=tuple(efficiency) if efficiency is not None else None, overlap=overlap)


def _reduced_bytes(kind: str, carried: float, p: int) -> float:
    # Reduce steps of a ring over p members add (p-1) chunks of carried/p bytes each.
    if kind in (coll.ALL_REDUCE, coll.REDUCE_SCATTER) and p > 1:
        return carried * (p - 1) / p
    return 0.0


@lru_cache(maxsize=1 << 16)
def collective_rows(c: Collective, net: Network, model: TimeModel = LIBRA) -> tuple[np.ndarray, np.ndarray]:
    """Rows (A, const) of one collective's time: time = max_r (A[r] @ (1/B) + const[r]).

    Cached (every argument is an immutable value): evaluating a demand at many bandwidths, as the
    baselines, the grid checks and the dependency replay do, builds each collective's rows once.
    The arrays are read-only."""
    A, const = _rows(c, net, model)
    if model.efficiency is not None:
        A = A / np.asarray(model.efficiency, dtype=float)
    A.setflags(write=False)
    const.setflags(write=False)
    return A, const


def _rows(c: Collective, net: Network, model: TimeModel) -> tuple[np.ndarray, np.ndarray]:
    D = net.num_dims
    traffic = np.asarray(c.traffic_bytes, dtype=float)
    used = [d for d in range(D) if traffic[d] > 0]
    if not used:
        return np.zeros((1, D)), np.zeros(1)
    if model.kind == "libra":
        A = np.zeros((len(used), D))
        for r, d in enumerate(used):
            A[r, d] = traffic[d]
        return A, np.zeros(len(used))
    lat = np.array([dim.latency_ns for dim in net.dims]) if model.latency else np.zeros(D)
    k = model.splits
    mem = model.local_mem_bw_gbps
    if c.algorithm != "hierarchical":
        # One stage over all crossed dims (flat ring or P2P): the slowest crossed link sets the pace.
        steps_lat = max(c.hops[d] * lat[d] for d in used)
        red = 0.0
        if mem is not None and c.algorithm == "flat_ring":
            p = int(np.prod([max(1, x) for x in c.participants]))
            red = 3.0 * _reduced_bytes(c.type, c.size_bytes, p) / mem
        chunks = 1 if c.algorithm == "p2p" else k
        A = np.zeros((len(used), D))
        for r, d in enumerate(used):
            A[r, d] = traffic[d]
        return A, np.full(len(used), red + chunks * steps_lat)
    hops = np.asarray(c.hops, dtype=float)
    if c.type == coll.ALL_TO_ALL:
        # ASTRA-sim's ring all-to-all forwards each block hop by hop round the ring: every link
        # carries m (p - 1) / 2 bytes, p / 2 times the table's m (p - 1) / p, and the ring pays
        # p (p - 1) / 2 hop latencies instead of p - 1 (both measured).
        ring_factor = np.array([max(p, 2) / 2.0 for p in c.participants])
        traffic = traffic * ring_factor
        hops = hops * ring_factor
    order = [d for d in range(D) if traffic[d] > 0]
    carried = c.size_bytes
    red_by_dim, lat_by_dim = {}, {}
    for d in coll.dim_order(c.type, D):
        p = c.participants[d]
        if traffic[d] > 0:
            red_by_dim[d] = 3.0 * _reduced_bytes(c.type, carried, p) / mem if mem is not None else 0.0
            lat_by_dim[d] = hops[d] * lat[d]
        if c.type in (coll.ALL_REDUCE, coll.REDUCE_SCATTER):
            carried /= p
        elif c.type == coll.ALL_GATHER:
            carried *= p
    # Chunks flow through the stages. As measured on ASTRA-sim, the stages that add a chunk's
    # share to the bottleneck stage i are the lower dimensions for all-reduce and every other
    # dimension for reduce-scatter, all-gather and all-to-all.
    fill_all = c.type != coll.ALL_REDUCE
    A = np.zeros((len(order), D))
    const = np.zeros(len(order))
    for i, d in enumerate(order):
        A[i, d] = traffic[d]
        const[i] = red_by_dim[d] + k * lat_by_dim[d]
        for e in order:
            if e != d and (fill_all or e < d):
                A[i, e] += traffic[e] / k
                const[i] += red_by_dim[e] / k + lat_by_dim[e]
    return A, const


def collective_time_ns(c: Collective, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> float:
    A, const = collective_rows(c, net, model)
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.asarray(bw_gbps, dtype=float)
    return float(np.max(_apply(A, inv) + const))


@lru_cache(maxsize=64)
def _class_rows(rc: RankClass, net: Network, model: TimeModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every collective's rows of one rank class stacked: (A, const, first row of each collective)."""
    if not rc.collectives:
        return np.zeros((0, net.num_dims)), np.zeros(0), np.zeros(0, dtype=np.int64)
    rows = [collective_rows(c, net, model) for c in rc.collectives]
    starts = np.cumsum([0] + [a.shape[0] for a, _ in rows[:-1]])
    return np.vstack([a for a, _ in rows]), np.concatenate([g for _, g in rows]), starts


def collective_times_ns(rc: RankClass, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> np.ndarray:
    """Time of each collective of a rank class (one run each), vectorized over the class."""
    A, const, starts = _class_rows(rc, net, model)
    if not starts.shape[0]:
        return np.zeros(0)
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.asarray(bw_gbps, dtype=float)
    vals = _apply(A, inv) + const
    return np.maximum.reduceat(vals, starts)


def _apply(A: np.ndarray, inv: np.ndarray) -> np.ndarray:
    # A dimension at 0 GB/s makes only the rows that use it infinite (0 * inf would be nan).
    if np.all(np.isfinite(inv)):
        return A @ inv
    finite = np.where(np.isfinite(inv), inv, 0.0)
    out = A @ finite
    out[(A[:, ~np.isfinite(inv)] > 0).any(axis=1)] = np.inf
    return out


def class_time_ns(rc: RankClass, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> tuple[float, float]:
    """(compute_ns, communication_ns) of one rank class without compute/communication overlap."""
    counts = np.array([c.count for c in rc.collectives], dtype=float)
    comm = float(counts @ collective_times_ns(rc, bw_gbps, net, model)) if counts.size else 0.0
    return rc.compute_time_ns, comm


@dataclass(frozen=True)
class TimeBreakdown:
    total_ns: float
    compute_ns: float
    communication_ns: float
    slowest_class: int


def demand_time(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> TimeBreakdown:
    """Job time of a demand: the slowest rank class, compute plus communication."""
    best = None
    for i, rc in enumerate(d.rank_classes):
        comp, comm = class_time_ns(rc, bw_gbps, net, model)
        if best is None or comp + comm > best.total_ns:
            best = TimeBreakdown(comp + comm, comp, comm, i)
    assert best is not None
    return best
