"""--system FILE: a user's ASTRA-sim system.json as the optimizer's time model, refused where the
model is not ASTRA-sim's time, and written back by emit with the user's keys kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_run import one_line_error, run
from libra_astra.doctor.system_model import read_user_system
from libra_astra.errors import LibraError
from libra_astra.optimize.design import load_design

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests/fixtures/system"
USER = FIX / "ring_user_4x4.json"
NET = ROOT / "network_configs/sample_4x4.yml"
DLRM = ROOT / "traces/dlrm_16/dlrm"
GPT = ROOT / "traces/gpt_tp2_pp2_dp4/gpt"       # TP 2 inside the package ring of 4: emit splits it
EXAMPLES = os.environ.get("ASTRA_SIM_EXAMPLES", "")
BIN = os.environ.get("ASTRA_SIM_BIN", "")
PREDICT = "'libra-astra predict' times it exactly"


def _variant(tmp_path, **changes) -> Path:
    data = json.loads(USER.read_text())
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "system.json"
    path.write_text(json.dumps(data))
    return path


def test_ring_file_sets_splits_and_local_mem_bw_and_notes_ignored_keys():
    user = read_user_system(USER, 2)
    assert (user.splits, user.local_mem_bw_gbps) == (4, 1600.0)
    assert user.data == json.loads(USER.read_text())
    assert user.notes == (f"{USER}: boost-mode is ignored by ASTRA-sim; kept as written",
                          f"{USER}: site-comment is ignored by ASTRA-sim; kept as written")


@pytest.mark.parametrize("name, message", [
    ("direct_4x4.json", "all-reduce-implementation ['direct', 'direct']: the optimizer does not yet model it (it "
                        "models ring in each of the network's 2 dimensions)"),
    ("halving_doubling_4x4.json", "all-reduce-implementation ['halvingDoubling', 'halvingDoubling']: the optimizer "
                                  "does not yet model it (it models ring in each of the network's 2 dimensions)"),
    ("one_ring.json", "all-reduce-implementation ['oneRing']: the optimizer does not yet model it (it models ring "
                      "in each of the network's 2 dimensions)"),
    ("ring_4x4.json", "endpoint-delay 10: the optimizer does not yet model it (it models 1)"),
])
def test_fixture_files_are_refused_naming_file_key_and_value(name, message):
    with pytest.raises(LibraError) as e:
        read_user_system(FIX / name, 2)
    assert str(e.value) == f"{FIX / name}: {message}; {PREDICT}"


@pytest.mark.parametrize("changes, message", [
    ({"active_chunks_per_dimension": 2}, "active-chunks-per-dimension 2: the optimizer does not yet model it (it models 1)"),
    ({"collective_optimization": "baseline"}, "collective-optimization 'baseline': the optimizer does not yet model "
                                              "it (it models localBWAware)"),
    ({"endpoint_delay": None}, "endpoint-delay 10: the optimizer does not yet model it (it models 1)"),
    ({"all_to_all_implementation": ["ring", "direct"]}, "all-to-all-implementation ['ring', 'direct']: the optimizer "
                                                        "does not yet model it (it models ring in each of the "
                                                        "network's 2 dimensions)"),
    ({"roofline_enabled": 1}, "roofline-enabled 1: the optimizer does not yet model it"),
    ({"roofline_enabled": "off"}, "roofline-enabled 'off': the optimizer does not yet model it"),
    ({"all_gather_implementation_custom": ["my_ag"]}, "all-gather-implementation-custom ['my_ag']: the optimizer does "
                                                      "not yet model it"),
    ({"per_node_custom_implementation": "plan.json"}, "per-node-custom-implementation 'plan.json': the optimizer "
                                                      "does not yet model it"),
    ({"model_shared_bus": 1}, "model-shared-bus 1: the optimizer does not yet model it"),
])
def test_each_unmodeled_setting_is_refused_in_one_line(tmp_path, changes, message):
    path = _variant(tmp_path, **changes)
    r = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--system", path, ok=False)
    one_line_error(r, f"{path}: {message}; {PREDICT}", 1)


def test_absent_local_mem_bw_and_missing_required_keys_are_refused(tmp_path):
    path = _variant(tmp_path, local_mem_bw=None)
    one_line_error(run("optimize", DLRM, "-n", NET, "--system", path, ok=False),
                   f"{path}: local-mem-bw 'absent': the optimizer does not yet model it (ASTRA-sim then reduces in "
                   "0 ns through a division by zero); set local-mem-bw in GB/s", 1)
    path = _variant(tmp_path, scheduling_policy=None)
    one_line_error(run("optimize", DLRM, "-n", NET, "--system", path, ok=False),
                   f"{path}: scheduling-policy is missing, which leaves ASTRA-sim undefined; set it", 1)


def test_conflicting_splits_or_local_mem_bw_and_libra_model_are_refused():
    one_line_error(run("optimize", DLRM, "-n", NET, "--system", USER, "--splits", 2, ok=False),
                   f"--splits 2 conflicts with {USER}'s preferred-dataset-splits 4; drop --splits (the file sets "
                   "it) or change the file", 1)
    one_line_error(run("pareto", DLRM, "-n", NET, "--cost", ROOT / "network_configs/cost.yml", "--min-budget", 1e5,
                       "--max-budget", 1e6, "--system", USER, "--local-mem-bw", 100, ok=False),
                   f"--local-mem-bw 100 conflicts with {USER}'s local-mem-bw 1600; drop --local-mem-bw (the file "
                   "sets it) or change the file", 1)
    one_line_error(run("optimize", DLRM, "-n", NET, "--system", USER, "--model", "libra", ok=False),
                   "--system applies to --model pipelined only (the LIBRA model has no chunks, latency or local "
                   "reduction cost); drop --system or use --model pipelined", 1)


def test_same_splits_as_the_file_is_accepted_and_gives_the_files_model(tmp_path):
    a = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--system", USER, "--splits", 4, "--json")
    b = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--splits", 4, "--local-mem-bw", 1600, "--json")
    strip = lambda out: out[out.index("{"):]        # the notes on stderr come first
    a, b = json.loads(strip(a.output)), json.loads(strip(b.output))
    assert a["optimum"] == b["optimum"]
    assert a["time_model"] == b["time_model"] and a["time_model"]["local_mem_bw_gbps"] == 1600


def _design(tmp_path, prefix, *extra) -> Path:
    out = tmp_path / "design.json"
    run("optimize", prefix, "-n", NET, "--total-bw", 400, *extra, "-o", out, "--force")
    return out


def test_round_trip_design_emit_keeps_every_user_key(tmp_path):
    design = _design(tmp_path, DLRM, "--system", USER)
    assert load_design(design).system == {"path": str(USER), "settings": json.loads(USER.read_text())}
    r = run("emit", design, "--out", tmp_path / "run")
    assert json.loads((tmp_path / "run/system.json").read_text()) == json.loads(USER.read_text())
    assert "boost-mode is ignored" not in r.output      # nothing changed, nothing to say
    manifest = json.loads((tmp_path / "run/manifest.json").read_text())
    assert manifest["design"]["system"]["path"] == str(USER)


def test_emit_sizes_implementation_lists_to_split_dimensions_and_says_so(tmp_path):
    design = _design(tmp_path, GPT, "--system", USER)
    r = run("emit", design, "--out", tmp_path / "run")
    written = json.loads((tmp_path / "run/system.json").read_text())
    user = json.loads(USER.read_text())
    impl = [k for k in user if k.endswith("-implementation")]
    assert written.keys() == user.keys()
    assert all(written[k] == user[k] for k in user if k not in impl)
    assert all(written[k] == ["ring"] * 3 for k in impl)
    note = (f"{USER}: written with one implementation per emitted dimension (package_0, package_1, pod), each its "
            "physical dimension's: all-reduce-implementation ['ring', 'ring'] as ['ring', 'ring', 'ring']")
    notes = json.loads((tmp_path / "run/manifest.json").read_text())["notes"]
    assert any(n.startswith(note) for n in notes)
    assert f"note: {note}" in r.output


def test_emit_system_on_a_design_without_one(tmp_path):
    design = _design(tmp_path, DLRM, "--splits", 2, "--local-mem-bw", 1600)
    r = run("emit", design, "--out", tmp_path / "run", "--system", USER, ok=False)
    assert r.exit_code == 1 and "was optimized for 2 chunks per collective" in r.output
    data = json.loads(USER.read_text())
    data["preferred-dataset-splits"] = 2
    (tmp_path / "two.json").write_text(json.dumps(data))
    run("emit", design, "--out", tmp_path / "run", "--system", tmp_path / "two.json")
    assert json.loads((tmp_path / "run/system.json").read_text()) == data


@pytest.mark.skipif(not EXAMPLES, reason="set ASTRA_SIM_EXAMPLES to an ASTRA-sim checkout to read its example files")
def test_astra_sims_example_system_files(tmp_path):
    folder = Path(EXAMPLES) / "examples/system/native_collectives"
    refused = {}
    for path in sorted(folder.glob("*.json")):
        try:
            read_user_system(path, 1)
        except LibraError as e:
            refused[path.name] = str(e)
    assert refused["Ring_4chunks.json"] == (f"{folder / 'Ring_4chunks.json'}: endpoint-delay 10: the optimizer does "
                                            f"not yet model it (it models 1); {PREDICT}")
    assert refused["HGX-H100-validated.json"] == (f"{folder / 'HGX-H100-validated.json'}: active-chunks-per-dimension 2:"
                                                  f" the optimizer does not yet model it (it models 1); {PREDICT}")
    data = json.loads((folder / "Ring_4chunks.json").read_text())
    data["endpoint-delay"] = 1
    (tmp_path / "ring.json").write_text(json.dumps(data))
    user = read_user_system(tmp_path / "ring.json", 1)
    assert (user.splits, user.local_mem_bw_gbps, user.data) == (4, 1600.0, data)


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_loop_with_a_ring_system_file_is_predicted_within_0_1_percent(tmp_path):
    r = run("loop", DLRM, "-n", NET, "--total-bw", 400, "--system", USER, "--out", tmp_path / "loop", "--json")
    data = json.loads(r.output[r.output.index("{"):])
    assert data["splits"] == 4 and data["time_model"]["local_mem_bw_gbps"] == 1600
    for row in data["rows"]:
        assert abs(row["simulated_ns"] / row["predicted_ns"] - 1) < 1e-3, row
        for d in row["run_dirs"]:
            assert json.loads((Path(d) / "system.json").read_text()) == json.loads(USER.read_text())
