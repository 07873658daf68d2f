"""The optimizer against closed forms, brute force and scipy: perf, perf-per-cost, min-cost, invariances, errors.

Every reference value here comes from evaluating the time and cost models directly (optimize.evaluate),
never from the solver, so a wrong problem build, a wrong unscaling or a false certificate all fail.
"""

import math

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

from libra_astra.optimize.constraints import parse_constraint
from libra_astra.model.cost import cost_from_dict
from libra_astra.demand.types import Demand, make_collective, scaled, single_class
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict
from libra_astra.optimize.optimizer import Constraints, Workload, evaluate, optimize, pareto
from libra_astra.timing.model import LIBRA, TimeModel

MIB = 2 ** 20
COST = cost_from_dict({"name": "t", "unit_prices_usd_per_gbps": {
    "A": {"link": 2.0}, "B": {"link": 5.0, "switch": 3.0}, "C": {"link": 10.0, "switch": 20.0, "nic": 30.0}}})
SUM1 = TimeModel("pipelined", splits=1)          # time = sum over dimensions: smooth in B


def net2(**dim1):
    return network_from_dict({"name": "n2", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 4, "latency_ns": 100, "cost_class": "A"},
        {"name": "sw", "topology": "Switch", "npus": 4, "latency_ns": 500, "cost_class": "C", **dim1}]})


def net3(**dim2):
    return network_from_dict({"name": "n3", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 4, "latency_ns": 100, "cost_class": "A"},
        {"name": "fc", "topology": "FullyConnected", "npus": 4, "latency_ns": 300, "cost_class": "B"},
        {"name": "sw", "topology": "Switch", "npus": 4, "latency_ns": 1000, "cost_class": "C", **dim2}]})


NET2, NET3 = net2(), net3()


def mix2(net=NET2, compute=5e6):
    return [Workload(single_class("mix2", net.npus_per_dim, compute, [
        make_collective("ALL_REDUCE", 64 * MIB, (4, 4), count=2, net=net),
        make_collective("ALL_REDUCE", 16 * MIB, (1, 4), count=3, net=net),
        make_collective("ALL_TO_ALL", 8 * MIB, (4, 1), net=net),
        make_collective("REDUCE_SCATTER", 32 * MIB, (4, 4), net=net)]))]


def mix3(net=NET3, compute=2e6):
    return [Workload(single_class("mix3", net.npus_per_dim, compute, [
        make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 4), net=net),
        make_collective("ALL_GATHER", 1 * MIB, (4, 4, 1), count=4, net=net),
        make_collective("ALL_REDUCE", 16 * MIB, (1, 1, 4), count=2, net=net),
        make_collective("ALL_TO_ALL", 4 * MIB, (1, 4, 1), net=net)]))]


def value(objective, w, net, bw, model):
    e = evaluate(w, net, COST, bw, Constraints(), model)
    return {"perf": e.time_ns, "perf-per-cost": e.time_cost_ns_usd, "min-cost": e.cost_usd}[objective]


def certified(r, tol=1e-8):
    assert r.success, r.message
    assert r.dual_bound <= r.fun
    assert r.rel_gap <= tol
    assert r.best.feasible
    return r


def brent(f, lo, hi):
    """Minimum of a convex function of one variable on [lo, hi]."""
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12 * (hi - lo), "maxiter": 500})
    return float(res.fun), float(res.x)


def nested_brent(f, lo0, hi0, lo1_of, hi1_of):
    """min over (u, w) of a convex f: the partial minimum over w is convex in u as well."""
    inner = lambda u: brent(lambda w: f(u, w), lo1_of(u), hi1_of(u))[0]
    return brent(inner, lo0, hi0)[0]


# ------------------------------------------------------------------ closed forms


def test_single_all_reduce_equalizes_dimension_times():
    c = make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 4), count=3, net=NET3)
    w = [Workload(single_class("ar", NET3.npus_per_dim, 1e6, [c]))]
    r = certified(optimize(w, NET3, COST, constraints=Constraints(300.0)))
    tr = np.array(c.traffic_bytes)
    # LIBRA's max: every dimension takes Sigma traffic / total, B_d proportional to traffic_d.
    assert r.bw_gbps == pytest.approx(300.0 * tr / tr.sum(), rel=1e-6)
    times = tr / np.array(r.bw_gbps)
    assert times == pytest.approx(np.full(3, tr.sum() / 300.0), rel=1e-6)
    assert r.fun == pytest.approx(1e6 + 3 * tr.sum() / 300.0, rel=1e-9)
    assert r.best.time_ns == pytest.approx(r.fun, rel=1e-12)


