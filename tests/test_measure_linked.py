"""measure on the linked traces chakra_trace_link writes: PARAM's 8-GPU DLRM run linked by mlc-chakra
1.0.0's own linker (tests/fixtures/real/param_dlrm8_linked) measures as its Kineto traces do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.errors import LibraError
from libra_astra.measure.calibrate import calibrate
from libra_astra.measure.kineto import read_profile
from libra_astra.measure.linked import LINKED_NOTE, parse_linked
from libra_astra.measure.measurement import measure
from libra_astra.model.network import load_network

REAL = Path(__file__).parent / "fixtures" / "real"
KINETO = REAL / "param_dlrm8" / "param_dlrm8"
LINKED = REAL / "param_dlrm8_linked" / "linked"
NET = load_network(REAL / "ring8.yml")


@pytest.fixture(scope="module")
def both():
    return measure([str(KINETO)], NET), measure([str(LINKED)], NET)


def test_the_collectives_are_the_kineto_ones(both):
    kineto, linked = both
    # the linker copies each GPU kernel's Kineto times; sizes come from the host operators' inputs
    assert [(c.kind, c.size_bytes, c.group, c.transfer_ns, c.transfer_rank, c.waits_ns) for c in linked.collectives] \
        == [(c.kind, c.size_bytes, c.group, c.transfer_ns, c.transfer_rank, c.waits_ns) for c in kineto.collectives]
    assert len(linked.collectives) == 8 and linked.world_size == 8


def test_the_step_is_the_whole_linked_profile_and_says_so(both):
    kineto, linked = both
    # the host trace holds no ProfilerStep: each rank's step is its first to last operator, within
    # 0.9% of the ProfilerStep the Kineto trace has; GPU compute and exposed communication as measured
    for k, lk in zip(kineto.ranks, linked.ranks):
        assert lk.step_ns == pytest.approx(k.step_ns, rel=0.009) and lk.step_ns != k.step_ns
        assert lk.exposed_comm_ns == pytest.approx(k.exposed_comm_ns, abs=10_000)
    assert LINKED_NOTE in linked.assumptions
    assert any("no ProfilerStep" in a for a in linked.assumptions)
    assert [r.step_ns for r in linked.ranks][:2] == [14_351_000, 19_799_000]


def test_calibration_fits_the_same_network(both):
    kineto, linked = both
    a, b = calibrate(kineto, NET), calibrate(linked, NET)
    assert (a.bw_gbps, a.kinds, a.checks) == (b.bw_gbps, b.kinds, b.checks)
    assert [(d.dim, d.latency_ns, d.bw_gbps, d.implementations) for d in a.dims] == \
        [(d.dim, d.latency_ns, d.bw_gbps, d.implementations) for d in b.dims]


def test_the_replay_refuses_a_linked_trace(tmp_path):
    res = CliRunner().invoke(main, ["optimize", str(KINETO), "--network", str(REAL / "ring8.yml"), "--total-bw", "10",
                                    "--measured", str(LINKED), "-o", str(tmp_path / "d.json")])
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines()[-1] == (
        f"Error: {LINKED}.0.json.gz: a linked trace keeps no CUDA runtime call (launches, synchronizations), which "
        "the replay against the measurement needs; give the run's Kineto traces (torch.profiler's JSON) instead")


def test_a_device_op_launches_at_its_operators_start():
    prof = read_profile(f"{LINKED}.0.json.gz", 0)
    assert prof.linked and len(prof.device) == 261 and len(prof.runtime) == 261
    calls = {c.correlation: c for c in prof.runtime}
    host_starts = {o.start_ns for o in prof.host}
    assert all(calls[d.correlation].start_ns in host_starts and calls[d.correlation].start_ns <= d.start_ns
               for d in prof.device)


def test_an_untimed_execution_trace_is_one_line():
    with pytest.raises(LibraError) as e:
        parse_linked({"nodes": [{"id": 1, "name": "aten::mm"}]}, "host.json", 0)
    assert str(e.value) == ("host.json: the execution trace holds no timed operator (no 'ts'); give the trace "
                            "chakra_trace_link wrote (host trace linked with Kineto), or the Kineto trace itself")


def test_hostile_linked_nodes_are_skipped_or_refused(tmp_path):
    nodes = [{"id": 1, "name": "nccl:all_reduce", "ts": 10, "inclusive_dur": 5, "attrs": 5,
              "inputs": {"shapes": 3, "types": None}},
             {"id": [2], "name": "k", "cat": "kernel", "ts": 11, "inclusive_dur": 2, "ctrl_deps": {"a": 1}},
             {"id": 3, "name": "k", "cat": "kernel", "ts": 12, "inclusive_dur": 2, "ctrl_deps": 99},
             "not a node", {"id": 4, "name": "x", "ts": "soon"}]
    prof = parse_linked({"nodes": nodes}, "h.json", 0)
    assert [o.name for o in prof.host] == ["nccl:all_reduce"] and prof.device == ()
    (tmp_path / "bad.0.json").write_text(json.dumps({"nodes": [{"id": 1, "name": "m", "ts": 1e30}]}))
    res = CliRunner().invoke(main, ["measure", str(tmp_path / "bad")])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1 and "has ts 1e+30 us" in res.output
