"""The GPU-faithful replay of a measured step, and predict --measured."""

from __future__ import annotations

import os
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.errors import LibraError
from libra_astra.measure.calibrate import calibrate
from libra_astra.measure.calibrate_files import write_calibration
from libra_astra.measure.kineto import parse_profile, read_profiles
from libra_astra.measure.measurement import measure_profiles
from libra_astra.measure.replay import replay
from libra_astra.model.network import load_network

from kineto_events import ev as _ev, step_events

REAL = Path(__file__).parent / "fixtures" / "real"
DLRM = REAL / "param_dlrm8" / "param_dlrm8"


def _rank(rank, world, arrive=100, comm_dur=50):
    """A step whose compute kernel waits for the all-reduce and whose host synchronizes at the end."""
    return parse_profile({"distributedInfo": {"rank": rank, "world_size": world},
                          "traceEvents": step_events(arrive, comm_dur)}, f"r{rank}", rank)


def _replayed(profiles, transfer):
    m = measure_profiles(profiles, [], None, "t")
    return m, [r.step_ns for r in replay(profiles, m.collectives, transfer, m.world_size, m.clock_offsets_ns)]


def test_a_longer_transfer_delays_the_waiting_kernel_and_the_sync():
    (m, base), (_, slower) = (_replayed([_rank(0, 1)], lambda c: c.transfer_ns),
                              _replayed([_rank(0, 1)], lambda c: c.transfer_ns + 100_000))
    assert base == [m.ranks[0].step_ns] == [300_000]
    assert slower == [400_000]


def test_the_transfer_starts_when_the_last_member_arrives():
    profiles = [_rank(0, 2, arrive=100, comm_dur=250), _rank(1, 2, arrive=330, comm_dur=20)]
    m, base = _replayed(profiles, lambda c: c.transfer_ns)
    assert base == [r.step_ns for r in m.ranks]
    _, fast = _replayed(profiles, lambda c: 5_000)
    # both end 15 us earlier: the early rank still waits for the late one
    assert fast == [s - 15_000 for s in base]


def test_a_kernel_recorded_before_its_launch_is_a_one_line_error():
    # a kernel launched after the sync but recorded before the sync's kernel, on its stream: the sync
    # waits for a kernel that, in stream order, waits for a call after the sync
    raw = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": step_events()[:-1] + [
        _ev("cudaLaunchKernel", "cuda_runtime", 275, 2, correlation=4),
        _ev("late", "kernel", 110, 5, tid=7, stream=7, correlation=4)]}
    profiles = [parse_profile(raw, "r0.json", 0)]
    m = measure_profiles(profiles, [], None, "t")
    with pytest.raises(LibraError) as e:
        replay(profiles, m.collectives, lambda c: c.transfer_ns, 1, m.clock_offsets_ns)
    assert str(e.value) == ("r0.json: the profile's times order its events in a cycle (the device op at ts 110 us "
                            "starts before the call that launched it, at ts 275 us); the trace is inconsistent, "
                            "export it again")


def test_dlrm_replay_with_measured_transfers_reproduces_every_rank():
    profiles, notes = read_profiles([str(DLRM)])
    m = measure_profiles(profiles, notes)
    steps = [r.step_ns for r in replay(profiles, m.collectives, lambda c: c.transfer_ns, 8, m.clock_offsets_ns)]
    for got, rank in zip(steps, m.ranks):
        assert got == pytest.approx(rank.step_ns, rel=1e-4)


