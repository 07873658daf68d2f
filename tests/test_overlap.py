"""Dependency-aware time: the DAG replay, and exact optimization of it by critical-path generation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from libra_astra.model.cost import cost_from_dict, load_cost
from libra_astra.demand.types import Dag, Demand, RankClass, make_collective
from libra_astra.model.network import Dimension, Network, load_network, network_from_dict
from libra_astra.optimize.optimizer import Constraints, Workload, evaluate, optimize
from libra_astra.timing.predict import critical_paths, predict
from libra_astra.timing.model import TimeModel, collective_time_ns
from libra_astra.demand.from_traces import demand_from_traces

ROOT = Path(__file__).resolve().parents[1]


def brute_min(f, lo, hi, points=200):
    """Minimum of a 1-D function: a grid, then Brent's method inside the best grid bracket."""
    xs = np.linspace(lo, hi, points)
    i = int(np.argmin([f(x) for x in xs]))
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, points - 1)]
    res = minimize_scalar(f, bounds=(a, b), method="bounded", options={"xatol": 1e-10 * (hi - lo)})
    return min(res.fun, f(xs[i]))
NET = network_from_dict({"name": "n", "dimensions": [
    {"name": "a", "topology": "Ring", "npus": 4, "cost_class": "x"},
    {"name": "b", "topology": "Switch", "npus": 4, "cost_class": "y"}]})
COST = cost_from_dict({"unit_prices_usd_per_gbps": {"x": {"link": 1.0}, "y": {"link": 2.0, "switch": 1.0}}})
LIBRA_OVERLAP = TimeModel("libra", overlap=True)


def two_branch_demand() -> Demand:
    """comp0 -> (AR over dim a) and comp1 in parallel -> comp2; a second AR over dim b after comp2."""
    ca = make_collective("ALL_REDUCE", 2**30, (4, 1), net=NET)
    cb = make_collective("ALL_REDUCE", 2**28, (1, 4), net=NET)
    dag = Dag(nodes=(("comp", 1e6), ("coll", 0), ("comp", 5e6), ("comp", 1e6), ("coll", 1)),
              deps=((0, 1), (0, 2), (1, 3), (2, 3), (3, 4)))
    rc = RankClass(7e6, (ca, cb), num_ranks=16, dag=dag)
    return Demand("two-branch", (4, 4), (rc,))


def test_replay_overlaps_compute_with_the_collective():
    d = two_branch_demand()
    bw = (100.0, 50.0)
    ta = collective_time_ns(d.rank_classes[0].collectives[0], bw, NET)
    tb = collective_time_ns(d.rank_classes[0].collectives[1], bw, NET)
    expected = 1e6 + max(ta, 5e6) + 1e6 + tb
    assert predict(d, bw, NET, LIBRA_OVERLAP).time_ns == pytest.approx(expected, rel=1e-12)
    t, path = critical_paths(d, bw, NET, LIBRA_OVERLAP)[0]
    nodes = [v for _, v in path]
    assert t == pytest.approx(expected, rel=1e-12)
    assert nodes[0] == 0 and nodes[-1] == 4 and (1 in nodes) == (ta > 5e6)


def test_overlap_optimum_beats_a_fine_grid_and_is_certified():
    d = two_branch_demand()
    r = optimize([Workload(d)], NET, COST, constraints=Constraints(total_bw_gbps=200), model=LIBRA_OVERLAP)
    assert r.rel_gap <= 1e-6 and r.dual_bound <= r.fun * (1 + 1e-12)
    ref = brute_min(lambda a: evaluate([Workload(d)], NET, COST, (a, 200 - a), model=LIBRA_OVERLAP).time_ns, 1, 199)
    assert r.fun == pytest.approx(ref, rel=1e-6)


def test_overlap_optimum_on_the_gpt3_sample_matches_a_grid_and_beats_the_no_overlap_design():
    net = load_network(ROOT / "network_configs/sample_8x8.yml")
    cost = load_cost(ROOT / "network_configs/cost.yml")
    prefix = str(ROOT / "traces/gpt3_tp8_dp8/gpt3")
    d, _ = demand_from_traces(prefix, net, comm_groups=prefix + ".groups.json")
    model = TimeModel("pipelined", splits=1, overlap=True)
    w = [Workload(d)]
    r = optimize(w, net, cost, constraints=Constraints(total_bw_gbps=400), model=model)
    ref = brute_min(lambda a: evaluate(w, net, cost, (a, 400 - a), model=model).time_ns, 1, 399, points=100)
    assert r.fun == pytest.approx(ref, rel=1e-6)
    flat = optimize(w, net, cost, constraints=Constraints(total_bw_gbps=400),
                    model=TimeModel("pipelined", splits=1))
    assert r.fun < evaluate(w, net, cost, flat.bw_gbps, model=model).time_ns