def test_sum_model_gives_square_root_split():
    c = make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 4), net=net3())
    net = network_from_dict({**net3().to_dict(), "dimensions": [{**d, "latency_ns": 0} for d in net3().to_dict()["dimensions"]]})
    w = [Workload(single_class("ar", net.npus_per_dim, 0.0, [c]))]
    r = certified(optimize(w, net, COST, constraints=Constraints(300.0), model=SUM1))
    root = np.sqrt(c.traffic_bytes)
    assert r.bw_gbps == pytest.approx(300.0 * root / root.sum(), rel=1e-6)
    assert r.fun == pytest.approx(root.sum() ** 2 / 300.0, rel=1e-9)


@pytest.mark.parametrize("compute", [4e7, 1e3])
def test_perf_per_cost_closed_form(compute):
    # time = C + tau, tau = max_d tr_d / B_d; for a given tau the cheapest split with sum B = T puts
    # tr_d / tau on every dimension and the rest on the cheapest: cost = P + a / tau with
    # P = p_min T and a = sum (p_d - p_min) tr_d. (C + tau)(P + a / tau) is smallest at
    # tau* = sqrt(C a / P) unless tau* < tau_min = sum tr / T (then traffic-proportional).
    c = make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 4), net=NET3)
    w = [Workload(single_class("ar", NET3.npus_per_dim, compute, [c]))]
    T = 300.0
    tr = np.array(c.traffic_bytes)
    p = np.array(COST.price_usd_per_gbps(NET3))
    P, a = p.min() * T, float(((p - p.min()) * tr).sum())
    tau = max(math.sqrt(compute * a / P), tr.sum() / T)
    f_star = (compute + tau) * (P + a / tau)
    r = certified(optimize(w, NET3, COST, objective="perf-per-cost", constraints=Constraints(T)))
    assert r.fun == pytest.approx(f_star, rel=1e-9)
    assert r.best.time_cost_ns_usd == pytest.approx(f_star, rel=1e-9)
    cheapest = int(np.argmin(p))
    expect = tr / tau
    expect[cheapest] += T - expect.sum()
    assert r.bw_gbps == pytest.approx(expect, rel=1e-5)
    if compute > 1e6:
        assert tau > tr.sum() / T                  # the interior case, not traffic-proportional


# ------------------------------------------------------------------ brute force, two dimensions


@pytest.mark.parametrize("model", [LIBRA, TimeModel("pipelined", splits=4)])
def test_two_dims_total_equality_against_grid_and_brent(model):
    w, T = mix2(), 200.0
    r = certified(optimize(w, NET2, COST, constraints=Constraints(T), model=model))
    f = lambda b0: value("perf", w, NET2, [b0, T - b0], model)
    grid = min(f(b0) for b0 in np.linspace(T / 400, T - T / 400, 399))
    best, _ = brent(f, 1e-6, T - 1e-6)
    assert r.fun <= grid * (1 + 1e-12) and grid >= r.dual_bound
    assert grid <= r.fun * (1 + 1e-3)               # the grid resolves the optimum
    assert r.fun == pytest.approx(best, rel=1e-8)
    assert sum(r.bw_gbps) == pytest.approx(T, rel=1e-9)


def test_two_dims_total_inequality_spends_everything_on_perf():
    w, T = mix2(), 200.0
    eq = certified(optimize(w, NET2, COST, constraints=Constraints(T)))
    le = certified(optimize(w, NET2, COST, constraints=Constraints(T, total_bw_is_upper_bound=True)))
    # 2-D grid under the bound: nothing beats the optimum, and the best points lie on the boundary.
    pts = [(b0, b1) for b0 in np.linspace(2, T, 60) for b1 in np.linspace(2, T, 60) if b0 + b1 <= T]
    vals = [value("perf", w, NET2, p, LIBRA) for p in pts]
    assert min(vals) >= le.dual_bound
    assert sum(pts[int(np.argmin(vals))]) >= T - 7
    assert le.fun == pytest.approx(eq.fun, rel=1e-8)
    assert sum(le.bw_gbps) == pytest.approx(T, rel=1e-7)


def test_two_dims_bounds_from_the_network_file():
    # sw between 30 and 60 GB/s: the unconstrained optimum gives it more, so 60 binds.
    net = net2(bw_min_gbps=30.0, bw_max_gbps=60.0)
    w, T = mix2(net), 200.0
    free = optimize(mix2(), NET2, COST, constraints=Constraints(T))
    assert free.bw_gbps[1] > 60
    r = certified(optimize(w, net, COST, constraints=Constraints(T)))
    best, b1 = brent(lambda b1: value("perf", w, net, [T - b1, b1], LIBRA), 30.0, 60.0)
    assert r.fun == pytest.approx(best, rel=1e-8)
    assert r.bw_gbps[1] == pytest.approx(60.0, rel=1e-7) and b1 == pytest.approx(60.0, rel=1e-6)
    # With bounds [80, 90] the lower bound binds instead.
    net = net2(bw_min_gbps=80.0, bw_max_gbps=90.0)
    r = certified(optimize(mix2(net), net, COST, constraints=Constraints(T)))
    assert r.bw_gbps[1] == pytest.approx(80.0, rel=1e-7)


