"""What users see: result headers, settings that travel with the design, refusals, show, plot, --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import one_line_error, run
from libra_astra.timing.settings import header, model_settings, resolve_model

ROOT = Path(__file__).resolve().parents[1]
NET = str(ROOT / "network_configs/sample_4x4.yml")
COST = str(ROOT / "network_configs/cost.yml")
DLRM = str(ROOT / "traces/dlrm_16/dlrm")
RESNET = str(ROOT / "traces/resnet50_dp16/resnet50")
COMMON = ["--network", NET, "--cost", COST, "--total-bw", "300"]
DEFAULT_HEADER = header("perf", model_settings(resolve_model()))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ux")
    run("demand", RESNET, "--network", NET, "-o", d / "resnet.demand.json")
    run("optimize", DLRM, *COMMON, "-o", d / "design.json")
    run("optimize", DLRM, "--demand", d / "resnet.demand.json", "--weight", "1", "--weight", "2", *COMMON,
        "-o", d / "two.json")
    run("pareto", "--demand", d / "resnet.demand.json", "--network", NET, "--cost", COST, "--min-budget", "1e5",
        "--max-budget", "1e6", "--points", "4", "-o", d / "frontier.json")
    return d


def test_every_result_header_names_the_settings(files):
    r = run("optimize", DLRM, *COMMON)
    assert r.output.splitlines()[0] == DEFAULT_HEADER
    r = run("optimize", DLRM, *COMMON, "--model", "libra")
    assert r.output.splitlines()[0] == header("perf", model_settings(resolve_model("libra")))
    r = run("optimize", DLRM, *COMMON, "--splits", "4", "--no-overlap")
    assert r.output.splitlines()[0] == header("perf", model_settings(resolve_model(splits=4, overlap=False)))
    assert run("pareto", "--demand", files / "resnet.demand.json", "--network", NET, "--cost", COST, "--min-budget",
               "1e5", "--max-budget", "1e6", "--points", "2").output.splitlines()[0] == DEFAULT_HEADER


def test_default_equals_the_explicit_simulator_model():
    a = json.loads(run("optimize", DLRM, *COMMON, "--json").output)
    b = json.loads(run("optimize", DLRM, *COMMON, "--json", "--model", "pipelined", "--splits", "1", "--overlap",
                       "--local-mem-bw", "1e9").output)
    assert a["optimum"] == b["optimum"] and a["time_model"] == b["time_model"] == model_settings(resolve_model())


def test_options_the_model_ignores_are_refused():
    one_line_error(run("optimize", DLRM, *COMMON, "--model", "libra", "--splits", "4", ok=False),
                   "--splits applies to --model pipelined only (the LIBRA model has no chunks, latency or local "
                   "reduction cost); drop --splits or use --model pipelined")


def test_strict_constraint_refused_with_the_fix():
    one_line_error(run("optimize", DLRM, *COMMON, "--constraint", "bw[package] > bw[pod]", ok=False),
                   "--constraint: constraint 'bw[package] > bw[pod]' is strict ('>'), which the optimizer cannot "
                   "represent; write 'bw[package] >= bw[pod]'")


def test_design_keeps_its_settings_and_emit_uses_them(files, tmp_path):
    run("optimize", DLRM, *COMMON, "--splits", "4", "-o", tmp_path / "k4.json")
    design = json.loads((tmp_path / "k4.json").read_text())
    assert design["time_model_settings"] == model_settings(resolve_model(splits=4))
    r = run("emit", tmp_path / "k4.json", "--out", tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["preferred_dataset_splits"] == 4 and manifest["system"]["preferred-dataset-splits"] == 4
    # emit prints the prediction it records, and it is the optimized time (same model, same settings)
    pred = manifest["prediction"]["time_ns"]
    assert f"predicted time: {pred / 1e6:.6f} ms" in r.output
    assert pred == pytest.approx(design["predicted_time_ns"], rel=1e-9)
    assert r.output.splitlines()[0] == ("simulator settings: "
                                        + header("perf", model_settings(resolve_model(splits=4))).split(" | ", 1)[1])
    one_line_error(run("emit", tmp_path / "k4.json", "--out", tmp_path / "run1", "--splits", "1", ok=False),
                   "design 'k4' was optimized for 4 chunks per collective (pipelined model); emitting it with "
                   "--splits 1 would simulate another time model than the one optimized; drop --splits, or "
                   "optimize again with --splits 1")


def test_emit_of_a_demand_says_the_workload_is_synthesized(files, tmp_path):
    r = run("emit", files / "two.json", "--workload", "resnet50", "--out", tmp_path / "run")
    assert "this workload is synthesized from the demand file, not your traces" in r.output
    data = json.loads(run("emit", files / "two.json", "--workload", "dlrm", "--out", tmp_path / "r2", "--json").output)
    assert data["source"] == "traces" and data["splits"] == 1 and data["prediction"]["time_ns"] > 0


def test_several_workloads_have_their_own_times(files):
    data = json.loads(run("show", files / "two.json", "--json").output)
    ws = data["result"]["workloads"]
    assert [w["name"] for w in ws] == ["dlrm", "resnet50"] and [w["weight"] for w in ws] == [1.0, 2.0]
    assert sum(w["weight"] * w["time_ns"] for w in ws) == pytest.approx(data["result"]["optimum"]["time_ns"], rel=1e-12)
    text = run("show", files / "two.json").output
    for w in ws:
        assert f"{w['name']:<18} weight {w['weight']:g}: " in text
    assert "(weighted sum over the workloads)" in run("optimize", DLRM, "--demand", files / "resnet.demand.json",
                                                      *COMMON).output


@pytest.mark.parametrize("name, first", [
    ("design.json", DEFAULT_HEADER),
    ("frontier.json", DEFAULT_HEADER),
    ("resnet.demand.json", "demand 'resnet50': network shape 4 x 4 (16 ranks), 1 rank class(es)"),
])
def test_show_each_kind(files, name, first):
    r = run("show", files / name)
    assert r.output.splitlines()[0] == first
    kind = json.loads(run("show", files / name, "--json").output)["kind"]
    assert kind == {"design.json": "design", "frontier.json": "frontier", "resnet.demand.json": "demand"}[name]


def test_show_labels_demand_dimensions_by_name(files, tmp_path):
    """The demand file keeps the network's dimension names; an older file without them shows indices."""
    table = run("show", files / "resnet.demand.json").output.splitlines()[3]
    assert table.split() == ["collective", "package", "(4)", "pod", "(4)"]
    data = json.loads((files / "resnet.demand.json").read_text())
    assert data["dim_names"] == ["package", "pod"]
    del data["dim_names"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert run("show", tmp_path / "old.json").output.splitlines()[3].split() == ["collective", "dim0", "(4)", "dim1",
                                                                                 "(4)"]


def test_demand_for_other_dimension_names_refused(files, tmp_path):
    net = tmp_path / "renamed.yml"
    net.write_text(Path(NET).read_text().replace("name: package", "name: chip").replace("name: pod", "name: rack"))
    demand = files / "resnet.demand.json"
    one_line_error(run("optimize", "--demand", demand, "--network", net, "--cost", COST, "--total-bw", "300", ok=False),
                   f"{demand}: \"dim_names\" ['package', 'pod'] differ from the dimensions ['chip', 'rack'] of "
                   "network 'sample-4x4'; rebuild the demand for this network, or, if only the names changed, edit "
                   "\"dim_names\" to match")


def test_show_refuses_other_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"format": "other"}')
    one_line_error(run("show", p, ok=False),
                   f"{p}: not a demand, design, frontier or loop file (\"format\" is 'other'); give a file written "
                   "by libra-astra demand, optimize, pareto or loop")