def test_min_cost_with_overlap_meets_the_target_at_the_cheapest_grid_point():
    net = load_network(ROOT / "network_configs/sample_8x8.yml")
    cost = load_cost(ROOT / "network_configs/cost.yml")
    prefix = str(ROOT / "traces/gpt3_tp8_dp8/gpt3")
    d, _ = demand_from_traces(prefix, net, comm_groups=prefix + ".groups.json")
    model = TimeModel("pipelined", overlap=True)
    w = [Workload(d)]
    target = 1.3e8
    r = optimize(w, net, cost, objective="min-cost", constraints=Constraints(time_target_ns=target), model=model)
    assert r.best.time_ns <= target * (1 + 1e-9)

    def cheapest_at(a: float) -> float:
        lo, hi = 1e-3, 1e5
        if evaluate(w, net, cost, (a, hi), model=model).time_ns > target:
            return np.inf
        for _ in range(70):
            mid = (lo * hi) ** 0.5
            lo, hi = (lo, mid) if evaluate(w, net, cost, (a, mid), model=model).time_ns <= target else (mid, hi)
        return cost.network_cost_usd(net, (a, hi))

    ref = brute_min(cheapest_at, 20, 2000, points=40)
    assert r.fun == pytest.approx(ref, rel=1e-6)


def test_receives_wait_for_the_sending_class_and_paths_cross_classes():
    from libra_astra.demand.types import Collective, demand_from_dict, demand_to_dict

    send = Collective("P2P", 2**28, (1, 1), (0.0, float(2**28)), (0, 2), algorithm="p2p")
    stage0 = RankClass(5e6, (send,), 8, dag=Dag(nodes=(("comp", 5e6), ("coll", 0)), deps=((0, 1),)))
    stage1 = RankClass(3e6, (), 8, dag=Dag(nodes=(("comp", 0.0), ("comp", 3e6)), deps=((0, 1),),
                                          links=((0, 0, 1),)))
    d = Demand("pp", (4, 4), (stage0, stage1))
    assert demand_from_dict(demand_to_dict(d)) == d
    bw = (100.0, 50.0)
    t_send = 2**28 / 50.0
    p = predict(d, bw, NET, LIBRA_OVERLAP)
    assert p.class_times_ns == pytest.approx((5e6 + t_send, 5e6 + t_send + 3e6), rel=1e-12)
    assert p.time_ns == pytest.approx(5e6 + t_send + 3e6, rel=1e-12)
    paths = critical_paths(d, bw, NET, LIBRA_OVERLAP)
    assert paths[1][1] == ((0, 0), (0, 1), (1, 0), (1, 1))
    # The optimizer sees the cross-class path: only dimension b matters, so it gets all it can.
    r = optimize([Workload(d)], NET, COST, constraints=Constraints(total_bw_gbps=150,
                 linear=()), model=LIBRA_OVERLAP)
    assert r.fun == pytest.approx(8e6 + 2**28 / r.bw_gbps[1], rel=1e-9) and r.bw_gbps[1] > 149


def test_pipeline_sample_optimum_matches_brent_and_uses_cross_stage_paths():
    net = load_network(ROOT / "network_configs/sample_4x4.yml")
    cost = load_cost(ROOT / "network_configs/cost.yml")
    prefix = str(ROOT / "traces/gpt_tp2_pp2_dp4/gpt")
    d, _ = demand_from_traces(prefix, net, comm_groups=prefix + ".groups.json")
    assert any(rc.dag.links for rc in d.rank_classes)
    model = TimeModel("pipelined", splits=1, overlap=True)
    w = [Workload(d)]
    r = optimize(w, net, cost, constraints=Constraints(total_bw_gbps=300), model=model)
    ref = brute_min(lambda a: evaluate(w, net, cost, (a, 300 - a), model=model).time_ns, 1, 299, points=120)
    assert r.fun == pytest.approx(ref, rel=1e-6) and r.rel_gap <= 1e-6


