"""Property test: random small problems, every objective x every constraint kind, against brute force.

The reference is independent of the problem build and the solver: it evaluates the time model's
rows (timing.collective_rows) and the cost prices directly, on a dense grid over the whole
feasible box followed by a zooming local grid search, and checks every constraint itself. Each
example asserts: a feasible problem with a minimizer is never refused; the optimizer's value is
not above the brute-force minimum (beyond the search's resolution) and no brute-force point beats
the certified lower bound; an infeasible problem is refused with the right message.

The number of examples per (objective, kind) is small by default (a few seconds in all); set
LIBRA_PROPERTY_EXAMPLES=200 for a long run. Examples are derandomized (the same on every run).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libra_astra.optimize.constraints import parse_constraint
from libra_astra.model.cost import cost_from_dict
from libra_astra.demand.types import Demand, RankClass, make_collective
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict
from libra_astra.optimize.optimizer import Constraints, Workload, evaluate, optimize
from libra_astra.timing.model import LIBRA, TimeModel, collective_rows

EXAMPLES = int(os.environ.get("LIBRA_PROPERTY_EXAMPLES", "3"))
MIB = 2 ** 20
TYPES = ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL")
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
PRICES = {"A": {"link": 2.0}, "B": {"link": 5.0, "switch": 3.0}, "C": {"link": 10.0, "switch": 20.0, "nic": 30.0}}
COST = cost_from_dict({"name": "p", "unit_prices_usd_per_gbps": PRICES})
EQUAL_COST = cost_from_dict({"name": "eq", "unit_prices_usd_per_gbps": {k: {"link": 4.0} for k in PRICES}})
KINDS = ("total", "total_max", "bounds", "budget", "linear", "flat", "infeasible")
OBJECTIVES = ("perf", "perf-per-cost", "min-cost")


# ------------------------------------------------------------------ the reference


class Reference:
    """Time, cost and feasibility of many bandwidth vectors at once, from the model's rows."""

    def __init__(self, workloads, net, cost, model, linear, total, total_max, budget):
        self.net, self.D = net, net.num_dims
        self.price = np.array(cost.price_usd_per_gbps(net))
        self.linear = linear                  # [(coeffs, op, rhs)]
        self.total, self.total_max, self.budget = total, total_max, budget
        self.parts = []                       # per workload: [(compute, A, g, counts, starts)]
        for w in workloads:
            classes = []
            for rc in w.demand.rank_classes:
                rows = [collective_rows(c, net, model) for c in rc.collectives]
                A = np.vstack([a for a, _ in rows])
                g = np.concatenate([b for _, b in rows])
                starts = np.cumsum([0] + [a.shape[0] for a, _ in rows[:-1]])
                counts = np.array([c.count for c in rc.collectives])
                classes.append((rc.compute_time_ns, A, g, counts, starts))
            self.parts.append((w.weight, classes))

    def time(self, B: np.ndarray) -> np.ndarray:
        inv = 1.0 / B                                          # (P, D)
        out = np.zeros(B.shape[0])
        for weight, classes in self.parts:
            worst = np.full(B.shape[0], -np.inf)
            for comp, A, g, counts, starts in classes:
                vals = inv @ A.T + g                           # (P, rows)
                per = np.maximum.reduceat(vals, starts, axis=1)
                worst = np.maximum(worst, comp + per @ counts)
            out += weight * worst
        return out

    def feasible(self, B: np.ndarray, tol: float = 0.0) -> np.ndarray:
        ok = np.all(B > 0, axis=1)
        for j, d in enumerate(self.net.dims):
            ok &= B[:, j] >= d.bw_min_gbps * (1 - tol)
            if d.bw_max_gbps is not None:
                ok &= B[:, j] <= d.bw_max_gbps * (1 + tol)
        s = B.sum(axis=1)
        if self.total_max is not None:
            ok &= s <= self.total_max * (1 + tol)
        if self.budget is not None:
            ok &= B @ self.price <= self.budget * (1 + tol)
        for coeffs, op, rhs in self.linear:
            lhs = B @ np.array(coeffs)
            slack = tol * max(1.0, abs(rhs))
            ok &= (lhs <= rhs + slack) if op == "<=" else (lhs >= rhs - slack)
        return ok


