"""Whether the optimum is attained when a bandwidth can grow without limit, and its proof.

A used bandwidth is *free* when the linear constraints let it grow without limit at no cost in
the objective: some direction d >= 0 with d_j > 0 keeps every constraint (G d <= 0, E d = 0) and
c . d <= 0 (for min-cost: only dimensions that cost nothing). Raising all free bandwidths together
(the sum d* of those directions) leaves every row not charged on them unchanged and strictly
lowers every row that is. So:

- a term whose every row is charged on a free bandwidth falls strictly along d*, everywhere; so
  does a class (or dependency path) holding one. When every class of one workload does, the
  objective of perf and perf-per-cost falls strictly along d* at every feasible point: there is
  no minimizer, whatever the numbers. Refused without solving. (min-cost has no such rule: a
  faster design is cheaper only if a priced dimension can give up bandwidth.)
- otherwise a minimizer may exist (with LIBRA's max over dimensions, a dimension stops mattering
  once every collective crossing it is paced by a bounded one). The problem is solved with the
  free bandwidths capped at b0 x 10, 100, ... 10^8; the optimum is attained iff some cap is not
  felt: at the capped optimum no row charged on a free bandwidth sets its term's value in a class
  that sets the objective (or a binding time target). That capped optimum is then optimal
  without the caps; its certificate is the dual bound of the problem with the free bandwidths at
  infinity (a relaxation). When every cap is felt, refused.

The values alone cannot decide it: without a minimizer the capped optimum still approaches the
bound at infinity, about tenfold closer per tenfold cap, and falls inside any tolerance once the
cap is large enough (with 1e-9, at 1e9 GB/s on a job whose communication is a small share of its
time: accepted as "optimal" before). Which rows set the time at the capped optimum is structure,
not a tolerance. perf-per-cost's s = 1 / cost is not a bandwidth: a cost that can shrink toward 0
is refused as documented (cost_can_vanish).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import linprog

from ..errors import InfeasibleError, LibraError
from ..model.network import Network
from .constraints import LinearConstraint
from .problem import ScaledProblem
from .solver import ConvexProblem, SolverResult, solve, tight_point, unbounded_coordinates

MAX_CAP_POWER = 8       # caps up to b0 x 10^8: beyond, the design would be meaningless anyway
# Relative: a row or class this close to the maximum sets it, a constraint this close to its bound
# binds. Far above the solver's tolerance (its ties are that close); a row or class that does not
# set the time at a large enough cap is below by about its margin at infinite bandwidth.
_TIE = 1e-6


def cost_can_vanish(b: ScaledProblem) -> bool:
    """perf-per-cost: can s = 1 / cost grow without limit (bandwidth shrink toward 0)? Refused as
    documented, whatever the structure: with compute or latency, time x cost falls all the way;
    without, it is the same at every scale, and no scale is the answer."""
    return b.s_index >= 0 and bool(unbounded_coordinates(b.problem, np.array([b.s_index])))


def free_coordinates(b: ScaledProblem) -> list[int]:
    """Used bandwidth coordinates that can grow without limit at no cost (see the module
    docstring); perf-per-cost's s is cost_can_vanish's.

    Raises InfeasibleError when the linear constraints hold nowhere."""
    p = b.problem
    used = np.flatnonzero(p.A[:, :b.D].max(axis=0, initial=0.0) > 0)
    # prices are >= 0 and so is d: a dimension that costs something cannot grow at no cost
    used = used[p.c[used] == 0]
    if not used.size:
        return []
    unbounded = unbounded_coordinates(p, used)
    recip = np.flatnonzero(p.recip)
    c = p.c[recip]
    if not unbounded or not np.any(c != 0):
        return unbounded
    # min-cost: a free dimension may grow only with priced ones (bw[c] <= bw[a]); d on the
    # recip coordinates, d_j <= 1.
    A_ub = np.vstack([p.G[:, recip], c[None, :]])
    b_ub = np.zeros(A_ub.shape[0])
    A_eq = p.E[:, recip] if p.E.shape[0] else None
    out = []
    for j in unbounded:
        k = int(np.flatnonzero(recip == j)[0])
        obj = np.zeros(recip.shape[0])
        obj[k] = -1.0
        bounds = [(0, 1) if i == k else (0, None) for i in range(recip.shape[0])]
        res = linprog(obj, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.zeros(A_eq.shape[0]) if A_eq is not None else None,
                      bounds=bounds, method="highs")
        if res.status == 0 and -res.fun > 0.5:
            out.append(j)
    return out


def _charged(p: ConvexProblem, free: Sequence[int]) -> np.ndarray:
    """Rows with a positive coefficient on a free coordinate."""
    return p.A[:, list(free)].max(axis=1) > 0


def falls_everywhere(p: ConvexProblem, free: Sequence[int]) -> bool:
    """Some workload (epigraph coordinate with a positive objective weight) all of whose classes
    hold a term whose every row is charged on a free coordinate: the objective falls strictly
    along the free directions at every feasible point, so it has no minimizer."""
    charged = _charged(p, free)
    K, Q = p.w.shape[0], p.class_z.shape[0]
    has_rows = np.bincount(p.owner, minlength=K) > 0
    uncharged_rows = np.bincount(p.owner, weights=~charged, minlength=K)
    term_falls = has_rows & (uncharged_rows == 0) & (p.w > 0)
    class_falls = np.bincount(p.term_class, weights=term_falls, minlength=Q) > 0
    for z in np.unique(p.class_z):
        if p.c[z] > 0 and np.all(class_falls[p.class_z == z]):
            return True
    return False


def free_rows_matter(p: ConvexProblem, x: np.ndarray, free: Sequence[int]) -> bool:
    """At x, does a row charged on a free coordinate set its term's value in a class that sets
    its workload's time, where that time counts (in the objective, or in a binding constraint)?"""
    x = tight_point(p, x)
    used = p.recip & (p.A.max(axis=0, initial=0.0) > 0)
    with np.errstate(divide="ignore"):
        vals = p.A[:, used] @ (1.0 / x[used]) + p.g
    K, Q = p.w.shape[0], p.class_z.shape[0]
    top = np.full(K, -np.inf)
    np.maximum.at(top, p.owner, vals)
    at_top = _charged(p, free) & (vals >= top[p.owner] - _TIE * np.maximum(np.abs(top[p.owner]), 1e-12))
    term_set = (np.bincount(p.owner, weights=at_top, minlength=K) > 0) & (p.w > 0)
    class_set = np.bincount(p.term_class, weights=term_set, minlength=Q) > 0
    cls = np.bincount(p.term_class, weights=p.w * np.where(np.isfinite(top), top, 0.0), minlength=Q) + p.class_e
    z = x[p.class_z]
    active = cls >= z - _TIE * np.maximum(np.abs(z), 1e-12)
    for q in np.flatnonzero(class_set & active):
        if _time_counts(p, x, int(p.class_z[q])):
            return True
    return False