def test_two_dims_linear_constraint():
    w, T = mix2(), 200.0
    free = optimize(w, NET2, COST, constraints=Constraints(T))
    assert free.bw_gbps[0] < 2 * free.bw_gbps[1]          # so that the constraint binds
    cons = Constraints(T, linear=(parse_constraint("bw[0] >= 2*bw[1]", NET2),))
    r = certified(optimize(w, NET2, COST, constraints=cons))
    # bw0 >= 2 bw1 with bw0 + bw1 = T: bw1 <= T / 3.
    best, _ = brent(lambda b1: value("perf", w, NET2, [T - b1, b1], LIBRA), 1e-6, T / 3)
    assert r.fun == pytest.approx(best, rel=1e-8)
    assert r.bw_gbps[0] == pytest.approx(2 * r.bw_gbps[1], rel=1e-7)
    grid = [value("perf", w, NET2, [T - b1, b1], LIBRA) for b1 in np.linspace(0.5, T / 3, 200)]
    assert min(grid) >= r.dual_bound


def test_two_dims_budget_only():
    w = mix2()
    p0, p1 = COST.price_usd_per_gbps(NET2)
    budget = 100.0 * (p0 + p1)
    r = certified(optimize(w, NET2, COST, constraints=Constraints(budget_usd=budget)))
    assert r.best.cost_usd == pytest.approx(budget, rel=1e-7)       # perf spends the whole budget
    best, _ = brent(lambda b0: value("perf", w, NET2, [b0, (budget - p0 * b0) / p1], LIBRA), 1e-6, budget / p0 - 1e-6)
    assert r.fun == pytest.approx(best, rel=1e-8)


@pytest.mark.parametrize("objective", ["perf", "perf-per-cost"])
def test_smooth_model_against_slsqp(objective):
    w, T = mix3(), 300.0
    r = certified(optimize(w, NET3, COST, objective=objective, constraints=Constraints(T), model=SUM1))
    scale = value(objective, w, NET3, [T / 3] * 3, SUM1)
    f = lambda b: value(objective, w, NET3, b, SUM1) / scale
    best = math.inf
    for start in ([100, 100, 100], [250, 25, 25], [20, 40, 240], [60, 200, 40]):
        res = minimize(f, np.array(start, float), method="SLSQP", bounds=[(1e-3, T)] * 3,
                       constraints=[{"type": "eq", "fun": lambda b: b.sum() - T}], options={"ftol": 1e-15, "maxiter": 500})
        if res.success:
            best = min(best, res.fun * scale)
    assert r.fun == pytest.approx(best, rel=1e-6)
    assert best >= r.dual_bound * (1 - 1e-12)


# ------------------------------------------------------------------ brute force, three dimensions


@pytest.mark.parametrize("objective", ["perf", "perf-per-cost"])
def test_three_dims_against_nested_search(objective):
    w, T = mix3(), 300.0
    r = certified(optimize(w, NET3, COST, objective=objective, constraints=Constraints(T)))
    f = lambda b0, b1: value(objective, w, NET3, [b0, b1, T - b0 - b1], LIBRA)
    eps = 1e-6
    best = nested_brent(f, eps, T - 2 * eps, lambda b0: eps, lambda b0: T - b0 - eps)
    assert r.fun == pytest.approx(best, rel=1e-6)
    grid = [f(b0, b1) for b0 in np.linspace(3, T - 6, 40) for b1 in np.linspace(3, T - 6, 40) if b0 + b1 <= T - 3]
    assert min(grid) >= r.dual_bound and r.fun <= min(grid)


