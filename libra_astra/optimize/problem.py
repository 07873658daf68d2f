"""The scaled convex program behind each objective (built here, solved by solver.py).

Bandwidths are scaled by b0 (GB/s), times by t0 (ns) and costs by c0 (USD) so the solver sees
O(1) numbers. ``perf`` and ``min-cost`` use x = (B / b0, one epigraph coordinate per workload);
``perf-per-cost`` uses the Charnes-Cooper variables x = (y, s, epigraph coordinates) with
s = 1 / c(B) and y = s B, under which T(B) c(B) = sum of compute / s + D(y), c(y) = 1 and every
linear constraint A B <= b becomes A y <= b s. Collectives whose time rows are equal up to a
positive scale merge into one term (exact). Linear constraints that always hold with equality are
moved into the equalities so the interior-point method has an interior.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import linprog

from .constraints import LinearConstraint
from ..model.cost import CostModel
from ..demand.workload import Workload
from ..errors import LibraError
from ..model.network import MAX_BW_GBPS, MIN_TOTAL_BW_GBPS, Network
from .solver import ConvexProblem, SolverResult
from ..timing.model import TimeModel, demand_time
from .terms import Terms, class_terms

OBJECTIVES = ("perf", "perf-per-cost", "min-cost", "min-energy", "perf-per-watt", "min-tco")
# Objectives of the form T(B) x (offset + per . B): solved in Charnes-Cooper variables.
FRACTIONAL = ("perf-per-cost", "min-energy", "perf-per-watt", "min-tco")


@dataclass(frozen=True)
class Constraints:
    total_bw_gbps: float | None = None
    total_bw_is_upper_bound: bool = False
    budget_usd: float | None = None
    time_target_ns: float | None = None
    linear: tuple[LinearConstraint, ...] = ()
    energy_max_j: float | None = None      # per step (energy_cap.py; needs power figures)
    tco_max_usd: float | None = None       # of the run (energy_cap.py; needs power figures and TCO settings)


@dataclass(frozen=True)
class ScaledProblem:
    problem: ConvexProblem
    D: int
    b0: float        # GB/s per scaled bandwidth unit
    t0: float        # ns per scaled time unit
    c0: float        # USD per scaled cost unit (perf-per-cost and min-cost)
    s_index: int     # index of s (perf-per-cost) or -1
    guesses: list
    num_collectives: int
    num_terms: int
    price_per_gbps: tuple[float, ...] = ()   # cost model's USD per GB/s of each dimension
    d0: float = 1.0  # unit of the fractional objectives' multiplier (USD or W) per scaled unit


def linear_rows(net: Network, cost: CostModel, cons: Constraints, b0: float, c0: float):
    """(G, h, E, f) on scaled bandwidths B' = B / b0, from every bandwidth-only constraint."""
    D = net.num_dims
    G, h, E, f = [], [], [], []
    price = np.array(cost.price_usd_per_gbps(net)) * b0 / c0
    for j, d in enumerate(net.dims):
        row = np.zeros(D)
        row[j] = -1.0
        G.append(row)
        h.append(-d.bw_min_gbps / b0)
        if d.bw_max_gbps is not None:
            row = np.zeros(D)
            row[j] = 1.0
            G.append(row)
            h.append(d.bw_max_gbps / b0)
    if cons.total_bw_gbps is not None:
        if cons.total_bw_gbps <= 0:
            raise LibraError(f"--total-bw must be > 0 GB/s, got {cons.total_bw_gbps:g}")
        if not MIN_TOTAL_BW_GBPS <= cons.total_bw_gbps <= MAX_BW_GBPS:
            above = cons.total_bw_gbps > MAX_BW_GBPS
            raise LibraError(f"--total-bw{'-max' if cons.total_bw_is_upper_bound else ''} "
                             f"{cons.total_bw_gbps:g} GB/s per NPU is {'beyond' if above else 'below'} "
                             f"{MAX_BW_GBPS if above else MIN_TOTAL_BW_GBPS:g}; give a real bandwidth")
        (G if cons.total_bw_is_upper_bound else E).append(np.ones(D))
        (h if cons.total_bw_is_upper_bound else f).append(cons.total_bw_gbps / b0)
    if cons.budget_usd is not None:
        if cons.budget_usd <= 0:
            raise LibraError(f"--budget must be > 0 USD, got {cons.budget_usd:g}")
        G.append(price.copy())
        h.append(cons.budget_usd / c0)
    for lc in cons.linear:
        row = np.array(lc.coeffs) * b0
        if lc.op == "<=":
            G.append(row); h.append(lc.rhs)
        elif lc.op == ">=":
            G.append(-row); h.append(-lc.rhs)
        else:
            E.append(row); f.append(lc.rhs)
    to = lambda rows, n: np.array(rows, dtype=float).reshape(len(rows), n)
    return to(G, D), np.array(h, dtype=float), to(E, D), np.array(f, dtype=float), price


