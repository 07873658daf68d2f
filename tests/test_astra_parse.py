"""parse_output() on standard output recorded from real ASTRA-sim runs (tests/fixtures/astra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from libra_astra.astra import parse_output
from libra_astra.errors import LibraError

FIXTURES = Path(__file__).parent / "fixtures" / "astra"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_ring8_allreduce_every_rank_in_order():
    text = fixture("real_ring8_allreduce.stdout")
    assert text.index("sys[6] finished") < text.index("sys[0] finished")  # printed out of order
    out = parse_output(text)
    assert [r.rank for r in out.ranks] == list(range(8))
    assert {r.finished_ns for r in out.ranks} == {17_500_015}
    assert {r.exposed_comm_ns for r in out.ranks} == {17_500_015}
    r0 = out.ranks[0]
    assert (r0.wall_time_ns, r0.comm_time_ns, r0.gpu_time_ns, r0.overlap_ns) == (17_500_015, 17_500_015, None, None)
    assert out.simulated_time_ns == 17_500_015
    assert out.missing(8) == ()


def test_compute_overlap_statistics():
    out = parse_output(fixture("real_ring8_overlap.stdout"))
    r = out.ranks[3]
    assert (r.finished_ns, r.exposed_comm_ns) == (18_000_015, 16_500_015)
    assert (r.gpu_time_ns, r.comm_time_ns, r.overlap_ns) == (1_500_000, 17_500_015, 1_000_000)


def test_two_dimensional_emitted_run():
    out = parse_output(fixture("real_ring4_switch4_k4.stdout"))
    assert len(out.ranks) == 16
    assert out.simulated_time_ns == 9_375_036  # Ring 4 x Switch 4 at 200/50 GiB/s, k = 4: 9.375 ms


def test_no_finished_lines():
    out = parse_output(fixture("real_missing_finished.stdout"))
    assert out.ranks == () and out.simulated_time_ns == 0
    assert out.missing(8) == tuple(range(8))
    assert parse_output(fixture("real_abort_latency0.stdout")).ranks == ()


def test_partial_output_and_lines_iterable():
    lines = [
        "[t] [workload] [info] sys[1] finished, 250 cycles, exposed communication 50 cycles.",
        "[t] [statistics] [info] sys[1], GPU time: 200",
        "[t] [statistics] [info] sys[1], Remote mem time: 7",
        "noise sys[0], Wall time: 999",
    ]
    out = parse_output(lines)
    assert [(r.rank, r.finished_ns, r.exposed_comm_ns, r.gpu_time_ns) for r in out.ranks] == [(1, 250, 50, 200)]
    assert out.missing(3) == (0, 2)


def test_rank_reported_twice_is_an_error():
    line = "sys[2] finished, 10 cycles, exposed communication 0 cycles.\n"
    with pytest.raises(LibraError, match=r"reports sys\[2\] finished twice"):
        parse_output(line + line)


def test_ranks_with_cpu_ops_have_only_the_finished_line():
    # ASTRA-sim drops the statistics lines of every rank that ran a CPU op (real DLRM run)
    out = parse_output(fixture("real_param_dlrm8_cpu_ops.stdout"))
    assert [r.rank for r in out.ranks] == list(range(8))
    assert out.ranks[0].finished_ns == 22_174_891 and out.ranks[0].exposed_comm_ns == 21_121_891
    assert all(r.wall_time_ns is None and r.gpu_time_ns is None for r in out.ranks)
