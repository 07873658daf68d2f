"""LIBRA bandwidth optimization: objectives, constraints, exact solve, certificate and baselines.

Objectives (T = weighted sum over workloads of the slowest rank class's time, c = network cost):

``perf``            minimize T(B)
``perf-per-cost``   minimize T(B) * c(B), made convex by the Charnes-Cooper change of variables
                    s = 1 / c(B), y = s B: T c = sum C_q / s + D(y) with c(y) = 1, A B <= b -> A y <= b s
``min-cost``        minimize c(B) subject to T(B) <= a time target
``min-energy``      minimize the energy of a step, (base + idle . B) T(B) + K (energy.py): Charnes-
                    Cooper as for perf-per-cost with s = 1 / (base + idle . B)
``perf-per-watt``   minimize T(B) * peak cluster power (base + active . B): throughput per watt
                    of the power envelope (per watt of *average* power it is 1 / energy: min-energy)
``min-tco``         minimize the total cost of a run: capital amortized over the cluster's lifetime
                    + electricity, T(B) x M(B) + constant (tco.py), the same way

Constraints: total bandwidth (equality or upper bound), cost budget, per-dimension bounds from the
network file, and linear constraints from text (constraints.py).
"""

from __future__ import annotations

import math
from operator import attrgetter
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
from scipy.optimize import linprog

from .constraints import LinearConstraint
from ..model.cost import CostModel
from ..errors import InfeasibleError, LibraError, TargetUnreachable
from ..model.network import Network
from ..timing.predict import critical_path_nodes, predict
from .energy import J_PER_NJ
from .energy_cap import capped, capped_base, objective_multiplier, over_cap
from ..model.power import PowerModel
from .tco import TcoSettings
from .problem import FRACTIONAL, OBJECTIVES, Constraints, ScaledProblem, Workload, build_problem, linear_rows, unscale
from .terms import item_terms, node_path_terms
from . import bounded
from .refine import bounded_message, refine
from .solver import solve, term_values, unbounded_coordinates
from ..timing.model import LIBRA, TimeModel, demand_time
from ..timing.rows import column

MAX_PATH_ROUNDS = 500     # rounds of critical-path generation before giving up (not converged)

__all__ = ["OBJECTIVES", "Constraints", "Evaluation", "OptimizeResult", "Workload", "evaluate", "optimize", "pareto"]


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
    fun: float                  # objective value in its unit (ns, ns*USD, USD, J for min-energy and perf-per-watt, USD per run for min-tco)
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
        if model.overlap and model.replay is not None:
            total = model.replay.time_ns(bw)
            compute = model.replay.floor_ns
        elif model.overlap:
            # The slowest class of the replay; communication is what its compute does not hide.
            p = predict(w.demand, bw, net, model)
            slowest = max(range(len(p.class_times_ns)), key=p.class_times_ns.__getitem__)
            total, compute = p.time_ns, w.demand.rank_classes[slowest].compute_time_ns
        else:
            br = demand_time(w.demand, bw, net, model)
            total, compute = br.total_ns, br.compute_ns
        t += w.weight * total
        comp += w.weight * compute
        comm += w.weight * (total - compute)
    c = cost.network_cost_usd(net, bw)
    return Evaluation(bw, t, comp, comm, c, _feasible(bw, net, constraints, t, c))


def _feasible(bw, net, cons: Constraints, t: float, c: float, tol: float = 1e-6) -> bool:
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


