"""An exact solver for the convex programs behind every libra_astra objective.

Problem (all data already scaled to O(1) by the caller)::

    minimize    c . x
    subject to  t_k >= sum_j A[m, j] / x_j + g[m]          for every row m of term k (owner[m] = k)
                x[z[q]] >= sum_{k in class q} w_k t_k + e[q]   for every class q
                G x <= h,   E x = f

Rows only touch "reciprocal" coordinates (bandwidths, or the Charnes-Cooper variables); class
constraints tie an epigraph coordinate z to the weighted sum of its terms. Every function here is
convex, so an interior-point method reaches the global optimum.

Method. ``-log(t - a/x)`` is not a self-concordant barrier (it equals ``-log(t x - a) + log x``),
and Newton steps on it can crawl for hundreds of iterations. So the solver works on an
equivalent problem with one more variable per used coordinate, v_j >= 1/x_j written as
``x_j v_j >= 1`` (a slice of a rotated second-order cone, whose barrier is self-concordant):
every row becomes linear, ``t_k >= A v + g``, and only those few two-variable constraints stay
nonlinear; their largest feasible step is the root of a quadratic. On it runs a primal-dual
interior-point method with Mehrotra's predictor-corrector, a second-order correction for the
hyperbolic constraints, separate primal and dual step lengths and a wide-neighbourhood
safeguard; once a full dual step has made the multipliers stationary, it centres less and gives
a short step one Gondzio centrality correction (terms whose rows tie at the optimum keep the
affine steps short there): 4-15 Newton systems on the benchmark families up to 1,000
collectives, 4-22 at 10,000 (from the square-root split the problem builder gives as the first
guess).
With thousands of distinct terms not certified after a few steps, a merged surrogate (terms
equal up to scale summed, a relaxation) is solved and its bandwidths restart the problem with v
close to 1/x: from the equal split the method needs many short steps while the rows' bottleneck
pattern moves (80 Newton steps for 10,000 pipelined collectives on 8 dimensions without it, 38
with it; 22 from the square-root split). Each Newton system eliminates the K term variables in
closed form (in a cancellation-free way, see :class:`_Newton`) and the equalities
through a null-space basis, so a step costs O(M n^2) for M rows and n coordinates (the same
system compiled in _newton_kernel.pyx where the install built it: on problems of a few hundred
rows numpy's per-call cost, not the arithmetic, sets a step's time; _Newton is the reference the
kernel is tested against and the fallback). If the
primal-dual method ever fails to certify, damped Newton on the self-concordant barrier (a
classic path-following method: slower, but with a guaranteed decrease per step) takes over.

Certificate. A Lagrange dual bound is computed in closed form from the multipliers of the rows
(inf over x_j > 0 of a x_j + b / x_j is 2 sqrt(a b)) for the original problem, so the reported gap
is a proven bound on the distance to the optimum, whatever method produced the multipliers: they
are only made dual feasible, never trusted. Where a coordinate binds no row at the optimum
(bandwidth a fixed total parks on a dimension no collective needs) two things can keep that bound
loose after convergence: the equality multipliers are a least-squares fit (so a bound charged for
a coordinate's decreasing term gets them chosen to maximise it, a concave function of one variable
per equality), and short dual steps can leave the multipliers off stationarity (so once the
iterates stop, a full dual Newton step's multipliers, clipped at 0, are tried as well). The
primal value is the objective at a feasible point (epigraph coordinates recomputed from x), never
a barrier estimate.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dgesv
from scipy.optimize import linprog

from ..errors import InfeasibleError, LibraError

try:
    # The Newton system compiled (setup.py builds it when it can); LIBRA_ASTRA_NUMPY_NEWTON=1
    # keeps the numpy one.
    from . import _newton_kernel as _kernel
except ImportError:
    _kernel = None
if os.environ.get("LIBRA_ASTRA_NUMPY_NEWTON") == "1":
    _kernel = None

# Tunables of the primal-dual method (chosen on the benchmark's problems: tools/bench_optimize.py).
_GAMMA = 1e-4       # wide neighbourhood: every u_i y_i / omega_i >= _GAMMA * mean
_QUAD = 0.9         # ... except once the predictor step exceeds this (the quadratic phase)
_SHORT = 0.05       # a step shorter than this is retried with more centring
_BACK = 0.7         # backtracking factor for the neighbourhood test
_EARLY = 100.0      # try the certificate once u.y <= _EARLY * the gap asked for
_V_MARGIN = 0.3     # start with x_j v_j = 1 + _V_MARGIN (1.0 took 5% more Newton steps on the benchmarks)
_V_WARM = 0.01      # ... from a surrogate's near-optimal bandwidths
_SURROGATE = 2000   # terms from which a merged surrogate may give a second start
_COLD = 15          # ... after this many Newton steps from the first start, unless mu still falls fast
_STALL_MIN = 4      # ... or sooner, from this many steps on, once the first start stalls:
_STALL_DROP = 0.5   # mu above this fraction of its value _STALL_WIN steps before
_STALL_WIN = 3
_FAST = 0.1         # past _COLD the first start goes on while mu falls below this fraction in _STALL_WIN steps
_SIGMA_POW = 3      # centring sigma = (mu_affine / mu) ** this (Mehrotra's rule) ...
_SIGMA_POW_FEAS = 9  # ... and this once a full dual step has made the multipliers stationary
_GZ_BELOW = 0.9     # a corrector step shorter than this gets one centrality correction (Gondzio's)
_GZ_BOX = 3.0       # ... which moves the products u_i y_i into [sigma mu / this, sigma mu * this]
_TINY = 1e-300      # multipliers a full dual step sends to 0 or below, for the certificate


@dataclass(frozen=True)
class ConvexProblem:
    c: np.ndarray            # (n,) objective
    recip: np.ndarray        # (n,) bool: coordinates that appear as 1/x_j (kept > 0)
    A: np.ndarray            # (M, n) row coefficients (>= 0, zero outside recip)
    g: np.ndarray            # (M,) row constants
    owner: np.ndarray        # (M,) term index of each row, non-decreasing
    w: np.ndarray            # (K,) term weights (> 0)
    term_class: np.ndarray   # (K,) class of each term, non-decreasing
    class_z: np.ndarray      # (Q,) epigraph coordinate of each class
    class_e: np.ndarray      # (Q,) class constants
    G: np.ndarray            # (p, n)
    h: np.ndarray            # (p,)
    E: np.ndarray            # (r, n)
    f: np.ndarray            # (r,)

    @property
    def n(self) -> int:
        return self.c.shape[0]


@dataclass(frozen=True)
class SolverResult:
    x: np.ndarray
    fun: float               # primal objective at x (evaluated exactly, not from the barrier)
    dual_bound: float        # proven lower bound on the optimum
    gap: float               # fun - dual_bound
    success: bool
    status: int              # 0 converged, 1 iteration limit or round-off
    message: str
    newton_steps: int
    solve_time_s: float


def term_values(p: ConvexProblem, x: np.ndarray, lay: "_Layout | None" = None) -> np.ndarray:
    """max over each term's rows of A x^-1 + g, i.e. the tightest feasible t.

    ``lay``: the problem's layout, whose copies of the used columns and term starts spare the
    search for them (the same arrays, so the same values)."""
    if lay is not None:
        used, A_used = lay.used, lay.AJ
    else:
        # Only columns some row uses: an unused coordinate may sit at exactly 0.
        used = _used_mask(p)
        A_used = p.A[:, used]
    with np.errstate(divide="ignore"):
        vals = A_used @ (1.0 / x[used]) + p.g
    if lay is not None:                            # the layout checked that every term has rows
        return np.maximum.reduceat(vals, lay.row_start)
    K = p.w.shape[0]
    owner = p.owner
    if owner.shape[0] and owner[0] == 0 and owner[-1] == K - 1:
        starts = _run_starts(owner)
        if starts.shape[0] == K:                   # every term has rows (owner is sorted)
            return np.maximum.reduceat(vals, starts)
    t = np.full(K, -np.inf)
    np.maximum.at(t, owner, vals)
    return t


def _used_mask(p: ConvexProblem) -> np.ndarray:
    return p.recip & (p.A.max(axis=0, initial=0.0) > 0)


def _run_starts(a: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a starts (a non-empty)."""
    return np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))