def test_three_dims_bounds_and_constraints_all_hold():
    net = net3(bw_min_gbps=20.0, bw_max_gbps=40.0)
    w = mix3(net)
    cons = Constraints(300.0, linear=(parse_constraint("bw[fc] <= 0.5 * bw[ring]", net),
                                      parse_constraint("bw[ring] - bw[fc] >= 50", net)))
    r = certified(optimize(w, net, COST, constraints=cons))
    b = r.bw_gbps
    assert 20 * (1 - 1e-9) <= b[2] <= 40 * (1 + 1e-9)
    assert b[1] <= 0.5 * b[0] * (1 + 1e-9) and b[0] - b[1] >= 50 * (1 - 1e-9)
    # The baselines ignore the constraints, and say so: 100 GB/s on sw breaks bw_max 40.
    assert not r.baselines["EqualBW"].feasible
    # Brute force over the feasible polygon (b2 = 300 - b0 - b1).
    f = lambda b0, b1: value("perf", w, net, [b0, b1, 300 - b0 - b1], LIBRA)
    ok = lambda b0, b1: 20 <= 300 - b0 - b1 <= 40 and b1 <= 0.5 * b0 and b0 - b1 >= 50 and b1 > 0
    grid = [f(b0, b1) for b0 in np.linspace(150, 280, 80) for b1 in np.linspace(1, 140, 80) if ok(b0, b1)]
    assert len(grid) > 100 and min(grid) >= r.dual_bound and r.fun <= min(grid)


# ------------------------------------------------------------------ min-cost


def test_min_cost_meets_the_time_target_exactly():
    w = mix2()
    fast = optimize(w, NET2, COST, constraints=Constraints(200.0))
    target = 1.3 * fast.best.time_ns
    r = certified(optimize(w, NET2, COST, objective="min-cost", constraints=Constraints(time_target_ns=target)))
    assert r.best.time_ns == pytest.approx(target, rel=1e-7)        # the target is active
    assert r.fun == pytest.approx(r.best.cost_usd, rel=1e-12)
    p0, p1 = COST.price_usd_per_gbps(NET2)

    def least_b1(b0):
        # time decreases in b1: bisect for the smallest b1 meeting the target.
        lo, hi = 1e-3, 1e6
        if value("perf", w, NET2, [b0, hi], LIBRA) > target:
            return math.inf
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if value("perf", w, NET2, [b0, mid], LIBRA) > target else (lo, mid)
        return hi

    best, _ = brent(lambda b0: p0 * b0 + p1 * least_b1(b0), 1.0, 5000.0)
    assert r.fun == pytest.approx(best, rel=1e-6)


def test_min_cost_errors():
    w = mix2()
    with pytest.raises(LibraError) as e:
        optimize(w, NET2, COST, objective="min-cost", constraints=Constraints(200.0))
    assert str(e.value) == "objective min-cost needs a time target > 0: pass --time-target NS"
    fast = optimize(w, NET2, COST, constraints=Constraints(200.0)).best.time_ns
    with pytest.raises(LibraError) as e:
        optimize(w, NET2, COST, objective="min-cost", constraints=Constraints(200.0, time_target_ns=0.5 * fast))
    assert str(e.value) == (f"time target {0.5 * fast:.6g} ns is infeasible: the fastest design under these constraints "
                            f"takes {fast:.6g} ns; raise --time-target or relax constraints")


# ------------------------------------------------------------------ invariances


def test_scaling_sizes_scales_communication_time():
    w = mix3(compute=2e6)
    r1 = certified(optimize(w, NET3, COST, constraints=Constraints(300.0)))
    w7 = [Workload(scaled(w[0].demand, 7.0))]
    r7 = certified(optimize(w7, NET3, COST, constraints=Constraints(300.0)))
    assert r7.best.communication_ns == pytest.approx(7.0 * r1.best.communication_ns, rel=1e-8)
    assert r7.best.compute_ns == r1.best.compute_ns
    assert r7.bw_gbps == pytest.approx(r1.bw_gbps, rel=1e-5)


def test_unused_dimension_gets_only_what_bounds_force():
    c = [make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 1), net=NET3),
         make_collective("ALL_TO_ALL", 8 * MIB, (4, 1, 1), net=NET3)]
    w = [Workload(single_class("d01", NET3.npus_per_dim, 1e6, c))]
    r = certified(optimize(w, NET3, COST, constraints=Constraints(300.0)))
    assert r.bw_gbps[2] <= 1e-6 * 300
    net = net3(bw_min_gbps=5.0)
    r = certified(optimize([Workload(single_class("d01", net.npus_per_dim, 1e6, c))], net, COST,
                           constraints=Constraints(300.0)))
    assert r.bw_gbps[2] == pytest.approx(5.0, rel=1e-6)


