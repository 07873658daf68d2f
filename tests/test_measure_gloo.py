"""measure, calibrate and predict --measured on real CPU (gloo) runs recorded with their Kineto
traces (tests/fixtures/real/measured), and the host-faithful replay in closed form."""

from __future__ import annotations

import gzip
import json
import os
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.errors import LibraError
from libra_astra.measure.calibrate import calibrate
from libra_astra.measure.cpu_replay import cpu_replay
from libra_astra.measure.fit import robust_nnls
from libra_astra.measure.kineto import parse_profile
from libra_astra.measure.measurement import measure, measure_profiles
from libra_astra.model.collectives import ring_traffic_bytes
from libra_astra.model.network import load_network
from libra_astra.traces.cpu_groups import group_map_from_data, load_group_map

REAL = Path(__file__).parent / "fixtures" / "real"
DDP = REAL / "measured" / "ddp4k" / "ddp4k"
TPDP = REAL / "measured" / "tpdp4k" / "tpdp4k"
TPDP_GROUPS = REAL / "measured" / "tpdp4k" / "tpdp4k.groups.yml"
PIPE = REAL / "measured" / "pipeline4k" / "pipeline4k"
PIPE_GROUPS = REAL / "measured" / "pipeline4k" / "pipeline4k.groups.yml"
BIN = os.environ.get("ASTRA_SIM_BIN", "")
SETS = {"ddp": (DDP, None), "tpdp": (TPDP, TPDP_GROUPS), "pipe": (PIPE, PIPE_GROUPS)}
STEPS = 100   # profiled steps per rank in every set (record.py --steps 100)


def _raw(prefix: Path, rank: int) -> list[dict]:
    data = json.loads(gzip.decompress(Path(f"{prefix}.{rank}.json.gz").read_bytes()))
    return [e for e in data["traceEvents"] if e.get("ph") == "X"]


def _ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


@pytest.fixture(scope="module")
def ddp():
    return measure([str(DDP)], load_network(REAL / "ring4.yml"))


@pytest.fixture(scope="module")
def tpdp():
    return measure([str(TPDP)], load_network(REAL / "ring2x2.yml"), load_group_map(TPDP_GROUPS))


@pytest.fixture(scope="module")
def pipe():
    return measure([str(PIPE)], load_network(REAL / "ring2x2.yml"), load_group_map(PIPE_GROUPS))


@pytest.mark.parametrize("which", list(SETS))
def test_step_per_rank_is_the_raw_profiler_steps_mean(which, request):
    m, prefix = request.getfixturevalue(which), SETS[which][0]
    assert m.host_only and m.world_size == 4
    for r in m.ranks:
        steps = [_ns(e["dur"]) for e in _raw(prefix, r.rank) if e["name"].startswith("ProfilerStep#")]
        assert len(steps) == r.steps == STEPS
        assert r.step_ns == pytest.approx(sum(steps) / STEPS, abs=1e-6)
        parts = (r.gpu_compute_ns, r.exposed_comm_ns, r.cpu_bound_ns, r.idle_ns)
        assert r.gpu_compute_ns == 0 and min(parts) >= 0 and sum(parts) == pytest.approx(r.step_ns)


@pytest.mark.parametrize("which", list(SETS))
def test_step_noise_is_the_standard_error_of_the_raw_steps(which, request):
    import statistics

    m, prefix = request.getfixturevalue(which), SETS[which][0]
    rel = {}
    for r in m.ranks:
        steps = [_ns(e["dur"]) for e in _raw(prefix, r.rank) if e["name"].startswith("ProfilerStep#")]
        assert list(r.step_durations_ns) == steps
        assert r.step_sem_ns == pytest.approx(statistics.stdev(steps) / STEPS ** 0.5, rel=1e-12)
        rel[r.rank] = statistics.stdev(steps) / STEPS ** 0.5 / (sum(steps) / STEPS)
    worst = max(rel, key=rel.get)
    assert m.step_noise == (pytest.approx(rel[worst], rel=1e-12), worst)


