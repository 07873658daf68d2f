"""Valid problems once refused or mislabelled: each case here failed before its fix.

Reference values come from the time and cost models directly (optimize.evaluate), not from the solver.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from libra_astra.optimize.constraints import parse_constraint
from libra_astra.model.cost import cost_from_dict, load_cost
from libra_astra.demand.types import make_collective, single_class
from libra_astra.errors import LibraError
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.optimizer import Constraints, Workload, evaluate, optimize
from libra_astra.timing.model import LIBRA, TimeModel
from libra_astra.demand.from_traces import demand_from_traces

ROOT = Path(__file__).resolve().parents[1]
COST = cost_from_dict({"name": "t", "unit_prices_usd_per_gbps": {
    "A": {"link": 2.0}, "B": {"link": 5.0, "switch": 3.0}, "C": {"link": 10.0, "switch": 20.0, "nic": 30.0}}})
RINGS = network_from_dict({"name": "r44", "dimensions": [
    {"name": "a", "topology": "Ring", "npus": 4, "latency_ns": 500, "cost_class": "A"},
    {"name": "b", "topology": "Ring", "npus": 4, "latency_ns": 500, "cost_class": "B"}]})
ONE_AR = [Workload(single_class("ar", (4, 4), 0.0, [make_collective("ALL_REDUCE", 100e6, (4, 4), net=RINGS)]))]


def cheapest_meeting(w, net, cost, total_max, target, model):
    """Brute force for two dimensions: for each B0, the smallest B1 meeting the target (time falls in
    B1), within B0 + B1 <= total_max; the cheapest such design (convex in B0: a grid, then Brent)."""
    def g(b0):
        lo, hi = 1e-9, total_max - b0
        if hi <= lo or evaluate(w, net, cost, (b0, hi), model=model).time_ns > target:
            return 1e30                  # infeasible (finite: Brent's parabola steps need numbers)
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if evaluate(w, net, cost, (b0, mid), model=model).time_ns > target else (lo, mid)
        return cost.network_cost_usd(net, (b0, hi))

    xs = np.linspace(total_max * 1e-3, total_max, 400)
    vals = [g(x) for x in xs]
    i = int(np.argmin(vals))
    res = minimize_scalar(g, bounds=(xs[max(i - 1, 0)], xs[min(i + 1, len(xs) - 1)]), method="bounded",
                          options={"xatol": 1e-12 * total_max})
    return min(float(res.fun), vals[i])


@pytest.mark.parametrize("model", [LIBRA, TimeModel("pipelined", splits=4)])
@pytest.mark.parametrize("factor", [1.05, 1.3, 1.6, 2.0])
def test_min_cost_targets_just_above_the_fastest_design(model, factor):
    # The fastest design spends the whole --total-bw-max; a target between it and about twice its
    # time used to fail with "the time target cannot be met at the starting point".
    fast = optimize(ONE_AR, RINGS, COST, constraints=Constraints(100.0, True), model=model, baselines=False)
    target = fast.fun * factor
    r = optimize(ONE_AR, RINGS, COST, objective="min-cost", model=model,
                 constraints=Constraints(100.0, True, time_target_ns=target))
    assert r.success and r.rel_gap <= 1e-8 and r.best.feasible, r.message
    assert r.best.time_ns <= target * (1 + 1e-9)
    ref = cheapest_meeting(ONE_AR, RINGS, COST, 100.0, target, model)
    assert r.fun <= ref * (1 + 1e-9) and ref >= r.dual_bound
    assert r.fun == pytest.approx(ref, rel=1e-7)


@pytest.mark.parametrize("tb_max", [False, True])
def test_min_cost_on_the_gpt3_sample_between_the_fastest_time_and_twice_it(tb_max):
    net = load_network(ROOT / "network_configs/sample_8x8.yml")
    cost = load_cost(ROOT / "network_configs/cost.yml")
    prefix = str(ROOT / "traces/gpt3_tp8_dp8/gpt3")
    d, _ = demand_from_traces(prefix, net, comm_groups=prefix + ".groups.json")
    for model in (LIBRA, TimeModel("pipelined", splits=4)):
        fast = optimize([Workload(d)], net, cost, constraints=Constraints(400.0, tb_max), model=model,
                        baselines=False)
        for factor in (1.01, 1.1, 1.5, 1.9):
            cons = Constraints(400.0, tb_max, time_target_ns=fast.fun * factor)
            r = optimize([Workload(d)], net, cost, objective="min-cost", constraints=cons, model=model,
                         baselines=False)
            assert r.success and r.rel_gap <= 1e-8 and r.best.feasible, r.message


@pytest.mark.parametrize("objective", ["perf", "perf-per-cost", "min-cost"])
def test_infeasible_constraints_are_called_infeasible_for_every_objective(objective):
    cons = Constraints(100.0, time_target_ns=1e12, linear=(parse_constraint("bw[0] >= 150", RINGS),))
    with pytest.raises(LibraError) as e:
        optimize(ONE_AR, RINGS, COST, objective=objective, constraints=cons)
    assert str(e.value) == ("the constraints are infeasible: --constraint 'bw[0] >= 150' or --total-bw conflicts "
                            "with the others (bounds in the network file included); relax it")


def capped_net(**ring):
    return network_from_dict({"name": "n3", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 4, "latency_ns": 100, "cost_class": "A", **ring},
        {"name": "fc", "topology": "FullyConnected", "npus": 4, "latency_ns": 300, "cost_class": "B",
         "bw_max_gbps": 100},
        {"name": "sw", "topology": "Switch", "npus": 4, "latency_ns": 1000, "cost_class": "C", "bw_max_gbps": 50}]})


def paced_by_capped_dims(net):
    # Every collective crossing the uncapped ring also crosses fc: once the ring is fast enough,
    # more ring bandwidth changes nothing (LIBRA's max), so the optimum is attained but not unique.
    return [Workload(single_class("m", net.npus_per_dim, 1e6, [
        make_collective("ALL_REDUCE", 64 * 2**20, (4, 4, 4), net=net),
        make_collective("ALL_GATHER", 2**20, (4, 4, 1), count=4, net=net),
        make_collective("ALL_REDUCE", 16 * 2**20, (1, 1, 4), count=2, net=net)]))]


def test_perf_optimum_attained_but_not_unique_is_solved():
    net = capped_net()
    w = paced_by_capped_dims(net)
    r = optimize(w, net, COST)
    assert r.success and r.rel_gap <= 1e-8, r.message
    # The fastest possible: caps on fc and sw, the ring at any large value.
    best = evaluate(w, net, COST, (1e9, 100.0, 50.0)).time_ns
    assert r.fun == pytest.approx(best, rel=1e-9) and r.dual_bound <= best
    assert r.bw_gbps[1] == pytest.approx(100.0) and r.bw_gbps[2] == pytest.approx(50.0)
    # The same problem with a generous cap on the ring has the same optimum.
    capped = optimize(w, capped_net(bw_max_gbps=1e6), COST)
    assert capped.fun == pytest.approx(r.fun, rel=1e-9)


def test_perf_still_unbounded_when_the_uncapped_dimension_always_matters():
    # The pipelined model adds every dimension's share to each stage: ring bandwidth always helps.
    net = capped_net()
    with pytest.raises(LibraError) as e:
        optimize(paced_by_capped_dims(net), net, COST, model=TimeModel("pipelined", splits=4))
    assert str(e.value) == ("objective perf is unbounded: bandwidth of ring can grow without limit; add --total-bw, "
                            "--budget, bw_max_gbps in the network file or a --constraint")


def test_min_cost_with_a_flat_optimal_face_is_certified_and_reports_one_gap():
    # Equal prices under an equality total: every feasible design costs the same.
    equal = cost_from_dict({"name": "eq", "unit_prices_usd_per_gbps": {"A": {"link": 3.0}, "B": {"link": 3.0}}})
    fast = optimize(ONE_AR, RINGS, equal, constraints=Constraints(100.0), baselines=False)
    for factor in (1.001, 1.5, 3.0):
        r = optimize(ONE_AR, RINGS, equal, objective="min-cost",
                     constraints=Constraints(100.0, time_target_ns=fast.fun * factor))
        assert r.success and r.rel_gap <= 1e-8 and r.best.feasible, r.message
        assert r.fun == pytest.approx(equal.network_cost_usd(RINGS, (50.0, 50.0)), rel=1e-12)


def test_not_certified_message_gives_the_results_relative_gap():
    net = load_network(ROOT / "network_configs/sample_8x8.yml")
    cost = load_cost(ROOT / "network_configs/cost.yml")
    prefix = str(ROOT / "traces/gpt3_tp8_dp8/gpt3")
    d, _ = demand_from_traces(prefix, net, comm_groups=prefix + ".groups.json")
    # An impossible tolerance: the solver stops on round-off, and its message must carry the very
    # relative gap the result reports.
    r = optimize([Workload(d)], net, cost, objective="min-cost", rel_gap=1e-30,
                 constraints=Constraints(400.0, True, time_target_ns=2e8))
    assert f"{r.rel_gap:.1e}" in r.message


def test_path_generation_stopped_early_is_not_called_optimal():
    net = load_network(ROOT / "network_configs/sample_8x8.yml")
    cost = load_cost(ROOT / "network_configs/cost.yml")
    prefix = str(ROOT / "traces/gpt3_tp8_dp8/gpt3")
    d, _ = demand_from_traces(prefix, net, comm_groups=prefix + ".groups.json")
    w, model, cons = [Workload(d)], TimeModel("pipelined", splits=1, overlap=True), Constraints(400.0)
    full = optimize(w, net, cost, constraints=cons, model=model)
    assert full.success and full.message.startswith("optimal")
    # The critical path at the first round's design is not yet in the problem (two rounds are needed).
    r = optimize(w, net, cost, constraints=cons, model=model, max_path_rounds=1)
    assert not r.success and r.status == 1
    assert r.message == ("not converged: the dependency-path generation stopped after 1 rounds with 1 critical "
                         "paths still missing; 1 dependency paths")
    assert r.dual_bound <= full.fun * (1 + 1e-12) and r.fun >= full.fun * (1 - 1e-12)
