"""optimize --algorithms auto-tree: doubleBinaryTree among the candidates, checked against every
combination solved on its own, where it wins (an all-reduce whose last dimension has 2 NPUs),
where ASTRA-sim cannot run it, and against the simulator."""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from cli_run import one_line_error, run
from libra_astra.demand.types import Collective, demand_to_dict, make_collective, single_class
from libra_astra.errors import InfeasibleError
from libra_astra.model.cost import unpriced
from libra_astra.model.network import Dimension, Network, load_network, network_from_dict
from libra_astra.optimize.algorithms import candidates, choose_algorithms
from libra_astra.optimize.optimizer import Constraints, Workload, optimize
from libra_astra.timing.astra_settings import KINDS
from libra_astra.timing.model import TimeModel
from libra_astra.timing.system_phases import SystemTiming

from test_algorithms import _problem

ROOT = Path(__file__).resolve().parents[1]
BIN = os.environ.get("ASTRA_SIM_BIN", "")
T = "doubleBinaryTree"
# 4 NPUs fully connected (10 ns) x 2 on a switch (100 ns): small all-reduces, 2 chunks
FC4X2 = (("FullyConnected", 4, 10.0), ("Switch", 2, 100.0))


def _net(dims) -> Network:
    return Network("t", tuple(Dimension(f"d{i}", topo, n, lat) for i, (topo, n, lat) in enumerate(dims)))


def _case(dims, colls, splits=2, active=1, mem=1600.0, baseline=False):
    net = _net(dims)
    model = TimeModel("pipelined", splits=splits, local_mem_bw_gbps=mem,
                      system=SystemTiming.uniform(net.num_dims, "ring", active_chunks=active, endpoint_delay_ns=1.0,
                                                  baseline=baseline))
    wl = [Workload(single_class("x", net.npus_per_dim, 1e4, [c(net) for c in colls]))]
    return net, wl, model


def _ar(size, count=1.0):
    return lambda net: make_collective("ALL_REDUCE", size, net.npus_per_dim, net=net, count=count)


def _each_combination_alone(net, wl, model, free, cons) -> dict[bool, float]:
    """The least objective over every combination of the candidates with a tree (True) and
    without (False), each solved by optimize."""
    best = {True: float("inf"), False: float("inf")}
    for choice in itertools.product(*(candidates(k, net.dims[d], trees=True) for k, d in free)):
        lists = [list(v) for v in model.system.implementations]
        for (k, d), impl in zip(free, choice):
            lists[KINDS.index(k)][d] = impl
        m = replace(model, system=replace(model.system, implementations=tuple(tuple(v) for v in lists)))
        try:
            fun = optimize(wl, net, unpriced(net), constraints=cons, model=m, baselines=False).fun
            best[T in choice] = min(best[T in choice], fun)
        except InfeasibleError:
            pass
    return best


def test_candidates_with_trees():
    ring8 = load_network(ROOT / "tests/fixtures/real/ring8.yml").dims[0]
    assert candidates("ALL_REDUCE", ring8, trees=True) == ["ring", "direct", "halvingDoubling", T]
    assert candidates("ALL_TO_ALL", ring8, trees=True) == ["ring", "direct", T]
    assert candidates("ALL_REDUCE", ring8) == ["ring", "direct", "halvingDoubling"]
    sw6 = network_from_dict({"name": "s", "dimensions": [{"name": "s", "topology": "Switch", "npus": 6}]}).dims[0]
    assert candidates("ALL_REDUCE", sw6, trees=True) == ["ring", "direct"]


# (dimensions, collectives, splits, active chunks, baseline): trees win on a last dimension of 2 NPUs
# (cases 0, 1, 2 and 5), lose on a Ring of 16 and for all-reduce with all-to-all on 4 x 8
CASES = [
    (FC4X2, (_ar(2**14),), 2, 1, False),
    (FC4X2, (_ar(2**14, 4),), 2, 1, False),
    ((("Ring", 2, 500.0),), (_ar(2**14),), 3, 3, False),
    ((("Ring", 16, 500.0),), (_ar(2**12),), 1, 1, False),
    ((("Ring", 4, 100.0), ("Ring", 8, 500.0)),
     (_ar(2**16), lambda n: make_collective("ALL_TO_ALL", 2**16, n.npus_per_dim, net=n)), 2, 1, False),
    ((("Switch", 4, 100.0), ("Ring", 2, 2000.0)), (_ar(2**18),), 3, 3, True),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_auto_tree_equals_every_combination_solved_alone(case):
    dims, colls, splits, active, baseline = CASES[case]
    net, wl, model = _case(dims, colls, splits, active, baseline=baseline)
    cons = Constraints(total_bw_gbps=100.0 * net.num_dims)
    auto = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model, trees=True)
    brute = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model, trees=True, prune=False)
    assert brute.combinations == len(list(itertools.product(*(candidates(k, net.dims[d], trees=True)
                                                             for k, d in brute.free))))
    assert not brute.pruned and auto.combinations <= brute.combinations
    assert auto.result.fun == pytest.approx(brute.result.fun, rel=1e-9)
    alone = _each_combination_alone(net, wl, model, auto.free, cons)
    assert auto.result.fun == pytest.approx(min(alone.values()), rel=1e-9)
    assert auto.tree_chosen == (case in (0, 1, 2, 5)) == (alone[True] < alone[False])
    assert brute.tree_best.fun == pytest.approx(alone[True], rel=1e-9)
    assert auto.tree_free.fun == pytest.approx(alone[False], rel=1e-9)
    # the best without trees is auto's own choice
    plain = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model)
    assert auto.tree_free.fun == pytest.approx(plain.result.fun, rel=1e-9)
    if not auto.tree_chosen:
        assert auto.result.fun == plain.result.fun and auto.timing == plain.timing