def test_pipeline_noise_is_named_by_measure_and_predict(tmp_path):
    groups = ["--cpu-collective-groups", str(PIPE_GROUPS)]
    res = CliRunner().invoke(main, ["measure", str(PIPE), "-n", str(REAL / "ring2x2.yml")] + groups)
    assert res.exit_code == 0, res.output
    # rank 3's 100 steps: 8.190 to 36.407 ms
    line = ("note: the measured steps vary (rank 3's 100 steps take 8.190 to 36.407 ms): its mean step is known to "
            "+-3.0% (standard error), so errors within about twice that are inside the measurement's own noise; "
            "profile more steps to narrow it")
    assert line in res.output.splitlines()
    assert "shortest" in res.output.splitlines()[2]
    res = CliRunner().invoke(main, ["measure", str(PIPE), "--json"] + groups)
    data = json.loads(res.output)
    assert data["step_sem_rel_max"] == pytest.approx(0.0301, abs=5e-5)
    assert len(data["ranks"][2]["steps_ns"]) == STEPS
    assert data["ranks"][2]["steps_ns"][:3] == [32617817, 27280561, 14641112]


def test_ddp_collectives_are_its_two_buckets_each_step(ddp):
    # DDP issues the 8320-float bucket first on every rank, though gloo starts them out of order
    assert [(c.kind, c.size_bytes) for c in ddp.collectives] == [("ALL_REDUCE", 33280), ("ALL_REDUCE", 16640)] * STEPS
    assert all(c.group == (0, 1, 2, 3) and c.complete for c in ddp.collectives) and set(ddp.dims) == {"ring"}
    raw = {r: {_ns(e["dur"]) for e in _raw(DDP, r) if e["name"] == "gloo:all_reduce"} for r in range(4)}
    for c in ddp.collectives:
        assert c.transfer_ns == min(c.durations_ns)
        for r, d in zip(c.ranks, c.durations_ns):
            assert d in raw[r]
    assert ddp.assumptions == ()


def test_tpdp_collectives_have_their_groups_and_sizes(tpdp):
    tp, dp = {(0, 1), (2, 3)}, {(0, 2), (1, 3)}
    got = {}
    for c, d in zip(tpdp.collectives, tpdp.dims):
        got.setdefault((c.kind, c.size_bytes, d), []).append(c.group)
        assert c.complete and c.transfer_ns == min(c.durations_ns)
    assert set(got) == {("ALL_REDUCE", 1024, "tp"), ("ALL_GATHER", 1024, "tp"), ("REDUCE_SCATTER", 4096, "dp"),
                        ("ALL_TO_ALL", 2048, "tp+dp")}
    # one per TP (DP) group per step, one world all-to-all per step
    assert sorted(got[("ALL_REDUCE", 1024, "tp")]) == sorted(sorted(tp) * STEPS)
    assert sorted(got[("ALL_GATHER", 1024, "tp")]) == sorted(sorted(tp) * STEPS)
    assert sorted(got[("REDUCE_SCATTER", 4096, "dp")]) == sorted(sorted(dp) * STEPS)
    assert got[("ALL_TO_ALL", 2048, "tp+dp")] == [(0, 1, 2, 3)] * STEPS
    assert tpdp.assumptions == ()


def test_pipeline_sends_and_receives_are_between_the_stages(pipe):
    p2p = [(c.group, c.size_bytes, d) for c, d in zip(pipe.collectives, pipe.dims) if c.kind == "P2P"]
    # per step: activations r -> r + 2 and gradients back, 8 x 64 floats each
    assert sorted(p2p) == sorted([((0, 2), 2048, "dp"), ((1, 3), 2048, "dp")] * 2 * STEPS)
    ars = [(c.group, c.size_bytes) for c in pipe.collectives if c.kind == "ALL_REDUCE"]
    assert sorted(ars) == sorted([(g, b) for g in ((0, 1), (2, 3)) for b in (16384, 256, 16384, 256)] * STEPS)
    # a send may end before its receive starts: no clock correction for that
    assert pipe.clock_offsets_ns == (0,) * 4 and pipe.assumptions == ()
    for r in pipe.ranks:
        raw = [e for e in _raw(PIPE, r.rank) if e["name"] in ("gloo:send", "gloo:recv")]
        assert len(raw) == 2 * STEPS