def test_pipeline_stages_with_the_same_program_become_separate_classes(tmp_path):
    import yaml
    from libra_astra.tracegen import generate

    spec = yaml.safe_load((ROOT / "traces/gpt_tp2_pp2_dp4/spec.yml").read_text())
    spec["parallel"] = {"tp": 1, "pp": 4, "dp": 4, "sequence_parallel": False}
    spec["placement"] = {"pp": [0], "dp": [1]}
    res = generate(spec, tmp_path / "pp4")
    net = load_network(ROOT / "network_configs/sample_4x4.yml")
    d, _ = demand_from_traces(str(res.prefix), net, comm_groups=str(res.groups_path))
    # stage s = coordinate 0: one class per stage, each waiting only on its neighbours
    assert [rc.ranks for rc in d.rank_classes] == [tuple(range(s, 16, 4)) for s in range(4)]
    for ci, rc in enumerate(d.rank_classes):
        assert {src for _, src, _ in rc.dag.links} == {c for c in (ci - 1, ci + 1) if 0 <= c < 4}
    times = predict(d, (100.0, 100.0), net, TimeModel("pipelined", overlap=True)).class_times_ns
    assert times[0] > times[1] > times[2]   # GPipe: the first stage finishes its backward last


def shared_collective_traces(path):
    """Ranks 0-3 compute 10 us, all-reduce with everyone, then compute 100 us; ranks 4-7 compute
    50 us, the same all-reduce, then 10 us. The all-reduce starts when ranks 4-7 are ready."""
    from libra_astra.traces import chakra_io as cio

    for r in range(8):
        first, second = (10, 100) if r < 4 else (50, 10)
        nodes = [cio.comp_node(1, "a", first),
                 cio.coll_node(2, "ar", "ALL_REDUCE", 1 << 20, involved_dim=[True, True], data_deps=[1]),
                 cio.comp_node(3, "b", second, data_deps=[2])]
        cio.write_et(path / f"s.{r}.et", nodes)
    return str(path / "s")


def test_a_collective_shared_by_two_classes_starts_when_both_are_ready(tmp_path):
    net = network_from_dict({"name": "n", "dimensions": [{"name": "a", "topology": "Ring", "npus": 4},
                                                         {"name": "b", "topology": "Switch", "npus": 2}]})
    d, _ = demand_from_traces(shared_collective_traces(tmp_path), net)
    early, late = d.rank_classes
    assert early.dag.syncs == ((1, 1, 1),) and late.dag.syncs == ((1, 0, 1),)
    model = TimeModel("pipelined", overlap=True)
    bw = (100.0, 50.0)
    ar = collective_time_ns(early.collectives[0], bw, net, model)
    p = predict(d, bw, net, model)
    assert p.class_times_ns == pytest.approx((50e3 + ar + 100e3, 50e3 + ar + 10e3), rel=1e-12)
    path = critical_paths(d, bw, net, model)[0][1]
    assert path == ((1, 0), (0, 1), (0, 2))    # the wait for the late class is on the critical path


def test_replay_runs_cpu_gpu_and_comm_slots_as_the_simulator():
    # Measured on ASTRA-sim (one rank): a CPU op and a GPU kernel of 1000 us overlap (1,000,000 ns);
    # two CPU ops run one after the other (2,000,000 ns).
    net = Network("one", (Dimension("a", "Ring", 2, 0.0),))
    par = RankClass(1e6, (), dag=Dag((("cpu", 1e6), ("comp", 1e6)), ()))
    ser = RankClass(0.0, (), dag=Dag((("cpu", 1e6), ("cpu", 1e6)), ()))
    model = TimeModel("pipelined", overlap=True)
    assert predict(Demand("p", (2,), (par,)), (100.0,), net, model).time_ns == 1e6
    p = predict(Demand("s", (2,), (ser,)), (100.0,), net, model)
    # exposed communication as ASTRA-sim prints it: finish minus summed GPU compute
    assert (p.time_ns, p.exposed_comm_ns) == (2e6, 2e6)


def test_replay_gives_a_free_slot_to_the_first_ready_node():
    # Node 1 waits for a CPU op; node 2 is ready at 0 and takes the GPU first (ASTRA-sim issues the
    # lowest-id *ready* node): 2 runs 0-300 us, 1 runs 300-400 us. A fixed DAG order would give 450.
    net = Network("one", (Dimension("a", "Ring", 2, 0.0),))
    rc = RankClass(4e5, (), dag=Dag((("cpu", 5e4), ("comp", 1e5), ("comp", 3e5)), ((0, 1),)))
    d = Demand("o", (2,), (rc,))
    model = TimeModel("pipelined", overlap=True)
    assert predict(d, (100.0,), net, model).time_ns == 4e5
    ((t, path),) = critical_paths(d, (100.0,), net, model)
    assert t == 4e5 and path == ((0, 2), (0, 1))   # node 1 waited for the GPU slot held by node 2
