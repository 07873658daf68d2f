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
from libra_astra.model.network import load_network
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
    user = read_user_system(USER, load_network(NET).dims)
    assert (user.splits, user.local_mem_bw_gbps) == (4, 1600.0)
    assert user.data == json.loads(USER.read_text())
    assert user.notes == (f"{USER}: boost-mode is ignored by ASTRA-sim; kept as written",
                          f"{USER}: site-comment is ignored by ASTRA-sim; kept as written")


def test_fixture_files_the_model_follows_are_read_with_their_settings():
    dims = load_network(NET).dims
    ring = read_user_system(FIX / "ring_4x4.json", dims)
    assert (ring.splits, ring.local_mem_bw_gbps) == (4, 1600.0)
    assert (ring.timing.endpoint_delay_ns, ring.timing.active_chunks, ring.timing.baseline) == (10.0, 1, False)
    hd = read_user_system(FIX / "halving_doubling_4x4.json", dims)
    assert hd.timing.implementation("ALL_REDUCE", 1) == "halvingDoubling"
    direct = read_user_system(FIX / "direct_4x4.json", dims)
    assert (direct.timing.implementation("ALL_REDUCE", 0), direct.timing.active_chunks) == ("direct", 2)


@pytest.mark.parametrize("name, message", [
    ("one_ring.json", "all-reduce-implementation has 1 entries for a network of 2 dimensions; give one per dimension"),
])
def test_fixture_files_are_refused_naming_file_key_and_value(name, message):
    with pytest.raises(LibraError) as e:
        read_user_system(FIX / name, load_network(NET).dims)
    assert str(e.value) == f"{FIX / name}: {message}"


@pytest.mark.parametrize("changes, message", [
    ({"all_to_all_implementation": ["ring", "oneDirect"]},
     "all-to-all-implementation[1] 'oneDirect': the optimizer does not model it (it flattens every dimension into "
     f"one ring); {PREDICT}; use ring, direct, halvingDoubling or doubleBinaryTree"),
    ({"all_to_all_implementation": ["ring", "halvingDoubling"]},
     "all-to-all-implementation[1] halvingDoubling: the workload has all-to-alls, which ASTRA-sim does not implement "
     "with it (it exits on the first one); use ring or direct"),
    ({"roofline_enabled": 1}, "roofline-enabled 1: the optimizer does not yet model it (compute from each node's "
                              f"FLOPs and peak-perf); {PREDICT}"),
    ({"roofline_enabled": "off"}, "roofline-enabled 'off': the optimizer does not yet model it (compute from each "
                                  f"node's FLOPs and peak-perf); {PREDICT}"),
    ({"all_gather_implementation_custom": ["my_ag"]}, "all-gather-implementation-custom ['my_ag']: the optimizer does "
                                                      f"not yet model it; {PREDICT}"),
    ({"per_node_custom_implementation": "plan.json"}, "per-node-custom-implementation 'plan.json': the optimizer "
                                                      f"does not yet model it; {PREDICT}"),
    ({"model_shared_bus": 1}, f"model-shared-bus 1: the optimizer does not yet model it; {PREDICT}"),
    ({"endpoint_delay": 0}, "endpoint-delay 0: ASTRA-sim aborts on a collective that starts at time 0 with it; set it "
                            "to 1 or more"),
])
def test_each_unmodeled_setting_is_refused_in_one_line(tmp_path, changes, message):
    path = _variant(tmp_path, **changes)
    r = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--system", path, ok=False)
    if message.startswith("all-to-all-implementation[1] halvingDoubling"):
        # found when the first all-to-all is timed, after the file's notes
        assert r.exit_code == 1 and "Traceback" not in r.output
        assert r.output.strip().splitlines()[-1] == f"Error: {message}"
    else:
        one_line_error(r, f"{path}: {message}", 1)


