"""An exact solver for the convex programs behind every libra_astra objective.

Problem (all data already scaled to O(1) by the caller)::

    minimize    c . x
    subject to  t_k >= sum_j A[m, j] / x_j + g[m]          for every row m of term k (owner[m] = k)
                x[z[q]] >= sum_{k in class q} w_k t_k + e[q]   for every class q
                G x <= h,   E x = f

Rows only touch "reciprocal" coordinates (bandwidths, or the Charnes-Cooper variables); class
constraints tie an epigraph coordinate z to the weighted sum of its terms. Every function here is
convex, so a barrier method reaches the global optimum. Newton steps eliminate the K term
variables analytically (their Hessian is diagonal plus one rank-one block per class), so a step
costs O(M n^2) for M rows and n coordinates, and 10,000 collectives solve in milliseconds.

The result carries a certificate: a Lagrange dual bound computed in closed form from the
barrier's multipliers (inf over x_j > 0 of a x_j + b / x_j is 2 sqrt(a b)), so the reported gap
is a proven bound on the distance to the optimum, not an estimate.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from .errors import LibraError


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
    status: int              # 0 converged, 1 iteration limit
    message: str
    newton_steps: int
    solve_time_s: float


def term_values(p: ConvexProblem, x: np.ndarray) -> np.ndarray:
    """max over each term's rows of A x^-1 + g, i.e. the tightest feasible t."""
    inv = np.zeros_like(x)
    inv[p.recip] = 1.0 / x[p.recip]
    vals = p.A @ inv + p.g
    K = p.w.shape[0]
    t = np.full(K, -np.inf)
    np.maximum.at(t, p.owner, vals)
    return t


def class_values(p: ConvexProblem, x: np.ndarray) -> np.ndarray:
    t = term_values(p, x)
    Q = p.class_z.shape[0]
    return np.bincount(p.term_class, weights=p.w * t, minlength=Q) + p.class_e


def tight_point(p: ConvexProblem, x: np.ndarray) -> np.ndarray:
    """x with every epigraph coordinate lowered to the largest class value it bounds."""
    x = x.copy()
    vals = class_values(p, x)
    z_vals = np.full(p.n, -np.inf)
    np.maximum.at(z_vals, p.class_z, vals)
    zs = np.unique(p.class_z)
    x[zs] = z_vals[zs]
    return x


def _starting_point(p: ConvexProblem, guesses: list[np.ndarray]) -> np.ndarray:
    """A point strictly inside G x <= h with E x = f (recip coordinates > 0); LP if no guess is."""
    n = p.n
    recip_idx = np.flatnonzero(p.recip)
    for x0 in guesses:
        x0 = np.asarray(x0, dtype=float)
        if np.all(x0[recip_idx] > 0) and np.all(p.G @ x0 < p.h) and np.allclose(p.E @ x0, p.f, rtol=1e-12, atol=1e-12):
            return x0
    # max delta s.t. G x + delta * |G_i| <= h, E x = f, delta <= 1 (Chebyshev-like centre).
    norms = np.linalg.norm(p.G, axis=1) if p.G.size else np.zeros(0)
    c = np.zeros(n + 1)
    c[-1] = -1.0
    A_ub = np.hstack([p.G, norms[:, None]]) if p.G.size else None
    A_eq = np.hstack([p.E, np.zeros((p.E.shape[0], 1))]) if p.E.size else None
    bounds = [(None, None)] * n + [(None, 1.0)]
    res = linprog(c, A_ub=A_ub, b_ub=p.h if p.G.size else None, A_eq=A_eq, b_eq=p.f if p.E.size else None,
                  bounds=bounds, method="highs")
    if res.status == 2:
        raise LibraError("the constraints are infeasible: no bandwidth split satisfies all of them; relax one")
    if res.status != 0:
        raise LibraError(f"could not find a starting point: {res.message}")
    if res.x[-1] <= 1e-9:
        raise LibraError("the constraints leave no strictly feasible point (an inequality always holds with "
                         "equality, or a bandwidth is forced to 0); write such pairs as one equality")
    return res.x[:n]


def _barrier_parts(p: ConvexProblem, x: np.ndarray, t: np.ndarray):
    inv = np.zeros_like(x)
    inv[p.recip] = 1.0 / x[p.recip]
    s = t[p.owner] - (p.A @ inv) - p.g
    sigma = x[p.class_z] - np.bincount(p.term_class, weights=p.w * t, minlength=p.class_z.shape[0]) - p.class_e
    rho = p.h - p.G @ x
    return inv, s, sigma, rho


def _phi(p: ConvexProblem, tau: float, x: np.ndarray, t: np.ndarray) -> float:
    if np.any(x[p.recip] <= 0):
        return math.inf
    _, s, sigma, rho = _barrier_parts(p, x, t)
    if np.any(s <= 0) or np.any(sigma <= 0) or np.any(rho <= 0):
        return math.inf
    return tau * float(p.c @ x) - float(np.log(s).sum() + np.log(sigma).sum() + np.log(rho).sum())


