"""The steps chain: traces -> demand file -> optimize gives what optimize on the traces gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main

ROOT = Path(__file__).resolve().parents[1]
COST = str(ROOT / "network_configs/cost.yml")
SAMPLES = [
    ("traces/gpt3_tp8_dp8/gpt3", "network_configs/sample_8x8.yml"),
    ("traces/dlrm_16/dlrm", "network_configs/sample_4x4.yml"),
    ("traces/resnet50_dp16/resnet50", "network_configs/sample_4x4.yml"),
    ("traces/gpt_tp2_pp2_dp4/gpt", "network_configs/sample_4x4.yml"),
]


def _run(args):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("prefix, network", SAMPLES)
@pytest.mark.parametrize("model", [["--model", "libra"], ["--model", "pipelined", "--splits", "4", "--overlap"]])
def test_optimize_on_traces_equals_demand_then_optimize(tmp_path, prefix, network, model):
    prefix, network = str(ROOT / prefix), str(ROOT / network)
    groups = Path(prefix + ".groups.json")
    gargs = ["--comm-groups", str(groups)] if groups.exists() else []
    demand = tmp_path / "d.json"
    _run(["demand", prefix, "--network", network, "-o", str(demand)] + gargs)
    common = ["--network", network, "--cost", COST, "--total-bw", "300", "--json"] + model
    direct = json.loads(_run(["optimize", prefix] + gargs + common))
    via = json.loads(_run(["optimize", "--demand", str(demand)] + common))
    assert via["objective_value"] == pytest.approx(direct["objective_value"], rel=1e-9)
    assert via["optimum"]["bandwidth_gbps"] == pytest.approx(direct["optimum"]["bandwidth_gbps"], rel=1e-6)
    assert direct["relative_gap"] <= 1e-6


def test_design_file_round_trips_into_emit(tmp_path):
    design = tmp_path / "design.json"
    _run(["optimize", str(ROOT / "traces/dlrm_16/dlrm"), "--network", str(ROOT / "network_configs/sample_4x4.yml"),
          "--cost", COST, "--total-bw", "300", "-o", str(design)])
    data = json.loads(design.read_text())
    assert data["format"] == "libra_astra.design" and sum(data["bandwidth_gbps"]) == pytest.approx(300)
    assert data["workloads"][0]["traces"].endswith("traces/dlrm_16/dlrm")
    out = tmp_path / "run"
    _run(["emit", str(design), "--out", str(out)])
    net_yml = (out / "network.yml").read_text()
    # GB/s -> the GiB/s value ASTRA-sim reads.
    first = data["bandwidth_gbps"][0] * 1e9 / 2**30
    assert f"{first:.6f}"[:8] in net_yml
    assert len(list((out / "workload").glob("*.et"))) == 16
    # optimize never overwrites its output without --force.
    r = CliRunner().invoke(main, ["optimize", str(ROOT / "traces/dlrm_16/dlrm"), "--network",
                                  str(ROOT / "network_configs/sample_4x4.yml"), "--cost", COST, "--total-bw", "300",
                                  "-o", str(design)])
    assert r.exit_code != 0 and "already exists" in r.output
