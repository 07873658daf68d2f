"""The GPU-faithful model as an optimization target: PARAM's measured 8-GPU DLRM run, its replay
as one max-plus graph, critical paths as cutting planes, and the optimum against brute force."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.demand.workload import Workload
from libra_astra.measure.faithful import faithful_graph
from libra_astra.measure.faithful_time import faithful_time
from libra_astra.measure.kineto import read_profiles
from libra_astra.measure.measurement import measure_profiles
from libra_astra.measure.replay import replay
from libra_astra.model.cost import load_cost, unpriced
from libra_astra.model.network import load_network
from libra_astra.optimize.optimizer import Constraints, optimize
from libra_astra.timing.model import TimeModel

REAL = Path(__file__).parent / "fixtures" / "real"
DLRM = REAL / "param_dlrm8" / "param_dlrm8"
COST = Path(__file__).parent.parent / "network_configs" / "cost.yml"
BIN = os.environ.get("ASTRA_SIM_BIN", "")


def _run(net_file: str):
    profiles, notes = read_profiles([str(DLRM)])
    net = load_network(REAL / net_file)
    m = measure_profiles(profiles, notes, net, str(DLRM))
    return profiles, net, m, faithful_time(m, profiles, net, TimeModel("pipelined", splits=1, local_mem_bw_gbps=1e9))


@pytest.fixture(scope="module")
def ring2x4():
    return _run("ring2x4.yml")


@pytest.fixture(scope="module")
def ring8():
    return _run("ring8.yml")


def _model(ft) -> TimeModel:
    return TimeModel("pipelined", splits=1, local_mem_bw_gbps=1e9, overlap=True, replay=ft)


@pytest.mark.parametrize("scale", [0.0, 0.1, 1.0, 10.0, 1000.0])
def test_graph_is_the_replay(ring8, scale):
    profiles, _, m, ft = ring8
    transfer = [int(c.transfer_ns * scale) for c in m.collectives]
    want = [r.step_ns for r in replay(profiles, m.collectives, lambda c: transfer[c.index], m.world_size,
                                      m.clock_offsets_ns)]
    assert [round(s) for s in ft.graph.rank_steps_ns(transfer)] == want


def test_a_step_ends_after_the_device_work_it_launched(ring8):
    profiles, _, m, _ = ring8
    # every collective's kernels run one after another on each rank's NCCL stream within the step
    slow = [1000 * c.transfer_ns for c in m.collectives]
    steps = replay(profiles, m.collectives, lambda c: slow[c.index], m.world_size, m.clock_offsets_ns)
    assert min(r.step_ns for r in steps) >= sum(slow)


def test_critical_paths_are_tight_here_and_bounds_elsewhere(ring2x4):
    _, net, m, ft = ring2x4
    rows = ft.demand.rank_classes[0].collectives
    from libra_astra.timing.model import demand_rows

    A, g, starts = demand_rows(ft.demand, net, _model(ft))
    ends = np.r_[starts[1:], A.shape[0]]

    def coll_ns(bw):
        v = A @ (1.0 / np.asarray(bw)) + g
        return np.array([v[s:e].max() for s, e in zip(starts, ends)])

    at = (30.0, 70.0)
    paths = ft.critical_paths(at)
    assert len(paths) == 8 and len({k for k, *_ in paths}) == 8
    steps = ft.rank_steps_ns(at)
    for bw in (at, (1.0, 0.5), (400.0, 3.0)):
        t = coll_ns(bw)
        exact = ft.rank_steps_ns(bw)
        for (_, comp, items, counts), step_at, step in zip(paths, steps, exact):
            bound = comp + float(np.dot(counts, t[items]))
            # the rows are ASTRA-sim's collective times to the nanosecond rounding of each collective
            slack = 2.0 * len(items) + 1e-6 * step
            if bw == at:
                assert bound == pytest.approx(step_at, abs=slack)
            assert bound <= step + slack
    assert len(rows) == sum(1 for i in ft.item_of if i >= 0) == 8


def test_perf_optimum_against_brute_force(ring2x4):
    _, net, _, ft = ring2x4
    r = optimize([Workload(ft.demand)], net, unpriced(net), objective="perf",
                 constraints=Constraints(total_bw_gbps=10.0), model=_model(ft))
    assert r.success and sum(r.bw_gbps) == pytest.approx(10.0)
    grid = np.linspace(0.005, 9.995, 1999)
    brute = min(ft.time_ns((b, 10.0 - b)) for b in grid)
    assert r.best.time_ns <= brute + 2.0
    assert r.dual_bound <= r.best.time_ns and r.best.time_ns == ft.time_ns(r.bw_gbps)


@pytest.mark.parametrize("target_ms", [20.5, 24.0])
def test_min_cost_optimum_against_bisection(ring8, target_ms):
    _, net, _, ft = ring8
    target = target_ms * 1e6
    r = optimize([Workload(ft.demand)], net, load_cost(COST), objective="min-cost",
                 constraints=Constraints(time_target_ns=target), model=_model(ft))
    lo, hi = 1e-4, 1e4                      # the step falls as the one bandwidth grows
    for _ in range(80):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ft.time_ns((mid,)) > target else (lo, mid)
    assert r.bw_gbps[0] == pytest.approx(hi, rel=1e-4)
    assert ft.time_ns(r.bw_gbps) <= target * (1 + 1e-6)


def test_cli_shows_both_optima_and_writes_the_faithful_design(tmp_path):
    out = tmp_path / "gf.json"
    res = CliRunner().invoke(main, ["optimize", str(DLRM), "--network", str(REAL / "ring8.yml"), "--cost", str(COST),
                                    "--objective", "min-cost", "--time-target", "24e6", "--measured", str(DLRM),
                                    "--gpu-faithful", "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[:res.output.rindex("}") + 1])
    gf = data["gpu_faithful"]
    assert gf["success"] and gf["time_ns"] == pytest.approx(24e6, rel=1e-6)
    assert gf["bandwidth_gbps"][0] < gf["model_optimum"]["bandwidth_gbps"][0]
    assert max(gf["rank_steps_ns"]) == gf["time_ns"]
    design = json.loads(out.read_text())
    assert design["bandwidth_gbps"] == gf["bandwidth_gbps"]
    # the design's time is what the simulator should give for the traces at those bandwidths
    assert design["predicted_time_ns"] == gf["model_time_ns"]


@pytest.mark.parametrize("args, message", [
    ([], "Error: --gpu-faithful optimizes a measured run: give its Kineto traces with --measured KINETO"),
    (["--measured", str(DLRM), "--algorithms", "auto"],
     "Error: --gpu-faithful takes the implementations as the system settings give them; drop --algorithms auto "
     "(or choose them first and pass the design's system.json with --system)"),
])
def test_cli_refusals(args, message):
    res = CliRunner().invoke(main, ["optimize", str(DLRM), "--network", str(REAL / "ring8.yml"), "--total-bw", "10",
                                    "--gpu-faithful", *args])
    assert res.exit_code == 1 and res.output.strip().splitlines()[-1] == message


def test_graph_refuses_collectives_missing_from_every_profile(ring8):
    profiles, _, m, _ = ring8
    with pytest.raises(Exception, match="the replay matched 8 collectives, the measurement 7"):
        faithful_graph(profiles, m.collectives[:7], m.world_size, m.clock_offsets_ns, "x")


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_simulator_runs_the_faithful_optimum_with_the_gpu_order(tmp_path):
    run = CliRunner().invoke
    assert run(main, ["doctor", str(DLRM), "--fix", "--gpu-order", "--out", str(tmp_path / "d")]).exit_code == 0
    res = run(main, ["optimize", str(tmp_path / "d"), "--network", str(REAL / "ring8.yml"), "--cost", str(COST),
                     "--objective", "min-cost", "--time-target", "24e6", "--measured", str(DLRM), "--gpu-faithful",
                     "-o", str(tmp_path / "gf.json")])
    assert res.exit_code == 0, res.output
    assert run(main, ["emit", str(tmp_path / "gf.json"), "--out", str(tmp_path / "run")]).exit_code == 0
    res = run(main, ["simulate", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    sim = float(re.search(r"simulated time: ([\d.]+) ms", res.output).group(1))
    pred = json.loads((tmp_path / "gf.json").read_text())["predicted_time_ns"] / 1e6
    assert abs(pred - sim) / sim < 0.01


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_loop_simulates_the_faithful_optimum(tmp_path):
    res = CliRunner().invoke(main, ["loop", str(DLRM), "--network", str(REAL / "ring8.yml"), "--cost", str(COST),
                                    "--objective", "min-cost", "--time-target", "24e6", "--measured", str(DLRM),
                                    "--gpu-faithful", "--out", str(tmp_path / "loop")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "loop" / "loop.json").read_text())
    opt = optimize_cli_faithful_bw()
    assert data["best"]["bandwidth_gbps"] == pytest.approx(opt, rel=1e-9)
    assert any(n.startswith("optimized for the GPU-faithful step") for n in data["notes"])


def optimize_cli_faithful_bw() -> list[float]:
    res = CliRunner().invoke(main, ["optimize", str(DLRM), "--network", str(REAL / "ring8.yml"), "--cost", str(COST),
                                    "--objective", "min-cost", "--time-target", "24e6", "--measured", str(DLRM),
                                    "--gpu-faithful", "--json"])
    return json.loads(res.output[:res.output.rindex("}") + 1])["gpu_faithful"]["bandwidth_gbps"]


def test_loop_gpu_faithful_refusals(tmp_path):
    res = CliRunner().invoke(main, ["loop", str(DLRM), "--network", str(REAL / "ring8.yml"), "--total-bw", "10",
                                    "--gpu-faithful", "--out", str(tmp_path / "l"), "--astra-sim", "/bin/true"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1] == ("Error: --gpu-faithful optimizes a measured run: give its Kineto "
                                                   "traces with --measured KINETO")


def test_cpu_runs_are_refused():
    ddp = REAL / "measured" / "ddp4k" / "ddp4k"
    res = CliRunner().invoke(main, ["optimize", str(ddp), "--network", str(REAL / "ring4.yml"), "--total-bw", "10",
                                    "--measured", str(ddp), "--gpu-faithful"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1] == (
        f"Error: {ddp}: a CPU-only (gloo) run has no GPU to be faithful to; --gpu-faithful optimizes GPU runs "
        "(its host-faithful replay is shown by --measured alone)")