@pytest.mark.parametrize("prices, seed", [("cost.yml", 1), ("cost.yml", 2), ("COST", 2)])
def test_perf_per_cost_with_bandwidth_no_collective_needs_is_certified(prices, seed):
    # 8 dimensions with 5%..60% bounds and a fixed total: at the perf-per-cost optimum two cheap
    # dimensions take what the total leaves over and bind no collective. The certificate stalled
    # there: 500 Newton steps, gaps 7e-7, 2e-5 and 2e-5. The first two needed the equality
    # multipliers chosen for the best bound, the third a full dual step once the iterates stop.
    from pathlib import Path

    from libra_astra.demand import synthetic
    from libra_astra.model.cost import load_cost
    total = 800.0
    if prices == "COST":
        classes, cost = ("A", "B", "C"), COST
    else:
        classes = ("InterPackage", "InterNode", "InterPod")
        cost = load_cost(Path(__file__).resolve().parent.parent / "network_configs" / "cost.yml")
    net = network_from_dict({"name": "n8", "dimensions": [
        {"name": f"d{i}", "topology": ("Ring", "FullyConnected", "Switch")[i % 3], "npus": n,
         "latency_ns": 100.0 * (i + 1), "cost_class": classes[min(i * 3 // 8, 2)],
         "bw_min_gbps": 0.05 * total / 8, "bw_max_gbps": 0.6 * total}
        for i, n in enumerate((4, 2, 4, 2, 2, 4, 2, 4))]})
    w = [Workload(synthetic.random_demand(net, 100, seed=seed))]
    r = certified(optimize(w, net, cost, objective="perf-per-cost", constraints=Constraints(total),
                           baselines=False), tol=1e-9)
    assert r.newton_steps <= 60
    # moving bandwidth between any two dimensions, within bounds, never does better
    for d in range(8):
        for e in range(8):
            bw = np.array(r.bw_gbps)
            bw[d] += 1e-3
            bw[e] -= 1e-3
            if d != e and all(net.dims[k].bw_min_gbps <= bw[k] <= net.dims[k].bw_max_gbps for k in (d, e)):
                e_time = evaluate(w, net, cost, bw, Constraints(), LIBRA)
                assert e_time.time_cost_ns_usd >= r.fun * (1 - 1e-12)


def test_weighted_workloads_equal_one_merged_workload():
    a = make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 4), count=2, net=NET3)
    b = make_collective("ALL_REDUCE", 16 * MIB, (1, 1, 4), count=1, net=NET3)
    c = make_collective("ALL_TO_ALL", 8 * MIB, (4, 4, 1), count=3, net=NET3)
    w1 = Demand("w1", NET3.npus_per_dim, single_class("w1", NET3.npus_per_dim, 1e6, [a, b]).rank_classes)
    w2 = single_class("w2", NET3.npus_per_dim, 3e6, [c, b])
    weighted = [Workload(w1, 2.0, "w1"), Workload(w2, 1.0, "w2")]
    merged_colls = [make_collective("ALL_REDUCE", 64 * MIB, (4, 4, 4), count=4, net=NET3),
                    make_collective("ALL_REDUCE", 16 * MIB, (1, 1, 4), count=3, net=NET3),
                    make_collective("ALL_TO_ALL", 8 * MIB, (4, 4, 1), count=3, net=NET3)]
    merged = [Workload(single_class("m", NET3.npus_per_dim, 2 * 1e6 + 3e6, merged_colls))]
    for objective in ("perf", "perf-per-cost"):
        rw = certified(optimize(weighted, NET3, COST, objective=objective, constraints=Constraints(300.0)))
        rm = certified(optimize(merged, NET3, COST, objective=objective, constraints=Constraints(300.0)))
        assert rw.fun == pytest.approx(rm.fun, rel=1e-9)
        assert rw.bw_gbps == pytest.approx(rm.bw_gbps, rel=1e-5)


def test_optimum_beats_the_baselines():
    r = certified(optimize(mix3(), NET3, COST, constraints=Constraints(300.0)))
    assert set(r.baselines) == {"EqualBW", "TrafficProportional"}
    for e in r.baselines.values():
        assert e.feasible and e.time_ns >= r.best.time_ns * (1 - 1e-12)
        assert sum(e.bw_gbps) == pytest.approx(300.0)


def test_pareto_frontier_is_monotone():
    w = mix2()
    p = sum(COST.price_usd_per_gbps(NET2))
    pts = pareto(w, NET2, COST, [20 * p, 60 * p, 180 * p])
    times = [q.best.time_ns for q in pts]
    assert times[0] > times[1] > times[2]
    for q, bud in zip(pts, [20 * p, 60 * p, 180 * p]):
        certified(q)
        assert q.best.cost_usd == pytest.approx(bud, rel=1e-7)


# ------------------------------------------------------------------ errors