def _time_counts(p: ConvexProblem, x: np.ndarray, z: int) -> bool:
    """The epigraph coordinate z is in the objective, or in a linear constraint that binds at x
    (min-cost's time target)."""
    if p.c[z] != 0 or (p.E.shape[0] and np.any(p.E[:, z] != 0)):
        return True
    rows = np.flatnonzero(p.G[:, z] != 0)
    slack = p.h[rows] - p.G[rows] @ x
    return bool(np.any(slack <= _TIE * np.maximum(np.abs(p.h[rows]), 1.0)))


def relaxed(p: ConvexProblem, free: Sequence[int]) -> ConvexProblem:
    """The problem with the free coordinates at infinity: their columns of the rows removed
    (every row can only get smaller) and the linear rows that hold them dropped (a free
    coordinate satisfies them by growing; left in, their multipliers would charge it and the
    dual bound would be -inf), each kept only above a positive floor. A relaxation: its dual
    bound is a lower bound on the uncapped optimum."""
    free = list(free)
    A = p.A.copy()
    A[:, free] = 0.0
    keep_g = ~np.any(p.G[:, free] != 0, axis=1)
    keep_e = ~np.any(p.E[:, free] != 0, axis=1)
    floors = np.zeros((len(free), p.n))
    floors[np.arange(len(free)), free] = -1.0
    G = np.vstack([p.G[keep_g], floors])
    h = np.r_[p.h[keep_g], np.full(len(free), -1e-9)]
    return replace(p, A=A, G=G, h=h, E=p.E[keep_e], f=p.f[keep_e])