def solve(p: ConvexProblem, guesses: list[np.ndarray] | None = None, *, rel_gap: float = 1e-9,
          max_newton: int = 500) -> SolverResult:
    """Minimise the problem by a primal barrier method with Newton steps and a proven dual bound."""
    start = time.perf_counter()
    n, K, Q = p.n, p.w.shape[0], p.class_z.shape[0]
    x = _starting_point(p, guesses or [])
    t = term_values(p, x)
    t = t + 0.1 * np.abs(t) + 1e-3
    # Raise epigraph coordinates above their classes, keeping E x = f (they appear in no equality).
    cv = np.bincount(p.term_class, weights=p.w * t, minlength=Q) + p.class_e
    for q in range(Q):
        j = p.class_z[q]
        need = cv[q] + 0.1 * abs(cv[q]) + 1e-3
        if x[j] < need:
            x[j] = need
    if np.any(p.G @ x >= p.h):
        raise LibraError("the time target cannot be met at the starting point; internal starting-point error")
    m_total = p.owner.shape[0] + Q + p.G.shape[0]
    obj0 = abs(float(p.c @ x)) + 1e-12
    tau = max(1.0, m_total / obj0)
    Aw = p.A  # (M, n)
    r = p.E.shape[0]
    steps = 0
    status = 1
    best_dual = -math.inf
    ones_cls = p.term_class
    row_start = np.flatnonzero(np.r_[True, p.owner[1:] != p.owner[:-1]])
    term_start = np.flatnonzero(np.r_[True, p.term_class[1:] != p.term_class[:-1]])
    if row_start.shape[0] != K or term_start.shape[0] != Q:
        raise ValueError("every term needs a row and every class a term, in sorted order")
    while steps < max_newton:
        # Centering by damped Newton.
        for _ in range(100):
            inv, s, sigma, rho = _barrier_parts(p, x, t)
            inv2 = inv * inv
            qm = Aw * inv2                              # (M, n): d s_m / d x
            is_ = 1.0 / s
            is2 = is_ * is_
            isig = 1.0 / sigma
            irho = 1.0 / rho
            # Gradient.
            gx = tau * p.c - qm.T @ is_ + p.G.T @ irho
            np.add.at(gx, p.class_z, -isig)
            gt = -np.bincount(p.owner, weights=is_, minlength=K) + p.w * isig[ones_cls]
            # Hessian blocks.
            Dg = np.bincount(p.owner, weights=is2, minlength=K)
            Hxx = (qm * is2[:, None]).T @ qm
            Hxx[np.diag_indices(n)] += (2.0 * (Aw * (inv2 * inv)).T @ is_)
            Hxx += (p.G * (irho * irho)[:, None]).T @ p.G
            np.add.at(Hxx, (p.class_z, p.class_z), isig * isig)
            # H_xt: rows' part summed per term, plus the class part on the z coordinates.
            U = np.add.reduceat(qm * is2[:, None], row_start, axis=0).T   # (n, K)
            rho_c = isig * isig
            wk = p.w
            U[p.class_z[ones_cls], np.arange(K)] -= wk * rho_c[ones_cls]
            # H_tt^-1 = (Dg + sum_q rho_q w_q w_q^T)^-1 by Sherman-Morrison per class.
            Dinv = 1.0 / Dg
            wD = wk * Dinv
            denom = 1.0 + rho_c * np.add.reduceat(wk * wD, term_start)
            beta = rho_c / denom
            UD = U * Dinv
            Uw = np.add.reduceat(U * wD, term_start, axis=1)          # (n, Q): U D^-1 w_q
            S = Hxx - UD @ U.T + (Uw * beta) @ Uw.T
            gD = gt * Dinv
            gw = np.add.reduceat(gt * wD, term_start)                  # w_q . D^-1 g_t
            htt_g = gD - (beta * gw)[ones_cls] * wD
            rhs = -gx + U @ htt_g
            if r:
                KKT = np.zeros((n + r, n + r))
                KKT[:n, :n] = S
                KKT[:n, n:] = p.E.T
                KKT[n:, :n] = p.E
                dx = _solve(KKT, np.concatenate([rhs, np.zeros(r)]))[:n]
            else:
                dx = _solve(S, rhs)
            v = gt + U.T @ dx
            vw = np.add.reduceat(v * wD, term_start)
            dt = -(v * Dinv - (beta * vw)[ones_cls] * wD)
            dec = -(gx @ dx + gt @ dt)
            steps += 1
            if dec / 2.0 <= 1e-10:
                break
            # Backtracking line search, staying strictly inside the domain.
            phi0 = _phi(p, tau, x, t)
            a = 1.0
            while a > 1e-12:
                x1, t1 = x + a * dx, t + a * dt
                phi1 = _phi(p, tau, x1, t1)
                if phi1 <= phi0 - 0.25 * a * dec:
                    break
                a *= 0.5
            else:
                break
            x, t = x1, t1
            if steps >= max_newton:
                break
        primal = float(p.c @ tight_point(p, x))
        # Every dual value is a valid lower bound, so keep the best one seen.
        best_dual = max(best_dual, _dual_bound(p, tau, x, t))
        if primal - best_dual <= rel_gap * max(1.0, abs(primal)):
            status = 0
            break
        if m_total / tau < 1e-2 * rel_gap * max(1.0, abs(primal)):
            # The barrier gap is far below the target: round-off now limits the dual bound.
            status = 0 if primal - best_dual <= 1e-7 * max(1.0, abs(primal)) else 1
            break
        tau *= 50.0
    xt = tight_point(p, x)
    primal = float(p.c @ xt)
    dual = best_dual
    msg = ("optimal: duality gap within tolerance" if status == 0 else
           "not certified: the dual bound stalled above the tolerance (round-off)")
    return SolverResult(xt, primal, dual, primal - dual, status == 0, status, msg, steps,
                        time.perf_counter() - start)


