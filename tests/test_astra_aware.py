"""timing.astra_aware (ASTRA-sim's congestion-aware backend) against real output of that binary.

tests/fixtures/astra_recorded_aware.json was recorded from a real run of astra-sim 518bd51's
AstraSim_Analytical_Congestion_Aware by ``tools/astra_grid.py --backend aware`` (the command is in
the file): per case the network YAML values, the system.json, ``--num-queues-per-dim``, the
collectives every rank ran one after the other, and the binary's ``finished`` lines. The live
tests need the binary: $ASTRA_SIM_AWARE_BIN, or AstraSim_Analytical_Congestion_Aware beside
$ASTRA_SIM_BIN; the examples test also $ASTRA_SIM_EXAMPLES.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from libra_astra.astra.parse import parse_output
from libra_astra.errors import LibraError
from libra_astra.timing.astra_aware import aware_message_ns, aware_rank_finish_ns
from libra_astra.timing.astra_collective import Coll, Link, astra_bw_gbps, rank_finish_ns
from libra_astra.timing.astra_settings import SystemSettings, settings_from_json

from cli_run import run
from tool_module import tool_module

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "tests" / "fixtures" / "astra_recorded_aware.json").read_text())
_UNAWARE = os.environ.get("ASTRA_SIM_BIN", "")
BIN = os.environ.get("ASTRA_SIM_AWARE_BIN") or (
    str(Path(_UNAWARE).with_name("AstraSim_Analytical_Congestion_Aware")) if _UNAWARE else "")
HAVE_BIN = bool(BIN) and os.access(BIN, os.X_OK)
NO_BIN = "set ASTRA_SIM_AWARE_BIN (or ASTRA_SIM_BIN beside it) to an AstraSim_Analytical_Congestion_Aware binary"


def links_of(net: dict) -> list[Link]:
    return [Link(t, n, astra_bw_gbps(b), lat)
            for t, n, b, lat in zip(net["topology"], net["npus_count"], net["bandwidth"], net["latency"])]


def predicted(case: dict) -> tuple[int, ...]:
    colls = [Coll(k, s, tuple(inv)) for k, s, inv in case["collectives"]]
    return aware_rank_finish_ns(colls, links_of(case["network"]),
                                settings_from_json(case["system"], queues_per_dim=case["queues_per_dim"]))


def test_the_recording_is_the_aware_binarys_and_covers_every_implementation_kind_and_topology():
    assert RECORDED["recorded_with"] == "astra-sim 518bd51 congestion-aware"
    pairs = {(c["system"][f"{k.lower().replace('_', '-')}-implementation"][0], k)
             for c in RECORDED["cases"] for k, _, _ in c["collectives"]}
    impls = {"ring", "direct", "direct2", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect",
             "oneHalvingDoubling"}
    kinds = {"ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL"}
    assert {(i, k) for i in impls for k in kinds if not (i.endswith("alvingDoubling") and k == "ALL_TO_ALL")} <= pairs
    assert {c["network"]["topology"][0] for c in RECORDED["cases"]} == {"Ring", "FullyConnected", "Switch"}
    assert {c["queues_per_dim"] for c in RECORDED["cases"]} == {1, 2}


@pytest.mark.parametrize("case", RECORDED["cases"], ids=lambda c: "-".join(
    [c["system"]["all-reduce-implementation"][0], c["collectives"][0][0], c["network"]["topology"][0],
     str(c["network"]["npus_count"][0]), f"q{c['queues_per_dim']}"]))
def test_every_rank_finishes_at_the_recorded_ns(case):
    simulated = [r.finished_ns for r in parse_output(case["stdout_finished"]).ranks]
    assert list(predicted(case)) == simulated


def _one(topology: str, impl: str, kind: str, n: int = 8, size: int = 1 << 20, **kw) -> tuple[int, ...]:
    s = SystemSettings.uniform(1, impl, endpoint_delay_ns=10, local_mem_bw_gbps=1600.0, **kw)
    return aware_rank_finish_ns([Coll(kind, size, (True,))], [Link(topology, n, astra_bw_gbps(100.0), 500.0)], s)


def test_direct_on_a_switch_serializes_the_uplink():
    # measured on the binary: Switch 8 at 100, latency 500, ed 10, 1 MiB all-gather: 79,140 ns;
    # the n - 1 messages leave one after the other (int(m/B) apart), each pays two hops
    b, m = astra_bw_gbps(100.0), 1 << 20
    ser, hop = int(m / b), int(500 + m / b)
    assert _one("Switch", "direct", "ALL_GATHER") == (2 * 10 + 6 * ser + 2 * hop,) * 8 == (79_140,) * 8
    unaware = rank_finish_ns([Coll("ALL_GATHER", m, (True,))], [Link("Switch", 8, b, 500.0)],
                             SystemSettings.uniform(1, "direct", local_mem_bw_gbps=1600.0))
    assert unaware[0] < 79_140 / 5          # the unaware backend charges the 7 messages as one


def test_a_ring_on_a_switch_pays_both_hops_each_step():
    # measured: 143,790 ns = ed + 7 (2 int(lat + m/B) + ed)
    hop = int(500 + (1 << 20) / astra_bw_gbps(100.0))
    assert _one("Switch", "ring", "ALL_GATHER") == (10 + 7 * (2 * hop + 10),) * 8 == (143_790,) * 8
    assert aware_message_ns(Link("Switch", 8, astra_bw_gbps(100.0), 500.0), 2, 1 << 20) == 2 * hop


def test_two_queues_use_both_directions_of_a_ring():
    one = _one("Ring", "ring", "REDUCE_SCATTER", splits=2, active_chunks=2)
    two = _one("Ring", "ring", "REDUCE_SCATTER", splits=2, active_chunks=2, queues_per_dim=2)
    assert max(two) < max(one)              # the second chunk runs anticlockwise, on other links


@pytest.mark.parametrize("links, words", [
    ([Link("Ring", 4, 10.0, 0.0), Link("Switch", 2, 10.0, 0.0)], "one dimension only"),
    ([Link("Ring", 2, 10.0, 0.0)], "Ring of 2 NPUs"),
])
def test_networks_the_aware_binary_exits_on_are_refused(links, words):
    with pytest.raises(LibraError, match=words):
        aware_rank_finish_ns([Coll("ALL_REDUCE", 1 << 20, (True,) * len(links))], links,
                             SystemSettings.uniform(len(links), local_mem_bw_gbps=1600.0))


def test_predict_backend_aware_refuses_a_two_dimensional_network_in_one_line(tmp_path):
    net = tmp_path / "net.yml"
    net.write_text("topology: [Ring, Switch]\nnpus_count: [4, 2]\nbandwidth: [50, 50]\nlatency: [500, 500]\n")
    sys_json = tmp_path / "sys.json"
    sys_json.write_text(json.dumps({"scheduling-policy": "LIFO", "collective-optimization": "localBWAware",
                                    "preferred-dataset-splits": 1, "local-mem-bw": 1600,
                                    **{f"{k}-implementation": ["ring", "ring"] for k in
                                       ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")}}))
    r = run("predict", tmp_path / "w", "--network-configuration", net, "--system-configuration", sys_json,
            "--backend", "aware", ok=False)
    assert r.exit_code == 1
    err = r.output.strip().splitlines()
    assert len(err) == 1 and "net.yml" in err[0] and "one dimension only" in err[0] and "--backend unaware" in err[0]


@pytest.mark.astra
@pytest.mark.skipif(not HAVE_BIN, reason=NO_BIN)
def test_a_fresh_sample_of_the_grid_matches_the_aware_binary():
    grid = tool_module("astra_grid")
    rng = random.Random(2025)
    compared = 0
    for case in (grid.sample_case(rng, "aware") for _ in range(24)):
        try:
            expected = predicted(case)
        except LibraError:          # a Ring of 2: the binary aborts (tools/astra_grid.py shows it)
            continue
        finished, _ = grid.simulate(case, BIN)
        assert list(expected) == finished, case
        compared += 1
    assert compared >= 18


@pytest.mark.astra
@pytest.mark.skipif(not (HAVE_BIN and os.environ.get("ASTRA_SIM_EXAMPLES")),
                    reason=NO_BIN + ", and ASTRA_SIM_EXAMPLES to an ASTRA-sim checkout")
def test_astra_sims_own_examples_are_predicted_to_the_ns_on_every_rank():
    from libra_astra.astra.predict_inputs import SimInputs, predict_inputs

    tool = tool_module("astra_aware_examples")
    runs = tool.runs(Path(os.environ["ASTRA_SIM_EXAMPLES"]))
    assert any(net.name == "HGX-H100-validated.yml" for net, _, _ in runs) and len(runs) >= 16
    for net, system, ex in runs:
        sim = tool.simulate(BIN, net, system, ex.prefix, 1)
        pred = predict_inputs(SimInputs(str(ex.prefix), str(net), str(system), backend="aware")).prediction
        assert [r.finished_ns for r in pred.ranks] == sim, (net.name, system.name, ex.label)


@pytest.mark.astra
@pytest.mark.skipif(not HAVE_BIN, reason=NO_BIN)
def test_simulate_on_the_aware_binary_compares_with_its_exact_model(tmp_path):
    from libra_astra.astra import emit, simulate
    from libra_astra.demand.types import demand_to_dict, make_collective, single_class
    from libra_astra.model.network import network_from_dict
    from libra_astra.optimize.design import Design, WorkloadRef

    net = network_from_dict({"name": "sw8", "dimensions": [
        {"name": "d0", "topology": "Switch", "npus": 8, "latency_ns": 700.0}]})
    demand = single_class("ar", [8], 20_000.0, [make_collective("ALL_REDUCE", 3 << 20, [8], net=net)])
    (tmp_path / "d.json").write_text(json.dumps(demand_to_dict(demand)))
    emit(Design("d", net, (150.0,), workloads=(WorkloadRef("w", demand=str(tmp_path / "d.json")),)),
         tmp_path / "run", splits=4, endpoint_delay_ns=10, local_mem_bw_gbps=1600.0)
    res = simulate(tmp_path / "run", BIN, timeout_s=120)
    assert (res.backend, res.prediction_by) == ("aware", "predict --backend aware")
    assert res.predicted_time_ns == res.simulated_time_ns
    shown = run("show", tmp_path / "run").output
    assert "congestion-aware backend; its exact model (predict --backend aware) predicted" in shown
    assert "error: +0.000% (predicted against simulated)" in shown
    if _UNAWARE:
        unaware = simulate(tmp_path / "run", _UNAWARE, timeout_s=120, overwrite=True)
        assert unaware.backend == "unaware" and unaware.prediction_by == "emit"
        assert unaware.simulated_time_ns < res.simulated_time_ns       # no contention on the unaware backend


def test_loop_refuses_a_multi_dimensional_network_on_the_aware_binary_before_optimizing(tmp_path):
    from libra_astra.demand.workload import load_workloads
    from libra_astra.loop import run_loop
    from libra_astra.model.cost import load_cost
    from libra_astra.model.network import load_network

    exe = tmp_path / "AstraSim_Analytical_Congestion_Aware"       # told by its name; never started
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    net = load_network(ROOT / "tests/fixtures/real/ring2x4.yml")
    workloads = load_workloads((str(ROOT / "tests/fixtures/real/param_dlrm8/param_dlrm8"),), (), (), net, None)
    with pytest.raises(LibraError, match="one-dimensional networks only and .* has 2; use AstraSim_Analytical_"
                                         "Congestion_Unaware"):
        run_loop(workloads, net, load_cost(ROOT / "network_configs/cost.yml"), out_dir=tmp_path / "loop",
                 binary=str(exe))
    assert not (tmp_path / "loop").exists()


@pytest.mark.astra
@pytest.mark.skipif(not HAVE_BIN, reason=NO_BIN)
def test_loop_on_the_aware_binary_compares_real_traces_with_the_aware_model(tmp_path):
    from libra_astra.demand.workload import load_workloads
    from libra_astra.loop import run_loop
    from libra_astra.model.cost import load_cost
    from libra_astra.model.network import load_network
    from libra_astra.optimize.optimizer import Constraints

    net = load_network(ROOT / "tests/fixtures/real/ring8.yml")
    workloads = load_workloads((str(ROOT / "tests/fixtures/real/param_dlrm8/param_dlrm8"),), (), (), net, None)
    events: list[str] = []
    res = run_loop(workloads, net, load_cost(ROOT / "network_configs/cost.yml"), out_dir=tmp_path / "loop",
                   constraints=Constraints(total_bw_gbps=100), binary=BIN, on_event=events.append)
    assert any("does not follow the congestion-aware backend" in e for e in events)
    assert "predict --backend aware" in res.notes[0]
    for row in res.rows:            # the real DLRM traces, every run: the aware model to the ns
        assert row.predicted_ns == row.simulated_ns, row


def _group_inputs(tmp_path, topology: str):
    from libra_astra.astra.predict_inputs import SimInputs

    case = tool_module("astra_aware_groups").sample_case(random.Random(4))
    case["network"]["topology"] = [topology]
    tool_module("astra_aware_groups").write_inputs(case, tmp_path)
    return SimInputs(f"{tmp_path}/w", f"{tmp_path}/network.yml", f"{tmp_path}/system.json",
                     f"{tmp_path}/groups.json", case["queues_per_dim"], backend="aware")


def test_a_group_on_a_ring_is_refused_on_the_aware_backend(tmp_path):
    from libra_astra.astra.predict_inputs import predict_inputs

    with pytest.raises(LibraError, match="on a Ring network with the congestion-aware backend.*Switch or "
                                         "FullyConnected"):
        predict_inputs(_group_inputs(tmp_path, "Ring"))


GROUPS = json.loads((ROOT / "tests" / "fixtures" / "astra_recorded_aware_groups.json").read_text())


@pytest.mark.parametrize("case", GROUPS["cases"], ids=lambda c: "-".join(map(str, c["factors"])))
def test_group_collectives_finish_at_the_recorded_ns(tmp_path, case):
    # recorded from the aware binary by tools/astra_aware_groups.py (the command is in the file)
    from libra_astra.astra.predict_inputs import SimInputs, predict_inputs

    assert GROUPS["recorded_with"] == "astra-sim 518bd51 congestion-aware"
    case = {**case, "groups": {int(k): v for k, v in case["groups"].items()}}
    tool_module("astra_aware_groups").write_inputs(case, tmp_path)
    pred = predict_inputs(SimInputs(f"{tmp_path}/w", f"{tmp_path}/network.yml", f"{tmp_path}/system.json",
                                    f"{tmp_path}/groups.json", case["queues_per_dim"], backend="aware")).prediction
    assert [r.finished_ns for r in pred.ranks] == [r.finished_ns for r in parse_output(case["stdout_finished"]).ranks]


@pytest.mark.astra
@pytest.mark.skipif(not HAVE_BIN, reason=NO_BIN)
def test_communicator_groups_on_the_aware_binary_match_to_the_ns():
    tool = tool_module("astra_aware_groups")
    rng = random.Random(31)
    compared = 0
    for case in (tool.sample_case(rng) for _ in range(16)):
        sim, pred = tool.compare(case, BIN)
        if isinstance(sim, str):        # the binary's own abort (docs/astra-sim-settings.md)
            continue
        assert sim == pred, case
        compared += 1
    assert compared >= 12