def test_the_tree_wins_a_small_all_reduce_over_a_dimension_of_two():
    net, wl, model = _case(FC4X2, (_ar(2**14),))
    got = choose_algorithms(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=200.0), model=model,
                            trees=True)
    assert got.timing.implementations[KINDS.index("ALL_REDUCE")] == ("direct", T)
    assert (got.combinations, len(got.pruned)) == (4, 4)
    assert got.result.best.time_ns == pytest.approx(10741.0455, abs=1e-3)
    assert got.tree_free.best.time_ns == pytest.approx(10914.92, abs=1e-3)
    assert got.ring.best.time_ns == pytest.approx(11042.2, abs=0.1)
    d = got.to_dict()["trees"]
    assert d["chosen"] and d["best_without_trees"]["time_ns"] == got.tree_free.best.time_ns
    assert d["time_is"].startswith("the slowest rank of each tree collective, summed along a chain: an upper bound")


def test_without_trees_the_record_and_the_result_are_autos():
    net, wl, model = _problem()
    cons = Constraints(total_bw_gbps=200.0)
    plain = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model)
    tree = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model, trees=True)
    assert "trees" not in plain.to_dict()
    assert not tree.tree_chosen and tree.result.fun == plain.result.fun and tree.timing == plain.timing
    assert tree.result.bw_gbps == plain.result.bw_gbps
    # every tree proven never faster on the DLRM sample: the same one combination is solved
    assert tree.combinations == plain.combinations == 1
    assert {(p.kind, p.dim, p.by) for p in tree.pruned if p.implementation == T} == {
        ("ALL_REDUCE", 0, "ring"), ("ALL_REDUCE", 1, "direct"), ("ALL_TO_ALL", 0, "ring"), ("ALL_TO_ALL", 1, "ring")}


def test_trees_are_no_candidates_where_astra_sim_cannot_run_them():
    # a one-dimensional network with a sub-group all-reduce: ASTRA-sim would use the tree for the group
    net, wl, model = _case((("Ring", 8, 500.0),), (_ar(2**16), lambda n: Collective(
        "ALL_REDUCE", 1e6, (4,), (1.5e6,), (1,), name="ar_tp", algorithm="flat_ring")))
    got = choose_algorithms(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=100.0), model=model,
                            trees=True)
    assert got.refused == (("ALL_REDUCE", 0, "sub-group ALL_REDUCE of 4 NPUs with a one-entry list (ASTRA-sim uses "
                                             "the group's ring as a tree and crashes)"),)
    # an all-gather goes on from dimension 1 to dimension 0: no tree on 1; a group on half of
    # dimension 0: emit splits it, no tree there; a Switch of 6: not a power of two
    net, wl, model = _case((("Ring", 4, 100.0), ("Switch", 2, 100.0), ("Switch", 6, 100.0)), (
        lambda n: make_collective("ALL_GATHER", 2**16, (4, 2, 6), net=n),
        lambda n: make_collective("ALL_REDUCE", 2**16, (2, 1, 1), net=n)))
    got = choose_algorithms(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=300.0), model=model,
                            trees=True)
    why = {(k, d): w for k, d, w in got.refused}
    split = ("a group covers part of the dimension: emit splits it and ASTRA-sim would run one tree per piece, which "
             "the model does not time")
    assert why == {("ALL_REDUCE", 0): split, ("ALL_GATHER", 0): split,
                   ("ALL_GATHER", 1): "the all-gather goes on to lower dimensions: a tree would leave the chunk "
                                      "ungathered for them (ASTRA-sim times less data than the all-gather moves)",
                   ("ALL_GATHER", 2): "6 NPUs, not a power of two (ASTRA-sim crashes)"}
    assert not any(T in names for names in got.timing.implementations)


