"""`show DIR`: a run directory emitted from the shipped DLRM sample, before and after simulate.

The simulator is the stand-in of conftest.py replaying outputs recorded from ASTRA-sim
(tests/fixtures/astra/README.md). real_ring4_switch4_k4.stdout is the output of another workload
(one all-reduce) on the same 16 NPUs (Ring 4 x Switch 4), so these tests check what `show` reads
and computes from a run directory, not the simulator's answer for DLRM.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from libra_astra.astra import simulate
from libra_astra.astra.record import read_run
from libra_astra.errors import LibraError

from cli_run import one_line_error as _one_line_error, run

ROOT = Path(__file__).resolve().parents[1]
NET = str(ROOT / "network_configs/sample_4x4.yml")
RECORDED_NS = 9_375_036          # real_ring4_switch4_k4.stdout: every rank finishes then


def one_line_error(r, message):
    _one_line_error(r, message, exit_code=1)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("show_run")
    run("optimize", ROOT / "traces/dlrm_16/dlrm", "--network", NET, "--cost", ROOT / "network_configs/cost.yml",
        "--total-bw", "300", "-o", d / "design.json")
    run("emit", d / "design.json", "--out", d / "run")
    return d / "run"


@pytest.fixture
def run_dir(emitted, tmp_path):
    """A fresh copy of the emitted directory (simulate writes into it)."""
    return Path(shutil.copytree(emitted, tmp_path / "run"))


def test_before_simulate(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    design = manifest["design"]
    lines = run("show", run_dir).output.splitlines()
    assert lines[0] == f"run directory {run_dir} (emitted by libra_astra {manifest['libra_astra_version']}, " \
                       f"mlc-chakra {manifest['mlc_chakra_version']})"
    assert lines[1].startswith("design 'design' for network 'sample-4x4', objective perf, cost $")
    assert lines[2] == f"workload 'dlrm' from traces {ROOT / 'traces/dlrm_16/dlrm'}: 16 ranks, " \
                       f"{manifest['workload_stats']['nodes_written']} nodes, " \
                       f"{manifest['workload_stats']['collectives']} collectives"
    # the network by name, with the design's bandwidths and the GiB/s the simulator reads
    assert lines[3] == "network as emitted (16 NPUs):"
    rows = [line.split() for line in lines[5:7]]
    assert [r[:3] for r in rows] == [["package", "Ring", "4"], ["pod", "Switch", "4"]]
    assert [float(r[3]) for r in rows] == pytest.approx(design["bandwidth_gbps"], abs=5e-5)
    assert [float(r[4]) for r in rows] == pytest.approx([b * 1e9 / 2**30 for b in design["bandwidth_gbps"]], abs=5e-5)
    assert [r[5] for r in rows] == ["100", "1000"]
    assert lines[7] == ("system: scheduling-policy LIFO | endpoint-delay 1 ns | active-chunks-per-dimension 1 | "
                        "preferred-dataset-splits 1 | collectives ring | collective-optimization localBWAware | "
                        "local-mem-bw 1e9 GB/s | roofline-enabled 0 | peak-perf 1000 TFLOPS")
    assert lines[8] == (f"command (from {run_dir}; $ASTRA_SIM_BIN picks the binary): "
                        f"{manifest['simulator']['command_line']}")
    assert lines[9] == f"predicted: {manifest['prediction']['time_ns'] / 1e6:.6f} ms (libra_astra at emit)"
    assert lines[10] == f"  with {manifest['prediction']['model']}"
    assert lines[11] == f"simulated: not yet; run libra-astra simulate {run_dir}"
    assert not any(line.startswith("error:") for line in lines)
    data = json.loads(run("show", run_dir, "--json").output)
    assert data["kind"] == "run" and data["manifest"] == manifest
    assert data["simulation"] is None and data["prediction_error"] is None


def test_after_simulate_with_recorded_output(run_dir, fake):
    res = simulate(run_dir, fake("real_ring4_switch4_k4.stdout"))
    lines = run("show", run_dir).output.splitlines()
    sim = next(line for line in lines if line.startswith("simulated:"))
    assert sim.startswith("simulated: 9.375036 ms (slowest rank 0; all 16 NPUs finished; host time ")
    assert sim.endswith(f" s) from {run_dir / 'sim'}/stdout.txt")
    predicted = json.loads((run_dir / "manifest.json").read_text())["prediction"]["time_ns"]
    err = predicted / RECORDED_NS - 1
    assert lines[lines.index(sim) + 1] == f"error: {err:+.3%} (predicted against simulated)"
    # the same error simulate reported, read back from what it left in the directory
    data = json.loads(run("show", run_dir, "--json").output)
    assert data["prediction_error"] == pytest.approx(res.prediction_error, rel=1e-15)
    s = data["simulation"]
    assert (s["accepted"], s["complete"], s["simulated_time_ns"], s["ranks_finished"], s["exit_code"]) == \
        (True, True, RECORDED_NS, 16, 0)
    assert s["ranks"] == [r.to_dict() for r in res.ranks]


def test_a_run_simulate_refused(run_dir, fake):
    # recorded: involved_dim all false, the simulator exits 0 and no rank finishes
    with pytest.raises(LibraError):
        simulate(run_dir, fake("real_missing_finished.stdout"))
    text = run("show", run_dir).output
    assert (f"simulated: did not finish: 0 of 16 NPUs reported 'finished' (missing ranks 0-15); see "
            f"{run_dir / 'sim'}/stderr.txt and stdout.txt") in text
    assert "error:" not in text
    # every rank finished, but the simulator exited 134: the time is shown, flagged as not accepted
    with pytest.raises(LibraError):
        simulate(run_dir, fake("real_ring4_switch4_k4.stdout", code=134), overwrite=True)
    rec = read_run(run_dir)
    assert rec.sim.complete and not rec.sim.accepted and rec.sim.simulated_time_ns == RECORDED_NS
    assert "(simulate did not accept this run: there is no result.json" in run("show", run_dir).output


def test_output_no_simulator_prints(run_dir, fake):
    simulate(run_dir, fake("real_ring4_switch4_k4.stdout"))
    out = run_dir / "sim" / "stdout.txt"
    out.write_text(out.read_text() * 2)           # two runs' output in one file
    line = next(x for x in run("show", run_dir).output.splitlines() if x.startswith("simulated:"))
    assert line == "simulated: no usable output: ASTRA-sim output reports sys[0] finished twice; is it the output " \
                   "of one run?"


def test_directories_that_are_not_runs(run_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(run("show", empty, ok=False),
                   f"{empty}: not a run directory (no manifest.json); give a directory made by 'libra-astra emit', "
                   "or a demand, design, frontier or loop file")
    one_line_error(run("show", run_dir / "workload", ok=False),
                   f"{run_dir / 'workload'}: not a run directory (no manifest.json): it is a part of run directory "
                   f"{run_dir}; show that directory")
    (run_dir / "sim").mkdir()
    one_line_error(run("show", run_dir / "sim", ok=False),
                   f"{run_dir / 'sim'}: not a run directory (no manifest.json): it is the simulator's output of run "
                   f"directory {run_dir}; show that directory")
    # a loop's --out: its summary file and the run directories under it
    loop = tmp_path / "loop"
    shutil.copytree(run_dir, loop / "iter0" / "optimized" / "dlrm")
    shutil.copytree(run_dir, loop / "iter0" / "EqualBW" / "dlrm")
    one_line_error(run("show", loop / "iter0", ok=False),
                   f"{loop / 'iter0'}: not a run directory (no manifest.json); it holds run directories such as "
                   f"{loop / 'iter0' / 'EqualBW' / 'dlrm'} (and 1 more): show one of those")
    (loop / "loop.json").write_text("{}")
    one_line_error(run("show", loop, ok=False),
                   f"{loop}: not a run directory (no manifest.json): it is a loop's output; show {loop / 'loop.json'}, "
                   f"or one of its 2 run directories such as {loop / 'iter0' / 'EqualBW' / 'dlrm'}")
    one_line_error(run("show", run_dir, "--plot", tmp_path / "r.svg", ok=False),
                   f"{run_dir}: --plot draws a demand, design, frontier or loop file, not a run directory; drop --plot")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "system": ["ring"]}))
    one_line_error(run("show", run_dir, "--json", ok=False),
                   f"{run_dir / 'manifest.json'}: 'system' must be an object; re-emit the directory (libra-astra "
                   f"emit DESIGN --out {run_dir} --force)")
    (run_dir / "manifest.json").write_text('{"format": "other"}')
    one_line_error(run("show", run_dir, ok=False),
                   f"{run_dir / 'manifest.json'}: not a libra_astra run manifest; make the directory with "
                   "'libra-astra emit'")
