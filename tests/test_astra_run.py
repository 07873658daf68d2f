"""simulate() and the emit/simulate commands, with a stand-in binary replaying recorded output."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from libra_astra.astra import emit, simulate
from libra_astra.cli.astra import emit_command, simulate_command
from libra_astra.demand.types import demand_to_dict, make_collective, single_class
from libra_astra.optimize.design import Design, WorkloadRef, design_to_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict

FIXTURES = Path(__file__).parent / "fixtures" / "astra"


@pytest.fixture
def run_dir(tmp_path):
    """An emitted directory for 8 NPUs (Ring 8), the size of the recorded ring-8 outputs."""
    net = network_from_dict({"name": "r8", "dimensions": [{"name": "a", "topology": "Ring", "npus": 8}]})
    demand = tmp_path / "demand.json"
    demand.write_text(json.dumps(demand_to_dict(single_class("ar", [8], 0.0, [make_collective("ALL_REDUCE", 2**30, [8])]))))
    design = Design("r8", net, (100 * 2**30 / 1e9,), workloads=(WorkloadRef("ar", demand=str(demand)),))
    (tmp_path / "design.json").write_text(json.dumps(design_to_dict(design)))
    emit(design, tmp_path / "run")
    return tmp_path / "run"


def test_missing_binary(run_dir, monkeypatch):
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    with pytest.raises(LibraError) as e:
        simulate(run_dir)
    assert str(e.value) == ("no ASTRA-sim binary given: set ASTRA_SIM_BIN to the path of "
                            "AstraSim_Analytical_Congestion_Unaware or pass --astra-sim BIN")
    monkeypatch.setenv("ASTRA_SIM_BIN", str(run_dir / "nope"))
    with pytest.raises(LibraError, match="nope' not found or not executable; set ASTRA_SIM_BIN"):
        simulate(run_dir)


def test_not_an_emitted_directory(tmp_path, fake):
    with pytest.raises(LibraError, match="not an emitted directory .no manifest.json.; make one with 'libra-astra emit'"):
        simulate(tmp_path, fake("real_ring8_allreduce.stdout"))


def test_success_keeps_outputs_and_refuses_to_rerun(run_dir, fake, monkeypatch):
    exe = fake("real_ring8_allreduce.stdout")
    res = simulate(run_dir, exe)
    assert res.simulated_time_ns == 17_500_015 and res.npus_count == 8 and res.exit_code == 0
    assert res.finished_ns == (17_500_015,) * 8 and res.exposed_comm_ns == (17_500_015,) * 8
    assert res.binary == str(Path(exe).resolve()) and res.splits == 1
    assert res.command[-1] == "--logging-folder=sim/log"
    sim = run_dir / "sim"
    assert (sim / "stdout.txt").read_text() == (FIXTURES / "real_ring8_allreduce.stdout").read_text()
    assert json.loads((sim / "result.json").read_text())["simulated_time_ns"] == 17_500_015
    with pytest.raises(LibraError, match="sim: already exists .an earlier run.; pass --force to replace it"):
        simulate(run_dir, exe)
    monkeypatch.setenv("ASTRA_SIM_BIN", exe)  # found through the environment this time
    assert simulate(run_dir, overwrite=True).simulated_time_ns == 17_500_015


def test_abort_reports_exit_code_and_last_lines(run_dir, fake):
    exe = fake("real_abort_latency0.stdout", code=134, stderr="real_abort_latency0.stderr")
    with pytest.raises(LibraError) as e:
        simulate(run_dir, exe)
    msg = str(e.value)
    assert "ASTRA-sim aborted (an assertion failed, or an unhandled error) (exit code 134)" in msg
    assert "last output: AstraSim_Analytical_Congestion_Unaware: astra-sim/extern" in msg
    assert "\n" not in msg


def test_config_error_exit_255(run_dir, fake):
    with pytest.raises(LibraError, match=r"ASTRA-sim stopped with a configuration error \(exit code 255\)"):
        simulate(run_dir, fake("real_missing_finished.stdout", code=255))


def test_exit_zero_with_missing_ranks_is_a_failure(run_dir, fake):
    with pytest.raises(LibraError) as e:
        simulate(run_dir, fake("real_missing_finished.stdout"))
    msg = str(e.value)
    assert "ASTRA-sim exited 0 but 8 of 8 ranks never finished (ranks 0, 1, 2, 3, 4, 5, 6, 7)" in msg
    assert "[HardwareResource] [critical] GPU comm node id: 0" in msg


def test_more_ranks_than_npus_is_a_failure(run_dir, fake):
    with pytest.raises(LibraError, match="reported rank 8 but the network has 8 NPUs"):
        simulate(run_dir, fake("real_ring4_switch4_k4.stdout"))


def test_timeout_stops_the_simulator(run_dir, fake):
    with pytest.raises(LibraError, match=r"did not finish within 0.3 s and was stopped; raise --timeout"):
        simulate(run_dir, fake("real_ring8_allreduce.stdout", sleep=30), timeout_s=0.3)


# ------------------------------------------------------------------ command line


def cli():
    group = click.Group()
    group.add_command(emit_command)
    group.add_command(simulate_command)
    return group


def test_cli_emit_and_simulate(run_dir, fake):
    tmp = run_dir.parent
    runner = CliRunner()
    r = runner.invoke(cli(), ["emit", str(tmp / "design.json"), "--out", str(tmp / "run2"), "--splits", "4"])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and "8 NPUs" in r.output and "splits 4" in r.output
    exe = fake("real_ring8_allreduce.stdout")
    r = runner.invoke(cli(), ["simulate", str(tmp / "run2"), "--astra-sim", exe])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("simulated time: 17.500015 ms")
    r = runner.invoke(cli(), ["simulate", str(tmp / "run2"), "--astra-sim", exe, "--force", "--json"])
    assert r.exit_code == 0
    assert json.loads(r.output)["preferred_dataset_splits"] == 4


def test_cli_errors_are_one_line(run_dir, fake, monkeypatch):
    tmp = run_dir.parent
    runner = CliRunner()
    r = runner.invoke(cli(), ["emit", str(tmp / "design.json"), "--out", str(run_dir)])
    assert r.exit_code == 1
    assert r.output == f"Error: {run_dir}: already exists; choose another directory or pass --force to replace it\n"
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    r = runner.invoke(cli(), ["simulate", str(run_dir)])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "pass --astra-sim BIN" in r.output
    r = runner.invoke(cli(), ["simulate", str(run_dir), "--astra-sim", fake("real_missing_finished.stdout")])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "never finished" in r.output


def test_cli_help_has_examples():
    runner = CliRunner()
    for cmd in ("emit", "simulate"):
        r = runner.invoke(cli(), [cmd, "--help"])
        assert r.exit_code == 0 and "Examples" in r.output and f"libra-astra {cmd}" in r.output


def test_run_that_cannot_fit_in_memory_is_refused_before_the_simulator_starts(run_dir, fake, monkeypatch):
    from libra_astra.astra import run as run_mod

    nodes = json.loads((run_dir / "manifest.json").read_text())["workload_stats"]["nodes_written"]
    assert nodes > 0
    monkeypatch.setattr(run_mod, "available_memory_bytes", lambda: nodes * run_mod.SIM_BYTES_PER_NODE - 1)
    exe = fake("real_ring8_allreduce.stdout")
    with pytest.raises(LibraError) as e:
        simulate(run_dir, exe)
    need_gb = nodes * run_mod.SIM_BYTES_PER_NODE / 1e9
    assert str(e.value) == (
        f"{run_dir}: ASTRA-sim would need about {need_gb:.1f} GB to hold the {nodes:,} nodes of this run (1.6 KB a "
        f"node) and this machine has {need_gb:.1f} GB available, so it would be killed for lack of memory; emit a "
        "shorter workload (fewer layers or iterations), run it on a larger machine, or pass --no-memory-check to "
        "try anyway")
    assert not (run_dir / "sim").exists()
    r = CliRunner().invoke(simulate_command, [str(run_dir), "--astra-sim", exe])
    assert r.exit_code != 0 and "--no-memory-check to try anyway" in r.output
    # enough memory, or the check turned off: the run goes ahead
    assert simulate(run_dir, exe, check_memory=False).simulated_time_ns == 17_500_015
    monkeypatch.setattr(run_mod, "available_memory_bytes", lambda: nodes * run_mod.SIM_BYTES_PER_NODE)
    assert simulate(run_dir, exe, overwrite=True).simulated_time_ns == 17_500_015


def test_available_memory_is_read_from_this_machine():
    from libra_astra.astra.run import available_memory_bytes

    have = available_memory_bytes()
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc/meminfo: the check is off on this system")
    assert isinstance(have, int) and have > 0


def _named(exe: str, name: str) -> str:
    """The stand-in simulator under another file name (the backend is told by the binary's name)."""
    link = Path(exe).with_name(name)
    link.symlink_to(exe)
    return str(link)


def test_congestion_aware_backend_refuses_a_multi_dimensional_run_before_starting(tmp_path, fake):
    net = network_from_dict({"name": "r4s4", "dimensions": [{"name": "a", "topology": "Ring", "npus": 4},
                                                            {"name": "b", "topology": "Switch", "npus": 4}]})
    demand = tmp_path / "demand.json"
    demand.write_text(json.dumps(demand_to_dict(single_class("ar", [4, 4], 0.0,
                                                             [make_collective("ALL_REDUCE", 2**30, [4, 4])]))))
    design = Design("r4s4", net, (100.0, 50.0), workloads=(WorkloadRef("ar", demand=str(demand)),))
    emit(design, tmp_path / "run")
    exe = _named(fake("real_ring4_switch4_k4.stdout"), "AstraSim_Analytical_Congestion_Aware")
    with pytest.raises(LibraError) as e:
        simulate(tmp_path / "run", exe)
    assert str(e.value) == (f"{tmp_path / 'run'}: AstraSim_Analytical_Congestion_Aware (the congestion-aware "
                            "backend) simulates one-dimensional networks only, and this run's network has 2 "
                            "dimensions (Ring 4 x Switch 4); use AstraSim_Analytical_Congestion_Unaware, or a "
                            "one-dimensional network")
    assert not (tmp_path / "run" / "sim").exists()      # refused before anything was run or written
    # the same run on the unaware backend's name goes ahead
    unaware = _named(fake("real_ring4_switch4_k4.stdout"), "AstraSim_Analytical_Congestion_Unaware")
    assert simulate(tmp_path / "run", unaware).npus_count == 16


def test_congestion_aware_backend_runs_a_one_dimensional_run(run_dir, fake):
    exe = _named(fake("real_ring8_allreduce.stdout"), "AstraSim_Analytical_Congestion_Aware")
    assert simulate(run_dir, exe).simulated_time_ns == 17_500_015