def class_values(p: ConvexProblem, x: np.ndarray, lay: "_Layout | None" = None) -> np.ndarray:
    t = term_values(p, x, lay)
    Q = p.class_z.shape[0]
    return np.bincount(p.term_class, weights=p.w * t, minlength=Q) + p.class_e


def tight_point(p: ConvexProblem, x: np.ndarray, lay: "_Layout | None" = None) -> np.ndarray:
    """x with every epigraph coordinate lowered to the largest class value it bounds."""
    x = x.copy()
    vals = class_values(p, x, lay)
    z_vals = np.full(p.n, -np.inf)
    np.maximum.at(z_vals, p.class_z, vals)
    zs = np.unique(p.class_z) if lay is None else lay.z_unique
    x[zs] = z_vals[zs]
    return x


def _strictly_inside(p: ConvexProblem, x0: np.ndarray, recip_idx: np.ndarray) -> bool:
    # Strictly inside by a margin: a guess on a bound up to round-off (an equal split that
    # spends exactly the budget) leaves the interior-point method no room to move.
    room = 1e-7 * (1.0 + np.abs(p.h) + np.abs(p.G) @ np.abs(x0))
    return bool(np.all(x0[recip_idx] > 0) and np.all(p.G @ x0 < p.h - room)
                and np.all(np.abs(p.E @ x0 - p.f) <= 1e-12 * (1.0 + np.abs(p.f))))


def _starting_point(p: ConvexProblem, guesses: list[np.ndarray]) -> np.ndarray:
    """A point strictly inside G x <= h with E x = f (used recip coordinates > 0), epigraph
    coordinates at their class values (tight_point) wherever a guess allows it.

    A guess strictly inside is taken as it is. A guess on the boundary (the fastest design of a
    min-cost problem spends the whole --total-bw-max) is pulled toward the centre of the linear
    constraints just far enough to be strictly inside: the time rows are convex, so a short pull
    keeps a time target the guess meets; the centre alone may be far slower than the target."""
    recip_idx = np.flatnonzero(p.recip)
    tight = []
    for x0 in guesses:
        x0 = np.asarray(x0, dtype=float)
        if _strictly_inside(p, x0, recip_idx):
            return x0
        if np.all(x0[recip_idx] >= 0) and np.all(np.isfinite(x0)):
            tight.append(x0)
    centre = _linear_centre(p)
    for x0 in tight:
        # Epigraph coordinates: as low as the guess's bandwidths allow (the guess may carry
        # arbitrary values there), recomputed at every blend.
        for lam in 0.5 ** np.arange(1, 41):
            xb = (1.0 - lam) * x0 + lam * centre
            xb = tight_point(p, xb) if np.all(xb[_used(p)] > 0) else xb
            if np.all(np.isfinite(xb)) and _strictly_inside(p, xb, recip_idx):
                return xb           # the largest pull that works: the most central start
    return centre


def _used(p: ConvexProblem) -> np.ndarray:
    return np.flatnonzero(_used_mask(p))


def _linear_centre(p: ConvexProblem) -> np.ndarray:
    """max delta s.t. G x + delta * |G_i| <= h, x_j >= delta for coordinates a row divides by,
    E x = f, delta <= 1 (a Chebyshev-like centre of the linear constraints)."""
    n = p.n
    used = _used(p)
    pos = np.zeros((used.shape[0], n))
    pos[np.arange(used.shape[0]), used] = -1.0
    Gs = np.vstack([p.G, pos])
    hs = np.r_[p.h, np.zeros(used.shape[0])]
    norms = np.linalg.norm(Gs, axis=1) if Gs.size else np.zeros(0)
    c = np.zeros(n + 1)
    c[-1] = -1.0
    A_ub = np.hstack([Gs, norms[:, None]]) if Gs.size else None
    A_eq = np.hstack([p.E, np.zeros((p.E.shape[0], 1))]) if p.E.size else None
    bounds = [(None, None)] * n + [(None, 1.0)]
    res = linprog(c, A_ub=A_ub, b_ub=hs if Gs.size else None, A_eq=A_eq, b_eq=p.f if p.E.size else None,
                  bounds=bounds, method="highs")
    if res.status == 2:
        raise InfeasibleError("the constraints are infeasible: no bandwidth split satisfies all of them; relax one")
    if res.status != 0:
        raise LibraError(f"could not find a starting point: {res.message}")
    # delta is the margin of the best point: negative means some inequality cannot hold at all.
    if res.x[-1] < -1e-9:
        raise InfeasibleError("the constraints are infeasible: no bandwidth split satisfies all of them; relax one")
    if res.x[-1] <= 1e-9:
        raise LibraError("the constraints leave no strictly feasible point (an inequality always holds with "
                         "equality, or a bandwidth is forced to 0); write such pairs as one equality")
    return res.x[:n]


