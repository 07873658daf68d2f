"""calibrate: alpha-beta and ASTRA-sim fits of measured collectives, held out, and the simulator's check."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.errors import LibraError
from libra_astra.measure.calibrate import calibrate
from libra_astra.measure.calibrate_files import write_calibration
from libra_astra.measure.collectives import MeasuredCollective
from libra_astra.measure.fit import quality, robust_nnls
from libra_astra.measure.measurement import Measurement, measure
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.timing.astra_collective import Link, collective_time_ns
from libra_astra.timing.astra_settings import SystemSettings

REAL = Path(__file__).parent / "fixtures" / "real"
DLRM = REAL / "param_dlrm8" / "param_dlrm8"
BIN = os.environ.get("ASTRA_SIM_BIN", "")


def _measurement(points, npus=8):
    colls = tuple(MeasuredCollective(i, kind, size, tuple(range(npus)), "", tuple(range(npus)), (0,) * npus,
                                     (t,) * npus, t, 0, True) for i, (kind, size, t) in enumerate(points))
    return Measurement("synthetic", npus, (), colls, ("ring",) * len(colls), (0,) * npus, ())


RING8 = network_from_dict({"name": "r8", "dimensions": [{"name": "ring", "topology": "Ring", "npus": 8}]})


def test_recovers_the_network_astra_sim_timed():
    truth = SystemSettings.uniform(1, "ring", endpoint_delay_ns=1, local_mem_bw_gbps=1e9)
    link = [Link("Ring", 8, 50.0, 700.0)]
    sizes = [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22]
    points = [(k, s, collective_time_ns(k, s, (True,), link, truth)) for k in ("ALL_REDUCE", "ALL_GATHER")
              for s in sizes]
    cal = calibrate(_measurement(points), RING8)
    (dim,) = cal.dims
    assert dim.latency_ns == pytest.approx(700.0, rel=1e-3) and dim.bw_gbps == pytest.approx(50.0, rel=1e-3)
    assert all(abs(r.astra_ns - r.measured_ns) <= 2e-3 * r.measured_ns for r in cal.checks)   # int truncations
    assert max(abs(e) for e in dim.quality.held_out) < 2e-3
    assert cal.network.dims[0].latency_ns == dim.latency_ns and cal.bw_gbps == (dim.bw_gbps,)


def test_alpha_beta_per_kind_and_an_outlier():
    # t = 5 us + traffic / 20 GB/s, one point 3x slow (a transfer that still holds a wait)
    sizes = [1 << 12, 1 << 15, 1 << 17, 1 << 19, 1 << 20, 1 << 21]
    points = [("ALL_REDUCE", s, int(5000 + 2 * s * 7 / 8 / 20)) for s in sizes]
    points[2] = (points[2][0], points[2][1], points[2][2] * 3)
    cal = calibrate(_measurement(points), RING8)
    (k,) = cal.kinds
    assert k.alpha_ns == pytest.approx(5000, rel=0.02) and k.bw_gbps == pytest.approx(20, rel=0.02)
    assert k.quality.relative_residuals[2] == pytest.approx(-2 / 3, abs=0.01)   # the outlier stands out
    assert sorted(abs(e) for e in k.quality.held_out)[3] < 0.02


def test_robust_fit_is_non_negative_and_held_out_needs_spare_points():
    x = np.array([[1.0, 10.0], [1.0, 20.0]])
    y = np.array([30.0, 20.0])             # a negative slope would fit exactly; bandwidth cannot be negative
    c = robust_nnls(x, y)
    assert (c >= 0).all()
    assert quality(x, y, c).held_out == ()


def test_dlrm_calibration():
    net = load_network(REAL / "ring8.yml")
    cal = calibrate(measure([str(DLRM)], net), net)
    assert [(r.kind, r.measured_ns) for r in cal.checks][:2] == [("ALL_TO_ALL", 10_000), ("ALL_TO_ALL", 8_000)]
    assert {k.kind for k in cal.kinds} == {"ALL_REDUCE", "ALL_TO_ALL"}
    ar = next(k for k in cal.kinds if k.kind == "ALL_REDUCE")
    assert 20 < ar.bw_gbps < 60                 # NVLink V100, effective over ring traffic
    errs = [abs(r.astra_ns - r.measured_ns) / r.measured_ns for r in cal.checks]
    assert float(np.median(errs)) < 0.1
    assert len(cal.dims[0].quality.held_out) == 8


def test_nothing_to_calibrate_is_one_line():
    net = network_from_dict({"name": "two", "dimensions": [{"name": "a", "topology": "Ring", "npus": 4},
                                                            {"name": "b", "topology": "Ring", "npus": 2}]})
    with pytest.raises(LibraError, match="no measured collective over all NPUs of one dimension"):
        calibrate(_measurement([("ALL_REDUCE", 1024, 1000)]), net)


def test_cli_writes_once_and_refuses_again(tmp_path):
    out = tmp_path / "cal"
    args = ["calibrate", str(DLRM), "-n", str(REAL / "ring8.yml"), "-o", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "held out median" in res.output
    data = json.loads((out / "calibration.json").read_text())
    assert len(data["check_trace"]["astra_finish_ns"]) == 8
    assert sorted(p.name for p in (out / "check").iterdir()) == [f"collectives.{r}.et" for r in range(8)]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1 and "--force" in again.output
    assert CliRunner().invoke(main, args + ["--force", "--json"]).exit_code == 0


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
@pytest.mark.parametrize("prefix, network", [
    (DLRM, "ring8.yml"),
    # a CPU (gloo) run, recorded with its Kineto traces
    (REAL / "measured" / "ddp4k" / "ddp4k", "ring4.yml"),
])
def test_astra_sim_runs_the_calibrated_network_at_the_expected_times(tmp_path, prefix, network):
    net = load_network(REAL / network)
    content = write_calibration(calibrate(measure([str(prefix)], net), net), tmp_path)
    proc = subprocess.run([BIN, "--workload-configuration=check/collectives", "--system-configuration=system.json",
                           "--network-configuration=astra-network.yml",
                           "--remote-memory-configuration=memory.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {int(r): int(t) for r, t in re.findall(r"sys\[(\d+)\] finished, (\d+) cycles", proc.stdout)}
    expected = content["check_trace"]["astra_finish_ns"]
    assert len(got) == net.npus_count
    # the binary's event loop adds a few ns at the start of a run
    assert all(abs(got[r] - expected[r]) <= 10 for r in range(net.npus_count)), (got, expected)
    if prefix == DLRM:
        # NCCL on V100s is an alpha-beta network; gloo on a loaded CPU is not (docs/time-models.md)
        measured = content["check_trace"]["measured_transfer_sum_ns"]
        assert abs(max(got.values()) - measured) / measured < 0.05