def optimize(workloads: Sequence[Workload], net: Network, cost: CostModel, *, objective: str = "perf",
             constraints: Constraints = Constraints(), model: TimeModel = LIBRA, rel_gap: float = 1e-9,
             baselines: bool = True, max_path_rounds: int = MAX_PATH_ROUNDS,
             power: PowerModel | None = None, tco: TcoSettings | None = None) -> OptimizeResult:
    """Find the bandwidth per dimension that minimizes the objective under the constraints.

    With ``model.overlap`` the time of a rank is its longest dependency path (compute and
    communication overlap); that time is still convex in B, and the solver adds critical paths
    until the one at the solution is already among them, which proves the optimum.

    Raises
    ------
    LibraError
        Infeasible problems, problems without a minimizer (bounded.py), bad weights, a demand for
        another network shape.
    """
    if constraints.energy_max_j is not None or constraints.tco_max_usd is not None:
        out = capped(optimize, workloads, net, cost, objective, constraints, model=model, rel_gap=rel_gap,
                     max_path_rounds=max_path_rounds, power=power, tco=tco)
        if baselines:
            out = _with_baselines(out, workloads, net, cost, capped_base(constraints), model)
            over = lambda e: over_cap(workloads, net, cost, constraints, power, tco, e.bw_gbps, e.time_ns)
            out = replace(out, baselines={k: replace(e, feasible=e.feasible and not over(e))
                                          for k, e in out.baselines.items()})
        return out
    start_for, start_bw = None, None
    multiplier, const_j = objective_multiplier(workloads, net, power, objective, cost, tco)
    try:
        if objective == "min-cost":
            start_for, start_bw = _min_cost_start(workloads, net, cost, constraints, model)
        b, res, bw, n_paths = _solve_model(workloads, net, cost, constraints, objective, model, rel_gap, start_for,
                                           start_bw, max_path_rounds, multiplier=multiplier)
    except TargetUnreachable:
        raise        # the constraints hold: nothing to explain
    except InfeasibleError as e:
        raise InfeasibleError(_explain_infeasible(net, cost, constraints) or str(e)) from None
    best = evaluate(workloads, net, cost, bw, constraints, model)
    unit = {"perf": b.t0, "perf-per-cost": b.t0 * b.c0}.get(objective, b.c0)
    if objective in ("min-energy", "perf-per-watt", "min-tco"):
        # W x ns = nJ (min-tco: USD/s x ns x run steps); plus what does not depend on B
        scale = J_PER_NJ * (tco.run_steps if objective == "min-tco" else 1.0)
        unit = b.t0 * b.d0 * scale

    def value(ev: Evaluation) -> float:
        if objective in ("min-energy", "perf-per-watt", "min-tco"):
            return (multiplier[0] + float(np.dot(multiplier[1], ev.bw_gbps))) * ev.time_ns * scale + const_j
        return {"perf": ev.time_ns, "perf-per-cost": ev.time_cost_ns_usd}.get(objective, ev.cost_usd)

    fun = value(best)
    dual = res.dual_bound * unit + const_j
    # relative to the problem's own scale when the optimum is 0 (a trace with no time at all)
    rel = (fun - dual) / max(abs(fun), 1e-9 * abs(unit), 1e-300) if math.isfinite(dual) else math.inf
    bounded_only = model.system is not None and res.success and not rel <= max(10 * rel_gap, 1e-9)
    if bounded_only:
        # The rows bound some collectives' time from below (timing/system_flow.py): the solver's
        # optimum is a lower bound, its design a start for a search on the replayed time.
        E = linear_rows(net, cost, constraints, 1.0, 1.0)[2]
        best, fun = refine(lambda x: evaluate(workloads, net, cost, x, constraints, model),
                           lambda ev: value(ev) if ev.feasible else math.inf, bw, np.asarray(E, dtype=float))
        rel = (fun - dual) / max(abs(fun), 1e-300) if math.isfinite(fun) else math.inf
    msg = res.message
    if res.success and msg.startswith("optimal to round-off"):
        msg = f"optimal to round-off: relative duality gap {rel:.1e} (asked {rel_gap:.0e})"
    elif not res.success and msg.startswith("not certified"):
        # The same relative gap as the result's rel_gap (the solver's figure is on its scaled problem).
        msg = (f"not certified: the relative duality gap {rel:.1e} stayed above the tolerance {rel_gap:.0e} "
               "(Newton step limit or round-off)")
    success, status = res.success, res.status
    if bounded_only:
        success, status = False, 3
        msg = bounded_message(rel)
    msg += f"; {n_paths} dependency paths" if model.overlap else ""
    out = OptimizeResult(objective, best, fun, dual, rel, success, status, msg, res.solve_time_s,
                         res.newton_steps, b.num_collectives, b.num_terms)
    if baselines:
        out = _with_baselines(out, workloads, net, cost, constraints, model)
    return out