def _surrogate(p: ConvexProblem) -> ConvexProblem | None:
    """Terms of one class whose rows are equal up to scale, merged into one (constants added):
    max_m(W a_m v + sum_k g_km) <= sum_k max_m(s_k a_m v + g_km), with equality when the members'
    bottleneck rows coincide. A relaxation close to the problem, used only for a starting point
    (None if it would not be much smaller). Expects unit term weights."""
    K = p.w.shape[0]
    if K < _SURROGATE:
        return None
    M, n = p.A.shape
    row_start = _run_starts(p.owner)
    nrows = np.diff(np.r_[row_start, M])
    scale = np.maximum.reduceat(p.A.max(axis=1), row_start)
    scale = np.where(scale > 0, scale, 1.0)
    An = np.round(p.A / scale[p.owner][:, None], 6)
    key_of = np.empty(K, dtype=np.int64)
    blocks = []                                    # (class, rows normalized, g summed, W)
    for r in np.unique(nrows).tolist():
        ks = np.flatnonzero(nrows == r)
        idx = row_start[ks][:, None] + np.arange(r)[None, :]
        flat = np.hstack([p.term_class[ks][:, None].astype(float), An[idx].reshape(len(ks), r * n)])
        uniq, inv = _unique_rows(flat)
        gsum = np.zeros((uniq.shape[0], r))
        np.add.at(gsum, inv, p.g[idx])
        W = np.bincount(inv, weights=scale[ks], minlength=uniq.shape[0])
        key_of[ks] = inv + len(blocks)
        for i in range(uniq.shape[0]):
            blocks.append((int(uniq[i, 0]), uniq[i, 1:].reshape(r, n) * W[i], gsum[i]))
    if len(blocks) * 4 > K:
        return None
    blocks.sort(key=lambda b: b[0])
    A = np.vstack([b[1] for b in blocks])
    g = np.concatenate([b[2] for b in blocks])
    owner = np.repeat(np.arange(len(blocks)), [b[1].shape[0] for b in blocks])
    tc = np.array([b[0] for b in blocks])
    return ConvexProblem(p.c, p.recip, A, g, owner, np.ones(len(blocks)), tc, p.class_z, p.class_e,
                         p.G, p.h, p.E, p.f)


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(a, axis=0, return_inverse=True) for a float matrix without NaN: the distinct rows in
    lexicographic order and each row's index among them. A lexsort over the columns; np.unique
    sorts the rows as structured records, 10-20x slower on thousands of rows."""
    order = np.lexsort(a.T[::-1])                  # the first column is the primary key
    ordered = a[order]
    new = np.empty(ordered.shape[0], dtype=bool)
    new[:1] = True
    new[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    inv = np.empty(ordered.shape[0], dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    return ordered[new], inv


def _unit_weights(p: ConvexProblem) -> ConvexProblem:
    """The same problem in the variables w_k t_k. Merged terms carry weights up to ~1e9 with rows
    of ~1e-9; an interior-point method wants each term on the scale of its share of the objective."""
    if np.all(p.w == 1.0):
        return p
    wr = p.w[p.owner]
    return ConvexProblem(p.c, p.recip, p.A * wr[:, None], p.g * wr, p.owner, np.ones_like(p.w), p.term_class,
                         p.class_z, p.class_e, p.G, p.h, p.E, p.f)


def _as_slice(idx: np.ndarray):
    """idx as a slice when it is a run of consecutive coordinates (the usual layout puts the
    bandwidths first): a basic index is a view, cheaper than a gather at every Newton step."""
    if idx.shape[0] and idx[-1] - idx[0] == idx.shape[0] - 1:
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


class _Layout:
    """Index arrays and constant factors of one problem, computed once per solve."""

    def __init__(self, p: ConvexProblem):
        n, K, Q = p.n, p.w.shape[0], p.class_z.shape[0]
        M, P = p.owner.shape[0], p.G.shape[0]
        self.p = p
        self.n, self.K, self.Q, self.M, self.P = n, K, Q, M, P
        self.ri = np.flatnonzero(p.recip)
        self.row_start = _run_starts(p.owner)
        self.term_start = _run_starts(p.term_class)
        if self.row_start.shape[0] != K or self.term_start.shape[0] != Q:
            raise ValueError("every term needs a row and every class a term, in sorted order")
        if not np.all(p.w == 1.0):
            raise ValueError("term weights must be 1 here; rescale the terms with _unit_weights first")
        # Coordinates some row uses get a variable v_j >= 1/x_j; rows become t >= A_J v + g.
        self.used = _used_mask(p)
        self.J = np.flatnonzero(self.used)
        nv = self.nv = self.J.shape[0]
        self.Jx = _as_slice(self.J)                  # J for indexing at every step
        self.N = n + nv
        self.AJ = p.A[:, self.used]                 # as term_values without a layout gathers it (same products)
        col_nnz = np.count_nonzero(self.AJ, axis=0)
        self.o_phi = M + Q + P                       # slacks: [rows, classes, linear rows, x_J v - 1]
        # Barrier weight of x_j v_j >= 1: the number of rows using v_j. With weight 1 thousands of
        # row barriers press v_j onto the hyperbola, and steps along its curve become tiny.
        nu = np.maximum(col_nnz, 1).astype(float)
        self.omega = np.concatenate([np.ones(self.o_phi), nu])
        self.nu_total = float(self.omega.sum())
        self.GT = np.ascontiguousarray(p.G.T)
        self.AT = np.ascontiguousarray(p.A.T)
        N = self.N
        # The fixed part of each Newton system's BL (see _Newton): the e_z of each class's b_q and
        # -G for the linear rows; each system fills in sum_k qbar_k and the gradients (v, x_J) of
        # x_J v - 1.
        self.BL0 = np.zeros((Q + P + nv, N))
        self.BL0[np.arange(Q), p.class_z] = 1.0
        self.BL0[Q:Q + P, :n] = -p.G
        self.cX = np.concatenate([p.c, np.zeros(nv)])
        # Null-space basis of E (on x; v is free): steps dX = Z dy keep E x = f and leave an SPD system.
        if p.E.shape[0]:
            eq = _equality_factors(p.E)
            Zx = eq.null_basis
            self.Z = np.zeros((N, Zx.shape[1] + nv))
            self.Z[:n, :Zx.shape[1]] = Zx
            self.Z[n:, Zx.shape[1]:] = np.eye(nv)
            self.P_E = eq.projector
        else:
            self.Z = self.P_E = None
        self.z_unique = np.unique(p.class_z)
        self.free = np.flatnonzero(~p.recip)         # coordinates the dual must balance exactly
        # Per coordinate, a linear row -g x_j <= h that bounds it from below only (or -1).
        self.lower_row = np.full(n, -1)
        if P:
            single = (np.count_nonzero(p.G, axis=1) == 1)
            rows = np.flatnonzero(single & (p.G.min(axis=1) < 0))
            cols = (p.G[rows] != 0).argmax(axis=1)       # each row's one nonzero column
            for i, j in zip(rows.tolist(), cols.tolist()):
                if self.lower_row[j] < 0:
                    self.lower_row[j] = i
        self.ub: dict[int, float] = {}               # LP upper bounds of recip coordinates, lazily
        self._row_ub = None
        self._moves = None
        self.eq = eq if p.E.shape[0] else None
        self.kernel = _kernel.Structure(self, p) if _kernel is not None else None

    @functools.cached_property
    def numpy_newton(self) -> "_NumpyNewtonLayout":
        """What only the numpy Newton system reads: built on its first use, never where the
        compiled kernel solves."""
        return _NumpyNewtonLayout(self)

    @property
    def recip_equality_moves(self) -> np.ndarray:
        """(r, k) basis of the equality multipliers' changes that leave every non-reciprocal
        coordinate's stationarity as it is: the null space of E[:, ~recip]^T."""
        if self._moves is None:
            self._moves = _null_basis(self.p.E[:, ~self.p.recip].T)
        return self._moves

    @property
    def row_ub(self) -> np.ndarray:
        if self._row_ub is None:
            self._row_ub = _row_upper_bounds(self.p)
        return self._row_ub


class _NumpyNewtonLayout:
    """The constants of _Newton beyond the layout's: transposed rows, the sparse rows' keys, and
    flat indices into BL and H."""

    def __init__(self, lay: _Layout):
        p, M, K, N, n = lay.p, lay.M, lay.K, lay.N, lay.n
        self.negAJT = np.ascontiguousarray(-lay.AJ.T)    # (nv, M): sums along its rows are the fast ones
        self.nz_key = None
        if 2 * np.count_nonzero(lay.AJ) <= lay.AJ.size:
            # Sparse rows (LIBRA's: one dimension each): the per-term sums of the rows' weighted
            # gradients are one bincount over the nonzeros keyed by (column, term), where a
            # reduceat over the dense rows pays for every (column, term) segment, one or two rows
            # long. (On dense rows at 100k collectives the bincount's gathers cost more.)
            nz_row, nz_col = np.nonzero(lay.AJ)
            self.nz_row = nz_row
            self.nz_key = nz_col * K + p.owner[nz_row]
            self.nz_negA = -lay.AJ[nz_row, nz_col]
        self.term_rows = np.diff(np.append(lay.row_start, M))
        vJ = n + np.arange(lay.nv)
        phi_rows = (lay.Q + lay.P + np.arange(lay.nv)) * N
        self.flat_phi_x = phi_rows + lay.J        # flat indices in BL of d phi_j / d x_j ...
        self.flat_phi_v = phi_rows + vJ           # ... and d phi_j / d v_j
        # Flat indices in H of the (x_j, v_j) and (v_j, x_j) entries.
        self.flat_off = np.concatenate([lay.J * N + vJ, vJ * N + lay.J])
        self.ZT = None if lay.Z is None else np.ascontiguousarray(lay.Z.T)
        self.eye = np.eye(N if lay.Z is None else lay.Z.shape[1])     # the reduced system's size