def _scales(net, cost, cons) -> tuple[float, float]:
    D = net.num_dims
    if cons.total_bw_gbps is not None:
        b0 = cons.total_bw_gbps / D
    else:
        caps = [d.bw_max_gbps for d in net.dims if d.bw_max_gbps is not None]
        b0 = float(np.mean(caps)) if len(caps) == D else 100.0
        if cons.budget_usd is not None:
            b0 = cons.budget_usd / sum(cost.price_usd_per_gbps(net)) if sum(cost.price_usd_per_gbps(net)) > 0 else b0
    b0 = max(b0, 1e-9)
    return b0, max(cost.network_cost_usd(net, [b0] * D), 1e-12)


def build_problem(workloads: Sequence[Workload], net: Network, cost: CostModel, cons: Constraints, objective: str,
           model: TimeModel, paths: Sequence[tuple[int, float, Terms]] | None = None,
           cache: dict | None = None, multiplier: tuple[float, Sequence[float]] | None = None) -> ScaledProblem:
    """The scaled convex problem. ``paths`` (workload, compute, terms) replace the rank classes
    when the time model follows dependency graphs: each path bounds its workload's time.
    ``cache`` keeps the demands' scaled rows for later builds and path terms of one optimization.
    ``multiplier`` (offset, per GB/s of each dimension): what the FRACTIONAL objectives multiply
    the time by (the network cost for perf-per-cost, by default; power for the energy ones)."""
    if objective not in OBJECTIVES:
        raise LibraError(f"unknown objective {objective!r}; use one of {list(OBJECTIVES)}")
    if not workloads:
        raise LibraError("no workload given; pass --demand FILE or a trace prefix")
    for w in workloads:
        w.demand.check_network(net, w.name or w.demand.name)
        if w.weight <= 0:
            raise LibraError(f"workload {w.name or w.demand.name!r}: weight must be > 0, got {w.weight:g}")
    D = net.num_dims
    b0, c0 = _scales(net, cost, cons)
    n_coll = sum(len(rc.collectives) for w in workloads for rc in w.demand.rank_classes)
    # Time unit: the EqualBW time of the demand at b0, so scaled values are O(1).
    if paths is not None:
        classes = list(paths)
        # the same for every round of paths of one optimization: timed once
        key = ("t_eq", b0, model)
        t_eq = cache.get(key) if cache is not None else None
        if t_eq is None:
            t_eq = sum(w.weight * demand_time(w.demand, [b0] * D, net, model).total_ns for w in workloads)
            if cache is not None:
                cache[key] = t_eq
    else:
        cache = {} if cache is None else cache
        classes = [(wi, comp, terms) for wi, w in enumerate(workloads)
                   for comp, terms in class_terms(w.demand, net, model, cache)]
        # From the terms themselves: evaluating the demand would time every collective again.
        slowest = np.zeros(len(workloads))
        for wi, comp, terms in classes:
            at_b0 = (np.maximum.reduceat(terms.A.sum(axis=1) / b0 + terms.g_ns, terms.starts)
                     if terms.num_terms else np.zeros(0))
            tc = comp + sum((terms.weight * at_b0).tolist())
            slowest[wi] = max(slowest[wi], tc)
        t_eq = float(sum(w.weight * slowest[wi] for wi, w in enumerate(workloads)))
    t0 = t_eq if t_eq > 0 else 1.0
    W = len(workloads)
    G0, h0, E0, f0, price = linear_rows(net, cost, cons, b0, c0)
    cc = objective in FRACTIONAL
    if objective in ("min-energy", "perf-per-watt", "min-tco") and multiplier is None:
        raise LibraError(f"objective {objective} needs power figures: pass a power model (--power FILE)")
    if multiplier is None:
        multiplier = (0.0, cost.price_usd_per_gbps(net))
    m_off, m_per = float(multiplier[0]), np.asarray(multiplier[1], dtype=float)
    d0 = max(m_off + float(m_per.sum()) * b0, 1e-12) if cc else 1.0
    n_recip = D + (1 if cc else 0)
    n = n_recip + W
    s_idx = D if cc else -1
    A_parts, g_parts, nrow_parts, w_parts, tclass_parts, cz, ce = [], [], [], [], [], [], []
    for q, (wi, comp, terms) in enumerate(classes):
        A_parts.append(terms.A)
        g_parts.append(terms.g_ns)
        nrow_parts.append(np.diff(np.r_[terms.starts, terms.A.shape[0]]))
        w_parts.append(terms.weight)
        K_q = terms.num_terms
        if cc and comp > 0:
            # Compute C becomes C / s: a term with one row on the s coordinate.
            extra, comp_const = comp, 0.0
        else:
            extra, comp_const = (0.0 if not K_q else None), comp
        if extra is not None:
            A_parts.append(np.zeros((1, D)))
            g_parts.append(np.array([extra]))
            nrow_parts.append(np.ones(1, dtype=np.int64))
            w_parts.append(np.ones(1))
            K_q += 1
        tclass_parts.append(np.full(K_q, q))
        cz.append(n_recip + wi)
        ce.append(comp_const / t0)
    # Written in place, part by part: at 100k collectives a stacked copy costs as much as the rows.
    A_all = np.zeros((sum(a.shape[0] for a in A_parts), n))
    at = 0
    for a in A_parts:
        np.divide(a, b0 * t0, out=A_all[at:at + a.shape[0], :D])
        at += a.shape[0]
    g_all = np.concatenate(g_parts) / t0
    if cc:
        A_all[:, s_idx] = g_all
        g_all = np.zeros_like(g_all)
    w_all = np.concatenate(w_parts).astype(float)
    k = w_all.shape[0]
    owner_all = np.repeat(np.arange(k), np.concatenate(nrow_parts))
    c = np.zeros(n)
    weights = np.array([w.weight for w in workloads])
    if objective == "min-cost":
        c[:D] = price
    else:
        c[n_recip:] = weights
    recip = np.zeros(n, dtype=bool)
    recip[:n_recip] = True
    # Lift the bandwidth constraints into x (and into (y, s) for Charnes-Cooper).
    def lift(M: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        out = np.zeros((M.shape[0], n))
        out[:, :D] = M
        if cc:
            out[:, s_idx] = -rhs
        return out

    G, h = lift(G0, h0), (np.zeros_like(h0) if cc else h0)
    E, f = lift(E0, f0), (np.zeros_like(f0) if cc else f0)
    if cc:
        # offset s + per . y = 1 (scaled by d0): s = d0 / multiplier(B)
        row = np.zeros(n)
        row[:D] = m_per * b0 / d0
        row[s_idx] = m_off / d0
        E = np.vstack([E, row])
        f = np.r_[f, 1.0]
        row = np.zeros(n)
        row[s_idx] = -1.0
        G = np.vstack([G, row])
        h = np.r_[h, 0.0]
    if objective == "min-cost":
        if cons.time_target_ns is None or cons.time_target_ns <= 0:
            raise LibraError("objective min-cost needs a time target > 0: pass --time-target NS")
        row = np.zeros(n)
        row[n_recip:] = weights
        G = np.vstack([G, row])
        h = np.r_[h, cons.time_target_ns / t0]
    # Starting guesses: the split of the total that would be optimal if each term were the sum
    # of its rows, then the equal split (of the total, or of the bounds' midpoints).
    guesses = []
    if cons.total_bw_gbps is not None:
        frac = 0.999 if cons.total_bw_is_upper_bound else 1.0
        total = frac * cons.total_bw_gbps / b0
        need = w_all.take(owner_all) @ A_all[:, :D]           # a matrix product: 40 ms less at 600k rows
        split = _square_root_split(need, total, net, b0)
        if split is not None:
            guesses.append(split)
        guesses.append(np.full(D, total / D))
    guesses.append(np.ones(D))
    full = []
    for gb in guesses:
        x = np.zeros(n)
        x[:D] = gb
        if cc:
            cost_scaled = float(m_per * b0 / d0 @ gb) + m_off / d0
            if cost_scaled <= 0:
                continue
            x[:D] = gb / cost_scaled
            x[s_idx] = 1.0 / cost_scaled
        full.append(x)
    G, h, E, f = _promote_implicit_equalities(G, h, E, f, full)
    E, f = _independent_rows(E, f)
    problem = ConvexProblem(
        c=c, recip=recip,
        A=A_all, g=g_all, owner=owner_all,
        w=w_all, term_class=np.concatenate(tclass_parts), class_z=np.array(cz), class_e=np.array(ce),
        G=G, h=h, E=E, f=f,
    )
    return ScaledProblem(problem, D, b0, t0, c0, s_idx, full, n_coll, k, cost.price_usd_per_gbps(net), d0)


def _square_root_split(need: np.ndarray, total: float, net: Network, b0: float) -> np.ndarray | None:
    """B_d proportional to sqrt(need_d) with sum B = total: the minimiser of sum_d need_d / B_d
    (LIBRA's closed form for an additive time), with each B_d kept strictly inside its bounds by
    water-filling (None if the bounds leave no room). From there the interior-point method needs
    fewer Newton steps than from the equal split on 8 dimensions, where the optimum is far from it."""
    D = need.shape[0]
    pad = 1e-3 * total / D
    lo = np.array([d.bw_min_gbps / b0 for d in net.dims]) + pad
    hi = np.array([d.bw_max_gbps / b0 if d.bw_max_gbps is not None else math.inf for d in net.dims]) - pad
    if lo.sum() >= total or hi.sum() <= total or np.any(lo >= hi):
        return None
    weight = np.sqrt(np.maximum(need, 0.0))
    top = float(weight.max())
    # a dimension no row needs still gets a sliver: every coordinate starts > 0
    weight = np.maximum(weight, 1e-3 * top) if top > 0 else np.ones(D)
    # sum_d clip(tau w_d, lo_d, hi_d) is piecewise linear and non-decreasing in tau, with kinks at
    # lo / w and hi / w: find the piece where it reaches the total and solve on it.
    kinks = np.unique(np.concatenate([lo / weight, hi / weight]))
    spent = np.clip(kinks[:, None] * weight, lo, hi).sum(axis=1)
    i = int(np.searchsorted(spent, total))            # spent[i - 1] < total <= spent[i]
    inside = kinks[i - 1] + 1.0 if not math.isfinite(kinks[i]) else 0.5 * (kinks[i - 1] + kinks[i])
    at_lo, at_hi = inside * weight <= lo, inside * weight >= hi
    free = ~(at_lo | at_hi)
    tau = (total - lo[at_lo].sum() - hi[at_hi].sum()) / weight[free].sum()
    return np.clip(tau * weight, lo, hi)


def _promote_implicit_equalities(G, h, E, f, guesses):
    """Move inequalities that hold with equality at every feasible point (bw_min == bw_max, or
    'bw[0] >= bw[1]' with 'bw[1] >= bw[0]') into the equalities, so the barrier has an interior."""
    if not G.shape[0]:
        return G, h, E, f
    # A guess strictly inside is proof enough that there is an interior (the common case, and it
    # spares a linear program on every solve).
    for x in guesses:
        # (np.allclose's test, |E x - f| <= 1e-12 + 1e-12 |f|, without its wrappers)
        if (np.all(G @ x < h - 1e-9 * np.maximum(1.0, np.abs(h)))
                and np.all(np.abs(E @ x - f) <= 1e-12 + 1e-12 * np.abs(f))):
            return G, h, E, f
    n = G.shape[1]
    norms = np.maximum(np.linalg.norm(G, axis=1), 1e-300)
    # Quick test: the largest uniform slack; positive means there is an interior already.
    cobj = np.zeros(n + 1)
    cobj[-1] = -1.0
    kw = dict(A_eq=np.hstack([E, np.zeros((E.shape[0], 1))]) if E.shape[0] else None,
              b_eq=f if E.shape[0] else None, method="highs")
    res = linprog(cobj, A_ub=np.hstack([G, norms[:, None]]), b_ub=h,
                  bounds=[(None, None)] * n + [(None, 1.0)], **kw)
    if res.status != 0 or res.x[-1] > 1e-9:
        return G, h, E, f
    tight = []
    for i in range(G.shape[0]):
        r = linprog(G[i], A_ub=G, b_ub=h, bounds=[(None, None)] * n, method="highs",
                    A_eq=E if E.shape[0] else None, b_eq=f if E.shape[0] else None)
        if r.status == 0 and h[i] - r.fun <= 1e-9 * max(1.0, abs(h[i])):
            tight.append(i)
    if not tight:
        return G, h, E, f
    keep = [i for i in range(G.shape[0]) if i not in tight]
    return G[keep], h[keep], np.vstack([E, G[tight]]), np.r_[f, h[tight]]


def _independent_rows(E: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop equality rows that repeat others (the Newton system needs full row rank)."""
    keep: list[int] = []
    for i in range(E.shape[0]):
        trial = E[keep + [i]]
        tol = 1e-10 * max(1.0, np.abs(trial).max())
        # one row: its only singular value is its norm (an SVD costs more than the rest of a small build)
        rank = int(float(np.sqrt(trial[0] @ trial[0])) > tol) if not keep else np.linalg.matrix_rank(trial, tol=tol)
        if rank == len(keep) + 1:
            keep.append(i)
        else:
            aug = np.hstack([E[keep + [i]], f[keep + [i], None]])
            if np.linalg.matrix_rank(aug, tol=1e-9 * max(1.0, np.abs(aug).max())) > len(keep):
                raise LibraError("the equality constraints contradict each other; remove or fix one")
    return E[keep], f[keep]


def unscale(b: ScaledProblem, res: SolverResult, objective: str) -> np.ndarray:
    x = res.x
    if b.s_index >= 0:
        return x[:b.D] / x[b.s_index] * b.b0
    return x[:b.D] * b.b0