def test_pareto_json_is_the_frontier_file(files):
    data = json.loads(run("pareto", "--demand", files / "resnet.demand.json", "--network", NET, "--cost", COST,
                          "--min-budget", "1e5", "--max-budget", "1e6", "--points", "4", "--json").output)
    assert data == json.loads((files / "frontier.json").read_text())
    assert [p["budget_usd"] for p in data["points"]] == pytest.approx([1e5, 1e5 * 10 ** (1 / 3), 1e5 * 10 ** (2 / 3), 1e6])


def test_generate_json(tmp_path):
    data = json.loads(run("generate", ROOT / "traces/resnet50_dp16/spec.yml", "--out", tmp_path / "r", "--json").output)
    assert data["ranks"] == 16 and Path(f"{tmp_path / 'r'}.15.et").is_file()


def test_progress_never_reaches_a_pipe(files):
    r = run("-q", "optimize", DLRM, *COMMON)
    assert r.stderr == ""
    r = run("optimize", DLRM, *COMMON)             # stderr is not a terminal under the test runner
    assert r.stderr == ""




@pytest.mark.parametrize("name", ["design.json", "two.json", "frontier.json", "resnet.demand.json"])
def test_plot_each_kind(files, tmp_path, name):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install -e '.[test,plot]'")
    out = tmp_path / (name + ".svg")
    r = run("plot", files / name, "-o", out)
    assert out.read_text().count('id="series:') >= 2 and r.output.startswith(f"wrote {out}")
    one_line_error(run("plot", files / name, "-o", out, ok=False),
                   f"{out}: already exists; choose another path or pass --force to overwrite it")