class _EqualityFactors:
    """Factors of an equality matrix E: a null-space basis, pinv(E), the projector onto E's null
    space and (when a certificate needs it) pinv(E^T). They depend on E alone, which every solve
    of one network and set of constraints shares (each round of dependency paths, each optimize of
    a sweep); decompositions of the same bytes give the same numbers, so they are kept instead of
    recomputed."""

    def __init__(self, E: np.ndarray):
        self.E = E
        self.null_basis = _frozen(_null_basis(E))
        self.pinv = _frozen(np.linalg.pinv(E))
        self.projector = _frozen(np.eye(E.shape[1]) - self.pinv @ E)     # onto E's null space
        self._pinv_T = None

    def pinv_T(self) -> np.ndarray:
        if self._pinv_T is None:
            self._pinv_T = _frozen(np.linalg.pinv(self.E.T))
        return self._pinv_T


_EQ_CACHE: dict = {}
_EQ_CACHE_SIZE = 32


def _equality_factors(E: np.ndarray) -> _EqualityFactors:
    key = (E.shape, E.dtype.str, E.tobytes())
    hit = _EQ_CACHE.get(key)
    if hit is None:
        if len(_EQ_CACHE) >= _EQ_CACHE_SIZE:
            _EQ_CACHE.clear()
        hit = _EQ_CACHE[key] = _EqualityFactors(_frozen(E.copy()))
    return hit


def _null_basis(m: np.ndarray) -> np.ndarray:
    """(columns of m, k): an orthonormal basis of m's null space, the right singular vectors past
    its numerical rank (all of them when m has no rows)."""
    _, sv, vt = np.linalg.svd(m)
    rank = int(np.sum(sv > 1e-12 * max(1.0, sv[0]))) if sv.size else 0
    return np.ascontiguousarray(vt[rank:].T)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _row_upper_bounds(p: ConvexProblem) -> np.ndarray:
    """Cheap upper bounds on recip coordinates from single rows with non-negative coefficients."""
    ub = np.full(p.n, np.inf)
    for row, b in zip(*_bounding_rows(p)):
        pos = row > 0
        ub[pos] = np.minimum(ub[pos], max(b, 0.0) / row[pos])
    return ub


def solve(p: ConvexProblem, guesses: list[np.ndarray] | None = None, *, rel_gap: float = 1e-9,
          max_newton: int = 500) -> SolverResult:
    """Minimise the problem; the result carries a proven lower bound on the optimum.

    ``rel_gap`` is the certified gap asked for, relative to |objective| (the caller scales the
    problem so the objective is about 1). ``max_newton`` caps the Newton systems solved.
    """
    start = time.perf_counter()
    p = _unit_weights(p)
    lay = _Layout(p)
    x0 = _starting_point(p, guesses or [])
    limit = min(max_newton, 100)
    many = p.w.shape[0] >= _SURROGATE
    run = _primal_dual(p, lay, x0, rel_gap, limit, cold=_COLD if many else None)
    sur = _surrogate(p) if many and run.status != 0 else None
    if many and run.status != 0 and sur is None:
        run = _Run.merge(run, _primal_dual(p, lay, x0, rel_gap, limit - run.steps))
    if sur is not None:
        # Thousands of distinct terms, not certified after a few steps: from a far start the
        # method needs many short steps while the rows' bottleneck pattern moves. Solve the merged
        # surrogate (cheap), then restart from its bandwidths with v close to 1/x.
        rs = _primal_dual(sur, _Layout(sur), _starting_point(sur, [x0]), 1e-4, limit)
        xs = tight_point(p, rs.x)
        if rs.status == 0 and np.all(np.isfinite(xs)) and _strictly_inside(p, xs, np.flatnonzero(p.recip)):
            second = _primal_dual(p, lay, xs, rel_gap, max(limit - run.steps - rs.steps, 1), _V_WARM)
        else:
            second = _primal_dual(p, lay, x0, rel_gap, max(limit - run.steps - rs.steps, 1))
        run = _Run.merge(run, second)
        run.steps += rs.steps
    if run.status != 0 and max_newton > run.steps:
        # Rare: the primal-dual method stalled. Damped Newton is slower but monotone.
        fb = _barrier(p, lay, x0, rel_gap, max_newton - run.steps)
        run = _Run.merge(run, fb)
    if run.status == 0:
        msg = "optimal: duality gap within tolerance"
    else:
        msg = (f"not certified: the relative duality gap {run.gap / _scale(run.primal):.1e} stayed above the "
               f"tolerance {rel_gap:.0e} (Newton step limit or round-off)")
    if run.status == 0 and run.gap > rel_gap * _scale(run.primal):
        msg = f"optimal to round-off: relative duality gap {run.gap / _scale(run.primal):.1e} (asked {rel_gap:.0e})"
    return SolverResult(run.x, run.primal, run.dual, run.gap, run.status == 0, run.status, msg, run.steps,
                        time.perf_counter() - start)


def _scale(value: float) -> float:
    """What a relative gap is relative to (the caller scales objectives to about 1)."""
    return max(abs(value), 1e-6)


@dataclass
class _Run:
    x: np.ndarray
    primal: float
    dual: float
    status: int
    steps: int

    @property
    def gap(self) -> float:
        return self.primal - self.dual

    @staticmethod
    def merge(a: "_Run", b: "_Run") -> "_Run":
        # Any feasible point is an upper bound and any dual value a lower bound: keep the best of each.
        x, primal = (a.x, a.primal) if a.primal <= b.primal else (b.x, b.primal)
        return _Run(x, primal, max(a.dual, b.dual), min(a.status, b.status), a.steps + b.steps)


def _certify(p: ConvexProblem, lay: _Layout, x: np.ndarray, u: np.ndarray, best: _Run,
             sharpen: bool = False) -> _Run:
    """Update the best feasible point and dual bound from iterate x with row multipliers u."""
    xt = tight_point(p, x, lay)
    primal = float(p.c @ xt)
    M, Q = lay.M, lay.Q
    dual = _dual_bound(p, lay, x, u[:M], u[M:M + Q], u[M + Q:lay.o_phi], sharpen)
    if primal < best.primal:
        best.x, best.primal = xt, primal
    best.dual = max(best.dual, dual)
    return best


# ------------------------------------------------------------------ the (x, v, t) form