def test_infeasible_constraints():
    cons = Constraints(300.0, linear=(parse_constraint("bw[0] >= 400", NET3),))
    with pytest.raises(LibraError) as e:
        optimize(mix3(), NET3, COST, constraints=cons)
    assert str(e.value) == ("the constraints are infeasible: --constraint 'bw[0] >= 400' or --total-bw conflicts "
                            "with the others (bounds in the network file included); relax it")
    both = Constraints(300.0, linear=(parse_constraint("bw[0] >= 200", NET3), parse_constraint("bw[1] >= 200", NET3)))
    with pytest.raises(LibraError) as e:
        optimize(mix3(), NET3, COST, constraints=both)
    assert str(e.value).startswith("the constraints are infeasible: --constraint 'bw[0] >= 200' or "
                                   "--constraint 'bw[1] >= 200' or --total-bw conflicts")
    cons = Constraints(300.0, linear=(parse_constraint("bw[0] >= 300", NET3),))     # forces fc and sw to 0
    with pytest.raises(LibraError, match=r"^the constraints leave no strictly feasible point"):
        optimize(mix3(), NET3, COST, constraints=cons)
    cons = Constraints(300.0, linear=(parse_constraint("bw[0] + bw[1] == 100", NET3),
                                      parse_constraint("bw[0] + bw[1] == 200", NET3)))
    with pytest.raises(LibraError) as e:
        optimize(mix3(), NET3, COST, constraints=cons)
    assert str(e.value) == "the equality constraints contradict each other; remove or fix one"


def test_independent_equality_rows():
    # The first row is judged by its norm, the later ones by the rank with the rows kept so far.
    from libra_astra.optimize.problem import _independent_rows
    E, f = _independent_rows(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [1.0, -1.0]]), np.array([0.0, 3.0, 6.0, 1.0]))
    assert E.tolist() == [[1.0, 1.0], [1.0, -1.0]] and f.tolist() == [3.0, 1.0]
    E, f = _independent_rows(np.array([[3e-11, 0.0]]), np.array([0.0]))        # below the rank tolerance
    assert E.shape == (0, 2) and f.shape == (0,)
    assert _independent_rows(np.array([[2e-10, 0.0]]), np.array([1.0]))[0].shape == (1, 2)
    with pytest.raises(LibraError, match="contradict"):
        _independent_rows(np.array([[0.0, 0.0]]), np.array([1.0]))
    with pytest.raises(LibraError, match="contradict"):
        _independent_rows(np.array([[1.0, 1.0], [2.0, 2.0]]), np.array([1.0, 3.0]))


def test_unbounded_objectives():
    with pytest.raises(LibraError) as e:
        optimize(mix3(), NET3, COST)
    assert str(e.value) == ("objective perf has no minimizer: the bandwidth of ring, fc, sw can grow without limit "
                            "and the time keeps falling as it grows; give --total-bw, --budget, or an upper bound "
                            "such as --constraint 'bw[ring] <= GBPS' (or bw_max_gbps in the network file)")
    ppc = ("objective perf-per-cost has no minimizer: the network cost can shrink toward 0 under these constraints "
           "(only upper bounds, or bandwidth free to move to dimensions that cost nothing); add --total-bw or lower "
           "bounds (bw_min_gbps or a --constraint)")
    budget = 100.0 * sum(COST.price_usd_per_gbps(NET3))
    for cons in (Constraints(), Constraints(300.0, total_bw_is_upper_bound=True), Constraints(budget_usd=budget)):
        with pytest.raises(LibraError) as e:
            optimize(mix3(), NET3, COST, objective="perf-per-cost", constraints=cons)
        assert str(e.value) == ppc
    # Bounded in one dimension only: the others are named.
    with pytest.raises(LibraError, match=r"bandwidth of ring, fc can grow without limit"):
        optimize(mix3(net3(bw_max_gbps=50.0)), net3(bw_max_gbps=50.0), COST)


