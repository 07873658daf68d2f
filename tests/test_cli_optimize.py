"""`libra-astra optimize` and `pareto` through click's CliRunner: table, JSON, design file, error handling."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.demand import synthetic
from libra_astra.cli import main
from libra_astra.demand.types import demand_to_dict
from libra_astra.optimize.design import load_design
from libra_astra.model.network import load_network

CONFIGS = Path(__file__).resolve().parent.parent / "network_configs"
NET = str(CONFIGS / "paper_3d.yml")
COST = str(CONFIGS / "cost.yml")


@pytest.fixture(scope="module")
def demand_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "gpt3.json"
    p.write_text(json.dumps(demand_to_dict(synthetic.gpt3_demand(load_network(NET)))))
    return str(p)


def run(*args):
    return CliRunner().invoke(main, ["optimize", *args])


def base(demand_file):
    return ["--demand", demand_file, "--network", NET, "--cost", COST]


def one_line_error(result, message):
    """Non-zero exit, exactly one line 'Error: <message>', no traceback."""
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines == [f"Error: {message}"], result.output
    assert "Traceback" not in result.output


def test_table_output(demand_file):
    r = run(*base(demand_file), "--total-bw", "300")
    assert r.exit_code == 0, r.output
    out = r.output
    for name in ("package", "node", "pod"):
        assert name in out
    assert "Ring" in out and "FullyConnected" in out and "Switch" in out
    assert "300.0000" in out                                  # the total row
    assert "vs EqualBW" in out and "vs TrafficProportional" in out
    assert "optimal: duality gap within tolerance" in out


def test_json_output(demand_file):
    r = run(*base(demand_file), "--total-bw", "300", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["objective"] == "perf" and data["dimensions"] == ["package", "node", "pod"]
    assert sum(data["optimum"]["bandwidth_gbps"]) == pytest.approx(300.0)
    assert data["success"] and data["relative_gap"] <= 1e-8
    assert data["dual_bound"] <= data["objective_value"]
    assert data["optimum"]["time_ns"] == pytest.approx(data["objective_value"])
    assert data["optimum"]["feasible"]
    assert set(data["baselines"]) == {"EqualBW", "TrafficProportional"}
    assert all(b["speedup_of_optimum"] >= 1 - 1e-12 for b in data["baselines"].values())


@pytest.mark.parametrize("extra", [
    ["--objective", "perf-per-cost", "--total-bw", "300"],
    ["--objective", "min-cost", "--time-target", "3e8", "--total-bw-max", "1000"],
    ["--total-bw", "300", "--constraint", "bw[package] >= 2*bw[node]", "--model", "pipelined", "--splits", "4"],
    ["--budget", "2e7"],
])
def test_objectives_and_options(demand_file, extra):
    r = run(*base(demand_file), *extra, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["success"] and data["relative_gap"] <= 1e-8 and data["optimum"]["feasible"]


def test_output_design_file_and_force(demand_file, tmp_path):
    out = tmp_path / "design.json"
    r = run(*base(demand_file), "--total-bw", "300", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output
    d = load_design(out)
    assert d.network.dim_names == ("package", "node", "pod")
    assert sum(d.bandwidth_gbps) == pytest.approx(300.0)
    assert d.objective == "perf" and d.workloads[0].demand == str(Path(demand_file).resolve())
    before = out.read_text()
    r = run(*base(demand_file), "--total-bw", "200", "-o", str(out))
    one_line_error(r, f"{out}: already exists; choose another path or pass --force to overwrite it")
    assert out.read_text() == before
    r = run(*base(demand_file), "--total-bw", "200", "-o", str(out), "--force")
    assert r.exit_code == 0, r.output
    assert sum(load_design(out).bandwidth_gbps) == pytest.approx(200.0)


def test_errors_are_one_line(demand_file, tmp_path):
    one_line_error(run(*base(demand_file)),
                   "objective perf has no minimizer: the bandwidth of package, node, pod can grow without limit and "
                   "the time keeps falling as it grows; give --total-bw, --budget, or an upper bound such as "
                   "--constraint 'bw[package] <= GBPS' (or bw_max_gbps in the network file)")
    one_line_error(run(*base(demand_file), "--total-bw", "300", "--constraint", "bw[0] >= 400"),
                   "the constraints are infeasible: --constraint 'bw[0] >= 400' or --total-bw conflicts with the "
                   "others (bounds in the network file included); relax it")
    one_line_error(run(*base(demand_file), "--total-bw", "300", "--constraint", "bw[0] >> 2"),
                   "--constraint: constraint 'bw[0] >> 2' needs exactly one of <=, >=, == (found 2)")
    one_line_error(run(*base(demand_file), "--total-bw", "300", "--total-bw-max", "400"),
                   "give either --total-bw (equality) or --total-bw-max (upper bound), not both")
    one_line_error(run(*base(demand_file), "--total-bw", "300", "--time-target", "1e9"),
                   "--time-target only applies to --objective min-cost")
    one_line_error(run(*base(demand_file), "--total-bw", "300", "--weight", "1", "--weight", "2"),
                   "--weight given 2 times for 1 workloads; give one per workload, in order (trace prefixes first, "
                   "then --demand files)")
    one_line_error(run("--network", NET, "--cost", COST, "--total-bw", "300"),
                   "no workload: give a trace PREFIX or --demand FILE")
    bad = tmp_path / "bad.yml"
    bad.write_text("dimensions:\n  - {name: a, topology: ring, npus: 4}\n")
    one_line_error(run("--demand", demand_file, "--network", str(bad), "--cost", COST, "--total-bw", "300"),
                   f"{bad}: dimensions[0]: topology must be one of ['Ring', 'FullyConnected', 'Switch'] "
                   "(case-sensitive), got 'ring'")
    other = str(CONFIGS / "paper_4d.yml")
    one_line_error(run("--demand", demand_file, "--network", other, "--cost", COST, "--total-bw", "300"),
                   f"{demand_file}: demand was made for a network of shape [16, 8, 32] but network 'paper-4d' has "
                   "[4, 8, 4, 32]; rebuild the demand for this network")


def test_click_validates_paths_before_any_work(demand_file):
    r = run("--demand", "/no/such/file.json", "--network", NET, "--cost", COST, "--total-bw", "300")
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output


def test_pareto(demand_file, tmp_path):
    out = tmp_path / "front.json"
    r = CliRunner().invoke(main, ["pareto", *base(demand_file), "--min-budget", "5e6", "--max-budget", "5e7",
                                  "--points", "3", "-o", str(out)])
    assert r.exit_code == 0, r.output
    pts = json.loads(out.read_text())["points"]
    assert [p["budget_usd"] for p in pts] == pytest.approx([5e6, 5e6 * 10 ** 0.5, 5e7])
    times = [p["time_ns"] for p in pts]
    assert times[0] > times[1] > times[2]
    assert all(p["cost_usd"] <= p["budget_usd"] * (1 + 1e-9) and p["relative_gap"] <= 1e-8 for p in pts)


def test_perf_without_cost_file_gives_the_same_design_and_no_cost(demand_file):
    """--cost is only needed by objectives and limits that use prices: without it the time-only
    optimum is the same, and no dollar figure is printed (every design would cost $0)."""
    with_cost = json.loads(run(*base(demand_file), "--total-bw", "300", "--json").output)
    r = run("--demand", demand_file, "--network", NET, "--total-bw", "300", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["optimum"]["bandwidth_gbps"] == with_cost["optimum"]["bandwidth_gbps"]
    assert data["optimum"]["time_ns"] == with_cost["optimum"]["time_ns"]
    assert data["optimum"]["cost_usd"] == 0.0
    table = run("--demand", demand_file, "--network", NET, "--total-bw", "300")
    assert table.exit_code == 0, table.output
    assert "$" not in table.output and "perf/cost" not in table.output and "\ncost " not in table.output
    assert "$" in run(*base(demand_file), "--total-bw", "300").output


@pytest.mark.parametrize("extra, needs", [
    (["--objective", "perf-per-cost", "--total-bw", "300"], "--objective perf-per-cost"),
    (["--objective", "min-cost", "--time-target", "1e9", "--total-bw-max", "300"], "--objective min-cost"),
    (["--budget", "1e6", "--total-bw-max", "300"], "--budget"),
])
def test_prices_needed_without_cost_file_is_one_line_error(demand_file, extra, needs):
    r = run("--demand", demand_file, "--network", NET, *extra)
    one_line_error(r, f"{needs} needs unit prices: give --cost FILE (e.g. network_configs/cost.yml)")


def test_pareto_without_cost_file_is_one_line_error(demand_file):
    r = CliRunner().invoke(main, ["pareto", "--demand", demand_file, "--network", NET,
                                  "--min-budget", "1e5", "--max-budget", "1e6"])
    one_line_error(r, "pareto needs unit prices: give --cost FILE (e.g. network_configs/cost.yml)")