class _Newton:
    """Primal-dual Newton system of the (x, v, t) form at one iterate, factored once.

    Slacks y = [rows s = t - A v - g; classes sigma; linear rows rho; phi = x_J v - 1], all linear
    in (x, v, t) except phi, whose primal-dual Hessian kappa phi grad^2(-log phi) is PSD for
    every kappa > 0. With u = omega / (tau y) it is the Newton system of the barrier itself.

    The K term variables are eliminated in closed form, written so that nothing cancels: a
    term's rows contribute their weighted covariance sum_m d_m (q_m - qbar_k)(q_m - qbar_k)^T
    around the weighted mean gradient qbar_k, and a class q adds beta_q b_q b_q^T with
    b_q = e_z + sum_k qbar_k. (The textbook H_xx - H_xt H_tt^-1 H_tx subtracts two numbers of
    size 1/s^2 when one row of a term is nearly tight, and loses every digit.) Term weights are 1
    (solve() rescales the terms first).
    """

    def __init__(self, p: ConvexProblem, lay: _Layout, x: np.ndarray, v: np.ndarray, u: np.ndarray,
                 y: np.ndarray):
        M, Q, n = lay.M, lay.Q, lay.n
        o_rho = M + Q
        d = u / y
        ds = d[:M]
        dg = d[M:o_rho]
        xJ = x[lay.Jx]
        nl = lay.numpy_newton
        D = np.add.reduceat(ds, lay.row_start)
        # (nv, K) and (nv, M); the sums add numbers of one sign, so their order does not matter
        if nl.nz_key is not None:
            qbarT = np.bincount(nl.nz_key, weights=nl.nz_negA * ds.take(nl.nz_row),
                                minlength=lay.nv * lay.K).reshape(lay.nv, lay.K) / D
        else:
            qbarT = np.add.reduceat(nl.negAJT * ds, lay.row_start, axis=1) / D
        QcT = nl.negAJT - np.repeat(qbarT, nl.term_rows, axis=1)
        wD = 1.0 / D
        beta = dg / (1.0 + dg * np.add.reduceat(wD, lay.term_start))
        # One matrix BL for everything of the system that is a weighted sum of outer products of
        # single gradients: the classes' b_q (weights beta), the linear rows' -g_i and the
        # hyperbolic constraints' (v_j, x_j) (weights d). The direction reads its products with
        # both sides (the right-hand side, the slacks' change) from it too.
        BL = lay.BL0.copy()
        BL[:Q, n:] = np.add.reduceat(qbarT, lay.term_start, axis=1).T
        BL.flat[nl.flat_phi_x] = v
        BL.flat[nl.flat_phi_v] = xJ
        H = (BL.T * np.concatenate((beta, d[o_rho:]))) @ BL
        H[n:, n:] += (QcT * ds) @ QcT.T
        # kappa phi grad^2(-log phi) is the (v, x) outer product above less kappa on the (x_j, v_j)
        # off-diagonal, the Hessian of x v times the multiplier.
        kap = u[lay.o_phi:]
        H.flat[nl.flat_off] -= np.concatenate((kap, kap))
        if lay.Z is not None:
            H = nl.ZT @ H @ lay.Z
        # The reduced system is tiny (n + nv - r <= ~12) and solved twice: invert it once, by
        # LAPACK's solve against the identity (what np.linalg.inv does, without the Python checks
        # that cost as much as the solve here; getri's inverse from the LU factors lost a
        # perf-per-cost certificate).
        _, _, Hinv, info = dgesv(H, nl.eye)
        if info != 0:
            Hinv = np.linalg.pinv(H)
        if lay.Z is not None:
            Hinv = lay.Z @ Hinv @ nl.ZT
        self.p, self.lay, self.xJ = p, lay, xJ
        self.d, self.QcT, self.qbarT, self.D, self.wD, self.beta, self.BL, self.Hinv = d, QcT, qbarT, D, wD, beta, BL, Hinv

    def direction(self, yc: np.ndarray | None, with_dt: bool = True):
        """Step for the gradient g = c - sum_i yc_i grad y_i (yc None means 0): H dV = -g.

        Returns (dx, dv, dt, dy) with dy the slacks' first-order change (dt None unless
        with_dt: the predictor only needs the slacks' change)."""
        p, lay = self.p, self.lay
        M, n, Q = lay.M, lay.n, lay.Q
        o_rho = M + Q
        cls = p.term_class
        BL, beta, wD = self.BL, self.beta, self.wD
        if yc is None:
            gt_D = 0.0
            wg = 0.0
            rhs = -lay.cX
        else:
            ys, ysig = yc[:M], yc[M:o_rho]
            gt_D = (ysig[cls] - np.add.reduceat(ys, lay.row_start)) / self.D
            wg = np.add.reduceat(gt_D, lay.term_start)              # 1^T D^-1 g_t per class
            rhs = BL.T @ np.concatenate((ysig - beta * wg, yc[o_rho:])) - lay.cX
            rhs[n:] += self.QcT @ ys
        dX = self.Hinv @ rhs
        if lay.Z is not None:
            # Near an optimal face the reduced system is ill-conditioned and Z H^-1 Z^T sums large
            # entries that cancel: remove what that round-off adds across the equalities, or the
            # iterates drift off E x = f (a min-cost optimum on a flat face moved by 1e-10).
            dX[:n] = lay.P_E @ dX[:n]
        dx, dv = dX[:n], dX[n:]
        # dt_k = tau_k - qbar_k . dv, with tau_k free of cancellation as well.
        BLdX = BL @ dX
        BdX = BLdX[:Q]
        tau = wD * (beta * (BdX + wg))[cls] - gt_D
        dt = tau - dv @ self.qbarT if with_dt else None
        dy = np.concatenate([dv @ self.QcT + tau.take(p.owner),
                             BdX - np.add.reduceat(tau, lay.term_start),
                             BLdX[Q:]])
        return dx, dv, dt, dy


def _newton(p: ConvexProblem, lay: _Layout, x: np.ndarray, v: np.ndarray, u: np.ndarray, y: np.ndarray):
    """The Newton system at (x, v, u, y): compiled where the kernel is built, else _Newton.
    Both have d, xJ and direction()."""
    if lay.kernel is not None:
        return _kernel.System(lay.kernel, x, v, u, y)
    return _Newton(p, lay, x, v, u, y)