@pytest.mark.parametrize("kwargs, message", [
    (dict(objective="fastest"), "unknown objective 'fastest'; use one of ['perf', 'perf-per-cost', 'min-cost', 'min-energy', 'perf-per-watt', 'min-tco']"),
    (dict(constraints=Constraints(-1.0)), "--total-bw must be > 0 GB/s, got -1"),
    # 1e300 was taken: a design of 5e299 GB/s per dimension, "time x cost inf" and gains of nan
    (dict(constraints=Constraints(1e300)), "--total-bw 1e+300 GB/s per NPU is beyond 1e+09; give a real bandwidth"),
    (dict(constraints=Constraints(2e9, total_bw_is_upper_bound=True)),
     "--total-bw-max 2e+09 GB/s per NPU is beyond 1e+09; give a real bandwidth"),
    # 1e-300 gave times of inf and a solver that could not certify anything
    (dict(constraints=Constraints(1e-300)), "--total-bw 1e-300 GB/s per NPU is below 1e-06; give a real bandwidth"),
    (dict(constraints=Constraints(300.0, budget_usd=-5.0)), "--budget must be > 0 USD, got -5"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(LibraError) as e:
        optimize(mix3(), NET3, COST, **kwargs)
    assert str(e.value) == message


def test_workload_errors():
    with pytest.raises(LibraError) as e:
        optimize([Workload(mix3()[0].demand, weight=0.0)], NET3, COST, constraints=Constraints(300.0))
    assert str(e.value) == "workload 'mix3': weight must be > 0, got 0"
    with pytest.raises(LibraError) as e:
        optimize(mix2(), NET3, COST, constraints=Constraints(300.0))
    assert str(e.value) == ("mix2: demand was made for a network of shape [4, 4] but network 'n3' has [4, 4, 4]; "
                            "rebuild the demand for this network")
    with pytest.raises(LibraError) as e:
        optimize([], NET3, COST, constraints=Constraints(300.0))
    assert str(e.value) == "no workload given; pass --demand FILE or a trace prefix"


FREE_COST = cost_from_dict({"unit_prices_usd_per_gbps": {"x": {"link": 1.0}, "y": {"link": 2.0, "switch": 1.0},
                                                          "z": {}}})
FREE_NET = network_from_dict({"name": "t", "dimensions": [
    {"name": "a", "topology": "Ring", "npus": 4, "cost_class": "x"},
    {"name": "b", "topology": "Switch", "npus": 4, "cost_class": "y"},
    {"name": "c", "topology": "FullyConnected", "npus": 2, "cost_class": "z"}]})
FREE_W = [Workload(single_class("w", (4, 4, 2), 1e6, [make_collective("ALL_REDUCE", 2**30, (4, 4, 2))]))]
FREE_LOWER = tuple(parse_constraint(f"bw[{i}] >= 1", FREE_NET) for i in range(3))
FREE_CASES = [("min-cost", Constraints(time_target_ns=1e8)), ("perf-per-cost", Constraints(budget_usd=1e5, linear=FREE_LOWER))]


@pytest.mark.parametrize("objective, cons", FREE_CASES)
def test_a_free_dimension_that_stops_mattering_has_a_minimizer(objective, cons):
    # LIBRA's max over dimensions: once c (which costs nothing, unbounded) is fast enough, the
    # priced dimensions pace the all-reduce, so more c changes nothing: the optimum is attained.
    r = optimize(FREE_W, FREE_NET, FREE_COST, objective=objective, constraints=cons, baselines=False)
    assert r.success and r.rel_gap <= 1e-8 and r.best.feasible, r.message
    a, b, c = r.bw_gbps
    traffic = FREE_W[0].demand.rank_classes[0].collectives[0].traffic_bytes
    assert math.isfinite(c) and traffic[2] / c < max(traffic[0] / a, traffic[1] / b)   # c no longer matters
    # the same problem with c capped far above: the same optimum
    capped = optimize(FREE_W, FREE_NET, FREE_COST, objective=objective, baselines=False,
                      constraints=Constraints(cons.total_bw_gbps, cons.total_bw_is_upper_bound, cons.budget_usd,
                                              cons.time_target_ns, cons.linear + (parse_constraint("bw[c] <= 1e8", FREE_NET),)))
    assert r.fun == pytest.approx(capped.fun, rel=1e-8) and r.dual_bound <= capped.fun * (1 + 1e-9)


@pytest.mark.parametrize("objective, cons", FREE_CASES)
def test_a_free_dimension_that_always_matters_has_no_minimizer(objective, cons):
    # One chunk: the all-reduce takes the sum of its dimensions' times, so c always helps.
    falls = "time x cost keeps falling" if objective == "perf-per-cost" else "the cost of meeting the time target keeps falling"
    with pytest.raises(LibraError) as e:
        optimize(FREE_W, FREE_NET, FREE_COST, objective=objective, constraints=cons, model=SUM1)
    assert str(e.value) == (f"objective {objective} has no minimizer: c cost nothing in the cost model and their "
                            f"bandwidth can grow without limit while {falls}; give them a price or an upper bound such "
                            "as --constraint 'bw[c] <= GBPS' (or bw_max_gbps in the network file)")
    capped = FREE_LOWER + (parse_constraint("bw[c] <= 100", FREE_NET),)
    r = optimize(FREE_W, FREE_NET, FREE_COST, objective="perf-per-cost", model=SUM1,
                 constraints=Constraints(budget_usd=1e5, linear=capped))
    assert r.success and r.bw_gbps[2] == pytest.approx(100, rel=1e-6)


def _bisected_split(need, total, lo, hi):
    """Reference: the water level of sum clip(tau sqrt(need), lo, hi) = total by bisection."""
    w = np.sqrt(need)
    w = np.maximum(w, 1e-3 * w.max()) if w.max() > 0 else np.ones_like(w)
    a, b = 0.0, 1.0
    while np.clip(b * w, lo, hi).sum() < total:
        b *= 2.0
    for _ in range(200):
        m = 0.5 * (a + b)
        a, b = (m, b) if np.clip(m * w, lo, hi).sum() < total else (a, m)
    return np.clip(b * w, lo, hi)


def test_square_root_start_is_the_additive_optimum_inside_the_bounds():
    from libra_astra.optimize.problem import _square_root_split
    # No bounds: B_d proportional to sqrt(need_d), the minimiser of sum need_d / B_d.
    need = np.array([4.0, 1.0, 9.0])
    x = _square_root_split(need, 6.0, net3(), 1.0)
    assert x == pytest.approx([2.0, 1.0, 3.0], rel=1e-12)
    # Random bounds (and dimensions nothing needs): the water-filled split of a reference bisection,
    # strictly inside every bound, spending the total.
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(300):
        lo = rng.choice([0.0, 1.0], 3) * rng.uniform(0, 50, 3)
        hi = lo + rng.uniform(1, 400, 3)
        hi[rng.random(3) < 0.3] = np.inf
        dims = [{"bw_min_gbps": float(lo[d])} | ({} if np.isinf(hi[d]) else {"bw_max_gbps": float(hi[d])})
                for d in range(3)]
        net = network_from_dict({"name": "n3", "dimensions": [
            {"name": f"d{d}", "topology": "Ring", "npus": 4, "latency_ns": 1, "cost_class": "A", **dims[d]}
            for d in range(3)]})
        need = rng.random(3) * (rng.random(3) < 0.8)
        total, b0 = float(rng.uniform(10, 900)), float(rng.uniform(1, 100))
        x = _square_root_split(need, total / b0, net, b0)
        pad = 1e-3 * total / b0 / 3
        if lo.sum() / b0 + 3 * pad >= total / b0 or (hi / b0 - pad).sum() <= total / b0:
            assert x is None
            continue
        checked += 1
        assert x.sum() == pytest.approx(total / b0, rel=1e-12)
        assert np.all(x > lo / b0) and np.all(x < hi / b0)
        assert x == pytest.approx(_bisected_split(need, total / b0, lo / b0 + pad, hi / b0 - pad), rel=1e-9)
    assert checked > 100


@pytest.mark.parametrize("name,network,overlap", [("param_dlrm8", "ring2x4", False), ("param_dlrm8", "ring2x4", True),
                                                   (None, "net3", False)])
def test_one_chunk_rows_dropped_leave_the_certified_optimum(monkeypatch, name, network, overlap):
    # PARAM's DLRM trace through the converter on 2 x 4 NPUs (its all-to-alls and all-reduces span
    # both dimensions: 128 rows, 64 after the drop) and a generated 3-dimension demand: with one
    # chunk per collective the terms keep only the rows that can be a collective's time, which
    # leaves the optimum where the problem with every row has it, both certified.
    from pathlib import Path
    from libra_astra.demand import synthetic
    from libra_astra.demand.from_traces import demand_from_traces
    from libra_astra.model.cost import load_cost
    from libra_astra.model.network import load_network
    from libra_astra.optimize import terms
    from libra_astra.timing.model import demand_rows
    real = Path(__file__).parent / "fixtures" / "real"
    cost = load_cost(Path(__file__).parents[1] / "network_configs" / "cost.yml")
    if name is None:
        net, dem, cost = NET3, synthetic.random_demand(NET3, 400, seed=6), COST
    else:
        net = load_network(real / f"{network}.yml")
        dem = demand_from_traces(real / name / name, net)[0]
    model = TimeModel("pipelined", splits=1, overlap=overlap)
    A, g, starts = demand_rows(dem, net, model)
    assert terms._undominated(A, g, starts)[0].shape[0] < A.shape[0]
    run = lambda: optimize([Workload(dem)], net, cost, constraints=Constraints(100.0 * net.num_dims),
                           model=model, baselines=False)
    dropped = run()
    monkeypatch.setattr(terms, "_undominated", lambda A, g, starts: (A, g, starts))
    every = run()
    assert dropped.success and every.success
    assert max(dropped.dual_bound, every.dual_bound) <= min(dropped.fun, every.fun) * (1 + 1e-12)
    assert dropped.fun == pytest.approx(every.fun, rel=2e-9)