def caps(b: ScaledProblem, free: Sequence[int], power: int, floor_gbps: float = 0.0) -> tuple[LinearConstraint, ...]:
    """Bandwidths of the free dimensions at most b0 x 10^power GB/s (and at least ``floor_gbps``,
    where a start must fit)."""
    cap = max(b.b0 * 10.0 ** power, floor_gbps)
    return tuple(LinearConstraint(tuple(1.0 if i == j else 0.0 for i in range(b.D)), "<=", cap, f"bw[{j}] <= {cap:g}")
                 for j in free)


def solve_capped(build: Callable, b: ScaledProblem, paths, free: Sequence[int], first_power: int,
                 guesses: Callable[[ScaledProblem], list], rel_gap: float, floor_gbps: float = 0.0):
    """The problem ``b`` (built without caps) with growing caps on the free coordinates, from
    b0 x 10^first_power on, until one is not felt. Returns (problem, result, power, settled):
    settled results carry the dual bound of the uncapped problem; unsettled ones are the last
    capped solve (no minimizer found)."""
    bound: SolverResult | None = None
    last = None
    for power in range(first_power, MAX_CAP_POWER + 1):
        try:
            bk = build(paths, caps(b, free, power, floor_gbps))
            rk = solve(bk.problem, guesses(bk), rel_gap=rel_gap / 3)
        except InfeasibleError:        # a cap below a lower bound: a larger one
            continue
        last = (bk, rk, power)
        if not rk.success or free_rows_matter(bk.problem, rk.x, free):   # felt, or not solved
            continue
        if bound is None:
            bound = solve(relaxed(b.problem, free), guesses(b), rel_gap=rel_gap / 3)
        lower = bound.dual_bound * b.t0 / bk.t0
        if bound.success and rk.fun - lower <= rel_gap * max(abs(rk.fun), 1e-300):
            return bk, replace(rk, dual_bound=lower, gap=rk.fun - lower, newton_steps=rk.newton_steps +
                               bound.newton_steps, solve_time_s=rk.solve_time_s + bound.solve_time_s), power, True
    if last is None:
        raise InfeasibleError("the constraints are infeasible: no bandwidth split satisfies all of them; relax one")
    bk, rk, power = last
    return bk, rk, power, False


def no_minimizer(net: Network, objective: str, free: Sequence[int]) -> LibraError:
    """The one-line refusal: which dimensions grow without limit, and the fix."""
    names = ", ".join(net.dims[j].name for j in free)
    first = net.dims[free[0]].name
    bound = f"--constraint 'bw[{first}] <= GBPS' (or bw_max_gbps in the network file)"
    if objective == "perf":
        return LibraError(f"objective perf has no minimizer: the bandwidth of {names} can grow without limit and the "
                          f"time keeps falling as it grows; give --total-bw, --budget, or an upper bound such as {bound}")
    falls = "time x cost keeps falling" if objective == "perf-per-cost" else "the cost of meeting the time target keeps falling"
    return LibraError(f"objective {objective} has no minimizer: {names} cost nothing in the cost model and their "
                      f"bandwidth can grow without limit while {falls}; give them a price or an upper bound such as "
                      f"{bound}")


def vanishing_cost(objective: str = "perf-per-cost") -> LibraError:
    if objective != "perf-per-cost":
        return LibraError(f"objective {objective} has no minimizer: the power can shrink toward 0 under these "
                          "constraints (all power figures 0); give the NPUs' power in the power file")
    return LibraError("objective perf-per-cost has no minimizer: the network cost can shrink toward 0 under these "
                      "constraints (only upper bounds, or bandwidth free to move to dimensions that cost nothing); "
                      "add --total-bw or lower bounds (bw_min_gbps or a --constraint)")
