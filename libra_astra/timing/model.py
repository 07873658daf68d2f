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
    All-to-all uses the ring algorithm's link load m (p - 1) / 2 (see rows.py).

The job time without overlap is compute + sum of count * collective time per rank class, and the
slowest class sets the job time.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from ..demand.types import Collective, Demand, RankClass
from ..errors import LibraError
from ..model.network import Network
from .rows import Rows, collective_rows_of
from .system_rows import exact_times_ns, system_rows_of

if TYPE_CHECKING:  # pragma: no cover
    from .system_phases import SystemTiming

MODELS = ("libra", "pipelined")


class PathReplay(Protocol):
    """A time that follows dependency paths outside the demand (measure/faithful_time.py): the
    optimizer times designs by it and bounds it by the critical paths it names, each a constant
    plus some of the demand's collectives, counted."""

    name: str

    def time_ns(self, bw_gbps: Sequence[float]) -> float: ...

    @property
    def floor_ns(self) -> float: ...

    def critical_paths(self, bw_gbps: Sequence[float]) -> list: ...


# Far below any memory; the reduce copies of the largest demand (1e21 bytes) still take a finite time.
MIN_LOCAL_MEM_BW_GBPS = 1e-6


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
    # A user's system.json beyond splits and local-mem-bw (system_phases.SystemTiming): the
    # implementations, active chunks, endpoint delay and collective optimization it sets.
    system: "SystemTiming | None" = None
    # With overlap: time the single workload by this replay instead of its demand's graph; its
    # rows are still the demand's (the replay's collectives).
    replay: PathReplay | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in MODELS:
            raise LibraError(f"unknown time model {self.kind!r}; use one of {list(MODELS)}")
        if self.splits < 1:
            raise LibraError(f"splits must be >= 1, got {self.splits}")
        if self.local_mem_bw_gbps is not None and not self.local_mem_bw_gbps >= MIN_LOCAL_MEM_BW_GBPS:
            raise LibraError(f"local_mem_bw_gbps must be >= {MIN_LOCAL_MEM_BW_GBPS:g} GB/s (a kilobyte per "
                             f"second), got {self.local_mem_bw_gbps:g}")
        if self.efficiency is not None and not all(e > 0 for e in self.efficiency):
            raise LibraError(f"dimension efficiencies must be > 0, got {list(self.efficiency)}")
        if self.system is not None and self.kind != "pipelined":
            raise LibraError("system settings apply to the pipelined model only")

    @property
    def stages_add_up(self) -> bool:
        """One chunk per collective: a hierarchical collective's dimension stages run one after the
        other, so the row of its last stage bounds each of its other rows."""
        return self.kind == "pipelined" and self.splits == 1 and self.system is None


LIBRA = TimeModel()


def simulator_model(splits: int, local_mem_bw_gbps: float | None, *, efficiency: Sequence[float] | None = None,
                    overlap: bool = True, system: dict | None = None) -> TimeModel:
    """The model of what ASTRA-sim computes with the settings libra_astra emits (ring algorithm,
    one active chunk, ``splits`` chunks, per-hop latency, this local memory bandwidth), or with
    the user's ``system`` (a design's record of their system.json: ``{"path", "settings"}``)."""
    from .system_phases import timing_of

    return TimeModel("pipelined", splits=splits, latency=True, local_mem_bw_gbps=local_mem_bw_gbps,
                     efficiency=tuple(efficiency) if efficiency is not None else None, overlap=overlap,
                     system=timing_of(system))


def collective_rows(c: Collective, net: Network, model: TimeModel = LIBRA) -> tuple[np.ndarray, np.ndarray]:
    """Rows (A, const) of one collective's time: time = max_r (A[r] @ (1/B) + const[r]).

    One row per dimension the collective uses, ascending (one zero row if it uses none). Read-only
    arrays; a caller with many collectives takes them all at once with ``class_rows``."""
    A, const, _ = _memo_rows(c, net, model)
    return A, const


@lru_cache(maxsize=1 << 12)
def _memo_rows(c: Collective, net: Network, model: TimeModel) -> Rows:
    # Cached: the loop and the checks of single collectives time the same few at many bandwidths.
    return _frozen(_rows_of((c,), net, rows_key(model)))