def _slacks(p: ConvexProblem, lay: _Layout, x: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.concatenate([t.take(p.owner) - lay.AJ @ v - p.g,
                           x[p.class_z] - np.add.reduceat(t, lay.term_start) - p.class_e,
                           p.h - p.G @ x,
                           x[lay.Jx] * v - 1.0])


def _hyp_step(x: np.ndarray, v: np.ndarray, dx: np.ndarray, dv: np.ndarray) -> float:
    """Largest a with (x + a dx)(v + a dv) >= 1 on the branch x, v > 0 (x v > 1 now)."""
    a = math.inf
    sqrt, copysign = math.sqrt, math.copysign     # called for most coordinates at every step
    # No test of the factors x + a dx, v + a dv against 0: their product is 0 < 1 there, so the
    # product crosses 1, the root below, first.
    for xj, vj, dxj, dvj in zip(x.tolist(), v.tolist(), dx.tolist(), dv.tolist()):
        q2, q1, q0 = dxj * dvj, vj * dxj + xj * dvj, xj * vj - 1.0
        if q2 >= 0.0 and q1 >= 0.0 and q0 > 0.0:
            continue                # no coefficient < 0 and q0 > 0: no root at a > 0
        if q2 == 0.0:
            if q1 < 0:
                r = -q0 / q1
                if r < a:
                    a = r
            continue
        disc = q1 * q1 - 4.0 * q2 * q0
        if disc < 0:
            continue
        # Roots of q2 a^2 + q1 a + q0, computed without cancellation.
        qq = -0.5 * (q1 + copysign(sqrt(disc), q1))
        r = qq / q2
        if r > 0 and r < a:
            a = r
        if qq != 0:
            r = q0 / qq
            if r > 0 and r < a:
                a = r
    return a


def _max_step(v: np.ndarray, dv: np.ndarray) -> float:
    """Largest a with v + a dv >= 0 (v > 0), inf if dv >= 0."""
    if not v.shape[0]:
        return math.inf
    r = float(np.minimum.reduce(dv / v))          # ndarray.min without its Python wrapper
    return -1.0 / r if r < 0 else math.inf


def _v_start(p: ConvexProblem, lay: _Layout, x: np.ndarray, delta: float = _V_MARGIN):
    """(x, v, t): v a little above 1/x; t and z above their constraints by about the slack each
    has on the central path (objective / number of constraints). The margins shrink until the
    linear rows still hold (a time target binds the epigraph coordinates from above)."""
    Q = lay.Q
    cls, w = p.term_class, p.w
    tv = np.maximum.reduceat(lay.AJ @ (1.0 / x[lay.J]) + p.g, lay.row_start)
    z_tight = x.copy()
    z_tight[p.class_z] = -np.inf
    np.maximum.at(z_tight, p.class_z, np.bincount(cls, weights=w * tv, minlength=Q) + p.class_e)
    margin = max(abs(float(p.c @ z_tight)), 1e-3) / lay.nu_total
    for _ in range(40):
        v = (1.0 + delta) / x[lay.J]
        t = np.maximum.reduceat(lay.AJ @ v + p.g, lay.row_start) + margin / w
        cv = np.bincount(cls, weights=w * t, minlength=Q) + p.class_e
        x1 = x.copy()
        for q in range(Q):
            j = p.class_z[q]
            if x1[j] < cv[q] + margin:
                x1[j] = cv[q] + margin
        if not lay.P or np.all(p.G @ x1 < p.h):
            return x1, v, t
        delta *= 0.25
        margin *= 0.25
    raise LibraError("the time target cannot be met at the starting point; internal starting-point error")


def _primal_dual(p: ConvexProblem, lay: _Layout, x: np.ndarray, rel_gap: float, max_iter: int,
                 v_margin: float = _V_MARGIN, cold: int | None = None) -> _Run:
    """Mehrotra predictor-corrector in (x, v, t), strictly feasible iterates."""
    J, om, o_phi = lay.Jx, lay.omega, lay.o_phi
    # Reciprocal coordinates that must stay > 0 beyond those x_J v_J >= 1 keeps > 0 (_hyp_step
    # bounds those); an unused coordinate the equalities pin at 0 stays there.
    ri = lay.ri[x[lay.ri] > 0]
    ri = ri[~lay.used[ri]]
    ri = _as_slice(ri) if ri.shape[0] else None
    m = lay.nu_total
    x, v, t = _v_start(p, lay, x, v_margin)
    y = _slacks(p, lay, x, v, t)
    u = om * (max(abs(float(p.c @ x)), 1e-3) / m) / y
    best = _Run(x.copy(), math.inf, -math.inf, 1, 0)
    steps = 0
    floor_hits = 0
    stationary = False          # a full dual step was taken: the multipliers balance the objective
    mus: list[float] = []
    while steps < max_iter:
        predictor = None        # (Newton system, affine direction) at this iterate, if built early
        gap = float(u @ y)
        target = rel_gap * _scale(float(p.c @ x))
        # The surrogate gap u.y overstates the certified one (barrier weights, inactive rows).
        if gap <= _EARLY * target:
            best = _certify(p, lay, x, u, best)
            if best.gap <= rel_gap * _scale(best.primal):
                best.status = 0
                break
            if gap <= 1e-3 * target:
                # The central path is far below the target: what still separates the bounds is
                # round-off, the least-squares equality multipliers (choose them for the best bound
                # instead: too slow to do at every check), or multipliers off stationarity after
                # short dual steps (where no row binds a coordinate its multipliers must vanish):
                # a full dual Newton step restores it, and any multipliers >= 0 give a bound.
                best = _certify(p, lay, x, u, best, sharpen=True)
                if best.gap > rel_gap * _scale(best.primal):
                    # the step below starts from the same system and affine direction
                    nt = _newton(p, lay, x, v, u, y)
                    predictor = nt, nt.direction(None, with_dt=False)
                    best = _certify(p, lay, x, np.maximum(-nt.d * predictor[1][3], _TINY), best, sharpen=True)
                if best.gap <= rel_gap * _scale(best.primal):
                    best.status = 0
                    break
                floor_hits += 1
                if floor_hits >= 3:
                    best.status = 0 if best.gap <= 1e-7 * _scale(best.primal) else 1
                    break
        mu = gap / m
        # With a surrogate start to fall back on (cold is set), a fixed step budget either cuts a
        # run that is a few steps from certified (mu falling tenfold per few steps) or wastes steps
        # on one that stalls (many short steps while the bottleneck pattern moves): judge progress.
        if cold is not None:
            ago = mus[-_STALL_WIN] if len(mus) >= _STALL_WIN else math.inf     # inf: no history yet
            if (steps >= _STALL_MIN and mu > _STALL_DROP * ago) or (steps >= cold and mu > _FAST * min(ago, mu)):
                break
        mus.append(mu)
        steps += 1
        if predictor is None:
            nt = _newton(p, lay, x, v, u, y)
            # Predictor (affine scaling): complementarity 0.
            predictor = nt, nt.direction(None, with_dt=False)
        nt, (dx, dv, _, dy) = predictor
        d = nt.d
        du = -u - d * dy
        dxJ = dx[J]
        a_aff = min(1.0, _max_step(y[:o_phi], dy[:o_phi]), _hyp_step(nt.xJ, v, dxJ, dv), _max_step(u, du))
        # phi is quadratic in the step: predict it exactly, and let the corrector anticipate the
        # dx dv term (a second-order correction); else steps along v = 1/x leave the region.
        dxdv = dxJ * dv
        y_aff = y + a_aff * dy
        y_aff[o_phi:] += a_aff * a_aff * dxdv
        ratio = max(0.0, float(y_aff @ (u + a_aff * du)) / m / mu)
        sigma = min(1.0, ratio ** _SIGMA_POW)
        # Once the multipliers are stationary the corrector's steps are long (0.9-1) while the
        # affine ones stay short (several rows of a term tie at the optimum, so their multipliers
        # are not unique): first try centring less than Mehrotra's rule, kept only if its step
        # stays in the neighbourhood without backtracking.
        eager = (min(1.0, ratio ** _SIGMA_POW_FEAS),) if stationary else ()
        corr = dy * du
        corr[o_phi:] += u[o_phi:] * dxdv
        # Corrector; a short step is retried with more centring (and none of the second-order
        # terms at sigma = 1).
        for k, sig in enumerate(eager + (sigma, max(sigma, 0.5), 1.0)):
            yc = (sig * mu * om - corr) / y
            dx, dv, dt, dy = nt.direction(yc)
            du = yc - u - d * dy
            # Fraction to the boundary, exact for every constraint, with separate primal and dual
            # step lengths (a row that stops being a bottleneck needs its multiplier to collapse
            # while the primal step can be long); then stay in a wide neighbourhood of the central
            # path (no product u_i y_i far below the mean) until the quadratic phase.
            frac = 0.995 if mu > 1e-6 else 0.9999
            a, ad = _step_lengths(lay, x, v, y, u, ri, dx, dv, dy, du, frac)
            if stationary and min(a, ad) < _GZ_BELOW:
                dx, dv, dt, dy, du, a, ad = _centrality_correction(
                    nt, lay, x, v, y, u, ri, yc, (dx, dv, dt, dy, du), a, ad, sig * mu, frac)
            y1 = None
            gamma = _GAMMA if a_aff < _QUAD else 0.0
            while min(a, ad) > _SHORT:
                x1, v1, t1, u1 = x + a * dx, v + a * dv, t + a * dt, u + ad * du
                y1 = _slacks(p, lay, x1, v1, t1)
                uy = u1 * y1
                # ndarray.min and .sum without their Python wrappers (the same reductions)
                if (np.minimum.reduce(uy / om) >= gamma * float(np.add.reduce(uy, axis=None)) / m
                        and (gamma or (y1 > 0).all())):
                    break
                if k < len(eager):
                    a = ad = 0.0            # on to Mehrotra's sigma
                a *= _BACK
                ad *= _BACK
                y1 = None
            if min(a, ad) > _SHORT:
                break
            if sig >= 0.5:
                corr = np.zeros_like(corr)
        stationary = stationary or ad >= 1.0
        if y1 is not None:
            x, v, t, u, y = x1, v1, t1, u1, y1
        else:
            x, v, t, u = x + a * dx, v + a * dv, t + a * dt, u + ad * du
            y = _slacks(p, lay, x, v, t)
        # (a y1 that passed the neighbourhood test is > 0: u1 > 0 and every u1 y1 > 0, or tested)
        if max(a, ad) < 1e-12 or (y1 is None and not (y > 0).all()):
            break
    if best.status != 0 and np.all(y > 0):
        best = _certify(p, lay, x, u, best)
        if best.gap <= rel_gap * _scale(best.primal):
            best.status = 0
    best.steps = steps
    return best


def _step_lengths(lay: _Layout, x, v, y, u, ri, dx, dv, dy, du, frac: float) -> tuple[float, float]:
    """Primal and dual fraction-to-the-boundary step lengths (at most 1). ``ri``: the coordinates
    beyond J that must stay > 0, or None (_hyp_step keeps x_J > 0: a factor of x_j v_j >= 1 cannot
    reach 0 before the product falls below 1)."""
    o_phi, J = lay.o_phi, lay.Jx
    a = min(_max_step(y[:o_phi], dy[:o_phi]), _hyp_step(x[J], v, dx[J], dv))
    if ri is not None:
        a = min(a, _max_step(x[ri], dx[ri]))
    a = min(1.0, frac * a)
    return a, min(1.0, frac * _max_step(u, du))


def _centrality_correction(nt: "_Newton", lay: _Layout, x, v, y, u, ri, yc, step, a: float, ad: float,
                           target: float, frac: float):
    """Gondzio's correction: push the products u_i y_i that a longer step would leave far from
    target * omega_i back into a box around it, re-solve with the factored system, and keep the
    result if the steps grow. Returns (dx, dv, dt, dy, du, a, ad)."""
    dx, dv, dt, dy, du = step
    o_phi, J, om = lay.o_phi, lay.Jx, lay.omega
    at, adt = min(1.0, 1.5 * a + 0.1), min(1.0, 1.5 * ad + 0.1)
    yt = y + at * dy
    yt[o_phi:] += at * at * (dx[J] * dv)
    prod = yt * (u + adt * du)
    tg = target * om
    push = np.maximum(np.minimum(np.maximum(prod, tg / _GZ_BOX), tg * _GZ_BOX) - prod, -_GZ_BOX * tg)
    yc2 = yc + push / y
    dx2, dv2, dt2, dy2 = nt.direction(yc2)
    du2 = yc2 - u - nt.d * dy2
    a2, ad2 = _step_lengths(lay, x, v, y, u, ri, dx2, dv2, dy2, du2, frac)
    if a2 + ad2 <= 1.01 * (a + ad):
        return dx, dv, dt, dy, du, a, ad
    return dx2, dv2, dt2, dy2, du2, a2, ad2


# ------------------------------------------------------------------ barrier fallback


def _center(p: ConvexProblem, lay: _Layout, x, v, t, tau: float, tol: float, max_steps: int):
    """Damped Newton on tau c.x - sum omega log y: a self-concordant barrier, so every damped step
    decreases it by a fixed amount. Returns (x, v, t, y, steps)."""
    J, om, o_phi = lay.J, lay.omega, lay.o_phi
    y = _slacks(p, lay, x, v, t)
    phi0 = tau * float(p.c @ x) - float(om @ np.log(y))
    steps = 0
    while steps < max_steps:
        u = om / (tau * y)
        dx, dv, dt, dy = _newton(p, lay, x, v, u, y).direction(u)
        steps += 1
        r = dy / y
        dec = float(om @ (r * r)) - 2.0 * float((dx[J] * dv) @ (om[o_phi:] / y[o_phi:]))   # Newton decrement^2
        if dec <= tol:
            break
        ri = lay.ri[x[lay.ri] > 0]
        a = min(1.0, 0.99 * min(_max_step(y[:o_phi], dy[:o_phi]), _hyp_step(x[J], v, dx[J], dv),
                                _max_step(x[ri], dx[ri])))
        while a > 1e-12:
            x1, v1, t1 = x + a * dx, v + a * dv, t + a * dt
            y1 = _slacks(p, lay, x1, v1, t1)
            if np.all(y1 > 0):
                phi1 = tau * float(p.c @ x1) - float(om @ np.log(y1))
                if phi1 <= phi0 - 0.25 * a * dec:
                    break
            a *= 0.5
        else:
            break
        x, v, t, y, phi0 = x1, v1, t1, y1, phi1
    return x, v, t, y, steps


def _barrier(p: ConvexProblem, lay: _Layout, x: np.ndarray, rel_gap: float, max_newton: int) -> _Run:
    """Path following: centre by damped Newton, certify, raise tau tenfold."""
    x, v, t = _v_start(p, lay, x)
    tau = lay.nu_total / max(abs(float(p.c @ x)), 1e-3)
    best = _Run(x.copy(), math.inf, -math.inf, 1, 0)
    steps = 0
    while steps < max_newton:
        x, v, t, y, k = _center(p, lay, x, v, t, tau, 1e-6, max_newton - steps)
        steps += k
        best = _certify(p, lay, x, lay.omega / (tau * y), best)
        scale = _scale(best.primal)
        if best.gap <= rel_gap * scale:
            best.status = 0
            break
        if lay.nu_total / tau < 1e-3 * rel_gap * scale:
            best.status = 0 if best.gap <= 1e-7 * scale else 1
            break
        tau *= 10.0
    best.steps = steps
    return best


# ------------------------------------------------------------------ certificate


def _dual_bound(p: ConvexProblem, lay: _Layout, x: np.ndarray, lam: np.ndarray, pi: np.ndarray,
                mu: np.ndarray, sharpen: bool = False) -> float:
    """A Lagrange dual value of the original problem from multipliers (lam, pi, mu) >= 0 of its
    rows, classes and linear rows: a proven lower bound on the optimum.

    The multipliers only need to be close to optimal for the bound to be tight; they are first
    made dual feasible (term and epigraph stationarity exact), then the dual function is
    evaluated in closed form.
    """
    n = lay.n
    # (ndarray.any: np.any's wrapper costs more than the test on these short arrays)
    if (lam <= 0).any() or (pi <= 0).any() or (mu < 0).any():
        return -math.inf
    inv = np.zeros(n)
    inv[lay.J] = 1.0 / x[lay.J]
    # Equality multipliers: least squares on stationarity in x.
    grad_known = p.c - lay.AT @ lam * (inv * inv) + lay.GT @ mu - np.bincount(p.class_z, weights=pi, minlength=n)
    if p.E.shape[0]:
        nu = -(lay.eq.pinv_T() @ grad_known)
        lin = p.c + lay.GT @ mu + p.E.T @ nu     # linear coefficient of x before class terms
    else:
        nu = np.zeros(0)
        lin = p.c + lay.GT @ mu
    # Epigraph stationarity exact: rescale each z coordinate's class multipliers to balance it.
    tot = np.bincount(p.class_z, weights=pi, minlength=n)
    zs = lay.z_unique
    if (lin[zs] <= 0).any() or (tot[zs] <= 0).any():
        return -math.inf
    pi = pi * (lin / np.where(tot > 0, tot, 1.0))[p.class_z]
    # Term stationarity exact: a term's row multipliers must add up to w_k pi_q.
    need = pi[p.term_class] * p.w
    have = np.add.reduceat(lam, lay.row_start)
    lam = lam * (need / have)[p.owner]
    alpha = lin - np.bincount(p.class_z, weights=pi, minlength=n)
    beta = lay.AT @ lam
    value = float(lam @ p.g + pi @ p.class_e - mu @ p.h - nu @ p.f)
    free = lay.free
    if free.size and (np.abs(alpha[free]) > 1e-9 * np.maximum(1.0, np.abs(lin[free]))).any():
        return -math.inf
    const = value                 # the part the coordinates' terms are added to
    decreasing = False
    for j in lay.ri.tolist():
        a, b = float(alpha[j]), float(beta[j])
        if a < 0 and lay.lower_row[j] >= 0 and not math.isfinite(_upper_bound_cached(p, lay, j)):
            # x_j has no upper bound (a coordinate no row needs once it is large): a negative a
            # would make the bound -inf, but lowering the multiplier of x_j's own lower bound
            # (a row -g x_j <= h_i) raises a, and any multipliers >= 0 give a valid bound.
            i = int(lay.lower_row[j])
            gi = -float(p.G[i, j])
            dm = min(float(mu[i]), -a / gi)
            a = 0.0 if dm < float(mu[i]) else a + gi * dm     # exactly 0 when the multiplier suffices
            value += dm * float(p.h[i])
            const += dm * float(p.h[i])
            alpha[j] = a
        if a >= 0:
            value += 2.0 * math.sqrt(a * b) if b > 0 else 0.0
        else:
            # a x_j + b / x_j decreases in x_j: the bound needs the largest feasible x_j.
            ub = _upper_bound_cached(p, lay, j)
            if not math.isfinite(ub):
                return -math.inf
            value += a * ub + (b / ub if b > 0 else 0.0)
            decreasing = True
    if (decreasing or sharpen) and lay.eq is not None:
        # A coordinate no row needs at the optimum (the bandwidth a total-bandwidth equality
        # leaves to a dimension no collective is bound by) has alpha = b / x^2 ~ 0 there, and the
        # least-squares nu above can leave it slightly negative, which charges a * ub: a bound
        # loose by 1e-6 that no further Newton step tightens. The equality multipliers are free.
        value = max(value, const + _best_over_equalities(p, lay, alpha, beta))
    return value


def _best_over_equalities(p: ConvexProblem, lay: _Layout, alpha: np.ndarray, beta: np.ndarray) -> float:
    """max over nu' of the coordinates' part of the dual function, sum_j inf_{0 < x_j <= ub_j}
    ((alpha_j + (E^T nu')_j) x_j + beta_j / x_j) - nu' . f, with nu' moving only along directions
    that leave every non-reciprocal coordinate's alpha as it is (so the rest of the bound holds).

    A concave function of a few variables (one per equality): Newton steps with backtracking
    from nu' = 0. Upper bounds are the ones already known (rows, or LPs solved for this
    layout); a coordinate without one keeps the unconstrained inf, -inf below alpha = 0."""
    basis = lay.recip_equality_moves
    if not basis.shape[1]:
        return -math.inf
    ri = lay.ri
    ub = np.array([_known_upper_bound(lay, j) for j in ri.tolist()])
    # A coordinate the equalities pin at 0 that no row charges adds 0 whatever its alpha (0/0 below).
    live = (ub > 0) | (beta[ri] != 0)
    ri, ub = ri[live], ub[live]
    a0, b = alpha[ri], beta[ri]
    ER = p.E[:, ri].T @ basis
    fN = basis.T @ p.f
    # Where the unconstrained minimiser sqrt(b / a) passes ub, the inf is taken at ub instead.
    cut = np.where(np.isfinite(ub), b / (ub * ub), 0.0)
    # ub where finite, else 1: the branch of np.where that is not taken is still computed, and
    # 0 * inf there would warn
    ubf = np.where(np.isfinite(ub), ub, 1.0)

    def parts(theta):
        a = a0 + ER @ theta
        inner = a > cut
        if np.any(~inner & ~np.isfinite(ub) & (a < 0)):
            return -math.inf, None, None
        ai = np.where(inner, a, 1.0)
        root = np.sqrt(b / ai)
        g = np.where(inner, 2.0 * np.sqrt(ai * b), np.where(np.isfinite(ub), a * ubf + b / ubf, 0.0))
        xs = np.where(inner, root, np.where(np.isfinite(ub), ub, 0.0))
        curv = np.where(inner, -0.5 * root / ai, 0.0)          # d2g/da2 = -sqrt(b) / (2 a^1.5)
        return float(g.sum() - fN @ theta), ER.T @ xs - fN, (ER.T * curv) @ ER

    theta = np.zeros(basis.shape[1])
    F, grad, hess = parts(theta)
    if not math.isfinite(F):
        return -math.inf
    for _ in range(30):
        neg = -hess
        # Regularised: where every coordinate sits at a bound the function is linear along the
        # step, which backtracking then shortens to the first kink.
        scale = max(float(np.abs(neg).max()), float(np.abs(grad).max()), 1e-300)
        step = np.linalg.solve(neg + 1e-12 * scale * np.eye(neg.shape[0]), grad)
        for halvings in range(60):
            F1, g1, h1 = parts(theta + 0.5 ** halvings * step)
            if F1 > F:
                break
        else:
            break
        t = 0.5 ** halvings
        theta = theta + t * step
        gained = F1 - F
        F, grad, hess = F1, g1, h1
        if gained <= 1e-16 * max(1.0, abs(F)):
            break
    return F


def _known_upper_bound(lay: _Layout, j: int) -> float:
    """An upper bound on x_j already computed for this layout (inf if none)."""
    if math.isfinite(lay.row_ub[j]):
        return float(lay.row_ub[j])
    return lay.ub.get(j, math.inf)


def _upper_bound_cached(p: ConvexProblem, lay: _Layout, j: int) -> float:
    """_known_upper_bound, with the LP solved (and kept) when no bound is known yet."""
    ub = _known_upper_bound(lay, j)
    if not math.isfinite(ub) and j not in lay.ub:
        ub = lay.ub[j] = _upper_bound(p, j)
    return ub


def _upper_bound(p: ConvexProblem, j: int) -> float:
    """Largest x_j over the linear constraints (the feasible set of x, ignoring the terms)."""
    c = np.zeros(p.n)
    c[j] = -1.0
    bounds = [(0, None) if p.recip[i] else (None, None) for i in range(p.n)]
    res = linprog(c, A_ub=p.G if p.G.size else None, b_ub=p.h if p.G.size else None,
                  A_eq=p.E if p.E.size else None, b_eq=p.f if p.E.size else None, bounds=bounds, method="highs")
    if res.status == 2:
        # No point at all: the largest x_j is not +inf (which would read as "unbounded").
        raise InfeasibleError("the constraints are infeasible: no bandwidth split satisfies all of them; relax one")
    if res.status not in (0, 3):
        raise LibraError(f"could not bound coordinate {j}: {res.message}")
    return float(-res.fun) if res.status == 0 else math.inf


def unbounded_coordinates(p: ConvexProblem, candidates: np.ndarray) -> list[int]:
    """Coordinates among ``candidates`` that can grow without limit under G x <= h, E x = f, x_recip >= 0."""
    candidates = np.asarray(candidates, dtype=np.int64)
    bounding = _bounding_rows(p)[0]
    unbound = candidates[~np.any(bounding[:, candidates] > 0, axis=0)]
    return [j for j in unbound.tolist() if not math.isfinite(_upper_bound(p, j))]


def _bounding_rows(p: ConvexProblem) -> tuple[np.ndarray, np.ndarray]:
    """(rows, right-hand sides) of G and E with non-negative coefficients on recip coordinates
    only: such a row bounds every x_j it has a positive coefficient for."""
    rows = np.vstack([p.G, p.E]) if p.E.shape[0] else p.G
    rhs = np.concatenate([p.h, p.f]) if p.E.shape[0] else p.h
    ok = np.all(rows[:, ~p.recip] == 0, axis=1) & np.all(rows[:, p.recip] >= 0, axis=1)
    return rows[ok], rhs[ok]