def _solve(M: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(M, b)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(M, b, rcond=None)[0]


def _dual_bound(p: ConvexProblem, tau: float, x: np.ndarray, t: np.ndarray) -> float:
    """A Lagrange dual value built from the barrier multipliers; a proven lower bound."""
    n, K, Q = p.n, p.w.shape[0], p.class_z.shape[0]
    inv, s, sigma, rho = _barrier_parts(p, x, t)
    lam = 1.0 / (tau * s)
    pi = 1.0 / (tau * sigma)
    mu = 1.0 / (tau * rho)
    # Equality multipliers: least squares on stationarity in x (recip coordinates use their
    # own curvature; z coordinates must balance exactly).
    grad_known = p.c - (p.A * (inv * inv)).T @ lam + p.G.T @ mu
    np.add.at(grad_known, p.class_z, -pi)
    if p.E.shape[0]:
        nu = np.linalg.lstsq(p.E.T, -grad_known, rcond=None)[0]
    else:
        nu = np.zeros(0)
    # Make the multipliers dual feasible: z stationarity exact, term stationarity exact.
    zs = np.unique(p.class_z)
    lin = p.c + p.G.T @ mu + p.E.T @ nu          # linear coefficient of x before class terms
    pi = pi.copy()
    for j in zs:
        cls = np.flatnonzero(p.class_z == j)
        tot = pi[cls].sum()
        if lin[j] <= 0 or tot <= 0:
            return -math.inf
        pi[cls] *= lin[j] / tot
    need = pi[p.term_class] * p.w                 # sum of lam over a term's rows must equal this
    have = np.bincount(p.owner, weights=lam, minlength=K)
    lam = lam * (need / have)[p.owner]
    alpha = lin.copy()
    np.add.at(alpha, p.class_z, -pi)
    beta = p.A.T @ lam
    value = float(lam @ p.g + pi @ p.class_e - mu @ p.h - nu @ p.f)
    for j in range(n):
        if not p.recip[j]:
            if abs(alpha[j]) > 1e-9 * max(1.0, abs(lin[j])):
                return -math.inf
            continue
        a, b = alpha[j], beta[j]
        if a >= 0:
            value += 2.0 * math.sqrt(a * b) if b > 0 else 0.0
        else:
            ub = _upper_bound(p, j)
            if not math.isfinite(ub):
                return -math.inf
            value += a * ub + b / ub
    return value


def _upper_bound(p: ConvexProblem, j: int) -> float:
    """Largest x_j over the linear constraints (the feasible set of x, ignoring the terms)."""
    c = np.zeros(p.n)
    c[j] = -1.0
    bounds = [(0, None) if p.recip[i] else (None, None) for i in range(p.n)]
    res = linprog(c, A_ub=p.G if p.G.size else None, b_ub=p.h if p.G.size else None,
                  A_eq=p.E if p.E.size else None, b_eq=p.f if p.E.size else None, bounds=bounds, method="highs")
    return float(-res.fun) if res.status == 0 else math.inf


def unbounded_coordinates(p: ConvexProblem, candidates: np.ndarray) -> list[int]:
    """Coordinates among ``candidates`` that can grow without limit under G x <= h, E x = f, x_recip >= 0."""
    out = []
    for j in candidates:
        if _row_bounds(p, j):
            continue
        if not math.isfinite(_upper_bound(p, int(j))):
            out.append(int(j))
    return out


def _row_bounds(p: ConvexProblem, j: int) -> bool:
    # A row with non-negative coefficients on recip coordinates only, positive at j, bounds x_j.
    for M in (p.G, p.E):
        for row in M:
            if row[j] > 0 and np.all(row[~p.recip] == 0) and np.all(row[p.recip] >= 0):
                return True
    return False