def _rows_of(colls, net: Network, model: TimeModel) -> Rows:
    # a user's system settings have rows of their own (system_rows.py)
    return collective_rows_of(colls, net, model) if model.system is None else system_rows_of(colls, net, model)


def rows_key(model: TimeModel) -> TimeModel:
    """The model as far as rows depend on it (keys of row caches)."""
    # Rows do not depend on overlap: the overlap solve and its no-overlap start share them.
    return replace(model, overlap=False, replay=None) if model.overlap else model


def _frozen(rows: Rows) -> Rows:
    for a in rows:
        a.setflags(write=False)
    return rows


def collective_time_ns(c: Collective, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> float:
    A, const = collective_rows(c, net, model)
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.asarray(bw_gbps, dtype=float)
    t = float(np.max(_apply(A, inv) + const))
    if model.system is None:
        return t
    return float(exact_times_ns((c,), np.array([t]), bw_gbps, net, model)[0])


# Rows of a class (and of a demand's classes stacked), kept while the class (demand) lives, by
# identity: hashing a class walks all its collectives, which costs more than building their rows;
# for its last few time models.
_MEMO: dict[int, tuple[weakref.ref, dict]] = {}
_MODELS_PER_CLASS = 4


def _memoized(owner: RankClass | Demand, net: Network, model: TimeModel, build) -> Rows:
    key = id(owner)
    entry = _MEMO.get(key)
    if entry is None or entry[0]() is not owner:
        def forget(ref, key=key):
            if _MEMO.get(key, (None,))[0] is ref:
                _MEMO.pop(key, None)
        entry = (weakref.ref(owner, forget), {})
        _MEMO[key] = entry
    memo = entry[1]
    mkey = (net, rows_key(model))
    rows = memo.get(mkey)
    if rows is None:
        rows = _frozen(build(mkey[1]))
        if len(memo) >= _MODELS_PER_CLASS:
            del memo[next(iter(memo))]
        memo[mkey] = rows
    return rows


def class_rows(rc: RankClass, net: Network, model: TimeModel = LIBRA) -> Rows:
    """Every collective's rows of one rank class stacked (``rows.Rows``: A, const, first row of
    each collective), built for all of them at once and kept while the class lives. Read-only."""
    return _memoized(rc, net, model, lambda m: _rows_of(rc.collectives, net, m))


def demand_rows(d: Demand, net: Network, model: TimeModel = LIBRA) -> Rows:
    """``class_rows`` of every class of ``d``, stacked in class order (a class's collectives then
    follow the previous class's); kept while the demand lives, so the optimizer's terms and the
    replay's durations share them. Read-only."""
    def build(m: TimeModel) -> Rows:
        parts = [class_rows(rc, net, m) for rc in d.rank_classes]
        if not parts:
            return Rows(np.zeros((0, net.num_dims)), np.zeros(0), np.zeros(0, dtype=np.int64))
        row_offset = np.cumsum([0] + [p.A.shape[0] for p in parts[:-1]])
        return Rows(np.vstack([p.A for p in parts]), np.concatenate([p.const_ns for p in parts]),
                    np.concatenate([p.starts + o for p, o in zip(parts, row_offset)]).astype(np.int64))
    if len(d.rank_classes) == 1:
        return class_rows(d.rank_classes[0], net, model)
    return _memoized(d, net, model, build)


def collective_times_ns(rc: RankClass, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> np.ndarray:
    """Time of each collective of a rank class (one run each), vectorized over the class."""
    times = rows_times_ns(class_rows(rc, net, model), bw_gbps)
    if model.system is None:
        return times
    return exact_times_ns(rc.collectives, times, bw_gbps, net, model)


def demand_times_ns(d: Demand, bw_gbps: Sequence[float], net: Network, model: TimeModel = LIBRA) -> np.ndarray:
    """Time of each collective of a demand, in ``demand_rows`` order (one run each)."""
    times = rows_times_ns(demand_rows(d, net, model), bw_gbps)
    if model.system is None:
        return times
    colls = [c for rc in d.rank_classes for c in rc.collectives]
    return exact_times_ns(colls, times, bw_gbps, net, model)


def rows_times_ns(rows: tuple[np.ndarray, np.ndarray, np.ndarray], bw_gbps: Sequence[float]) -> np.ndarray:
    """Time of each collective from its class's rows (``class_rows``)."""
    A, const, starts = rows
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