def test_pipeline_each_step_waits_for_both_transfers():
    from libra_astra.measure.kineto import read_profiles

    gm = load_group_map(PIPE_GROUPS)
    profiles, notes = read_profiles([str(PIPE)])
    m = measure_profiles(profiles, notes, None, str(PIPE), gm)
    base = cpu_replay(profiles, m.collectives, lambda c: c.transfer_ns, 4, m.clock_offsets_ns, gm)
    slower = cpu_replay(profiles, m.collectives, lambda c: c.transfer_ns + (1_000_000 if c.kind == "P2P" else 0),
                        4, m.clock_offsets_ns, gm)
    # every stage sends and then receives (or the reverse) in each step, one after the other
    assert [x.step_ns - b.step_ns for x, b in zip(slower, base)] == [2_000_000] * 4


def test_tpdp_without_the_groups_says_they_were_guessed():
    # both of a rank's non-world groups have two members: the trace cannot tell TP from DP
    m = measure([str(TPDP)], load_network(REAL / "ring2x2.yml"))
    assert any(a.startswith("gloo: the process group of 1600 collective(s) is not fixed by the trace") and
               a.endswith("give --cpu-collective-groups FILE") for a in m.assumptions)
    assert all(c.group == (0, 1, 2, 3) for c in m.collectives)


def test_groups_file_with_a_group_id_is_one_line():
    gm = group_map_from_data([{"op": "c10d::allreduce_", "group": [1]}], "g.yml")
    with pytest.raises(LibraError, match=r"^g.yml: entry 1 \(c10d::allreduce_\): a measured run's groups are given "
                                         r"as ranks"):
        measure([str(TPDP)], None, gm)


def test_calibration_held_out_is_a_fit_without_the_point(ddp):
    net = load_network(REAL / "ring4.yml")
    cal = calibrate(ddp, net)
    (k,) = cal.kinds
    colls = ddp.collectives
    x = np.array([[1.0, ring_traffic_bytes(c.kind, c.size_bytes, 4)] for c in colls])
    y = np.array([float(c.transfer_ns) for c in colls])
    assert len(k.quality.held_out) == len(colls) == 2 * STEPS
    for i in range(len(colls)):
        keep = np.arange(len(colls)) != i
        coef = robust_nnls(x[keep], y[keep])
        assert k.quality.held_out[i] == pytest.approx((x[i] @ coef - y[i]) / y[i], rel=1e-9)
    assert [r.measured_ns for r in cal.checks] == [c.transfer_ns for c in colls]


def _ev(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _rank(rank, arrive):
    """The step thread computes until ``arrive``, queues an all-reduce that a worker thread runs
    until 400, waits for it, then computes 30 more."""
    ev = [_ev("ProfilerStep#1", 0, 460, cat="user_annotation"),
          _ev("aten::mm", 10, arrive - 20),
          _ev("c10d::allreduce_", arrive - 10, 5, **{"Input Dims": [[[16]], []], "Input type": ["TensorList", ""]}),
          _ev("gloo:all_reduce", arrive, 400 - arrive, tid=9, **{"Input Dims": [[16]], "Input type": ["float"]}),
          _ev("aten::add", 420, 30)]
    return parse_profile({"distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo",
                                              "pg_config": [{"ranks": [0, 1]}]}, "traceEvents": ev}, f"r{rank}", rank)


