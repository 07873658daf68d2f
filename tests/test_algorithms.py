"""optimize --algorithms auto: the collective implementations chosen with the bandwidths,
checked against every combination solved on its own and against a grid over the bandwidths."""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cli_run import one_line_error, run
from libra_astra.demand.workload import load_workloads
from libra_astra.errors import LibraError
from libra_astra.model.cost import unpriced
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.algorithms import candidates, choose_algorithms
from libra_astra.optimize.optimizer import Constraints, optimize
from libra_astra.timing.astra_settings import KINDS
from libra_astra.timing.model import TimeModel
from libra_astra.timing.predict import predict
from libra_astra.timing.system_phases import SystemTiming

ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT / "traces/dlrm_16/dlrm"
NET = ROOT / "network_configs/sample_4x4.yml"
BIN = os.environ.get("ASTRA_SIM_BIN", "")


def _problem(net_path=NET, prefix=DLRM, splits=1, active=1):
    net = load_network(net_path)
    wl = load_workloads((str(prefix),), (), (), net, None)
    model = TimeModel("pipelined", splits=splits, local_mem_bw_gbps=1600.0, overlap=True,
                      system=SystemTiming.uniform(net.num_dims, "ring", active_chunks=active, endpoint_delay_ns=10.0))
    return net, wl, model


def test_candidates_are_what_the_simulator_runs_and_the_model_follows():
    ring8 = load_network(ROOT / "tests/fixtures/real/ring8.yml").dims[0]
    assert candidates("ALL_REDUCE", ring8) == ["ring", "direct", "halvingDoubling"]
    assert candidates("ALL_TO_ALL", ring8) == ["ring", "direct"]
    sw6 = network_from_dict({"name": "s", "dimensions": [{"name": "s", "topology": "Switch", "npus": 6}]}).dims[0]
    assert candidates("ALL_REDUCE", sw6) == ["ring", "direct"]


@pytest.mark.parametrize("splits, active", [(1, 1), (4, 2)])
def test_auto_equals_the_best_of_every_combination_solved_alone(splits, active):
    net, wl, model = _problem(splits=splits, active=active)
    cons = Constraints(total_bw_gbps=200.0)
    auto = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model)
    brute = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model, prune=False)
    # every (kind, dimension) the DLRM sample uses: all-reduce and all-to-all on both dimensions
    assert brute.free == (("ALL_REDUCE", 0), ("ALL_REDUCE", 1), ("ALL_TO_ALL", 0), ("ALL_TO_ALL", 1))
    assert brute.combinations == 3 * 3 * 2 * 2 and not brute.pruned
    assert auto.combinations < brute.combinations and auto.pruned
    assert auto.result.fun == pytest.approx(brute.result.fun, rel=1e-9)
    # the choice is never slower than ring everywhere, and here strictly faster
    assert auto.result.fun < auto.ring.fun
    ring = optimize(wl, net, unpriced(net), constraints=cons, model=model, baselines=False)
    assert auto.ring.fun == pytest.approx(ring.fun, rel=1e-12)


def test_auto_matches_a_grid_over_every_combination_and_bandwidth_split():
    net, wl, model = _problem()
    total = 200.0
    auto = choose_algorithms(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=total), model=model)
    free = auto.free
    opts = [candidates(k, net.dims[d]) for k, d in free]
    best = np.inf
    for choice in itertools.product(*opts):
        lists = [list(v) for v in model.system.implementations]
        for (k, d), impl in zip(free, choice):
            lists[KINDS.index(k)][d] = impl
        m = replace(model, system=replace(model.system, implementations=tuple(tuple(v) for v in lists)))
        for share in np.linspace(0.01, 0.99, 99):
            t = predict(wl[0].demand, [share * total, (1 - share) * total], net, m).time_ns
            best = min(best, t)
    # no grid point beats the optimum; the grid's best is within its resolution of it
    assert auto.result.best.time_ns <= best * (1 + 1e-9)
    assert best <= auto.result.best.time_ns * 1.01


def test_cli_prints_the_choice_and_its_gain_and_the_design_keeps_it(tmp_path):
    r = run("optimize", DLRM, "-n", NET, "--total-bw", 200, "--algorithms", "auto", "-o", tmp_path / "d.json")
    assert "combination" in r.output and "vs ring everywhere:" in r.output
    design = json.loads((tmp_path / "d.json").read_text())
    settings = design["system"]["settings"]
    assert settings["all-to-all-implementation"] == ["direct", "direct"]
    assert design["time_model_settings"]["system"]["implementations"]["ALL_TO_ALL"] == ["direct", "direct"]
    out = run("optimize", DLRM, "-n", NET, "--total-bw", 200, "--algorithms", "auto", "--json").output
    data = json.loads(out)
    assert data["algorithms"]["gain_over_ring"] > 1
    one_line_error(run("optimize", DLRM, "-n", NET, "--total-bw", 200, "--algorithms", "auto", "--model", "libra",
                       ok=False),
                   "--algorithms auto applies to --model pipelined only (the LIBRA model has no algorithms); drop "
                   "--model libra", 1)


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
@pytest.mark.parametrize("extra", [(), ("--splits", "4")])
def test_the_simulator_confirms_the_auto_optimum(tmp_path, extra):
    run("optimize", DLRM, "-n", NET, "--total-bw", 200, "--algorithms", "auto", *extra, "-o", tmp_path / "d.json")
    run("emit", tmp_path / "d.json", "--out", tmp_path / "run")
    data = json.loads(run("simulate", tmp_path / "run", "--json").output)
    assert abs(data["prediction_error"]) < 2e-3, data


def test_min_cost_keeps_a_choice_that_meets_a_target_ring_cannot():
    """A time target between the auto optimum's fastest time and ring's: ring everywhere is
    infeasible there, the choice is not (the combination is skipped, not the whole choice)."""
    net, wl, model = _problem()
    cons = Constraints(total_bw_gbps=200.0, total_bw_is_upper_bound=True)
    fast = choose_algorithms(wl, net, unpriced(net), constraints=cons, model=model)
    target = (fast.result.best.time_ns + fast.ring.best.time_ns) / 2
    target_cons = Constraints(total_bw_gbps=200.0, total_bw_is_upper_bound=True, time_target_ns=target)
    with pytest.raises(LibraError, match=r"^time target .* ns is infeasible: the fastest design"):
        optimize(wl, net, unpriced(net), objective="min-cost", constraints=target_cons, model=model, baselines=False)
    got = choose_algorithms(wl, net, unpriced(net), objective="min-cost", constraints=target_cons, model=model)
    assert got.ring is None and got.to_dict()["gain_over_ring"] is None
    assert got.result.best.time_ns <= target * (1 + 1e-9)