def brute_force(ref: Reference, objective: str, lo, hi, target=None, extra=None, value=None) -> tuple[float, np.ndarray]:
    """(minimum, its point) over the feasible set: a dense grid over the box [lo, hi] (with the
    equality total, over the first D-1 coordinates) plus the ``extra`` point, then a zooming grid
    around the best point. ``value(B, t)``: another objective of the points and their times."""
    D = ref.D
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    free = D - 1 if ref.total is not None else D

    def full(X):
        if ref.total is None:
            return X
        return np.hstack([X, ref.total - X.sum(axis=1, keepdims=True)])

    def f(X):
        B = full(X)
        ok = ref.feasible(B) & (B[:, -1] >= lo[-1]) & (B[:, -1] <= hi[-1])
        val = np.full(X.shape[0], np.inf)
        if not ok.any():
            return val
        Bo = B[ok]
        t = ref.time(Bo)
        c = Bo @ ref.price
        if value is not None:
            v = value(Bo, t)
        elif objective == "perf":
            v = t
        elif objective == "perf-per-cost":
            v = t * c
        else:
            v = np.where(t <= target, c, np.inf)
        val[ok] = v
        return val

    def grid(center, half, n):
        axes = [np.linspace(max(lo[i], center[i] - half[i]), min(hi[i], center[i] + half[i]), n)
                for i in range(free)]
        return np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1)

    n0 = {1: 4001, 2: 201, 3: 41}[free]
    centre, half = (lo[:free] + hi[:free]) / 2, (hi[:free] - lo[:free]) / 2
    X = grid(centre, half, n0)
    if extra is not None:
        X = np.vstack([X, extra[None, :free]])
    vals = f(X)
    best = int(np.argmin(vals))
    if not math.isfinite(vals[best]):
        return math.inf, X[best]
    x, fx = X[best], float(vals[best])
    half = 2.0 * (hi[:free] - lo[:free]) / (n0 - 1)
    for _ in range(400):
        X = grid(x, half, 9)
        vals = f(X)
        i = int(np.argmin(vals))
        if vals[i] < fx:
            moved = X[i]
            at_edge = np.any(np.abs(moved - x) >= half * 0.999)
            x, fx = moved, float(vals[i])
            if at_edge:
                continue                      # keep the window: the minimum may lie further on
        half = half * 0.5
        if np.all(half <= 1e-12 * np.maximum(1.0, np.abs(x))):
            break
    return fx, full(x[None, :])[0]


# ------------------------------------------------------------------ random problems


@st.composite
def problems(draw, objective: str, kind: str):
    D = draw(st.integers(2, 3))
    npus = [draw(st.integers(2, 4)) for _ in range(D)]
    dims = [{"name": f"d{i}", "topology": draw(st.sampled_from(TOPOLOGIES)), "npus": npus[i],
             "latency_ns": draw(st.sampled_from([0.0, 100.0, 700.0])), "cost_class": "ABC"[i]} for i in range(D)]
    total = float(draw(st.sampled_from([100.0, 300.0, 1000.0])))
    # Flat faces: perf with uncapped dimensions that stop mattering (LIBRA's max, every collective
    # crosses capped dimension 0); min-cost with equal prices under an equality total (every
    # design costs the same); perf-per-cost the same way.
    flat = kind == "flat"
    if kind == "bounds" or (flat and objective == "perf"):
        for i, d in enumerate(dims):
            if flat and i > 0:
                continue
            d["bw_max_gbps"] = total / D * draw(st.sampled_from([0.5, 1.0, 2.0]))
            if objective != "perf" or draw(st.booleans()):
                d["bw_min_gbps"] = d["bw_max_gbps"] * draw(st.sampled_from([0.01, 0.2, 0.5]))
    net = network_from_dict({"name": "r", "dimensions": dims})
    model = LIBRA if flat and objective == "perf" else draw(st.sampled_from(
        [LIBRA, TimeModel("pipelined", splits=1), TimeModel("pipelined", splits=4)]))

    def collective():
        parts = [draw(st.sampled_from([1, n])) for n in npus]
        if flat and objective == "perf":
            parts[0] = npus[0]
        if all(p == 1 for p in parts):
            i = draw(st.integers(0, D - 1))
            parts[i] = npus[i]
        return make_collective(draw(st.sampled_from(TYPES)), draw(st.sampled_from([1, 4, 16, 64])) * MIB, parts,
                               count=float(draw(st.integers(1, 3))), net=net)

    n_work = draw(st.integers(1, 2))
    workloads = []
    for wi in range(n_work):
        classes = []
        for _ in range(draw(st.integers(1, 2))):
            colls = tuple(collective() for _ in range(draw(st.integers(1, 3))))
            classes.append(RankClass(float(draw(st.sampled_from([0.0, 1e5, 5e6]))), colls, num_ranks=2))
        workloads.append(Workload(Demand(f"w{wi}", tuple(npus), tuple(classes)),
                                  weight=float(draw(st.sampled_from([1.0, 0.5, 3.0])))))
    cost = EQUAL_COST if flat and objective != "perf" else COST
    price = np.array(cost.price_usd_per_gbps(net))
    lin_text = []
    cons = dict(total_bw_gbps=None, total_bw_is_upper_bound=False, budget_usd=None)
    if kind in ("total", "linear", "infeasible") or (flat and objective != "perf"):
        cons["total_bw_gbps"] = total
    elif kind == "total_max":
        cons.update(total_bw_gbps=total, total_bw_is_upper_bound=True)
    elif kind == "budget":
        cons["budget_usd"] = float(price.sum() * total / D)
    if kind in ("total_max", "budget") and objective == "perf-per-cost":
        # Cost could shrink toward 0 without a floor: perf-per-cost needs lower bounds.
        lin_text += [f"bw[{i}] >= {total / D * 0.1:g}" for i in range(D)]
    if kind == "linear":
        a, b = draw(st.permutations(range(D)))[:2]
        lin_text.append(draw(st.sampled_from([f"bw[{a}] >= 2*bw[{b}]", f"bw[{a}] <= {total * 0.3:g}",
                                               f"bw[{a}] + bw[{b}] >= {total * 0.6:g}", f"bw[{a}] >= bw[{b}]"])))
    if kind == "infeasible":
        lin_text.append(f"bw[0] >= {total * 1.5:g}")
    linear = tuple(parse_constraint(t, net) for t in lin_text)
    raw_linear = [(lc.coeffs, lc.op, lc.rhs) for lc in linear]
    frac = draw(st.sampled_from([-0.05, 1e-3, 0.05, 0.3, 1.0, 3.0])) if objective == "min-cost" else None
    return dict(net=net, workloads=workloads, cost=cost, model=model, cons=cons, linear=linear,
                raw_linear=raw_linear, lin_text=lin_text, total=total, frac=frac)


