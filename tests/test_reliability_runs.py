"""emit and simulate never lose data, bound their memory, and end cleanly when stopped."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.astra import emit, simulate
from libra_astra.cli import main
from libra_astra.cli.guard import Interrupted
from libra_astra.demand.types import demand_to_dict, make_collective, single_class
from libra_astra.optimize.design import Design, WorkloadRef, design_to_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict

emit_mod = importlib.import_module("libra_astra.astra.emit")
rundir = importlib.import_module("libra_astra.astra.rundir")
FIXTURES = Path(__file__).parent / "fixtures" / "astra"
RING8 = (FIXTURES / "real_ring8_allreduce.stdout").read_text()


def _design(tmp_path) -> Design:
    net = network_from_dict({"name": "r8", "dimensions": [{"name": "a", "topology": "Ring", "npus": 8}]})
    demand = tmp_path / "demand.json"
    demand.write_text(json.dumps(demand_to_dict(single_class("ar", [8], 0.0, [make_collective("ALL_REDUCE", 2**30, [8])]))))
    design = Design("r8", net, (100 * 2**30 / 1e9,), workloads=(WorkloadRef("ar", demand=str(demand)),))
    (tmp_path / "design.json").write_text(json.dumps(design_to_dict(design)))
    return design


def _hidden(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@pytest.fixture
def fake_sim(tmp_path, monkeypatch):
    """A stand-in simulator printing the text of $FAKE_OUT (a file), optionally sleeping first."""
    exe = tmp_path / "fake_astra"
    exe.write_text(f"#!{sys.executable}\n"
                   "import os, sys, time\n"
                   "pid = os.environ.get('FAKE_PID')\n"
                   "if pid: open(pid, 'w').write(str(os.getpid()))\n"
                   "time.sleep(float(os.environ.get('FAKE_SLEEP', '0')))\n"
                   "sys.stdout.write(open(os.environ['FAKE_OUT']).read())\n")
    exe.chmod(0o755)

    def use(text: str, sleep: float = 0.0) -> str:
        out = tmp_path / f"out{len(text)}.txt"
        out.write_text(text)
        monkeypatch.setenv("FAKE_OUT", str(out))
        monkeypatch.setenv("FAKE_SLEEP", str(sleep))
        return str(exe)
    return use


# ---------------------------------------------------------------- emit: nothing lost


def test_directory_created_while_emitting_keeps_its_files(tmp_path, monkeypatch):
    design = _design(tmp_path)
    out = tmp_path / "run"
    real = emit_mod.network_yaml

    def meanwhile(*a, **k):
        out.mkdir()
        (out / "precious.txt").write_text("mine")
        return real(*a, **k)
    monkeypatch.setattr(emit_mod, "network_yaml", meanwhile)
    with pytest.raises(LibraError, match=r"run: appeared while emitting \(another command wrote it\?\); it is kept"):
        emit(design, out)
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]
    assert _hidden(tmp_path) == []


def test_two_emits_into_one_new_directory_one_wins(tmp_path, monkeypatch):
    design = _design(tmp_path)
    out = tmp_path / "run"
    real = emit_mod.network_yaml
    inner = []

    def meanwhile(*a, **k):
        if not inner:   # a second emit runs to completion while the first is half-way
            inner.append(1)
            emit(design, out, splits=2)
        return real(*a, **k)
    monkeypatch.setattr(emit_mod, "network_yaml", meanwhile)
    with pytest.raises(LibraError, match="appeared while emitting"):
        emit(design, out)
    assert json.loads((out / "system.json").read_text())["preferred-dataset-splits"] == 2
    assert json.loads((out / "manifest.json").read_text())["preferred_dataset_splits"] == 2
    assert _hidden(tmp_path) == []


def test_force_keeps_sim_results_and_user_files(tmp_path, fake_sim):
    design = _design(tmp_path)
    out = tmp_path / "run"
    emit(design, out)
    simulate(out, fake_sim(RING8))
    (out / "notes.md").write_text("my notes")
    (out / "workload" / "extra.txt").write_text("mine too")
    emit(design, out, splits=4, overwrite=True)
    assert (out / "sim" / "result.json").is_file() and (out / "notes.md").read_text() == "my notes"
    assert (out / "workload" / "extra.txt").read_text() == "mine too"
    assert json.loads((out / "system.json").read_text())["preferred-dataset-splits"] == 4
    assert sorted(p.name for p in (out / "workload").iterdir()) == sorted(
        [f"ar.{r}.et" for r in range(8)] + ["ar.set.json", "extra.txt"])
    assert _hidden(tmp_path) == [] and _hidden(out) == []


def test_force_refuses_a_directory_that_stopped_being_an_emitted_one(tmp_path, monkeypatch):
    design = _design(tmp_path)
    out = tmp_path / "run"
    emit(design, out)
    real = emit_mod.network_yaml

    def meanwhile(*a, **k):
        (out / "manifest.json").unlink()
        return real(*a, **k)
    monkeypatch.setattr(emit_mod, "network_yaml", meanwhile)
    with pytest.raises(LibraError, match="is no longer an emitted directory"):
        emit(design, out, overwrite=True)
    assert (out / "system.json").is_file() and _hidden(tmp_path) == []


def test_interrupted_force_is_detected_and_repaired(tmp_path, fake_sim, monkeypatch):
    design = _design(tmp_path)
    out = tmp_path / "run"
    emit(design, out)
    real_rename = os.rename
    count = []

    def rename(a, b):
        count.append(1)
        if len(count) == 4:
            raise KeyboardInterrupt
        return real_rename(a, b)
    monkeypatch.setattr(rundir.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        emit(design, out, splits=2, overwrite=True)
    monkeypatch.setattr(rundir.os, "rename", real_rename)
    with pytest.raises(LibraError, match=r"run: emit did not finish writing this directory \(manifest state "
                                         r"'incomplete'\); re-emit the directory \(libra-astra emit DESIGN --out .*run "
                                         r"--force\)$"):
        simulate(out, fake_sim(RING8))
    emit(design, out, splits=2, overwrite=True)
    assert simulate(out, fake_sim(RING8)).simulated_time_ns == 17_500_015
    assert _hidden(tmp_path) == [] and _hidden(out) == []


def test_emit_rank_and_file_limits(tmp_path, monkeypatch):
    design = _design(tmp_path)
    monkeypatch.setenv("LIBRA_ASTRA_MAX_EMIT_FILES", "10")
    with pytest.raises(LibraError, match=r"run: the run needs 16 files \(8 rank files\), more than the limit of 10 "
                                         r"files of one emitted run; .* LIBRA_ASTRA_MAX_EMIT_FILES=N$"):
        emit(design, tmp_path / "run")
    monkeypatch.setenv("LIBRA_ASTRA_MAX_RANKS", "4")
    with pytest.raises(LibraError, match=r"design 'r8': the network has 8 NPUs, more than the limit of 4"):
        emit(design, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_hint_after_emit_is_shell_quoted(tmp_path):
    _design(tmp_path)
    out = tmp_path / "my run; rm -rf x"
    r = CliRunner().invoke(main, ["emit", str(tmp_path / "design.json"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    hint = [ln for ln in r.output.splitlines() if ln.startswith("run it:")][0]
    assert f"libra-astra simulate '{out}'" in hint


def test_run_sh_through_a_path_ending_in_a_newline(tmp_path, monkeypatch):
    design = _design(tmp_path)
    odd, neighbour = tmp_path / "r\n", tmp_path / "r"
    emit(design, odd)
    emit(design, neighbour)
    exe = tmp_path / "where"
    exe.write_text(f"#!{sys.executable}\nimport os\nopen(os.environ['WHERE_OUT'], 'w').write(os.getcwd())\n")
    exe.chmod(0o755)
    env = {**os.environ, "ASTRA_SIM_BIN": str(exe), "WHERE_OUT": str(tmp_path / "cwd.txt")}
    subprocess.run(["sh", str(odd / "run.sh")], env=env, check=True)
    assert (tmp_path / "cwd.txt").read_text() == str(odd)


# ---------------------------------------------------------------- simulate: bounded, validated


def test_negative_exposed_communication_is_refused(tmp_path, fake_sim):
    design = _design(tmp_path)
    emit(design, tmp_path / "run")
    bad = RING8.replace("exposed communication 17500015 cycles", "exposed communication -5 cycles", 1)
    assert bad != RING8
    with pytest.raises(LibraError, match=r"negative exposed communication \(-5 cycles\) for sys\[\d\]"):
        simulate(tmp_path / "run", fake_sim(bad))


def test_absurd_numbers_are_one_line(tmp_path, fake_sim):
    emit(_design(tmp_path), tmp_path / "run")
    bad = RING8.replace("finished, 17500015 cycles", "finished, " + "9" * 5000 + " cycles", 1)
    with pytest.raises(LibraError, match=r"ASTRA-sim output has an absurd number in "):
        simulate(tmp_path / "run", fake_sim(bad))


def test_manifest_with_missing_keys_is_one_line(tmp_path, fake_sim):
    emit(_design(tmp_path), tmp_path / "run")
    m = tmp_path / "run" / "manifest.json"
    data = json.loads(m.read_text())
    del data["network"]["npus_count"]
    m.write_text(json.dumps(data))
    with pytest.raises(LibraError, match=r"manifest\.json: 'network\.npus_count' is missing; re-emit the directory"):
        simulate(tmp_path / "run", fake_sim(RING8))


def test_huge_output_is_streamed_with_a_bounded_tail(tmp_path, fake_sim, monkeypatch):
    emit(_design(tmp_path), tmp_path / "run")
    noise = "x" * 3_000_000 + "\n" + "noise line\n" * 100_000
    monkeypatch.setenv("LIBRA_ASTRA_SIM_TAIL_LINES", "5")
    real_read_text = Path.read_text

    def read_text(self, *a, **k):   # the output may be gigabytes: it must never be read whole
        assert self.name != "stdout.txt", "simulator output read into memory whole"
        return real_read_text(self, *a, **k)
    monkeypatch.setattr(Path, "read_text", read_text)
    res = simulate(tmp_path / "run", fake_sim(noise + RING8))
    assert res.simulated_time_ns == 17_500_015
    assert (tmp_path / "run" / "sim" / "stdout.txt").stat().st_size == len(noise + RING8)
    with pytest.raises(LibraError) as e:   # a failure quotes only the last lines
        simulate(tmp_path / "run", fake_sim(noise), overwrite=True)
    assert "noise line | noise line | noise line" in str(e.value) and len(str(e.value)) < 2000


def _wait_for(path: Path, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        if time.monotonic() > end:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:   # a zombie has finished
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_simulate_ends_the_simulator_and_cleans_up(tmp_path, fake_sim, monkeypatch, sig):
    emit(_design(tmp_path), tmp_path / "run")
    exe = fake_sim(RING8, sleep=60)
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_PID", str(pid_file))
    # SIGUSR1 makes the command print where each of its threads is: the report if it does not stop
    code = ("import faulthandler, signal; faulthandler.register(signal.SIGUSR1); "
            "from libra_astra.cli import main; main()")
    proc = subprocess.Popen([sys.executable, "-c", code, "simulate", str(tmp_path / "run"), "--astra-sim", exe],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(pid_file)
    child = int(pid_file.read_text())
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the command did not stop within 30 s of {signal.Signals(sig).name}; where it was:\n{err}")
    assert proc.returncode == 128 + sig
    name = signal.Signals(sig).name
    assert err.strip().splitlines() == [f"Error: interrupted by {name}; temporary files removed; nothing was "
                                        "written"], err
    end = time.monotonic() + 10
    while _alive(child) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive(child)
    assert not (tmp_path / "run" / "sim").exists() and _hidden(tmp_path / "run") == []


def test_interrupted_emit_removes_its_temporary_directory(tmp_path, monkeypatch):
    _design(tmp_path)

    def stop(*a, **k):
        raise Interrupted(signal.SIGTERM)
    monkeypatch.setattr(emit_mod, "network_yaml", stop)
    r = CliRunner().invoke(main, ["emit", str(tmp_path / "design.json"), "--out", str(tmp_path / "run")])
    assert r.exit_code == 143
    assert "interrupted by SIGTERM" in r.output and "nothing was written" in r.output
    assert not (tmp_path / "run").exists() and _hidden(tmp_path) == []


def test_twenty_dimension_design_is_refused_before_writing(tmp_path):
    net = network_from_dict({"name": "n20", "dimensions": [{"name": f"d{i}", "topology": "Ring", "npus": 2}
                                                           for i in range(20)]})
    d = single_class("ar", [2] * 20, 0.0, [make_collective("ALL_REDUCE", 2**20, [2] * 20)])
    (tmp_path / "d.json").write_text(json.dumps(demand_to_dict(d)))
    design = Design("n20", net, (10.0,) * 20, workloads=(WorkloadRef("ar", demand=str(tmp_path / "d.json")),))
    with pytest.raises(LibraError, match=r"run: the run needs 1,048,584 files \(1,048,576 rank files\), more than the "
                                         r"limit of 131,072 files of one emitted run"):
        emit(design, tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json"]


def test_interrupted_force_leaves_the_workload_set_marked_incomplete(tmp_path, monkeypatch):
    from libra_astra.model.network import load_network
    from libra_astra.demand.from_traces import demand_from_traces
    root = Path(__file__).resolve().parents[1]
    net = load_network(root / "network_configs" / "sample_4x4.yml")
    design = Design("g", net, (100.0, 100.0), workloads=(WorkloadRef(
        "gpt", traces=str(root / "traces" / "gpt_tp2_pp2_dp4" / "gpt"),
        comm_groups=str(root / "traces" / "gpt_tp2_pp2_dp4" / "gpt.groups.json")),))
    out = tmp_path / "run"
    emit(design, out)
    real_rename = os.rename
    moved = []

    def rename(a, b):
        if str(a).startswith(str(tmp_path / ".run.")) and "workload" in str(a):
            moved.append(a)
            if len(moved) == 5:   # half-way through the new rank files
                raise KeyboardInterrupt
        return real_rename(a, b)
    monkeypatch.setattr(rundir.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        emit(design, out, splits=2, overwrite=True)
    monkeypatch.setattr(rundir.os, "rename", real_rename)
    files = sorted(p.name for p in (out / "workload").iterdir())
    assert "gpt.set.json" in files
    with pytest.raises(LibraError, match=r"trace set is incomplete: gpt\.set\.json says it was still being written by "
                                         r"libra-astra emit --force"):
        demand_from_traces(out / "workload" / "gpt", net)
