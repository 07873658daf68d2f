"""A run whose ranks report 0 cycles although their rank files hold work is refused, by simulate
and so by loop; ranks whose files hold nothing that takes a cycle may finish at 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.astra import emit, simulate
from libra_astra.cli import main
from libra_astra.demand.types import Demand, RankClass, demand_to_dict, make_collective, single_class
from libra_astra.demand.workload import load_workloads
from libra_astra.errors import LibraError
from libra_astra.loop import run_loop
from libra_astra.model.cost import load_cost
from libra_astra.model.network import network_from_dict
from libra_astra.optimize.design import Design, WorkloadRef
from libra_astra.optimize.optimizer import Constraints
from libra_astra.traces import chakra_io as cio

ROOT = Path(__file__).resolve().parents[1]
RING8 = (ROOT / "tests" / "fixtures" / "astra" / "real_ring8_allreduce.stdout").read_text()
NET8 = network_from_dict({"name": "r8", "dimensions": [{"name": "a", "topology": "Ring", "npus": 8}]})


def _zero_lines(ranks) -> str:
    return "".join(f"[t] [workload] [info] sys[{r}] finished, 0 cycles, exposed communication 0 cycles.\n"
                   for r in ranks)


def _printing(tmp_path: Path, fake, text: str) -> str:
    """The stand-in simulator printing ``text`` (an absolute path replaces the fixture directory)."""
    out = tmp_path / f"stdout{len(list(tmp_path.glob('stdout*')))}.txt"
    out.write_text(text)
    return fake(str(out))


def _emitted(tmp_path: Path, demand: Demand, name: str = "run") -> Path:
    path = tmp_path / f"{demand.name}.json"
    path.write_text(json.dumps(demand_to_dict(demand)))
    design = Design("r8", NET8, (100.0,), workloads=(WorkloadRef(demand.name, demand=str(path)),))
    emit(design, tmp_path / name)
    return tmp_path / name


def _all_reduce() -> Demand:
    return single_class("ar", [8], 0.0, [make_collective("ALL_REDUCE", 2**30, [8])])


def test_every_rank_at_zero_cycles_with_communication_is_refused(tmp_path, fake):
    run = _emitted(tmp_path, _all_reduce())
    with pytest.raises(LibraError) as e:
        simulate(run, _printing(tmp_path, fake, _zero_lines(range(8))))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{run}: ASTRA-sim reported every rank (8) finished at 0 cycles")
    assert "while the workload has 0 compute and 8 communication nodes (" in msg and "ns predicted)" in msg
    assert "did not run these nodes" in msg and "simulate again with --force" in msg
    assert msg.endswith(f"see {run}/sim/stdout.txt")
    assert (run / "sim" / "stdout.txt").read_text() == _zero_lines(range(8))   # kept for inspection
    assert not (run / "sim" / "result.json").exists()


def test_cli_simulate_refuses_zero_cycles_in_one_line(tmp_path, fake):
    run = _emitted(tmp_path, _all_reduce())
    r = CliRunner().invoke(main, ["simulate", str(run), "--astra-sim", _printing(tmp_path, fake, _zero_lines(range(8)))])
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert "every rank (8) finished at 0 cycles" in r.output and "simulated time" not in r.output


def test_one_rank_at_zero_cycles_with_work_is_refused(tmp_path, fake):
    run = _emitted(tmp_path, _all_reduce())
    one = RING8.replace("sys[3] finished, 17500015 cycles, exposed communication 17500015 cycles",
                        "sys[3] finished, 0 cycles, exposed communication 0 cycles")
    assert one != RING8
    with pytest.raises(LibraError, match=r"ASTRA-sim reported 1 of 8 ranks finished at 0 cycles \(ranks 3\) while "
                                         r"their rank files hold 0 compute and 1 communication nodes, "):
        simulate(run, _printing(tmp_path, fake, one))


def test_every_rank_at_zero_cycles_with_compute_is_refused(tmp_path, fake):
    # An idle workload predicts 0 ns, but emit gives each empty rank a compute node (1 cycle).
    run = _emitted(tmp_path, single_class("idle", [8], 0.0, []))
    with pytest.raises(LibraError, match=r"every rank \(8\) finished at 0 cycles while the workload has 8 compute "
                                         r"and 0 communication nodes \(no prediction\)"):
        simulate(run, _printing(tmp_path, fake, _zero_lines(range(8))))


def _without_timed_nodes(run: Path, ranks) -> None:
    """Replace the rank files of ``ranks`` by files whose only node is INVALID (skipped at no cost)."""
    for r in ranks:
        node = cio.comp_node(0, "skipped", 0)
        node.type = 0
        cio.write_et(run / "workload" / f"ar.{r}.et", [node], overwrite=True)


def test_ranks_without_timed_nodes_may_finish_at_zero_cycles(tmp_path, fake):
    half = Demand("ar", (8,), (RankClass(1e5, (), 4, (0, 1, 2, 3)), RankClass(0.0, (), 4, (4, 5, 6, 7))))
    run = _emitted(tmp_path, half)
    _without_timed_nodes(run, range(4, 8))
    busy = "".join(f"sys[{r}] finished, 100000 cycles, exposed communication 0 cycles.\n" for r in range(4))
    res = simulate(run, _printing(tmp_path, fake, busy + _zero_lines(range(4, 8))))
    assert res.finished_ns == (100_000,) * 4 + (0,) * 4
    # ... but not a rank whose file still holds its work
    with pytest.raises(LibraError, match=r"1 of 8 ranks finished at 0 cycles \(ranks 0\) while their rank files "
                                         r"hold 1 compute and 0 communication nodes"):
        simulate(run, _printing(tmp_path, fake, busy.replace("sys[0] finished, 100000", "sys[0] finished, 0")
                                + _zero_lines(range(4, 8))), overwrite=True)


def test_all_zero_without_work_or_prediction_gives_no_division_by_zero(tmp_path, fake):
    run = _emitted(tmp_path, single_class("ar", [8], 0.0, []))
    _without_timed_nodes(run, range(8))
    res = simulate(run, _printing(tmp_path, fake, _zero_lines(range(8))))
    assert res.simulated_time_ns == 0 and res.prediction_error is None
    r = CliRunner().invoke(main, ["simulate", str(run), "--force", "--astra-sim",
                                  _printing(tmp_path, fake, _zero_lines(range(8)))])
    assert r.exit_code == 0 and "simulated time: 0.000000 ms" in r.output


@pytest.fixture
def loop_inputs(ring4_switch4_allreduce):
    return ring4_switch4_allreduce


def test_loop_records_no_zero_cycle_run(loop_inputs, fake):
    net, tmp = loop_inputs
    exe = _printing(tmp, fake, _zero_lines(range(16)))
    workloads = load_workloads((), (str(tmp / "ar.json"),), (), net)
    with pytest.raises(LibraError, match=r"iter0/optimized/ar: ASTRA-sim reported every rank \(16\) finished at 0 "
                                         r"cycles while the workload has 16 compute and 16 communication nodes"):
        run_loop(workloads, net, load_cost(ROOT / "network_configs/cost.yml"), out_dir=tmp / "loop",
                 constraints=Constraints(total_bw_gbps=250), binary=exe)
    r = CliRunner().invoke(main, ["loop", "--demand", str(tmp / "ar.json"), "-n", str(tmp / "net.yml"),
                                  "--cost", str(ROOT / "network_configs/cost.yml"), "--total-bw", "250",
                                  "--astra-sim", exe, "--out", str(tmp / "runs")])
    assert r.exit_code == 1 and "finished at 0 cycles" in r.output and "Traceback" not in r.output
    assert not (tmp / "runs" / "loop.json").exists()
