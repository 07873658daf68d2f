"""measure: Kineto profiles of a real run (PARAM's 8-GPU DLRM) and malformed or partial ones."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.errors import LibraError
from libra_astra.measure.measurement import measure, measurement_to_dict
from libra_astra.model.network import load_network

REAL = Path(__file__).parent / "fixtures" / "real"
DLRM = REAL / "param_dlrm8" / "param_dlrm8"


@pytest.fixture(scope="module")
def dlrm():
    return measure([str(DLRM)], load_network(REAL / "ring8.yml"))


def test_dlrm_steps_are_the_profiler_steps(dlrm):
    # ProfilerStep#10 durations of the eight worker traces (us), as recorded
    assert [r.step_ns / 1000 for r in dlrm.ranks] == [14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509]
    assert dlrm.max_step_ns == 19_901_000
    assert round(dlrm.mean_step_ns / 1e3) == 16008
    # from rank 1's start to rank 4's end: the ranks share one clock
    assert dlrm.span_ns == 20_823_000
    assert dlrm.clock_offsets_ns == (0,) * 8 and dlrm.assumptions == ()


def test_dlrm_breakdown_fills_each_step(dlrm):
    for r in dlrm.ranks:
        parts = (r.gpu_compute_ns, r.exposed_comm_ns, r.cpu_bound_ns, r.idle_ns)
        assert min(parts) >= 0 and sum(parts) == pytest.approx(r.step_ns)
        assert r.comm_ns >= r.exposed_comm_ns
    # the slowest rank waited longest in its first all-to-all: most of its step is exposed communication
    assert dlrm.ranks[1].exposed_comm_ns > dlrm.ranks[7].exposed_comm_ns + 9e6


def test_dlrm_collectives_sizes_and_transfer(dlrm):
    kinds = [(c.kind, c.size_bytes) for c in dlrm.collectives]
    # the ET's COMM_COLL nodes (tests/fixtures/real/README.md) in issue order
    assert kinds == [("ALL_TO_ALL", 24576), ("ALL_TO_ALL", 192), ("ALL_TO_ALL", 1536), ("ALL_TO_ALL", 13568),
                     ("ALL_REDUCE", 1576964), ("ALL_TO_ALL", 24576), ("ALL_REDUCE", 448), ("ALL_REDUCE", 907840)]
    first = dlrm.collectives[0]
    assert first.transfer_ns == 10_000 and first.transfer_rank == 7     # the last to arrive waits least
    assert max(first.durations_ns) == 7_635_000 and first.wait_max_ns == 7_625_000
    assert all(c.group == tuple(range(8)) and c.complete for c in dlrm.collectives)
    assert set(dlrm.dims) == {"ring"}


def _event(name, cat, ts, dur, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _rank_trace(rank, world, t0=1000, comm_start=(100, 400), comm_dur=(50, 20), step=True, kinds=("all_reduce",)):
    """A small GPU rank: a step, a compute kernel, and NCCL kernels launched under nccl:* ops."""
    ev = []
    if step:
        ev.append(_event("ProfilerStep#3", "user_annotation", t0, 1000))
    ev.append(_event("aten::mm", "cpu_op", t0 + 10, 30))
    ev.append(_event("cudaLaunchKernel", "cuda_runtime", t0 + 20, 5, correlation=1))
    ev.append(_event("gemm", "kernel", t0 + 30, 60, tid=7, pid=0, stream=7, correlation=1))
    for i, (s, d) in enumerate(zip(comm_start, comm_dur)):
        kind = kinds[i % len(kinds)]
        ev.append(_event(f"nccl:{kind}", "user_annotation", t0 + s - 10, 8, **{"Input Dims": [[256]],
                                                                               "Input type": ["float"]}))
        ev.append(_event("cudaLaunchKernel", "cuda_runtime", t0 + s - 8, 3, correlation=10 + i))
        ev.append(_event(f"ncclKernel_{kind}", "kernel", t0 + s, d, tid=20, pid=0, stream=20, correlation=10 + i))
    return {"distributedInfo": {"rank": rank, "world_size": world, "backend": "nccl"}, "traceEvents": ev}


def _write(tmp_path, traces, gz=True):
    for r, t in traces.items():
        data = json.dumps(t).encode()
        p = tmp_path / (f"run.{r}.json.gz" if gz else f"run.{r}.json")
        p.write_bytes(gzip.compress(data) if gz else data)
    return str(tmp_path / "run")


def test_wait_is_the_difference_to_the_shortest_instance(tmp_path):
    prefix = _write(tmp_path, {0: _rank_trace(0, 2, comm_start=(100, 400), comm_dur=(50, 20)),
                               1: _rank_trace(1, 2, comm_start=(130, 405), comm_dur=(20, 15))})
    m = measure([prefix])
    c0, c1 = m.collectives
    assert (c0.kind, c0.size_bytes, c0.transfer_ns, c0.transfer_rank) == ("ALL_REDUCE", 1024, 20_000, 1)
    assert c0.waits_ns == (30_000, 0) and c1.waits_ns == (5_000, 0)
    # exposed communication: the NCCL kernels outside the compute kernel, inside the step
    assert m.ranks[0].exposed_comm_ns == 70_000 and m.ranks[0].gpu_compute_ns == 60_000


def test_missing_rank_is_a_stated_assumption(tmp_path):
    prefix = _write(tmp_path, {0: _rank_trace(0, 3), 2: _rank_trace(2, 3)})
    m = measure([prefix])
    assert [r.rank for r in m.ranks] == [0, 2]
    assert any("ranks 1 of 3 missing" in a for a in m.assumptions)
    assert not m.collectives[0].complete and any("upper bound" in a for a in m.assumptions)


def test_no_profiler_step_takes_the_whole_profile(tmp_path):
    prefix = _write(tmp_path, {0: _rank_trace(0, 2, step=False), 1: _rank_trace(1, 2, step=False)}, gz=False)
    m = measure([prefix])
    assert [a for a in m.assumptions if "no ProfilerStep" in a] == [
        "no ProfilerStep annotation on rank(s) 0, 1: their step is the whole profile (profile with torch.profiler's "
        "schedule and call prof.step() each step)"]
    assert m.ranks[0].step_ns == (1420 - 1010) * 1000    # first event (aten::mm) to last end (the 2nd kernel)


def test_clock_skew_is_corrected_and_stated(tmp_path):
    # rank 1's clock runs 5 ms ahead: its kernels "start" after rank 0's have ended
    prefix = _write(tmp_path, {0: _rank_trace(0, 2, t0=1000), 1: _rank_trace(1, 2, t0=6000)})
    m = measure([prefix])
    assert any("clocks disagree" in a for a in m.assumptions)
    assert m.clock_offsets_ns == (-2_500_000, 2_500_000)
    assert m.span_ns == 1_000_000     # aligned, the two steps coincide


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not valid JSON"),
    (b'{"schemaVersion": 1}', "not a Kineto trace"),
    (b'{"traceEvents": []}', "no timed event"),
])
def test_malformed_profile_is_one_line(tmp_path, content, message):
    (tmp_path / "bad.0.json").write_bytes(content)
    res = CliRunner().invoke(main, ["measure", str(tmp_path / "bad")])
    assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("key, value, shown", [("ts", 1e30, "1e+30"), ("dur", 5e18, "5e+18"), ("ts", -5e15, "-5e+15")])
def test_a_time_beyond_int64_nanoseconds_is_one_line(tmp_path, key, value, shown):
    t = _rank_trace(0, 1)
    t["traceEvents"][1][key] = value
    (tmp_path / "run.0.json").write_text(json.dumps(t))
    res = CliRunner().invoke(main, ["measure", str(tmp_path / "run")])
    assert res.exit_code == 1 and res.output.strip().splitlines() == [
        f"Error: {tmp_path / 'run.0.json'}: event 'aten::mm' has {key} {shown} us, outside what a Kineto time can be "
        "(within +-4e+15 us); the trace is corrupt, export it again"]


def test_an_odd_category_is_no_category(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    plain = measure([_write(tmp_path / "a", {0: _rank_trace(0, 1)})])
    odd = _rank_trace(0, 1)
    odd["traceEvents"].append({**odd["traceEvents"][1], "cat": {"nested": 1}})
    assert measure([_write(tmp_path / "b", {0: odd})]).ranks == plain.ranks


def test_profiles_of_different_steps_are_refused(tmp_path):
    prefix = _write(tmp_path, {0: _rank_trace(0, 2, kinds=("all_reduce",)), 1: _rank_trace(1, 2, kinds=("all_gather",))})
    with pytest.raises(LibraError, match="ALL_REDUCE on rank 0 but ALL_GATHER on rank 1"):
        measure([prefix])


def test_missing_prefix_and_wrong_network(tmp_path):
    with pytest.raises(LibraError, match="no Kineto file"):
        measure([str(tmp_path / "nothing")])
    with pytest.raises(LibraError, match="8 ranks but network 'real-ring4' has 4 NPUs"):
        measure([str(DLRM)], load_network(REAL / "ring4.yml"))


def test_cli_json_and_timeline(tmp_path):
    out = tmp_path / "t.svg"
    res = CliRunner().invoke(main, ["measure", str(DLRM), "--json", "--plot", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["step_max_ns"] == 19_901_000 and len(data["collectives"]) == 8
    assert data == measurement_to_dict(measure([str(DLRM)]))
    svg = out.read_text()
    assert 'id="series:timeline:transfer:0:7"' in svg and 'id="series:timeline:wait:0:1"' in svg


def test_cli_table(dlrm):
    res = CliRunner().invoke(main, ["measure", str(DLRM), "-n", str(REAL / "ring8.yml")])
    assert res.exit_code == 0, res.output
    assert "step: mean 16.0078 ms, max 19.9010 ms (rank 1); start to end across ranks 20.8230 ms" in res.output
    # one profiled step: no spread columns, and the output says the spread is not measured
    assert res.output.splitlines()[2].split() == ["rank", "step", "GPU", "compute", "exposed", "comm", "CPU-bound", "idle", "starts", "after", "first"]
    assert ("note: one profiled step per rank: how much the step varies is not measured (profile several steps: "
            "torch.profiler's schedule with active=N)") in res.output.splitlines()


def test_several_steps_are_averaged_and_spanned_per_step(tmp_path):
    traces = {}
    for r, lag in ((0, 0), (1, 10)):
        t = _rank_trace(r, 2, t0=1000 + lag)
        # a second step, 2000 us later, as long as the first
        t["traceEvents"] += [dict(e, ts=e["ts"] + 2000, args=dict(e["args"], correlation=e["args"]["correlation"] + 100))
                             if "correlation" in e["args"] else dict(e, ts=e["ts"] + 2000, name="ProfilerStep#4")
                             if e["name"] == "ProfilerStep#3" else dict(e, ts=e["ts"] + 2000)
                             for e in t["traceEvents"]]
        traces[r] = t
    m = measure([_write(tmp_path, traces)])
    assert [r.steps for r in m.ranks] == [2, 2] and m.ranks[0].step_ns == 1_000_000
    assert m.span_ns == 1_010_000        # per step: rank 0's start to rank 1's end, not first to last step
    assert len(m.collectives) == 4
    # two equal steps: the mean is exact
    assert all(r.step_durations_ns == (1_000_000, 1_000_000) and r.step_sem_ns == 0 for r in m.ranks)
    assert m.step_noise == (0.0, 1)


def test_a_cpu_gloo_run_measures_its_gloo_operators(tmp_path):
    def rank(r, start):
        ev = [_event("ProfilerStep#2", "user_annotation", 0, 500),
              _event("aten::addmm", "cpu_op", 10, 100),
              _event("c10d::allreduce_", "cpu_op", start - 5, 200 - start + 10),
              _event("gloo:all_reduce", "cpu_op", start, 200 - start, **{"Input Dims": [[64, 64]],
                                                                        "Input type": ["float"]})]
        return {"distributedInfo": {"rank": r, "world_size": 2, "backend": "gloo"}, "traceEvents": ev}

    m = measure([_write(tmp_path, {0: rank(0, 120), 1: rank(1, 170)})])
    (c,) = m.collectives
    assert (c.kind, c.size_bytes, c.transfer_ns, c.transfer_rank) == ("ALL_REDUCE", 16384, 30_000, 1)
    r0 = m.ranks[0]
    assert (r0.gpu_compute_ns, r0.exposed_comm_ns, r0.cpu_bound_ns) == (0, 80_000, 100_000)
