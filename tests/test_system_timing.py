"""The optimizer's time model for a user's system settings (timing/system_phases.py,
system_flow.py, system_rows.py), checked against ASTRA-sim's own rules as
timing/astra_collective.py replays them to the nanosecond."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from libra_astra.demand.types import make_collective
from libra_astra.demand.workload import load_workloads
from libra_astra.errors import LibraError
from libra_astra.model.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from libra_astra.model.network import Dimension, load_network, network_from_dict
from libra_astra.timing import astra_collective as ac
from libra_astra.timing.astra_settings import KINDS, SystemSettings
from libra_astra.timing.model import TimeModel, collective_rows, collective_time_ns
from libra_astra.timing.settings import model_from_settings, model_settings
from libra_astra.timing.system_flow import Flow, flow_rows, replay_ns
from libra_astra.timing.system_phases import Phase, SystemTiming, check_timing, phase

ROOT = Path(__file__).resolve().parents[1]
KIND_LIST = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)


def _cases():
    for topo, n, alg, ptype in itertools.product(("Ring", "FullyConnected", "Switch"), (2, 3, 4, 8, 6),
                                                 ("ring", "direct", "halvingDoubling"), KIND_LIST):
        if alg == "halvingDoubling" and (n & (n - 1) or ptype == ALL_TO_ALL):
            continue
        yield topo, n, alg, ptype


@pytest.mark.parametrize("topo, n, alg, ptype", list(_cases()))
def test_phase_is_astra_sims_time_but_for_its_truncation_to_whole_ns(topo, n, alg, ptype):
    bw, lat = 7.3, 523.25
    for m, ed, mem in ((2**30 * n, 10, 1600.0), (12345 * n, 1, 3.0), (2**20 * n, 37, 1e9)):
        exact = ac._phase_ns(alg, ptype, ac._Dim(n, (ac.Link(topo, n, bw, lat),), False), m, -1, ed, mem)
        p = phase(alg, ptype, n, m, Dimension("d", topo, n, lat), ed, mem, 0)
        mine = p.a_bytes / bw + p.c_ns
        # ASTRA-sim truncates each message (and each reduction's three accesses) to whole ns; a
        # direct all-reduce on a Ring overlaps its reductions with the wait for the farthest peer
        # by up to one hop latency more when messages are short (the model takes the longer)
        slack = 2 * n * n * 4 + (lat if alg == "direct" and ptype == ALL_REDUCE and topo == "Ring" else 0)
        assert exact - 4 <= mine <= exact + slack, (m, ed, mem, exact, mine)


def _dlrm():
    net = load_network(ROOT / "network_configs/sample_4x4.yml")
    d = load_workloads((str(ROOT / "traces/dlrm_16/dlrm"),), (), (), net, None)[0].demand
    return net, sorted({c for rc in d.rank_classes for c in rc.collectives if c.algorithm == "hierarchical"},
                       key=lambda c: (c.type, c.size_bytes))


SETTINGS = [  # (implementation per kind or one for all, active chunks, splits, endpoint delay, local-mem-bw, baseline)
    ("ring", 1, 1, 1, 1e9, False), ("ring", 1, 4, 10, 3350.0, False), ("ring", 2, 4, 10, 3350.0, False),
    ("ring", 3, 5, 7, 800.0, False), ("direct_pod", 2, 4, 10, 3350.0, False), ("hd", 1, 3, 5, 1600.0, True),
    ("hd", 2, 4, 10, 1600.0, False), ("ring", 1, 2, 10, 50.0, True), ("direct_pod", 1, 1, 10, 100.0, False),
]


def _timing(name: str, ac_: int, ed: float, base: bool) -> SystemTiming:
    lists = {"ring": ("ring", "ring"), "direct_pod": ("ring", "direct"), "hd": ("halvingDoubling", "halvingDoubling")}
    names = lists[name]
    per_kind = tuple(("direct", "direct") if k == ALL_TO_ALL and name == "hd" else names for k in KINDS)
    return SystemTiming(per_kind, ac_, float(ed), base)


@pytest.mark.parametrize("name, ac_, k, ed, mem, base", SETTINGS)
def test_collectives_of_the_dlrm_sample_match_astra_sim_within_truncation(name, ac_, k, ed, mem, base):
    net, colls = _dlrm()
    t = _timing(name, ac_, ed, base)
    model = TimeModel("pipelined", splits=k, local_mem_bw_gbps=mem, system=t)
    settings = SystemSettings(*t.implementations, splits=k, active_chunks=ac_, endpoint_delay_ns=ed,
                              local_mem_bw_gbps=mem, collective_optimization="baseline" if base else "localBWAware")
    for bw in ([100.0, 37.0], [12.5, 400.0]):
        links = [ac.Link(d.topology, d.npus, b, d.latency_ns) for d, b in zip(net.dims, bw)]
        for c in colls:
            exact = ac.collective_time_ns(c.type, int(c.size_bytes), [p > 1 for p in c.participants], links, settings)
            mine = collective_time_ns(c, bw, net, model)
            assert exact - 64 <= mine <= exact * 1.003, (c.type, c.size_bytes, bw, exact, mine)


def _flow(K, cap, shape):
    rng = np.random.default_rng(K * 31 + cap)
    phases = tuple((q, Phase(d, float(rng.uniform(1e3, 1e6)), float(rng.uniform(0, 5e3)))) for q, d in shape)
    return Flow(phases, K, cap)


SERIES = ((0, 0), (1, 1), (2, 2))               # reduce-scatter over three dimensions
SHARED = ((0, 0), (1, 1), (2, 2), (1, 1), (0, 0))   # localBWAware all-reduce over three


@pytest.mark.parametrize("K, cap", [(1, 1), (2, 1), (4, 1), (4, 2), (5, 2), (7, 3), (16, 4)])
def test_rows_equal_the_queue_replay_when_exact_and_bound_it_otherwise(K, cap):
    rng = np.random.default_rng(K + 10 * cap)
    for shape in (SERIES, SHARED, ((0, 0),)):
        f = _flow(K, cap, shape)
        A, const = flow_rows(f, 3)
        for _ in range(50):
            inv = 1.0 / rng.uniform(1.0, 500.0, size=3)
            bound = float(np.max(A @ inv + const))
            t = replay_ns(f, tuple(inv))
            if f.exact:
                assert bound == pytest.approx(t, rel=1e-12)
            else:
                assert bound <= t * (1 + 1e-12)


def test_series_flow_is_its_bottleneck_waves_plus_one_pass_of_the_rest():
    # three phases of 10, 30 and 20 ns, 5 chunks two at a time: W = 2 waits at the 30 ns queue
    f = Flow(tuple((q, Phase(q, 0.0, c)) for q, c in enumerate((10.0, 30.0, 20.0))), 5, 2)
    assert replay_ns(f, (1.0, 1.0, 1.0)) == 60.0 + 2 * 30.0
    A, const = flow_rows(f, 3)
    assert float(np.max(const)) == 120.0


def test_system_timing_round_trips_through_the_design_settings():
    t = SystemTiming(((("ring", "direct"),) * 4), 2, 10.0, True)
    m = TimeModel("pipelined", splits=4, local_mem_bw_gbps=3350.0, system=t, overlap=True)
    assert model_from_settings(model_settings(m), "design.json") == m
    with pytest.raises(LibraError, match=r"^design.json: bad time_model_settings.system"):
        model_from_settings({**model_settings(m), "system": {"active_chunks": 2}}, "design.json")


@pytest.mark.parametrize("names, npus, message", [
    (("ring", "doubleBinaryTree"), (4, 6), "all-reduce-implementation[1] doubleBinaryTree needs a power of two "
                                           "NPUs, not 6 (ASTRA-sim crashes)"),
    (("oneRing", "ring"), (4, 4), "all-reduce-implementation[0] 'oneRing': the optimizer does not model it (it "
                                  "flattens every dimension into one ring)"),
    (("ring", "direct2"), (4, 4), "all-reduce-implementation[1] 'direct2': a direct window below the dimension's 3 "
                                  "peers is not modeled"),
    (("ring", "halvingDoubling"), (4, 6), "all-reduce-implementation[1] halvingDoubling needs a power of two NPUs, "
                                          "not 6"),
    (("ring",), (4, 4), "all-reduce-implementation has 1 entries for a network of 2 dimensions"),
])
def test_settings_the_model_does_not_follow_are_refused_naming_file_and_key(names, npus, message):
    dims = (Dimension("a", "Ring", npus[0], 500.0), Dimension("b", "Switch", npus[1], 700.0))
    t = SystemTiming((names,) + (("ring", "ring"),) * 3)
    with pytest.raises(LibraError) as e:
        check_timing(t, dims, "sys.json")
    assert str(e.value).startswith(f"sys.json: {message}")


def test_halving_doubling_all_to_all_is_refused_when_the_workload_has_one():
    net = network_from_dict({"name": "s4", "dimensions": [{"name": "s", "topology": "Switch", "npus": 4}]})
    t = SystemTiming((("ring",), ("ring",), ("ring",), ("halvingDoubling",)))
    check_timing(t, net.dims, "sys.json")
    model = TimeModel("pipelined", splits=1, local_mem_bw_gbps=1600.0, system=t)
    assert collective_time_ns(make_collective("ALL_REDUCE", 2**20, (4,), net=net), [100.0], net, model) > 0
    with pytest.raises(LibraError, match=r"^all-to-all-implementation\[0\] halvingDoubling: the workload has "
                                         r"all-to-alls, which ASTRA-sim does not implement with it"):
        collective_time_ns(make_collective("ALL_TO_ALL", 2**20, (4,), net=net), [100.0], net, model)


def test_bounded_collectives_are_timed_by_the_replay_not_the_bound():
    net = network_from_dict({"name": "r4s4", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 4, "latency_ns": 500},
        {"name": "switch", "topology": "Switch", "npus": 4, "latency_ns": 700}]})
    c = make_collective("ALL_REDUCE", 2**30, (4, 4), net=net)
    model = TimeModel("pipelined", splits=8, local_mem_bw_gbps=1600.0,
                      system=SystemTiming.uniform(2, "ring", active_chunks=3, endpoint_delay_ns=10.0))
    A, const = collective_rows(c, net, model)
    gaps = []
    for bw in ([200.0, 50.0], [50.0, 200.0], [90.0, 110.0], [10.0, 300.0]):
        bound = float(np.max(A @ (1.0 / np.array(bw)) + const))
        t = collective_time_ns(c, bw, net, model)
        assert t >= bound * (1 - 1e-12)
        gaps.append(t / bound - 1)
        links = [ac.Link(d.topology, d.npus, b, d.latency_ns) for d, b in zip(net.dims, bw)]
        s = SystemSettings.uniform(2, "ring", splits=8, active_chunks=3, endpoint_delay_ns=10, local_mem_bw_gbps=1600.0)
        exact = ac.collective_time_ns("ALL_REDUCE", 2**30, (True, True), links, s)
        assert exact <= t * (1 + 1e-9) and t <= exact * 1.001
    assert max(gaps) > 1e-6      # the bound is not the time everywhere: the replay is needed


def test_where_rows_only_bound_the_time_the_result_says_how_far_it_is_proven():
    from libra_astra.demand.types import single_class
    from libra_astra.model.cost import unpriced
    from libra_astra.optimize.optimizer import Constraints, Workload, evaluate, optimize

    net = load_network(ROOT / "network_configs/paper_3d.yml")
    d = single_class("ar", net.npus_per_dim, 1e5, [make_collective("ALL_REDUCE", 2**30, net.npus_per_dim, net=net)])
    wl = [Workload(d)]
    cons = Constraints(total_bw_gbps=300.0)
    model = TimeModel("pipelined", splits=8, local_mem_bw_gbps=1600.0,
                      system=SystemTiming.uniform(3, "ring", active_chunks=3, endpoint_delay_ns=10.0))
    r = optimize(wl, net, unpriced(net), constraints=cons, model=model)
    assert not r.success and r.status == 3
    assert r.message.startswith(f"not certified: proven within {r.rel_gap:.3%} of the optimum")
    assert 0 < r.rel_gap < 0.05 and r.dual_bound < r.fun
    # the reported time is the queue replay's at the reported design, which meets the constraints
    again = evaluate(wl, net, unpriced(net), r.bw_gbps, cons, model)
    assert again.feasible and again.time_ns == r.best.time_ns == r.fun
    # one active chunk per queue: the rows are the time, and the optimum is certified as usual
    exact = optimize(wl, net, unpriced(net), constraints=cons,
                     model=replace(model, splits=4, system=replace(model.system, active_chunks=2)))
    assert exact.success and exact.rel_gap < 1e-8