@pytest.mark.parametrize("transfer_ns", [250_000, 100_000, 400_000])
def test_host_faithful_transfer_starts_when_the_last_member_arrives(transfer_ns):
    profiles = [_rank(0, 80), _rank(1, 150)]
    m = measure_profiles(profiles, [], None, "t")
    (c,) = m.collectives
    assert (c.transfer_ns, c.transfer_rank, c.size_bytes) == (250_000, 1, 64)
    got = cpu_replay(profiles, m.collectives, lambda c: transfer_ns, 2)
    # rank 1 arrives at 150 us; the step thread resumes 20 us after the end, computes 30, ends 10 later
    assert [r.step_ns for r in got] == [150_000 + transfer_ns + 60_000] * 2


def test_predict_measured_on_the_cpu_run(tmp_path):
    cal = tmp_path / "cal"
    res = CliRunner().invoke(main, ["calibrate", str(DDP), "-n", str(REAL / "ring4.yml"), "-o", str(cal)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["predict", str(DDP), "--network-configuration", str(cal / "astra-network.yml"),
                                    "--system-configuration", str(cal / "system.json"), "--measured", str(DDP),
                                    "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["measured"]
    m = measure([str(DDP)])
    assert out["gpu_faithful_label"] == "host-faithful"
    # the converted set still has its gloo collectives as CPU operators: said, with the way to type them
    assert f"{DDP}: its gloo collectives are CPU operators, so ASTRA-sim's semantics time them as recorded" \
        in " ".join(out["notes"])
    assert [r["measured_ns"] for r in out["ranks"]] == [r.step_ns for r in m.ranks]
    assert out["transfer_measured_ns"] == sum(c.transfer_ns for c in m.collectives)
    # the replay's rules alone (measured transfers) give back every rank's step
    for r in out["ranks"]:
        assert abs(r["replay_measured_transfers_ns"] - r["measured_ns"]) <= 1
    text = CliRunner().invoke(main, ["predict", str(DDP), "--network-configuration", str(cal / "astra-network.yml"),
                                     "--system-configuration", str(cal / "system.json"), "--measured", str(DDP)])
    assert text.exit_code == 0 and "host-faithful residual (mean)" in text.output


def test_measure_cli_takes_the_groups_file():
    res = CliRunner().invoke(main, ["measure", str(TPDP), "-n", str(REAL / "ring2x2.yml"),
                                    "--cpu-collective-groups", str(TPDP_GROUPS), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["host_only"] and len(data["collectives"]) == 7 * STEPS and data["assumptions"] == []


@pytest.mark.parametrize("which", list(SETS))
def test_host_faithful_with_the_measured_transfers_gives_back_every_step(which):
    prefix, groups = SETS[which]
    gm = load_group_map(groups) if groups else None
    from libra_astra.measure.kineto import read_profiles

    profiles, notes = read_profiles([str(prefix)])
    m = measure_profiles(profiles, notes, None, str(prefix), gm)
    base = cpu_replay(profiles, m.collectives, lambda c: c.transfer_ns, 4, m.clock_offsets_ns, gm)
    assert [abs(b.step_ns - r.step_ns) <= 1 for b, r in zip(base, m.ranks)] == [True] * 4
    # every transfer 1 ms longer: no rank's step is shorter, and the slowest is longer
    longer = cpu_replay(profiles, m.collectives, lambda c: c.transfer_ns + 1_000_000, 4, m.clock_offsets_ns, gm)
    assert all(x.step_ns >= b.step_ns for x, b in zip(longer, base))
    assert max(x.step_ns for x in longer) >= max(b.step_ns for b in base) + 1_000_000


def test_predict_measured_table_on_the_tp_dp_run(tmp_path):
    groups = ["--cpu-collective-groups", str(TPDP_GROUPS)]
    cal = tmp_path / "cal"
    res = CliRunner().invoke(main, ["calibrate", str(TPDP), "-n", str(REAL / "ring2x2.yml"), "-o", str(cal)] + groups)
    assert res.exit_code == 0, res.output
    assert "tp: latency" in res.output and "dp: latency" in res.output
    res = CliRunner().invoke(main, ["predict", str(TPDP), "--network-configuration", str(cal / "astra-network.yml"),
                                    "--system-configuration", str(cal / "system.json"), "--measured", str(TPDP)]
                             + groups)
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.output.splitlines() if line.strip().split(" ")[0] in "0123"]
    m = measure([str(TPDP)], None, load_group_map(TPDP_GROUPS))
    table = [r for r in rows if len(r) == 9]
    assert [r[0] for r in table] == ["0", "1", "2", "3"]
    assert [f"{float(r[1]):.3f}" for r in table] == [f"{s.step_ns / 1e6:.3f}" for s in m.ranks]
    assert "host-faithful residual (mean)" in res.output and "replay rules" in res.output


@pytest.mark.parametrize("which, network, extra, robust_err, total_err", [
    # mean host-faithful error under each fit, as measured (docs/time-models.md)
    ("ddp", "ring4.yml", [], -0.101, -0.014),
    ("tpdp", "ring2x2.yml", ["--cpu-collective-groups", str(TPDP_GROUPS)], -0.309, -0.008),
])
def test_total_fit_adds_the_collectives_up_to_the_measured_ones(tmp_path, which, network, extra, robust_err,
                                                                 total_err):
    prefix = SETS[which][0]
    errors = {}
    for fit in ("robust", "total"):
        cal = tmp_path / fit
        res = CliRunner().invoke(main, ["calibrate", str(prefix), "-n", str(REAL / network), "-o", str(cal),
                                        "--fit", fit] + extra)
        assert res.exit_code == 0, res.output
        data = json.loads((cal / "calibration.json").read_text())
        assert data["fit"] == fit
        res = CliRunner().invoke(main, ["predict", str(prefix), "--network-configuration",
                                        str(cal / "astra-network.yml"), "--system-configuration",
                                        str(cal / "system.json"), "--measured", str(prefix), "--json"] + extra)
        assert res.exit_code == 0, res.output
        errors[fit] = json.loads(res.output)["measured"]["mean"]["gpu_faithful_error"]
        if fit == "total" and which == "ddp":
            # least squares with a latency column: the calibrated times add up to the measured ones
            checks = data["astra_sim_check"]
            assert sum(c["astra_ns"] for c in checks) == pytest.approx(sum(c["measured_ns"] for c in checks),
                                                                       rel=1e-3)
    assert errors["robust"] == pytest.approx(robust_err, abs=1e-3)
    assert errors["total"] == pytest.approx(total_err, abs=1e-3)


def test_unknown_fit_is_one_line(ddp):
    with pytest.raises(LibraError, match=r"^unknown fit 'median'; use one of \['robust', 'total'\]$"):
        calibrate(ddp, load_network(REAL / "ring4.yml"), "median")


def test_pipeline_sends_calibrate_their_dimension(tmp_path):
    groups = ["--cpu-collective-groups", str(PIPE_GROUPS)]
    cal = tmp_path / "cal"
    res = CliRunner().invoke(main, ["calibrate", str(PIPE), "-n", str(REAL / "ring2x2.yml"), "-o", str(cal),
                                    "--fit", "total"] + groups)
    assert res.exit_code == 0, res.output
    data = json.loads((cal / "calibration.json").read_text())
    dp = next(d for d in data["dimensions"] if d["dim"] == "dp")
    sends = [r for r in data["astra_sim_check"] if r["kind"] == "P2P"]
    assert len(sends) == 4 * STEPS and all(r["dim"] == "dp" for r in sends)
    # one message of 2,048 bytes over one hop of the Ring of 2, as ASTRA-sim times it
    assert all(r["astra_ns"] == int(dp["latency_ns"] + 2048 / dp["bw_gbps"]) for r in sends)
    # the check trace chains the collectives only
    colls = [r for r in data["astra_sim_check"] if r["kind"] != "P2P"]
    assert data["check_trace"]["measured_transfer_sum_ns"] == sum(r["measured_ns"] for r in colls)
    res = CliRunner().invoke(main, ["predict", str(PIPE), "--network-configuration", str(cal / "astra-network.yml"),
                                    "--system-configuration", str(cal / "system.json"), "--measured", str(PIPE),
                                    "--json"] + groups)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["measured"]
    assert not any("does not time" in n for n in out["notes"])       # the sends are the network's now
    assert out["transfer_modelled_ns"] == pytest.approx(out["transfer_measured_ns"], rel=1e-3)
    assert out["mean"]["gpu_faithful_error"] == pytest.approx(-0.039, abs=1e-3)
    # the error is inside the measurement's own noise, and the comparison says so
    assert any(n.startswith("the measured steps vary (rank 3's 100 steps") for n in out["notes"])


def test_collectives_summed_up_by_kind_size_group_and_dimension(pipe):
    from libra_astra.measure.summary import collective_classes

    classes = collective_classes(pipe.collectives, pipe.dims)
    assert sorted((k.kind, k.size_bytes, k.group, k.dim, k.count) for k in classes) == sorted(
        [("P2P", 2048, g, "dp", 2 * STEPS) for g in ((0, 2), (1, 3))]
        + [("ALL_REDUCE", b, g, "tp", 2 * STEPS) for g in ((0, 1), (2, 3)) for b in (16384, 256)])
    for k in classes:
        inst = [c for c, d in zip(pipe.collectives, pipe.dims) if (c.kind, c.size_bytes, c.group, d)
                == (k.kind, k.size_bytes, k.group, k.dim)]
        t = sorted(c.transfer_ns for c in inst)
        assert (k.transfer_min_ns, k.transfer_max_ns, k.transfer_sum_ns) == (t[0], t[-1], sum(t))
        assert k.transfer_median_ns == (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2
        assert k.wait_max_ns == max(c.wait_max_ns for c in inst)


def test_calibration_checks_summed_up_add_up_to_each(ddp):
    from libra_astra.measure.summary import check_classes

    cal = calibrate(ddp, load_network(REAL / "ring4.yml"), "total")
    classes = check_classes(cal.checks)
    assert [(k.kind, k.size_bytes, k.count) for k in classes] == [("ALL_REDUCE", 33280, STEPS),
                                                                 ("ALL_REDUCE", 16640, STEPS)]
    assert sum(k.measured_sum_ns for k in classes) == sum(r.measured_ns for r in cal.checks)
    assert sum(k.astra_sum_ns for k in classes) == sum(r.astra_ns for r in cal.checks)
    # least squares with a latency column: each size's calibrated times add up to its measured ones
    for k in classes:
        assert k.astra_sum_ns == pytest.approx(k.measured_sum_ns, rel=2e-3)


def test_measure_sums_up_many_collectives_unless_asked_for_each():
    args = ["measure", str(TPDP), "-n", str(REAL / "ring2x2.yml"), "--cpu-collective-groups", str(TPDP_GROUPS)]
    out = CliRunner().invoke(main, args).output.splitlines()
    head = next(i for i, line in enumerate(out) if line.startswith("collectives:"))
    assert out[head] == ("collectives: 700 in 7 kinds (transfer: the shortest instance across the ranks; wait: the "
                         "rest, per rank; --each lists every one):")
    assert [line.split()[5] for line in out[head + 2:head + 9]] == [str(STEPS)] * 7   # size is "1.024 kB"
    each = CliRunner().invoke(main, args + ["--each"]).output.splitlines()
    head = next(i for i, line in enumerate(each) if line.startswith("collectives (transfer"))
    assert [line.split()[0] for line in each[head + 2:head + 2 + 7 * STEPS]] == [str(i) for i in range(7 * STEPS)]