def test_plot_option_on_result_commands(files, tmp_path):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install -e '.[test,plot]'")
    run("optimize", DLRM, *COMMON, "--plot", tmp_path / "o.svg")
    run("pareto", "--demand", files / "resnet.demand.json", "--network", NET, "--cost", COST, "--min-budget", "1e5",
        "--max-budget", "1e6", "--points", "3", "--plot", tmp_path / "p.png")
    run("demand", DLRM, "--network", NET, "--plot", tmp_path / "d.svg")
    svg = (tmp_path / "o.svg").read_text()
    assert 'id="series:bandwidth:optimum:package"' in svg and 'id="series:time:pod:EqualBW"' in svg
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    d = (tmp_path / "d.svg").read_text()
    assert 'id="series:traffic:ALL_TO_ALL:package (Ring 4)"' in d and "ALL_REDUCE" in d
    # a bad picture name is refused before any work
    one_line_error(run("optimize", DLRM, *COMMON, "--plot", tmp_path / "o.pdf", ok=False),
                   f"{tmp_path / 'o.pdf'}: picture format '.pdf' is not supported; name the file .svg or .png")


def test_a_design_file_without_stored_settings_still_emits(files, tmp_path):
    # Files written before the settings were stored keep "splits"/"overlap" in the result.
    data = json.loads((files / "design.json").read_text())
    del data["time_model_settings"]
    data["result"].update(splits=2, overlap=True)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    run("emit", old, "--out", tmp_path / "run")
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["preferred_dataset_splits"] == 2


@pytest.mark.astra
def test_loop_reports_settings_workloads_and_draws(files, tmp_path):
    import os

    if not os.environ.get("ASTRA_SIM_BIN"):
        pytest.skip("set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these")
    pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install -e '.[test,plot]'")
    r = run("loop", DLRM, "--demand", files / "resnet.demand.json", "--weight", "1", "--weight", "2", *COMMON,
            "--out", tmp_path / "loop", "--plot", tmp_path / "loop.svg")
    assert r.output.splitlines()[0] == DEFAULT_HEADER
    data = json.loads((tmp_path / "loop" / "loop.json").read_text())
    assert data["time_model"] == model_settings(resolve_model()) and data["objective"] == "perf"
    for row in data["rows"]:
        ws = row["workloads"]
        assert [w["name"] for w in ws] == ["dlrm", "resnet50"]
        assert sum(w["weight"] * w["simulated_ns"] for w in ws) == pytest.approx(row["simulated_ns"], rel=1e-12)
    assert "   resnet50 (weight 2)" in r.output
    assert run("show", tmp_path / "loop" / "loop.json").output.splitlines()[0] == DEFAULT_HEADER
    svg = (tmp_path / "loop.svg").read_text()
    assert all(f'id="series:{k}:0:{n}"' in svg for k in ("predicted", "simulated")
               for n in ("optimized", "EqualBW", "TrafficProportional"))


def test_overlap_without_a_dependency_graph_is_said(tmp_path):
    # The documented by-hand demand has no "dag": with the default overlap its time is the sum, and the output says so.
    import re as _re

    block = _re.search(r"```json\n(.*?)```", (ROOT / "docs" / "file-formats.md").read_text(), _re.S).group(1)
    (tmp_path / "d.json").write_text(block)
    r = run("optimize", "--demand", tmp_path / "d.json", "--network", ROOT / "network_configs/paper_3d.yml",
            "--cost", COST, "--total-bw", "500")
    assert r.output.splitlines()[1] == ('note: by-hand: no dependency graph (a demand file without "dag"), so its '
                                        "time is the no-overlap sum")
    assert "note:" not in run("optimize", DLRM, *COMMON).output


def test_progress_on_a_terminal_and_quiet_with_q(monkeypatch, tmp_path):
    import io

    from libra_astra.cli import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    real = progress.enabled
    monkeypatch.setattr(progress, "enabled", lambda stream=None, quiet=None: real(Tty(), quiet))
    r = run("demand", DLRM, "--network", NET)
    assert "reading " + DLRM + ": 16/16 (100%)" in r.stderr and "Bytes sent per NPU" in r.stdout
    assert "16/16" not in r.stdout
    r = run("generate", ROOT / "traces/resnet50_dp16/spec.yml", "--out", tmp_path / "g")
    assert "16/16 (100%)" in r.stderr
    assert run("-q", "demand", DLRM, "--network", NET).stderr == ""


def test_commands_run_numpys_blas_on_one_thread_unless_the_user_chose(monkeypatch, tmp_path):
    # the BLAS thread pool spins at numpy's import: CPU for nothing on the command line's small matrices
    import os
    from cli_run import run
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    run("show", tmp_path / "missing.json", ok=False)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    run("show", tmp_path / "missing.json", ok=False)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