def test_settings_the_model_follows_change_the_optimum(tmp_path):
    base = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--system", USER, "--json").output
    times = {}
    for name, changes in (("baseline", {"collective_optimization": "baseline"}),
                          ("two chunks", {"active_chunks_per_dimension": 2}),
                          ("delay", {"endpoint_delay": None})):
        out = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--system", _variant(tmp_path, **changes),
                  "--json").output
        times[name] = json.loads(out[out.index("{"):])["optimum"]["time_ns"]
    t0 = json.loads(base[base.index("{"):])["optimum"]["time_ns"]
    # baseline all-reduces whole chunks on each dimension; two chunks at once halve the waves;
    # endpoint-delay absent is 10 ns a message instead of 1
    assert times["baseline"] > 1.05 * t0 and times["two chunks"] < 0.9 * t0 and t0 < times["delay"] < 1.01 * t0


def test_absent_local_mem_bw_is_free_reductions_and_missing_required_keys_are_refused(tmp_path):
    path = _variant(tmp_path, local_mem_bw=None)
    r = run("optimize", DLRM, "-n", NET, "--total-bw", 400, "--system", path)
    assert (f"note: {path}: local-mem-bw 'absent': ASTRA-sim reduces in 0 ns (a division by zero); modeled so"
            in r.output)
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
    assert a["time_model"]["splits"] == b["time_model"]["splits"] == 4
    assert a["time_model"]["local_mem_bw_gbps"] == b["time_model"]["local_mem_bw_gbps"] == 1600
    assert a["time_model"]["system"]["endpoint_delay_ns"] == 1.0 and "system" not in b["time_model"]
    # the file's endpoint-delay of 1 ns a message is in its model only: a little slower, same split
    assert 1 < a["optimum"]["time_ns"] / b["optimum"]["time_ns"] < 1.001
    assert a["optimum"]["bandwidth_gbps"] == pytest.approx(b["optimum"]["bandwidth_gbps"], rel=1e-3)


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
    net = load_network(Path(EXAMPLES) / "examples/network/analytical/HGX-H100-validated.yml")
    read = {path.name: read_user_system(path, net.dims) for path in sorted(folder.glob("*.json"))}
    assert set(read) == {"Ring_4chunks.json", "HGX-H100-validated.json"}
    hgx = read["HGX-H100-validated.json"]
    assert (hgx.splits, hgx.local_mem_bw_gbps, hgx.timing.active_chunks, hgx.timing.endpoint_delay_ns) == \
        (4, 3350.0, 2, 10.0)
    with pytest.raises(LibraError, match="custom_collective.json: collective-optimization is missing"):
        read_user_system(Path(EXAMPLES) / "examples/system/custom_collectives/custom_collective.json", net.dims)


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


@pytest.mark.astra
@pytest.mark.skipif(not (EXAMPLES and BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_EXAMPLES and ASTRA_SIM_BIN to run ASTRA-sim on its own example files")
@pytest.mark.parametrize("network, system", [("HGX-H100-validated.yml", "HGX-H100-validated.json"),
                                             ("Ring_8npus.yml", "Ring_4chunks.json")])
def test_loop_on_astra_sims_own_example_files_is_confirmed_by_the_simulator(tmp_path, network, system):
    ex = Path(EXAMPLES) / "examples"
    r = run("loop", ROOT / "tests/fixtures/real/param_dlrm8/param_dlrm8", "-n", ex / "network/analytical" / network,
            "--system", ex / "system/native_collectives" / system, "--total-bw", 400, "--out", tmp_path / "loop",
            "--json")
    data = json.loads(r.output[r.output.index("{"):])
    for row in data["rows"]:
        assert abs(row["simulated_ns"] / row["predicted_ns"] - 1) < 1e-3, row


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_optimize_and_loop_on_a_users_own_astra_files_are_confirmed_by_the_simulator(tmp_path):
    # ASTRA-sim's format for both files; the HGX example's knobs (2 active chunks, 4 splits,
    # endpoint-delay 10, local-mem-bw 3350) with direct and halving-doubling lists
    net, system = FIX / "astra_4x4.yml", FIX / "hgx_knobs_4x4.json"
    r = run("loop", DLRM, "-n", net, "--system", system, "--total-bw", 200, "--out", tmp_path / "loop", "--json")
    data = json.loads(r.output[r.output.index("{"):])
    assert data["time_model"]["system"]["active_chunks"] == 2
    for row in data["rows"]:
        assert abs(row["simulated_ns"] / row["predicted_ns"] - 1) < 2e-3, row
    best = min(data["rows"], key=lambda row: row["simulated_ns"])
    assert best["name"] == "optimized"
