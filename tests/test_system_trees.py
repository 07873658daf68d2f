"""doubleBinaryTree in the optimizer's time model (timing/system_trees.py): the rows against
ASTRA-sim's own timing of the tree (astra_collective, which predict uses and which equals the
simulator to the ns), the optimum against a grid, and the calibrated DLRM example end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from cli_run import run
from libra_astra.demand.types import make_collective, single_class
from libra_astra.model.cost import unpriced
from libra_astra.model.network import Dimension, Network
from libra_astra.optimize.optimizer import Constraints, Workload, optimize
from libra_astra.timing import astra_collective as ac
from libra_astra.timing.astra_settings import KINDS, SystemSettings
from libra_astra.timing.model import TimeModel, collective_rows, collective_time_ns
from libra_astra.timing.system_phases import SystemTiming
from libra_astra.timing.system_rows import _flow
from libra_astra.timing.system_trees import TreePhase

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests/fixtures/real"
BIN = os.environ.get("ASTRA_SIM_BIN", "")
T = "doubleBinaryTree"
# (dimensions as (topology, npus, latency), implementation per dimension, kind, splits, active chunks, baseline)
EXACT = [
    ((("Ring", 8, 500),), (T,), "ALL_REDUCE", 1, 1, False),
    ((("Switch", 4, 700),), (T,), "REDUCE_SCATTER", 3, 1, False),
    ((("FullyConnected", 2, 90),), (T,), "ALL_GATHER", 4, 4, False),
    ((("Ring", 16, 100),), (T,), "ALL_TO_ALL", 2, 1, False),
    ((("Ring", 4, 500), ("Switch", 3, 700)), (T, "ring"), "ALL_REDUCE", 1, 1, False),
    ((("Ring", 5, 300), ("FullyConnected", 8, 200)), ("ring", T), "REDUCE_SCATTER", 2, 1, False),
    ((("Ring", 4, 250), ("Switch", 2, 800)), (T, T), "ALL_GATHER", 2, 2, False),
    ((("Ring", 4, 500), ("Ring", 8, 100)), (T, T), "ALL_REDUCE", 3, 1, True),
    ((("Ring", 4, 500), ("Switch", 3, 700)), (T, "ring"), "ALL_REDUCE", 3, 1, False),    # one queue, fixed order
    ((("Ring", 2, 400), ("FullyConnected", 3, 100), ("Switch", 4, 600)), (T, "ring", T), "ALL_REDUCE", 1, 1, False),
    ((("Ring", 4, 100), ("Switch", 2, 300), ("Ring", 4, 700)), (T, T, T), "ALL_TO_ALL", 2, 1, False),
    ((("Ring", 3, 100), ("Ring", 4, 200), ("Switch", 5, 300)), ("ring", T, "ring"), "ALL_GATHER", 3, 3, False),
]
# which chunk a queue starts next can change with the bandwidths: rows bound the time from below
BOUNDED = [
    ((("Ring", 4, 200), ("FullyConnected", 4, 100)), (T, "ring"), "REDUCE_SCATTER", 5, 2, False),
    ((("Ring", 8, 500),), (T,), "ALL_REDUCE", 4, 2, False),
    ((("Ring", 4, 300), ("Switch", 3, 100), ("Ring", 2, 900)), (T, "ring", T), "ALL_REDUCE", 2, 1, False),
]
SIZE = 9 * 5 * 2**20        # every chunk and ring message a whole multiple of a power-of-two bandwidth


def _case(dims, impls, kind, k, active, base, mem=None, ed=7):
    net = Network("t", tuple(Dimension(f"d{i}", topo, n, float(lat)) for i, (topo, n, lat) in enumerate(dims)))
    t = SystemTiming((tuple(impls),) * len(KINDS), active, float(ed), base)
    model = TimeModel("pipelined", splits=k, local_mem_bw_gbps=mem, system=t)
    settings = SystemSettings(*t.implementations, splits=k, active_chunks=active, endpoint_delay_ns=ed,
                              local_mem_bw_gbps=mem or 1e300, collective_optimization="baseline" if base else
                              "localBWAware")
    c = make_collective(kind, SIZE, net.npus_per_dim, net=net)
    return net, model, settings, c


def _astra_ns(c, net, settings, bw) -> int:
    links = [ac.Link(d.topology, d.npus, b, d.latency_ns) for d, b in zip(net.dims, bw)]
    return ac.collective_time_ns(c.type, int(c.size_bytes), [p > 1 for p in c.participants], links, settings)


def _messages(f) -> int:
    """Messages one chunk sends on its longest chain, times the chunks: ASTRA-sim truncates each."""
    per = sum(4 * int(np.log2(p.n)) + 2 if isinstance(p, TreePhase) else 4 * 16 for _, p in f.phases)
    return per * f.chunks


@pytest.mark.parametrize("case", EXACT, ids=lambda c: f"{c[1]}-{c[2]}-k{c[3]}-ac{c[4]}")
def test_rows_are_astra_sims_tree_time_exactly(case):
    net, model, settings, c = _case(*case)
    f = _flow(c, net, model)
    assert f.exact
    A, const = collective_rows(c, net, model)
    rng = np.random.default_rng(len(str(case)))
    # power-of-two bandwidths: no message truncates, so the rows are the time to round-off
    for _ in range(25):
        bw = 2.0 ** rng.integers(0, 7, size=net.num_dims)
        mine = float(np.max(A @ (1 / bw) + const))
        assert mine == pytest.approx(_astra_ns(c, net, settings, bw), abs=1e-6)
    # any bandwidth: ASTRA-sim's truncation of each message to whole ns, and nothing more
    for _ in range(25):
        bw = rng.uniform(1.0, 500.0, size=net.num_dims)
        exact = _astra_ns(c, net, settings, bw)
        assert exact - 1e-6 <= float(np.max(A @ (1 / bw) + const)) <= exact + _messages(f)


def test_rows_with_reductions_and_uneven_chunks_stay_within_truncation():
    for dims, impls, kind, k, active, base in EXACT:
        net, model, settings, c = _case(dims, impls, kind, k, active, base, mem=1600.0, ed=10)
        c = make_collective(kind, 1_234_567, net.npus_per_dim, net=net)
        f = _flow(c, net, model)
        if not f.exact:     # a last short chunk can leave more chunks than run at once
            continue
        for bw in ([37.0, 210.0, 99.0], [400.0, 3.5, 12.0]):
            exact = _astra_ns(c, net, settings, bw[:net.num_dims])
            mine = collective_time_ns(c, bw[:net.num_dims], net, model)
            assert exact - 1e-6 <= mine <= exact + _messages(f) + 3 * f.chunks * 8


@pytest.mark.parametrize("case", BOUNDED, ids=lambda c: f"{c[1]}-{c[2]}-k{c[3]}-ac{c[4]}")
def test_where_queues_can_reorder_chunks_rows_bound_the_time_and_the_time_is_astra_sims(case):
    net, model, settings, c = _case(*case)
    f = _flow(c, net, model)
    assert not f.exact
    A, const = collective_rows(c, net, model)
    rng = np.random.default_rng(3)
    gaps = []
    for _ in range(20):
        bw = rng.uniform(1.0, 500.0, size=net.num_dims)
        exact = _astra_ns(c, net, settings, bw)
        bound = float(np.max(A @ (1 / bw) + const))
        assert bound <= exact + _messages(f)
        assert collective_time_ns(c, bw, net, model) == exact       # the model's time is the replay's
        gaps.append(exact / bound - 1)
    if case is BOUNDED[0]:
        assert 1e-3 < max(gaps) < 0.1        # the bound is not the time everywhere: the replay is needed


def test_the_other_tree_first_gives_the_same_slowest_rank():
    # ASTRA-sim alternates the two trees over the whole run; the model times a fresh start
    for dims, impls, kind, k, active, base in EXACT:
        net, model, settings, c = _case(dims, impls, kind, k, active, base)
        plans_state = {(kind, d): 0 for d, name in enumerate(impls) if name == T}
        links = [ac.Link(d.topology, d.npus, 50.0 + 30 * i, d.latency_ns) for i, d in enumerate(net.dims)]
        coll = ac.Coll(kind, SIZE, tuple(p > 1 for p in c.participants))
        odd = max(ac.rank_times([ac.collective_plan(coll, tuple(links), settings, plans_state)], tuple(links),
                                settings))
        assert odd == _astra_ns(c, net, settings, [link.bw_gbps for link in links])


def test_optimum_with_trees_matches_a_grid_of_bandwidth_splits():
    net, model, _, _ = _case((("Ring", 8, 500), ("Switch", 4, 900)), (T, "ring"), "ALL_REDUCE", 1, 1, False,
                             mem=1600.0)
    colls = [make_collective("ALL_REDUCE", 2**24, (8, 4), net=net, count=3),
             make_collective("ALL_REDUCE", 2**16, (8, 1), net=net, count=20),
             make_collective("ALL_GATHER", 2**22, (8, 4), net=net, count=2)]
    wl = [Workload(single_class("trees", net.npus_per_dim, 1e5, colls))]
    total = 300.0
    r = optimize(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=total), model=model,
                 baselines=False)
    assert r.success

    def time_ns(bw):
        return 1e5 + sum(c.count * collective_time_ns(c, bw, net, model) for c in colls)
    grid = min(time_ns([s * total, (1 - s) * total]) for s in np.linspace(0.005, 0.995, 199))
    assert r.fun == pytest.approx(time_ns(r.bw_gbps), rel=1e-9)
    assert r.fun <= grid * (1 + 1e-9) and grid <= r.fun * 1.001


def test_calibrated_dlrm_system_file_is_optimized(tmp_path):
    run("calibrate", REAL / "param_dlrm8/param_dlrm8", "-n", REAL / "ring8.yml", "-o", tmp_path / "cal")
    system = tmp_path / "cal/system.json"
    assert json.loads(system.read_text())["all-reduce-implementation"] == [T]
    r = run("optimize", REAL / "param_dlrm8/param_dlrm8", "--network", tmp_path / "cal/network.yml", "--system",
            system, "--total-bw", 150, "-o", tmp_path / "design.json")
    assert "doubleBinaryTree in all-reduce-implementation: each tree collective is timed as its slowest rank" \
        in r.output
    assert json.loads((tmp_path / "design.json").read_text())["time_model_settings"]["system"]["implementations"][
        "ALL_REDUCE"] == [T]


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_calibrated_dlrm_optimum_is_confirmed_by_the_simulator(tmp_path):
    run("calibrate", REAL / "param_dlrm8/param_dlrm8", "-n", REAL / "ring8.yml", "-o", tmp_path / "cal")
    r = run("loop", REAL / "param_dlrm8/param_dlrm8", "-n", tmp_path / "cal/network.yml", "--system",
            tmp_path / "cal/system.json", "--total-bw", 150, "--out", tmp_path / "loop", "--json")
    data = json.loads(r.output[r.output.index("{"):])
    for row in data["rows"]:
        assert abs(row["simulated_ns"] / row["predicted_ns"] - 1) < 1e-3, row


def test_where_rows_only_bound_trees_the_result_says_how_far_it_is_proven():
    # a localBWAware all-reduce over three dimensions, two chunks: the middle queue's order moves
    net, model, settings, c = _case(*BOUNDED[2])
    wl = [Workload(single_class("ar", net.npus_per_dim, 1e5, [c]))]
    r = optimize(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=200.0), model=model,
                 baselines=False)
    assert not r.success and r.status == 3
    assert r.message.startswith(f"not certified: proven within {r.rel_gap:.3%} of the optimum (the time of a "
                                "localBWAware all-reduce over shared queues, or of double binary trees with several "
                                "active chunks and more chunks than that, is bounded from below")
    assert 0.01 < r.rel_gap < 0.1
    # the reported time is ASTRA-sim's at the reported design
    assert r.best.time_ns == pytest.approx(1e5 + _astra_ns(c, net, settings, r.bw_gbps), abs=1e-6)


def test_a_one_entry_tree_list_with_sub_group_collectives_is_refused():
    from libra_astra.demand.types import Collective
    from libra_astra.errors import LibraError

    net, model, _, _ = _case((("Ring", 8, 500),), (T,), "ALL_REDUCE", 1, 1, False)
    group = Collective("ALL_REDUCE", 1e6, (4,), (1.5e6,), (1,), name="ar_tp", algorithm="flat_ring")
    with pytest.raises(LibraError, match=r"^all-reduce-implementation \['doubleBinaryTree'\] with a sub-group "
                                         r"ALL_REDUCE of 4 NPUs: ASTRA-sim uses the group's ring as a tree and "
                                         r"crashes; use ring for that kind$"):
        collective_rows(group, net, model)


def test_a_tree_on_a_dimension_without_bandwidth_takes_forever():
    net, model, _, c = _case(*BOUNDED[1])
    assert collective_time_ns(c, [0.0], net, model) == float("inf")


# A localBWAware all-reduce over three dimensions with a tree in the middle and three chunks: the
# middle dimension's queue takes reduce-scatter and all-gather phases in different orders on
# different ranks, which then wait on each other for ever (the binary below: every rank unfinished)
DEADLOCK = ((("Switch", 4, 100), ("Ring", 4, 200), ("Ring", 4, 300)), ("ring", T, "ring"), "ALL_REDUCE", 3, 1, False)


def test_ranks_that_wait_on_each_other_for_ever_are_named_and_never_end_in_the_model():
    from libra_astra.errors import LibraError

    net, model, settings, c = _case(*DEADLOCK, mem=1600.0, ed=5)
    c = make_collective("ALL_REDUCE", 3 * 2**20, (4, 4, 4), net=net)
    bw = [100.0, 50.0, 70.0]
    with pytest.raises(LibraError, match=r"^doubleBinaryTree: ranks take their chunks' tree phases through a shared "
                                         r"queue in different orders and wait on each other for ever"):
        _astra_ns(c, net, settings, bw)
    assert collective_time_ns(c, bw, net, model) == float("inf")
    wl = [Workload(single_class("ar", net.npus_per_dim, 1e5, [c]))]
    r = optimize(wl, net, unpriced(net), constraints=Constraints(total_bw_gbps=200.0), model=model, baselines=False)
    assert r.status == 3 and r.message.startswith("not certified: no design found both meets the constraints and "
                                                  "ends under ASTRA-sim's queue replay")
    # two chunks finish
    net, model, settings, c = _case(*DEADLOCK[:3], 2, 1, False, mem=1600.0, ed=5)
    c = make_collective("ALL_REDUCE", 3 * 2**20, (4, 4, 4), net=net)
    assert collective_time_ns(c, bw, net, model) == _astra_ns(c, net, settings, bw) > 0


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_the_simulator_leaves_every_rank_unfinished_where_the_model_says_it_never_ends(tmp_path):
    from libra_astra.astra import emit, simulate
    from libra_astra.demand.types import demand_to_dict
    from libra_astra.errors import LibraError
    from libra_astra.optimize.design import Design, WorkloadRef

    net, _, _, _ = _case(*DEADLOCK)
    demand = single_class("ar", [4, 4, 4], 0.0, [make_collective("ALL_REDUCE", 3 * 2**20, [4, 4, 4])])
    (tmp_path / "d.json").write_text(json.dumps(demand_to_dict(demand)))
    design = Design("d", net, (100.0, 50.0, 70.0), workloads=(WorkloadRef("w", demand=str(tmp_path / "d.json")),))
    names = ["ring", T, "ring"]
    system = {"scheduling-policy": "LIFO", "endpoint-delay": 5, "active-chunks-per-dimension": 1,
              "preferred-dataset-splits": 2, "collective-optimization": "localBWAware", "local-mem-bw": 1600.0,
              **{f"{k}-implementation": names for k in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")}}
    emit(design, tmp_path / "run", splits=2, local_mem_bw_gbps=1600.0, system={"path": "s.json", "settings": system})
    assert simulate(tmp_path / "run", BIN, timeout_s=120).simulated_time_ns > 0
    # three chunks: emit's own prediction refuses them, so the file is changed by hand
    written = json.loads((tmp_path / "run/system.json").read_text())
    (tmp_path / "run/system.json").write_text(json.dumps({**written, "preferred-dataset-splits": 3}))
    with pytest.raises(LibraError, match="ASTRA-sim exited 0 but 64 of 64 ranks never finished"):
        simulate(tmp_path / "run", BIN, timeout_s=120, overwrite=True)