def _explain_infeasible(net: Network, cost: CostModel, cons: Constraints) -> str | None:
    """Name the constraint whose removal makes the rest feasible, if there is one."""
    named = [(lc.text if lc.text.startswith("--") else f"--constraint {lc.text!r}", replace(cons, linear=cons.linear[:i] + cons.linear[i + 1:]))
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
    G, h, E, f, _ = linear_rows(net, cost, cons, 1.0, 1.0)
    res = linprog(np.zeros(net.num_dims), A_ub=G if G.size else None, b_ub=h if G.size else None,
                  A_eq=E if E.size else None, b_eq=f if E.size else None,
                  bounds=[(None, None)] * net.num_dims, method="highs")
    return res.status == 0


def _solve_model(workloads, net, cost, cons, objective, model, rel_gap, start_for=None, start_bw=None,
                 max_rounds=MAX_PATH_ROUNDS, cache=None, seed=False, multiplier=None):
    """(built problem, solver result, bandwidths, number of dependency paths used).

    ``start_bw``: bandwidths whose critical paths seed the path generation (a min-cost start
    meets the target only with overlap); by default the no-overlap optimum seeds it. ``cache``
    holds the scaled rows of the demands, shared by the no-overlap start and the paths.
    ``seed``: only a starting point is wanted, so a problem without a minimizer gives its
    capped solution instead of the refusal."""
    cache = {} if cache is None else cache
    # The free coordinates (decided on the first build, see bounded.py), the cap in use and
    # whether the last solve still felt it.
    state: dict = {}
    floor = 0.0
    if start_bw is not None:
        # min-cost's start must fit under the caps
        floor = 2.0 * float(np.max(start_bw))

    def build(paths, caps=()):
        c = replace(cons, linear=cons.linear + tuple(caps))
        return build_problem(workloads, net, cost, c, objective, model, paths, cache, multiplier)

    def guesses(b):
        return [start_for(b)] if start_for else b.guesses

    def run(paths):
        b = build(paths)
        if "free" not in state:
            if objective in FRACTIONAL and bounded.cost_can_vanish(b):
                raise bounded.vanishing_cost(objective)
            state["free"], state["power"] = bounded.free_coordinates(b), 1
            # Paths are a part of the graph's: only the classes themselves prove it.
            if (state["free"] and paths is None and objective != "min-cost"
                    and bounded.falls_everywhere(b.problem, state["free"])):
                if not seed:
                    raise bounded.no_minimizer(net, objective, state["free"])
                # a start for the dependency paths: any cap will do
                b = build(paths, bounded.caps(b, state["free"], 2, floor))
                res = solve(b.problem, guesses(b), rel_gap=rel_gap)
                return b, res, unscale(b, res, objective)
        if not state["free"]:
            res = solve(b.problem, guesses(b), rel_gap=rel_gap)
            return b, res, unscale(b, res, objective)
        b, res, power, settled = bounded.solve_capped(build, b, paths, state["free"], state["power"], guesses, rel_gap,
                                                      floor)
        # The next round of paths starts from the cap that settled; after none did, from the
        # smallest again (the paths found at the largest cap may let a small one settle).
        state["power"], state["open"] = (power if settled else 1), not settled
        if not settled and paths is None and not seed:
            raise bounded.no_minimizer(net, objective, state["free"])
        return b, res, unscale(b, res, objective)

    if not model.overlap:
        b, res, bw = run(None)
        return b, res, bw, 0
    # Start from the no-overlap optimum, then add each rank class's critical path until the
    # critical paths at the solution are all in the problem already.
    if start_bw is not None:
        bw = np.asarray(start_bw, dtype=float)
    else:
        _, _, bw, _ = _solve_model(workloads, net, cost, cons, objective, replace(model, overlap=False), rel_gap,
                                   cache=cache, seed=True, multiplier=multiplier)
    paths: dict = {}
    total_time = 0.0
    steps = 0
    b = res = None
    for _ in range(max_rounds + 1):
        added = 0
        for wi, w in enumerate(workloads):
            if model.replay is not None:
                for key, comp, items, counts in model.replay.critical_paths(bw):
                    if (wi, key) not in paths:
                        paths[(wi, key)] = (wi, comp, item_terms(w.demand, items, counts, net, model, cache))
                        added += 1
                continue
            # As global nodes of the replay's graph (int64 arrays): the same paths as (class, node)
            # pairs, cheaper to walk, key and merge.
            for _, path in critical_path_nodes(w.demand, bw, net, model):
                key = (wi, path.tobytes())
                if key not in paths:
                    comp, terms = node_path_terms(w.demand, path, net, model, cache)
                    paths[key] = (wi, comp, terms)
                    added += 1
        if not added and b is not None:
            break
        if steps == max_rounds:
            # The critical paths at the last design are not all in the problem: its optimum is
            # only a lower bound, and the design is not proven optimal.
            assert res is not None
            res = replace(res, success=False, status=1,
                          message=f"not converged: the dependency-path generation stopped after {max_rounds} "
                                  f"rounds with {added} critical paths still missing")
            break
        b, res, bw = run(list(paths.values()))
        n_solved = len(paths)
        total_time += res.solve_time_s
        steps += 1
    assert b is not None and res is not None
    if state.get("open"):
        # Every critical path at the largest cap is in the problem, and the free rows still set
        # the time there.
        raise bounded.no_minimizer(net, objective, state["free"])
    res = replace(res, solve_time_s=total_time)
    return b, res, bw, n_solved


def _min_cost_start(workloads, net, cost, cons: Constraints, model):
    """A function giving a strictly feasible start for min-cost: the fastest design under the
    same constraints, whose time must beat the target (else the target is infeasible)."""
    if cons.time_target_ns is None or cons.time_target_ns <= 0:
        raise LibraError("objective min-cost needs a time target > 0: pass --time-target NS")
    fast_cons = Constraints(cons.total_bw_gbps, cons.total_bw_is_upper_bound, cons.budget_usd, None, cons.linear)
    fb = build_problem(workloads, net, cost, fast_cons, "perf", replace(model, overlap=False))
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
        raise TargetUnreachable(f"time target {cons.time_target_ns:.6g} ns is infeasible: the fastest design under these "
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

    def start_for(b: ScaledProblem) -> np.ndarray:
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
    traffic = baseline_traffic(workloads, D)
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


def baseline_traffic(workloads: Sequence[Workload], D: int) -> np.ndarray:
    """Bytes per dimension of all workloads (weight x count x traffic x ranks of every collective),
    accumulated collective by collective in order (cumsum is sequential), so the proportional
    split is the one a loop over the collectives gives, to the last bit."""
    parts = [np.zeros((1, D))]
    for w in workloads:
        for rc in w.demand.rank_classes:
            n = len(rc.collectives)
            if not n:
                continue
            counts = np.fromiter(map(attrgetter("count"), rc.collectives), float, count=n)
            traffic = column(rc.collectives, "traffic_bytes", float, D)
            parts.append((w.weight * counts)[:, None] * traffic * rc.num_ranks)
    return np.cumsum(np.concatenate(parts), axis=0)[-1]


def pareto(workloads: Sequence[Workload], net: Network, cost: CostModel, budgets_usd: Sequence[float], *,
           constraints: Constraints = Constraints(), model: TimeModel = LIBRA, versus: str = "cost",
           power: PowerModel | None = None, tco: TcoSettings | None = None) -> list[OptimizeResult]:
    """The fastest design for each budget: points of the time-versus-cost frontier, or with
    ``versus`` "energy" (budgets in J per step) or "tco" (USD per run) of time versus energy or TCO."""
    out = []
    field = {"cost": "budget_usd", "energy": "energy_max_j", "tco": "tco_max_usd"}[versus]
    for bud in budgets_usd:
        # the other caps given (--budget, --energy-max, --tco-max) still hold; the time target does not apply
        cons = replace(constraints, time_target_ns=None, **{field: bud})
        out.append(optimize(workloads, net, cost, objective="perf", constraints=cons, model=model, baselines=False,
                            power=power, tco=tco))
    return out
