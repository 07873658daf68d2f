"""Every command: NaN/inf refused, every failed write one line, -o onto a dangling link refused."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra import publish
from libra_astra.demand import synthetic
from libra_astra.cli import main
from libra_astra.demand.types import demand_to_dict
from libra_astra.model.network import load_network

ROOT = Path(__file__).resolve().parent.parent
NET = str(ROOT / "network_configs" / "sample_4x4.yml")
COST = str(ROOT / "network_configs" / "cost.yml")
TRACES = str(ROOT / "traces" / "gpt_tp2_pp2_dp4" / "gpt")
SPEC = str(ROOT / "traces" / "gpt_tp2_pp2_dp4" / "spec.yml")


@pytest.fixture(scope="module")
def demand_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("rel") / "d.json"
    p.write_text(json.dumps(demand_to_dict(synthetic.gpt3_demand(load_network(NET)))))
    return str(p)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(r, pattern):
    import re
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 or (len(lines) >= 2 and lines[0].startswith("Usage:")), r.output
    assert re.search(pattern, lines[-1]), lines[-1]


def opt(demand_file, *extra):
    return invoke("optimize", "--demand", demand_file, "--network", NET, "--cost", COST, *extra)


@pytest.mark.parametrize("extra", [
    ["--total-bw", "300", "--weight", "nan"],
    ["--total-bw", "nan"],
    ["--total-bw-max", "inf"],
    ["--total-bw", "300", "--budget", "nan"],
    ["--total-bw", "300", "--objective", "min-cost", "--time-target", "inf"],
    ["--total-bw", "300", "--model", "pipelined", "--local-mem-bw", "nan"],
    ["--total-bw", "300", "--local-mem-bw", "-inf"],
])
def test_non_finite_options_are_refused(demand_file, extra):
    one_line(opt(demand_file, *extra), r"Error: Invalid value for '--[a-z-]+': '-?(nan|inf)' is not a finite number")


def test_pareto_budgets_must_be_finite(demand_file):
    r = invoke("pareto", "--demand", demand_file, "--network", NET, "--cost", COST, "--min-budget", "1",
               "--max-budget", "inf")
    one_line(r, r"--max-budget.*'inf' is not a finite number")


def test_emit_and_simulate_options_must_be_finite(tmp_path):
    d = tmp_path / "x.json"
    d.write_text("{}")
    one_line(invoke("emit", d, "--out", tmp_path / "o", "--local-mem-bw", "inf"), r"'inf' is not a finite number")
    one_line(invoke("simulate", tmp_path, "--timeout", "nan"), r"'nan' is not a finite number")


def test_huge_demand_count_is_refused(tmp_path):
    d = synthetic.gpt3_demand(load_network(NET))
    data = demand_to_dict(d)
    data["rank_classes"][0]["collectives"][0]["count"] = 1e308
    p = tmp_path / "d.json"
    p.write_text(json.dumps(data))
    one_line(opt(str(p), "--total-bw", "300"),
             r"Error: .*d\.json: rank_classes\[0\]: collectives\[0\]: count must be a finite number >= 0 and <= 1e\+21, "
             r"got 1e\+308$")


def test_infinity_in_a_demand_file_is_refused(tmp_path):
    p = tmp_path / "d.json"
    p.write_text('{"format": "libra_astra.demand", "version": 1, "npus_per_dim": [4, 4], "compute_time_ns": Infinity}')
    one_line(opt(str(p), "--total-bw", "300"), r"d\.json: not valid JSON: Infinity is not a number JSON allows")


def test_all_zero_prices(tmp_path, demand_file):
    c = tmp_path / "zero.yml"
    c.write_text("unit_prices_usd_per_gbps:\n  InterPackage: {link: 0}\n  InterPod: {link: 0}\n")
    r = opt(demand_file, "--cost", c, "--total-bw", "300")
    assert r.exit_code == 0 and "perf/cost gain n/a (cost 0)" in r.output, r.output
    r = opt(demand_file, "--cost", c, "--total-bw", "300", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["baselines"]["EqualBW"]["perf_per_cost_gain_of_optimum"] is None
    one_line(opt(demand_file, "--cost", c, "--total-bw", "300", "--objective", "perf-per-cost"),
             r"every unit price of the network's cost classes is 0, so every design costs \$0 and perf-per-cost "
             r"has no meaning; give prices, or use --objective perf$")


def test_design_with_wrongly_typed_fields(tmp_path, demand_file):
    out = tmp_path / "design.json"
    assert opt(demand_file, "--total-bw", "300", "-o", out).exit_code == 0
    data = json.loads(out.read_text())
    for key, value, msg in [("workloads", {"a": 1}, r"workloads must be a list of objects, got dict"),
                            ("cost_usd", "cheap", r"cost_usd must be a finite number >= 0, got 'cheap'"),
                            ("predicted_time_ns", [1], r"predicted_time_ns must be a finite number >= 0, got \[1\]")]:
        bad = tmp_path / f"bad_{key}.json"
        bad.write_text(json.dumps({**data, key: value}))
        one_line(invoke("emit", bad, "--out", tmp_path / f"o_{key}"), msg)
    w = dict(data["workloads"][0], weight="heavy")
    bad = tmp_path / "bad_weight.json"
    bad.write_text(json.dumps({**data, "workloads": [w]}))
    one_line(invoke("emit", bad, "--out", tmp_path / "o_w"), r"workloads\[0\]: weight must be a finite number >= 0")
    w = dict(data["workloads"][0], demand=7)
    bad.write_text(json.dumps({**data, "workloads": [w]}))
    one_line(invoke("emit", bad, "--out", tmp_path / "o_w"), r"workloads\[0\]: demand must be a string, got int")


def test_dangling_symlink_output_needs_force(tmp_path, demand_file):
    link = tmp_path / "design.json"
    link.symlink_to(tmp_path / "nowhere" / "design.json")
    one_line(opt(demand_file, "--total-bw", "300", "-o", link),
             r"design\.json: is a symbolic link to a missing file; choose another path or pass --force")
    assert link.is_symlink()


def _no_space(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def fake_sim(tmp_path):
    exe = tmp_path / "fake_astra"
    out = ROOT / "tests" / "fixtures" / "astra" / "real_ring4_switch4_k4.stdout"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(out)!r}).read())\n")
    exe.chmod(0o755)
    return str(exe)


def test_every_writing_command_reports_a_full_disk_in_one_line(tmp_path, demand_file, monkeypatch, fake_sim):
    design = tmp_path / "design.json"
    assert opt(demand_file, "--total-bw", "300", "-o", design).exit_code == 0
    run = tmp_path / "run"
    assert invoke("emit", design, "--out", run).exit_code == 0
    monkeypatch.setattr(publish.tempfile, "mkstemp", _no_space)
    monkeypatch.setattr(publish.tempfile, "mkdtemp", _no_space)
    cases = {
        "generate": ["generate", SPEC, "--out", tmp_path / "g" / "gpt"],
        "demand": ["demand", TRACES, "--network", NET, "-o", tmp_path / "d2.json"],
        "optimize": ["optimize", "--demand", demand_file, "--network", NET, "--cost", COST, "--total-bw", "300",
                     "-o", tmp_path / "o.json"],
        "pareto": ["pareto", "--demand", demand_file, "--network", NET, "--cost", COST, "--min-budget", "1e6",
                   "--max-budget", "1e7", "--points", "2", "-o", tmp_path / "p.json"],
        "emit": ["emit", design, "--out", tmp_path / "run2"],
        "simulate": ["simulate", run, "--astra-sim", fake_sim],
        "loop": ["loop", "--demand", demand_file, "--network", NET, "--cost", COST, "--total-bw", "300",
                 "--astra-sim", fake_sim, "--out", tmp_path / "loop"],
    }
    for name, args in cases.items():
        r = invoke(*args)   # results may be printed before the write fails; then one error line
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (name, r.output)
        errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
        assert len(errors) == 1 and "Traceback" not in r.output, (name, r.output)
        assert r.output.strip().splitlines()[-1] == errors[0]
        assert errors[0].endswith("cannot write (No space left on device); free some space or write elsewhere"), (
            name, errors[0])


def test_design_bandwidth_beyond_any_link_is_refused(tmp_path, demand_file):
    out = tmp_path / "design.json"
    assert opt(demand_file, "--total-bw", "300", "-o", out).exit_code == 0
    data = json.loads(out.read_text())
    data["bandwidth_gbps"][0] = 1e308
    out.write_text(json.dumps(data))
    one_line(invoke("emit", out, "--out", tmp_path / "run"),
             r"design\.json: bandwidth_gbps must be a finite number >= 0 and <= 1e\+15, got 1e\+308$")
    assert not (tmp_path / "run").exists()


def test_loop_keeps_a_summary_file_that_appeared_while_it_ran(tmp_path, demand_file):
    out = ROOT / "tests" / "fixtures" / "astra" / "real_ring4_switch4_k4.stdout"
    exe = tmp_path / "fake_astra"
    # runs in OUT/iter0/NAME/WORKLOAD: meanwhile, someone else writes OUT/loop.json
    exe.write_text(f"#!{sys.executable}\nimport os, sys\n"
                   "p = os.path.join('..', '..', '..', 'loop.json')\n"
                   "os.path.exists(p) or open(p, 'w').write('someone else\\n')\n"
                   f"sys.stdout.write(open({str(out)!r}).read())\n")
    exe.chmod(0o755)
    r = invoke("loop", "--demand", demand_file, "--network", NET, "--cost", COST, "--total-bw", "300",
               "--astra-sim", exe, "--out", tmp_path / "loop")
    assert r.exit_code == 1, r.output
    assert r.output.strip().splitlines()[-1].startswith("Error: ") and "loop.json: already exists" in r.output
    assert (tmp_path / "loop" / "loop.json").read_text() == "someone else\n"
