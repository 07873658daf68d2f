"""LIBRA bandwidth optimization: objectives, constraints, exact solve, certificate and baselines.

Objectives (T = weighted sum over workloads of the slowest rank class's time, c = network cost):

``perf``            minimize T(B)
``perf-per-cost``   minimize T(B) * c(B), made convex by the Charnes-Cooper change of variables
                    s = 1 / c(B), y = s B: T c = sum C_q / s + D(y) with c(y) = 1, A B <= b -> A y <= b s
``min-cost``        minimize c(B) subject to T(B) <= a time target

Constraints: total bandwidth (equality or upper bound), cost budget, per-dimension bounds from the
network file, and linear constraints from text (constraints.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
from scipy.optimize import linprog

from .constraints import LinearConstraint
from .cost import CostModel
from .demand import Demand
from .errors import InfeasibleError, LibraError
from .network import Network
from .predict import critical_path, predict
from .solver import ConvexProblem, SolverResult, solve, term_values, unbounded_coordinates
from .timing import LIBRA, TimeModel, collective_rows, demand_time

OBJECTIVES = ("perf", "perf-per-cost", "min-cost")


@dataclass(frozen=True)
class Workload:
    demand: Demand
    weight: float = 1.0
    name: str = ""


@dataclass(frozen=True)
class Constraints:
    total_bw_gbps: float | None = None
    total_bw_is_upper_bound: bool = False
    budget_usd: float | None = None
    time_target_ns: float | None = None
    linear: tuple[LinearConstraint, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    """One bandwidth split, evaluated: weighted time over workloads, cost, feasibility."""

    bw_gbps: tuple[float, ...]
    time_ns: float
    compute_ns: float
    communication_ns: float
    cost_usd: float
    feasible: bool

    @property
    def time_cost_ns_usd(self) -> float:
        return self.time_ns * self.cost_usd


@dataclass(frozen=True)
class OptimizeResult:
    objective: str
    best: Evaluation
    fun: float                  # objective value in its unit (ns, ns*USD or USD)
    dual_bound: float           # proven lower bound on the optimum, same unit
    rel_gap: float
    success: bool
    status: int
    message: str
    solve_time_s: float
    newton_steps: int
    num_collectives: int
    num_terms: int
    baselines: dict = field(default_factory=dict)   # name -> Evaluation

    @property
    def bw_gbps(self) -> tuple[float, ...]:
        return self.best.bw_gbps


# ------------------------------------------------------------------ evaluation


def evaluate(workloads: Sequence[Workload], net: Network, cost: CostModel, bw_gbps: Sequence[float],
             constraints: Constraints = Constraints(), model: TimeModel = LIBRA) -> Evaluation:
    bw = tuple(float(b) for b in bw_gbps)
    t = comp = comm = 0.0
    for w in workloads:
        br = demand_time(w.demand, bw, net, model)
        if model.overlap:
            # Communication here is what compute does not hide.
            total = predict(w.demand, bw, net, model).time_ns
            br = type(br)(total, br.compute_ns, total - br.compute_ns, br.slowest_class)
        t += w.weight * br.total_ns
        comp += w.weight * br.compute_ns
        comm += w.weight * br.communication_ns
    c = cost.network_cost_usd(net, bw)
    return Evaluation(bw, t, comp, comm, c, _feasible(bw, net, cost, constraints, t, c))


def _feasible(bw, net, cost, cons: Constraints, t: float, c: float, tol: float = 1e-6) -> bool:
    total = sum(bw)
    if cons.total_bw_gbps is not None:
        if cons.total_bw_is_upper_bound:
            if total > cons.total_bw_gbps * (1 + tol):
                return False
        elif abs(total - cons.total_bw_gbps) > tol * cons.total_bw_gbps:
            return False
    if cons.budget_usd is not None and c > cons.budget_usd * (1 + tol):
        return False
    if cons.time_target_ns is not None and t > cons.time_target_ns * (1 + tol):
        return False
    for b, d in zip(bw, net.dims):
        if b < d.bw_min_gbps * (1 - tol) or (d.bw_max_gbps is not None and b > d.bw_max_gbps * (1 + tol)):
            return False
    return all(lc.satisfied(bw, tol) for lc in cons.linear)


# ------------------------------------------------------------------ problem building


def _merge_terms(items, net: Network, model: TimeModel, cache: dict) -> list:
    """Terms [(A, g, weight)] of (collective, count) items; terms equal up to scale merge."""
    merged: dict = {}
    for c, count in items:
        if count <= 0:
            continue
        key = (c.type, c.size_bytes, c.participants, c.traffic_bytes, c.hops, c.algorithm)
        rows = cache.get(key)
        if rows is None:
            A, g = collective_rows(c, net, model)
            scale = float(A.max()) if not np.any(g) and A.max() > 0 else 1.0
            An = A / scale
            mkey = (An.shape, np.round(An, 12).tobytes(), g.tobytes())
            rows = (mkey, An, g, scale)
            cache[key] = rows
        mkey, An, g, scale = rows
        if mkey in merged:
            merged[mkey][2] += count * scale
        else:
            merged[mkey] = [An, g, count * scale]
    return list(merged.values())


def _class_terms(demand: Demand, net: Network, model: TimeModel, cache: dict) -> list[tuple[float, list]]:
    """Per rank class (no overlap): compute and merged terms."""
    return [(rc.compute_time_ns, _merge_terms(((c, c.count) for c in rc.collectives), net, model, cache))
            for rc in demand.rank_classes]


def _path_terms(rc, path: tuple[int, ...], net: Network, model: TimeModel, cache: dict) -> tuple[float, list]:
    """Compute and merged terms of one dependency path of a rank class (its nodes run in sequence)."""
    if rc.dag is None:
        return rc.compute_time_ns, _merge_terms(((c, c.count) for c in rc.collectives), net, model, cache)
    comp = sum(rc.dag.nodes[v][1] for v in path if rc.dag.nodes[v][0] == "comp")
    colls = [(rc.collectives[int(rc.dag.nodes[v][1])], 1.0) for v in path if rc.dag.nodes[v][0] == "coll"]
    return comp, _merge_terms(colls, net, model, cache)


@dataclass(frozen=True)
class _Built:
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


def _linear_rows(net: Network, cost: CostModel, cons: Constraints, b0: float, c0: float):
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


def _scales(workloads, net, cost, cons) -> tuple[float, float]:
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


def _build(workloads: Sequence[Workload], net: Network, cost: CostModel, cons: Constraints, objective: str,
           model: TimeModel, paths: Sequence[tuple[int, float, list]] | None = None) -> _Built:
    """The scaled convex problem. ``paths`` (workload, compute, terms) replace the rank classes
    when the time model follows dependency graphs: each path bounds its workload's time."""
    if objective not in OBJECTIVES:
        raise LibraError(f"unknown objective {objective!r}; use one of {list(OBJECTIVES)}")
    if not workloads:
        raise LibraError("no workload given; pass --demand FILE or a trace prefix")
    for w in workloads:
        w.demand.check_network(net, w.name or w.demand.name)
        if w.weight <= 0:
            raise LibraError(f"workload {w.name or w.demand.name!r}: weight must be > 0, got {w.weight:g}")
    D = net.num_dims
    b0, c0 = _scales(workloads, net, cost, cons)
    # Time unit: the EqualBW time of the demand at b0, so scaled values are O(1).
    t_eq = sum(w.weight * demand_time(w.demand, [b0] * D, net, model).total_ns for w in workloads)
    t0 = t_eq if t_eq > 0 else 1.0
    n_coll = sum(len(rc.collectives) for w in workloads for rc in w.demand.rank_classes)
    if paths is not None:
        classes = list(paths)
    else:
        cache: dict = {}
        classes = [(wi, comp, terms) for wi, w in enumerate(workloads)
                   for comp, terms in _class_terms(w.demand, net, model, cache)]
    W = len(workloads)
    G0, h0, E0, f0, price = _linear_rows(net, cost, cons, b0, c0)
    cc = objective == "perf-per-cost"
    n_recip = D + (1 if cc else 0)
    n = n_recip + W
    s_idx = D if cc else -1
    A_rows, g_rows, owner, wts, tclass, cz, ce = [], [], [], [], [], [], []
    k = 0
    for q, (wi, comp, terms) in enumerate(classes):
        items = list(terms)
        if cc and comp > 0:
            # Compute C becomes C / s: a term with one row on the s coordinate.
            items.append([np.zeros((1, D)), np.array([comp]), 1.0])
            comp_const = 0.0
        else:
            comp_const = comp
        if not items:
            items = [[np.zeros((1, D)), np.zeros(1), 1.0]]
        for An, g, weight in items:
            Ar = np.zeros((An.shape[0], n))
            Ar[:, :D] = An / (b0 * t0)
            gr = g / t0
            if cc:
                Ar[:, s_idx] = gr
                gr = np.zeros_like(gr)
            A_rows.append(Ar)
            g_rows.append(gr)
            owner.append(np.full(An.shape[0], k))
            wts.append(weight)
            tclass.append(q)
            k += 1
        cz.append(n_recip + wi)
        ce.append(comp_const / t0)
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
        row = np.zeros(n)
        row[:D] = price
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
    G, h, E, f = _promote_implicit_equalities(G, h, E, f, n_recip)
    E, f = _independent_rows(E, f)
    problem = ConvexProblem(
        c=c, recip=recip,
        A=np.vstack(A_rows), g=np.concatenate(g_rows), owner=np.concatenate(owner),
        w=np.array(wts, dtype=float), term_class=np.array(tclass), class_z=np.array(cz), class_e=np.array(ce),
        G=G, h=h, E=E, f=f,
    )
    # Starting guesses: the equal split (of the total, or of the bounds' midpoints).
    guesses = []
    if cons.total_bw_gbps is not None:
        frac = 0.999 if cons.total_bw_is_upper_bound else 1.0
        guesses.append(np.full(D, frac * cons.total_bw_gbps / D / b0))
    guesses.append(np.ones(D))
    full = []
    for gb in guesses:
        x = np.zeros(n)
        x[:D] = gb
        if cc:
            cost_scaled = float(price @ gb)
            if cost_scaled <= 0:
                continue
            x[:D] = gb / cost_scaled
            x[s_idx] = 1.0 / cost_scaled
        full.append(x)
    return _Built(problem, D, b0, t0, c0, s_idx, full, n_coll, k, cost.price_usd_per_gbps(net))