def _demand(tmp_path, count: float) -> tuple[Path, Path]:
    net_file = tmp_path / "net.yml"
    net_file.write_text("name: fc4x2\ndimensions:\n"
                        "  - {name: node, topology: FullyConnected, npus: 4, latency_ns: 10}\n"
                        "  - {name: pod, topology: Switch, npus: 2, latency_ns: 100}\n")
    net = load_network(net_file)
    d = single_class("small_ar", net.npus_per_dim, 1e4, [_ar(2**14, count)(net)], ["node", "pod"])
    path = tmp_path / f"ar{count:g}.json"
    path.write_text(json.dumps(demand_to_dict(d)))
    return path, net_file


def test_cli_reports_the_best_tree_combination_when_none_is_chosen():
    """The DLRM sample with 4 splits: no tree is pruned (the other implementations' rows only
    bound their time there), none is chosen; the best with one is printed, and the choice is auto's."""
    args = ("optimize", ROOT / "traces/dlrm_16/dlrm", "-n", ROOT / "network_configs/sample_4x4.yml", "--total-bw", 200,
            "--splits", 4, "--json")
    tree = json.loads(run(*args, "--algorithms", "auto-tree").output)
    plain = json.loads(run(*args, "--algorithms", "auto").output)
    assert tree["algorithms"]["combinations_solved"] == 4 and plain["algorithms"]["combinations_solved"] == 1
    assert tree["optimum"] == plain["optimum"]
    assert tree["algorithms"]["implementations"] == plain["algorithms"]["implementations"]
    best = tree["algorithms"]["trees"]["best_with_trees"]
    assert not tree["algorithms"]["trees"]["chosen"] and best["objective_value"] > tree["objective_value"]
    text = run(*args[:-1], "--algorithms", "auto-tree").output
    assert "  best with a tree: " in text and "(each tree collective its slowest rank: ASTRA-sim can run" in text


AUTO_TREE = ("--total-bw", 200, "--splits", 2, "--local-mem-bw", 1600, "--algorithms", "auto-tree")


def test_cli_reports_the_tree_and_the_best_without(tmp_path):
    demand, net = _demand(tmp_path, 1)
    r = run("optimize", "--demand", demand, "-n", net, *AUTO_TREE, "-o", tmp_path / "d.json")
    assert "all-reduce-implementation      pod        doubleBinaryTree" in r.output
    assert "best without trees: 10.9149 us; with trees each tree collective counts its slowest rank" in r.output
    settings = json.loads((tmp_path / "d.json").read_text())["system"]["settings"]
    assert settings["all-reduce-implementation"] == ["direct", T]
    one_line_error(run("optimize", "--demand", demand, "-n", net, "--total-bw", 200, "--algorithms", "auto-tree",
                       "--model", "libra", ok=False),
                   "--algorithms auto-tree applies to --model pipelined only (the LIBRA model has no algorithms); "
                   "drop --model libra", 1)


@pytest.mark.parametrize("count", [1, 4])
def test_predict_times_the_chosen_tree_design_at_most_as_the_optimizer(tmp_path, count):
    """One tree all-reduce: the optimizer's time is predict's (but for whole-ns truncation); a
    chain of four: predict's ranks start the next one early, and the optimizer's time is above."""
    demand, net = _demand(tmp_path, count)
    out = json.loads(run("optimize", "--demand", demand, "-n", net, *AUTO_TREE, "--json", "-o",
                         tmp_path / "d.json").output)
    model_ns = out["optimum"]["time_ns"]
    run("emit", tmp_path / "d.json", "--out", tmp_path / "run")
    exact = json.loads(run("predict", tmp_path / "run", "--json").output)["time_ns"]
    assert exact == {1: 10736, 4: 12386}[count]
    assert model_ns == pytest.approx({1: 10741.0455, 4: 12964.1822}[count], abs=1e-3)
    # and the best without trees (exact: no tree) is slower than either
    assert out["algorithms"]["trees"]["best_without_trees"]["time_ns"] == pytest.approx(
        {1: 10914.92, 4: 13659.68}[count], abs=1e-3)


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
@pytest.mark.parametrize("count", [1, 4])
def test_the_simulator_runs_the_chosen_tree_as_predict_says(tmp_path, count):
    demand, net = _demand(tmp_path, count)
    run("optimize", "--demand", demand, "-n", net, *AUTO_TREE, "-o", tmp_path / "d.json")
    run("emit", tmp_path / "d.json", "--out", tmp_path / "run")
    sim = json.loads(run("simulate", tmp_path / "run", "--json").output)
    assert sim["simulated_time_ns"] == json.loads(run("predict", tmp_path / "run", "--json").output)["time_ns"]
    # the optimizer's time (emit's prediction) bounds the simulated one from above
    assert sim["simulated_time_ns"] <= sim["predicted_time_ns"]
    assert (count == 1) == (abs(sim["prediction_error"]) < 2e-3)
