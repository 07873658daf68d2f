"""The closed loop end to end without the simulator: the stand-in binary replays a recorded run.

Every simulated time is the recorded one (Ring 4 x Switch 4, 9,375,036 ns), so these tests check
the loop's bookkeeping (runs, rows, calibration stop, loop.json, refusal to overwrite), not the
simulator's answers; tests/test_loop.py checks those with the real binary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.demand.workload import load_workloads
from libra_astra.loop import run_loop
from libra_astra.model.cost import load_cost
from libra_astra.optimize.optimizer import Constraints

ROOT = Path(__file__).resolve().parents[1]
RECORDED_NS = 9_375_036


@pytest.fixture
def inputs(ring4_switch4_allreduce):
    return ring4_switch4_allreduce


def test_run_loop_simulates_the_design_and_baselines_then_stops_calibrating(inputs, fake):
    net, tmp = inputs
    cost = load_cost(ROOT / "network_configs/cost.yml")
    workloads = load_workloads((), (str(tmp / "ar.json"),), (), net)
    res = run_loop(workloads, net, cost, out_dir=tmp / "loop", constraints=Constraints(total_bw_gbps=250),
                   binary=fake("real_ring4_switch4_k4.stdout"), calibrate=2)
    names = [(r.iteration, r.name) for r in res.rows]
    assert names == [(0, "optimized"), (0, "EqualBW"), (0, "TrafficProportional"),
                     (1, "probe-ring"), (1, "probe-switch"), (1, "optimized")]
    assert all(r.simulated_ns == RECORDED_NS for r in res.rows)
    assert all(r.predicted_ns > 0 and r.error == pytest.approx(r.predicted_ns / RECORDED_NS - 1) for r in res.rows)
    # Probes that change nothing in the simulator leave the efficiency at 1, and no gain stops the loop.
    assert res.efficiency == ((1.0, 1.0), (1.0, 1.0))
    assert res.stop_reason == "simulated time improved by less than 0.1% at iteration 1"
    assert res.best.iteration == 0 and res.best.name == "optimized"
    assert sum(res.best.bw_gbps) == pytest.approx(250)
    for r in res.rows:
        (d,) = r.run_dirs
        assert Path(d, "manifest.json").is_file() and Path(d, "sim", "result.json").is_file()
    assert res.to_dict(net)["simulated_speedup_of_best_over"] == {"EqualBW": 1.0, "TrafficProportional": 1.0}


def test_loop_command_writes_loop_json_and_refuses_an_existing_out(inputs, fake):
    net, tmp = inputs
    args = ["loop", "--demand", str(tmp / "ar.json"), "-n", str(tmp / "net.yml"),
            "--cost", str(ROOT / "network_configs/cost.yml"), "--total-bw", "250",
            "--astra-sim", fake("real_ring4_switch4_k4.stdout"), "--out", str(tmp / "runs")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp / "runs" / "loop.json").read_text())
    assert summary["format"] == "libra_astra.loop" and summary["dimensions"] == ["ring", "switch"]
    assert [row["name"] for row in summary["rows"]] == ["optimized", "EqualBW", "TrafficProportional"]
    assert summary["stop_reason"] == "no calibration asked (--calibrate 0)"
    assert "best: iteration 0" in r.output
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1 and "already exists" in again.output