def _promote_implicit_equalities(G, h, E, f, n_recip):
    """Move inequalities that hold with equality at every feasible point (bw_min == bw_max, or
    'bw[0] >= bw[1]' with 'bw[1] >= bw[0]') into the equalities, so the barrier has an interior."""
    if not G.shape[0]:
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
    # Keep non-negativity rows of reciprocal coordinates: they are never implicit equalities here.
    return G[keep], h[keep], np.vstack([E, G[tight]]), np.r_[f, h[tight]]


def _independent_rows(E: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop equality rows that repeat others (the Newton system needs full row rank)."""
    keep: list[int] = []
    for i in range(E.shape[0]):
        trial = E[keep + [i]]
        if np.linalg.matrix_rank(trial, tol=1e-10 * max(1.0, np.abs(trial).max())) == len(keep) + 1:
            keep.append(i)
        else:
            aug = np.hstack([E[keep + [i]], f[keep + [i], None]])
            if np.linalg.matrix_rank(aug, tol=1e-9 * max(1.0, np.abs(aug).max())) > len(keep):
                raise LibraError("the equality constraints contradict each other; remove or fix one")
    return E[keep], f[keep]


def _check_bounded(b: _Built, net: Network, objective: str, workloads: Sequence[Workload]) -> None:
    """Refuse problems whose infimum is not attained, naming the cause and the fix."""
    p = b.problem
    D = b.D
    used = np.flatnonzero(p.A[:, :D].max(axis=0) > 0)
    if objective == "perf":
        bad = unbounded_coordinates(p, used)
        if bad:
            names = ", ".join(net.dims[j].name for j in bad)
            raise LibraError(f"objective perf is unbounded: bandwidth of {names} can grow without limit; "
                             "add --total-bw, --budget, bw_max_gbps in the network file or a --constraint")
        return
    if objective == "perf-per-cost" and unbounded_coordinates(p, np.array([b.s_index])):
        raise LibraError("objective perf-per-cost has no minimizer: the network cost can shrink toward 0 under "
                         "these constraints (only upper bounds, or bandwidth free to move to dimensions that cost "
                         "nothing); add --total-bw or lower bounds (bw_min_gbps or a --constraint)")
    # A used dimension that costs nothing and has no upper bound improves the time for free forever.
    price = np.array(b.price_per_gbps)
    free = used[price[used] == 0]
    bad = unbounded_coordinates(p, free) if free.size else []
    if bad:
        names = ", ".join(net.dims[j].name for j in bad)
        raise LibraError(f"objective {objective} has no minimizer: {names} cost nothing in the cost model and "
                         "their bandwidth can grow without limit; give them a price or an upper bound "
                         "(bw_max_gbps or a --constraint)")


def _unscale(b: _Built, res: SolverResult, objective: str) -> np.ndarray:
    x = res.x
    if objective == "perf-per-cost":
        return x[:b.D] / x[b.s_index] * b.b0
    return x[:b.D] * b.b0


def optimize(workloads: Sequence[Workload], net: Network, cost: CostModel, *, objective: str = "perf",
             constraints: Constraints = Constraints(), model: TimeModel = LIBRA, rel_gap: float = 1e-9,
             baselines: bool = True) -> OptimizeResult:
    """Find the bandwidth per dimension that minimizes the objective under the constraints.

    With ``model.overlap`` the time of a rank is its longest dependency path (compute and
    communication overlap); that time is still convex in B, and the solver adds critical paths
    until the one at the solution is already among them, which proves the optimum.

    Raises
    ------
    LibraError
        Infeasible or unbounded problems, bad weights, a demand for another network shape.
    """
    start_for, start_bw = None, None
    try:
        if objective == "min-cost":
            start_for, start_bw = _min_cost_start(workloads, net, cost, constraints, model)
        b, res, bw, n_paths = _solve_model(workloads, net, cost, constraints, objective, model, rel_gap, start_for,
                                           start_bw)
    except InfeasibleError as e:
        raise InfeasibleError(_explain_infeasible(net, cost, constraints) or str(e)) from None
    best = evaluate(workloads, net, cost, bw, constraints, model)
    if objective == "perf":
        fun, unit = best.time_ns, b.t0
    elif objective == "perf-per-cost":
        fun, unit = best.time_cost_ns_usd, b.t0 * b.c0
    else:
        fun, unit = best.cost_usd, b.c0
    dual = res.dual_bound * unit
    rel = (fun - dual) / max(abs(fun), 1e-300) if math.isfinite(dual) else math.inf
    msg = res.message + (f"; {n_paths} dependency paths" if model.overlap else "")
    out = OptimizeResult(objective, best, fun, dual, rel, res.success, res.status, msg, res.solve_time_s,
                         res.newton_steps, b.num_collectives, b.num_terms)
    if baselines:
        out = _with_baselines(out, workloads, net, cost, constraints, model)
    return out


def _explain_infeasible(net: Network, cost: CostModel, cons: Constraints) -> str | None:
    """Name the constraint whose removal makes the rest feasible, if there is one."""
    named = [(f"--constraint {lc.text!r}", replace(cons, linear=cons.linear[:i] + cons.linear[i + 1:]))
             for i, lc in enumerate(cons.linear)]
    if cons.total_bw_gbps is not None:
        named.append(("--total-bw" + ("-max" if cons.total_bw_is_upper_bound else ""),
                      replace(cons, total_bw_gbps=None)))
    if cons.budget_usd is not None:
        named.append(("--budget", replace(cons, budget_usd=None)))
    culprits = [name for name, rest in named if _linear_feasible(net, cost, rest)]
    if not culprits:
        return None
    return (f"the constraints are infeasible: {' or '.join(culprits)} conflicts with the others "
            "(bounds in the network file included); relax it")


def _linear_feasible(net: Network, cost: CostModel, cons: Constraints) -> bool:
    G, h, E, f, _ = _linear_rows(net, cost, cons, 1.0, 1.0)
    res = linprog(np.zeros(net.num_dims), A_ub=G if G.size else None, b_ub=h if G.size else None,
                  A_eq=E if E.size else None, b_eq=f if E.size else None,
                  bounds=[(None, None)] * net.num_dims, method="highs")
    return res.status == 0


def _solve_model(workloads, net, cost, cons, objective, model, rel_gap, start_for=None, start_bw=None):
    """(built problem, solver result, bandwidths, number of dependency paths used).

    ``start_bw``: bandwidths whose critical paths seed the path generation (a min-cost start
    meets the target only with overlap); by default the no-overlap optimum seeds it."""
    checked = []

    def run(paths):
        b = _build(workloads, net, cost, cons, objective, model, paths)
        if not checked:
            _check_bounded(b, net, objective, workloads)
            checked.append(True)
        res = solve(b.problem, [start_for(b)] if start_for else b.guesses, rel_gap=rel_gap)
        return b, res, _unscale(b, res, objective)

    if not model.overlap:
        b, res, bw = run(None)
        return b, res, bw, 0
    # Start from the no-overlap optimum, then add each rank class's critical path until the
    # critical paths at the solution are all in the problem already.
    if start_bw is not None:
        bw = np.asarray(start_bw, dtype=float)
    else:
        _, _, bw, _ = _solve_model(workloads, net, cost, cons, objective, replace(model, overlap=False), rel_gap)
    cache: dict = {}
    paths: dict = {}
    total_time = 0.0
    b = res = None
    for _ in range(500):
        added = 0
        for wi, w in enumerate(workloads):
            for ci, rc in enumerate(w.demand.rank_classes):
                _, path = critical_path(rc, bw, net, model)
                key = (wi, ci, path)
                if key not in paths:
                    comp, terms = _path_terms(rc, path, net, model, cache)
                    paths[key] = (wi, comp, terms)
                    added += 1
        if not added and b is not None:
            break
        b, res, bw = run(list(paths.values()))
        total_time += res.solve_time_s
    assert b is not None and res is not None
    res = replace(res, solve_time_s=total_time)
    return b, res, bw, len(paths)


def _min_cost_start(workloads, net, cost, cons: Constraints, model):
    """A function giving a strictly feasible start for min-cost: the fastest design under the
    same constraints, whose time must beat the target (else the target is infeasible)."""
    if cons.time_target_ns is None or cons.time_target_ns <= 0:
        raise LibraError("objective min-cost needs a time target > 0: pass --time-target NS")
    fast_cons = Constraints(cons.total_bw_gbps, cons.total_bw_is_upper_bound, cons.budget_usd, None, cons.linear)
    fb = _build(workloads, net, cost, fast_cons, "perf", replace(model, overlap=False))
    p = fb.problem
    used = np.flatnonzero(p.A[:, :fb.D].max(axis=0) > 0)
    if unbounded_coordinates(p, used):
        # Unbounded bandwidth: cap it far above any sensible design just to find a start.
        cap = 1e6 * fb.b0
        capped = tuple(LinearConstraint(tuple(1.0 if i == j else 0.0 for i in range(fb.D)), "<=", cap, "cap")
                       for j in used)
        fast_cons = Constraints(cons.total_bw_gbps, cons.total_bw_is_upper_bound, cons.budget_usd, None,
                                cons.linear + capped)
    fast = optimize(workloads, net, cost, objective="perf", constraints=fast_cons, model=model, rel_gap=1e-6,
                    baselines=False)
    if fast.best.time_ns >= cons.time_target_ns:
        raise LibraError(f"time target {cons.time_target_ns:.6g} ns is infeasible: the fastest design under these "
                         f"constraints takes {fast.best.time_ns:.6g} ns; raise --time-target or relax constraints")
    bw0 = np.array(fast.bw_gbps)
    if fast_cons is not None and any(lc.text == "cap" for lc in fast_cons.linear):
        # The capped fastest design is absurdly fast and expensive; shrink it toward the target
        # (time and linear constraints checked strictly) so the barrier starts well scaled.
        goal = cons.time_target_ns - 0.25 * (cons.time_target_ns - fast.best.time_ns)
        lo, hi = 1e-12, 1.0
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            x = np.zeros(fb.problem.n)
            x[:fb.D] = bw0 * mid / fb.b0
            ok = np.all(fb.problem.G[:, :fb.D] @ x[:fb.D] < fb.problem.h) and \
                evaluate(workloads, net, cost, bw0 * mid, Constraints(), model).time_ns <= goal
            lo, hi = (lo, mid) if ok else (mid, hi)
            if hi / lo < 1 + 1e-6:
                break
        bw0 = bw0 * hi

    def start_for(b: _Built) -> np.ndarray:
        start = np.zeros(b.problem.n)
        start[:b.D] = bw0 / b.b0
        # Epigraph coordinates start at the workloads' times at the fast design (below the target).
        tv = term_values(b.problem, start)
        cls_vals = np.bincount(b.problem.term_class, weights=b.problem.w * tv) + b.problem.class_e
        zmax = np.full(b.problem.n, -np.inf)
        np.maximum.at(zmax, b.problem.class_z, cls_vals)
        zs = np.unique(b.problem.class_z)
        start[zs] = zmax[zs]
        slack = cons.time_target_ns / b.t0 - float(b.problem.G[-1] @ start)
        start[b.D:] += 0.5 * slack / max(1e-300, float(np.sum(b.problem.G[-1, b.D:])))
        return start

    return start_for, bw0


def _with_baselines(out: OptimizeResult, workloads, net, cost, cons, model) -> OptimizeResult:
    bw = np.array(out.bw_gbps)
    total = float(bw.sum())
    D = net.num_dims
    traffic = np.zeros(D)
    for w in workloads:
        for rc in w.demand.rank_classes:
            for c in rc.collectives:
                traffic += w.weight * c.count * np.array(c.traffic_bytes) * rc.num_ranks
    equal = np.full(D, total / D)
    if traffic.sum() > 0:
        prop = np.maximum(traffic / traffic.sum() * total, 1e-9 * total)
    else:
        prop = equal
    base = {
        "EqualBW": evaluate(workloads, net, cost, equal, cons, model),
        "TrafficProportional": evaluate(workloads, net, cost, prop, cons, model),
    }
    return OptimizeResult(**{**out.__dict__, "baselines": base})


def pareto(workloads: Sequence[Workload], net: Network, cost: CostModel, budgets_usd: Sequence[float], *,
           constraints: Constraints = Constraints(), model: TimeModel = LIBRA) -> list[OptimizeResult]:
    """The fastest design for each cost budget: points of the time-versus-cost frontier."""
    out = []
    for bud in budgets_usd:
        cons = Constraints(constraints.total_bw_gbps, constraints.total_bw_is_upper_bound, bud, None,
                           constraints.linear)
        out.append(optimize(workloads, net, cost, objective="perf", constraints=cons, model=model, baselines=False))
    return out