def test_predict_measured_prints_both_models(tmp_path):
    net = load_network(REAL / "ring8.yml")
    profiles, notes = read_profiles([str(DLRM)])
    write_calibration(calibrate(measure_profiles(profiles, notes, net), net), tmp_path)
    args = ["predict", str(DLRM), "--network-configuration", str(tmp_path / "astra-network.yml"),
            "--system-configuration", str(tmp_path / "system.json"), "--measured", str(DLRM)]
    res = CliRunner().invoke(main, args + ["--json"])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.output)["measured"]
    assert abs(cmp["mean"]["gpu_faithful_error"]) < 0.05 and abs(cmp["max"]["gpu_faithful_error"]) < 0.05
    # ASTRA-sim's semantics: every rank a chain of CPU operators, far above the measured steps
    assert cmp["mean"]["astra_error"] > 0.3 and cmp["max"]["astra_error"] > 0.1
    # why: the slowest rank's two host threads, one after the other on ASTRA-sim's one CPU
    assert cmp["astra_slowest_rank_host_threads_ns"] == {"1": 19_300_000, "2": 3_872_000}
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "GPU-faithful residual (mean)" in text.output


def test_optimize_measured_compares_the_optimum(tmp_path):
    args = ["optimize", str(DLRM), "-n", str(REAL / "ring8.yml"), "--total-bw", "100", "--measured", str(DLRM),
            "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.output)["measured"]
    assert [r["measured_ns"] for r in cmp["ranks"]][:2] == [14_455_000, 19_901_000]
    # the optimizer's own time is the same for every rank: the slowest chain of CPU operators
    assert len({r["astra_ns"] for r in cmp["ranks"]}) == 1
    assert abs(cmp["mean"]["gpu_faithful_error"]) < 0.05
    two = CliRunner().invoke(main, args[:-1] + ["--demand", str(tmp_path / "x.json")])
    assert two.exit_code != 0


def test_measured_of_another_job_is_one_line(tmp_path):
    (tmp_path / "k.0.json").write_text(json.dumps(
        {"distributedInfo": {"rank": 0, "world_size": 4}, "traceEvents": [_ev("ProfilerStep#1", "user_annotation", 0, 5)]}))
    res = CliRunner().invoke(main, ["optimize", str(DLRM), "-n", str(REAL / "ring8.yml"), "--total-bw", "100",
                                    "--measured", str(tmp_path / "k")])
    assert res.exit_code == 1 and "4 ranks but network 'real-ring8' has 8 NPUs" in res.output
    assert "Traceback" not in res.output


@pytest.mark.astra
@pytest.mark.skipif(not (os.environ.get("ASTRA_SIM_BIN") and os.access(os.environ["ASTRA_SIM_BIN"], os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_loop_measured_sets_the_simulated_ranks_beside_the_run(tmp_path):
    res = CliRunner().invoke(main, ["loop", str(DLRM), "-n", str(REAL / "ring8.yml"), "--total-bw", "100",
                                    "--out", str(tmp_path / "loop"), "--measured", str(DLRM)])
    assert res.exit_code == 0, res.output
    cmp = json.loads((tmp_path / "loop" / "loop.json").read_text())["measured"]
    simulated = [r["astra_ns"] for r in cmp["ranks"]]
    # ASTRA-sim's ranks differ (the slowest CPU chain is rank 1's); all far above the measured mean
    assert len(set(simulated)) > 1 and cmp["mean"]["astra_error"] > 0.3
    assert "ASTRA-sim (simulated)" in res.output


def test_several_steps_replay_to_their_mean():
    ev = []
    raw = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": []}
    base = step_events()
    for k, shift in enumerate((0, 400)):       # two steps of 300 us, 100 us apart
        for e in base:
            e = dict(e, ts=e["ts"] + shift, args=dict(e["args"]))
            if "correlation" in e["args"]:
                e["args"]["correlation"] += 10 * k
            if e["name"].startswith("ProfilerStep"):
                e["name"] = f"ProfilerStep#{k + 1}"
            ev.append(e)
    raw["traceEvents"] = ev
    prof = parse_profile(raw, "two", 0)
    assert len(prof.steps) == 2
    m, steps = _replayed([prof], lambda c: c.transfer_ns)
    assert steps == [m.ranks[0].step_ns] == [300_000]
    _, slower = _replayed([prof], lambda c: c.transfer_ns + 100_000)
    assert slower == [400_000]