def box(ref: Reference, net, total, budget, price, big: float):
    lo = np.array([max(d.bw_min_gbps, 1e-9 * total) for d in net.dims])
    hi = []
    for j, d in enumerate(net.dims):
        h = big
        if d.bw_max_gbps is not None:
            h = min(h, d.bw_max_gbps)
        if ref.total is not None or ref.total_max is not None:
            h = min(h, total)
        if budget is not None:
            h = min(h, budget / price[j])
        hi.append(h)
    return lo, np.array(hi)


def check(objective: str, kind: str, prob) -> None:
    net, workloads, cost, model, cons = prob["net"], prob["workloads"], prob["cost"], prob["model"], prob["cons"]
    total = prob["total"]
    price = np.array(cost.price_usd_per_gbps(net))
    eq = None if cons["total_bw_is_upper_bound"] else cons["total_bw_gbps"]
    tmax = cons["total_bw_gbps"] if cons["total_bw_is_upper_bound"] else None
    ref = Reference(workloads, net, cost, model, prob["raw_linear"], eq, tmax, cons["budget_usd"])
    lo, hi = box(ref, net, total, cons["budget_usd"], price, big=1e3 * total)
    constraints = Constraints(cons["total_bw_gbps"], cons["total_bw_is_upper_bound"], cons["budget_usd"], None,
                              prob["linear"])
    if kind == "infeasible":
        with pytest.raises(LibraError) as e:
            optimize(workloads, net, cost, objective=objective, baselines=False,
                     constraints=Constraints(**{**constraints.__dict__, "time_target_ns": 1e12}))
        assert str(e.value) == (f"the constraints are infeasible: --constraint {prob['lin_text'][-1]!r} or --total-bw "
                                "conflicts with the others (bounds in the network file included); relax it")
        return
    target = None
    if objective == "min-cost":
        # The slack of a target 0.1% above the fastest design is a sliver no grid hits: the search
        # starts from the fastest point it found.
        fastest, x_fast = brute_force(ref, "perf", lo, hi)
        target = fastest * (1 + prob["frac"])
        constraints = Constraints(**{**constraints.__dict__, "time_target_ns": target})
        if prob["frac"] < 0:
            with pytest.raises(LibraError, match=r"^time target .* ns is infeasible: the fastest design under these "
                                                 r"constraints takes .* ns; raise --time-target or relax constraints$"):
                optimize(workloads, net, cost, objective=objective, constraints=constraints, model=model,
                         baselines=False)
            return
    r = optimize(workloads, net, cost, objective=objective, constraints=constraints, model=model, baselines=False)
    assert r.success, r.message
    assert r.rel_gap <= 1e-8, r.message
    assert r.best.feasible
    assert f"{r.rel_gap:.1e}" in r.message or r.message.startswith("optimal: duality gap within tolerance")
    bf, _ = brute_force(ref, objective, lo, hi, target, x_fast if objective == "min-cost" else None)
    assert math.isfinite(bf)
    # Nothing the search finds beats the certified lower bound; the optimizer is at least as good
    # as the search (up to its resolution).
    assert bf >= r.dual_bound * (1 - 1e-9)
    assert r.fun <= bf * (1 + 1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_against_brute_force(objective, kind):
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(problems(objective, kind))
    def run(prob):
        check(objective, kind, prob)

    run()


# ------------------------------------------------------------------ dimensions nothing bounds

FREE_COST = cost_from_dict({"name": "f", "unit_prices_usd_per_gbps": {**PRICES, "Z": {}}})


def free_problem(seed: int, objective: str):
    """A random problem with some dimensions nothing bounds (free of charge for perf-per-cost,
    whose priced dimensions get lower bounds so the cost cannot vanish), 1-2 rank classes."""
    rng = np.random.default_rng(seed)
    D = int(rng.integers(2, 4))
    free = [j for j in range(D) if rng.random() < 0.5] or [int(rng.integers(D))]
    if objective == "perf-per-cost" and len(free) == D:
        free = free[1:]                   # a network that costs nothing has no time x cost to minimize
    dims = []
    for j in range(D):
        dim = {"name": f"d{j}", "topology": str(rng.choice(TOPOLOGIES)), "npus": 4,
               "latency_ns": float(rng.choice([0.0, 100.0, 500.0])), "cost_class": "ABC"[j]}
        if j in free:
            dim["cost_class"] = "Z" if objective == "perf-per-cost" else dim["cost_class"]
        else:
            dim["bw_max_gbps"] = float(rng.uniform(20, 200))
            dim["bw_min_gbps"] = 1.0
        dims.append(dim)
    net = network_from_dict({"name": "free", "dimensions": dims})
    n_classes = int(rng.integers(1, 3))
    size = net.npus_count // n_classes
    classes = []
    for q in range(n_classes):
        colls = []
        for _ in range(int(rng.integers(1, 4))):
            parts = tuple(int(rng.choice([1, 4])) for _ in range(D))
            parts = parts if any(p > 1 for p in parts) else (4,) * D
            colls.append(make_collective(TYPES[int(rng.integers(4))], float(2 ** rng.uniform(16, 30)), parts, net=net))
        classes.append(RankClass(float(10 ** rng.uniform(3, 7)), tuple(colls), size, tuple(range(q * size, (q + 1) * size))))
    model = (LIBRA, TimeModel("pipelined", splits=1), TimeModel("pipelined", splits=4))[int(rng.integers(3))]
    return net, [Workload(Demand("free", net.npus_per_dim, tuple(classes)))], model, free


@pytest.mark.parametrize("objective", ["perf", "perf-per-cost"])
@pytest.mark.parametrize("seed", range(4 * EXAMPLES))
def test_free_dimensions_no_minimizer_is_refused_and_a_minimizer_is_found(objective, seed):
    """Checked on the answer, with the models' own times: a solved problem's free dimensions no
    longer matter (doubling them leaves the time as it is, to the last bits: not merely inside the
    tolerance); a refused one still gains from cap 1e5 to cap 1e7 GB/s on them."""
    net, w, model, free = free_problem(seed, objective)
    try:
        r = optimize(w, net, FREE_COST, objective=objective, model=model, baselines=False)
    except LibraError as e:
        assert "has no minimizer" in str(e) and "\n" not in str(e)

        def capped(cap):
            cons = Constraints(linear=tuple(parse_constraint(f"bw[{j}] <= {cap:g}", net) for j in free))
            return optimize(w, net, FREE_COST, objective=objective, model=model, constraints=cons, baselines=False,
                            rel_gap=1e-11).fun
        assert capped(1e7) < capped(1e5) * (1 - 1e-11)
        return
    assert r.success and r.rel_gap <= 1e-8, r.message
    doubled = [2 * b if j in free else b for j, b in enumerate(r.bw_gbps)]
    assert evaluate(w, net, FREE_COST, doubled, model=model).time_ns == pytest.approx(r.best.time_ns, rel=1e-12, abs=0)
