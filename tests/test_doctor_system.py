"""libra-astra doctor --system: each trap of an ASTRA-sim system.json on a small set (found with the
trap, absent with a sound file on the same set), bad files as one-line errors, the shipped and real
traces, and, with the binary, that the set fails or runs in ASTRA-sim as the diagnosis says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from test_doctor import attr, comp, coll, write_set

from libra_astra.astra.parse import parse_output
from libra_astra.cli import main
from libra_astra.doctor import CHECKS, FAILS, SYSTEM_CODES, diagnose, fix
from libra_astra.errors import LibraError

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
SYSTEMS = ROOT / "tests" / "fixtures" / "system"
AR, AG, A2A, RS = 0, 2, 6, 7          # CollectiveCommType values
MIB = 1 << 20
IMPL = ("all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
        "all-to-all-implementation")


def sound(num_dims: int, **kw) -> dict:
    """A system.json ASTRA-sim runs as meant: ring on every dimension, every required key."""
    out = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
           "preferred-dataset-splits": 1, "collective-optimization": "localBWAware", "local-mem-bw": 1600,
           **{k: ["ring"] * num_dims for k in IMPL}}
    out.update(kw)
    return out


def without(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def after_compute(ctype, size=MIB, **kw):
    """Every rank: a compute node, then the collective (so it does not start at t = 0)."""
    return lambda r: [comp(1), coll(2, ctype, size, data=[1], **kw)]


def in_groups(ctype, m, size=MIB):
    """Every rank: a collective on its group of m consecutive ranks (``groups(n, m)``)."""
    return lambda r: [comp(1), coll(2, ctype, size, inv=None, pg=str(r // m + 1), data=[1])]


def groups(n, m):
    return {str(k + 1): list(range(k * m, (k + 1) * m)) for k in range(n // m)}


def roofline_ready(r):
    """A GPU compute node the roofline can time (num_ops, tensor_size), then an all-reduce."""
    c = comp(1)
    c.attr.extend([attr("num_ops", "int64_val", 10**9), attr("tensor_size", "int64_val", 10**6)])
    return [c, coll(2, AR, MIB, data=[1])]

# name: (network npus per dimension or None, ranks(r) -> nodes, system, groups, the code expected)
CASES = {
    "implementation-long": ([2], after_compute(AR), sound(1, **{IMPL[0]: ["ring", "ring"]}), None),
    "no-implementation": ([4], after_compute(A2A), without(sound(1), IMPL[3]), None),
    "splits-invalid": ([4], after_compute(AR), without(sound(1), "preferred-dataset-splits"), None),
    "endpoint-delay-negative": ([4], after_compute(AR), sound(1, **{"endpoint-delay": -5}), None),
    "endpoint-delay-zero": ([4], lambda r: [coll(1, AR, MIB)], sound(1, **{"endpoint-delay": 0}), None),
    "active-chunks-invalid": ([4], after_compute(AR), sound(1, **{"active-chunks-per-dimension": 0}), None),
    "no-phase": ([4, 2], after_compute(AR, inv=[False, True]), sound(2, **{IMPL[0]: ["ring"]}), None),
    "hd-all-to-all": ([4], after_compute(A2A), sound(1, **{IMPL[3]: ["halvingDoubling"]}), None),
    "hd-not-power-of-two": ([6], after_compute(AR), sound(1, **{IMPL[0]: ["halvingDoubling"]}), None),
    "tree-not-power-of-two": ([6], after_compute(AR), sound(1, **{IMPL[0]: ["doubleBinaryTree"]}), None),
    "tree-sub-group": ([8], in_groups(AR, 2), sound(1, **{IMPL[0]: ["doubleBinaryTree"]}), groups(8, 2)),
    "optimization-absent": ([4, 2], after_compute(AR, inv=[True, True]),
                            without(sound(2), "collective-optimization"), None),
    "all-gather-small": ([4], after_compute(AG, 3), sound(1, **{"preferred-dataset-splits": 4}), None),
    "roofline-attrs": ([4], after_compute(AR), sound(1, **{"roofline-enabled": 1, "peak-perf": 100}), None),
    "roofline-zero": ([4], roofline_ready, sound(1, **{"roofline-enabled": 1}), None),
    "replay-only": ([4], after_compute(AR), sound(1, **{"replay-only": 1}), None),
    "flag-false-on": ([4], after_compute(AR), sound(1, **{"trace-enabled": False}), None),
    "int-wrapped": ([4], after_compute(AR), sound(1, **{"endpoint-delay": 2**32 + 20}), None),
    "local-mem-bw-zero": ([4], after_compute(AR), without(sound(1), "local-mem-bw"), None),
    "implementation-short": ([4, 2], after_compute(AR, inv=[True, True]), sound(2, **{IMPL[0]: ["ring"]}), None),
    "tree-as-all-reduce": ([4], after_compute(RS), sound(1, **{IMPL[2]: ["doubleBinaryTree"]}), None),
    "direct-unaware": ([8], after_compute(AR), sound(1, **{IMPL[0]: ["direct"]}), None),
    "active-chunks": ([4], after_compute(AR), sound(1, **{"active-chunks-per-dimension": 2,
                                                          "preferred-dataset-splits": 4}), None),
    "one-flattened": ([4, 2], after_compute(AR, inv=[True, True]), sound(2, **{IMPL[0]: ["oneRing"]}), None),
    "sub-group-ring": ([4, 2], in_groups(AR, 4), sound(2, **{IMPL[0]: ["direct", "direct"]}), groups(8, 4)),
    "sub-group-endpoint-delay": ([4, 2], in_groups(AR, 2), sound(2, **{"endpoint-delay": 100}), groups(8, 2)),
    "key-typo": ([4], after_compute(AR), sound(1, **{"prefered-dataset-splits": 4}), None),
    "setting-ignored": ([4], after_compute(AR), sound(1, **{"inter-dimension-scheduling": "offlineGreedy"}), None),
    "key-ignored": ([4], after_compute(AR), sound(1, **{"boost-mode": 0}), None),
    "policy-absent": ([4], after_compute(AR), without(sound(1), "scheduling-policy"), None),
    "roofline-on": ([4], roofline_ready, sound(1, **{"roofline-enabled": 1, "peak-perf": 100}), None),
    "custom-implementation": ([4], after_compute(AR), sound(1, **{IMPL[0] + "-custom": ["nowhere/allreduce"]}),
                              None),
    "custom-splits": ([4], after_compute(AR), sound(1, **{IMPL[0] + "-custom": ["nowhere/allreduce"],
                                                         "preferred-dataset-splits": 2}), None),
    "per-node-custom": ([4], after_compute(AR), sound(1, **{"per-node-custom-implementation": "nowhere.yml"}),
                        None),
    "no-network": (None, after_compute(AR), sound(1), None),
}


def make(tmp: Path, name: str, system: dict | None = None) -> tuple[str, dict]:
    """The case's set, network, groups and system file (``system`` replaces the case's)."""
    dims, ranks, case_system, groups = CASES[name]
    n = 1
    for d in dims or [4]:
        n *= d
    prefix = write_set(tmp / "t", [ranks(r) for r in range(n)])
    kw: dict = {}
    if dims is not None:
        net = tmp / "net.yml"
        net.write_text(f"topology: [ {', '.join(['Ring'] * len(dims))} ]\nnpus_count: {dims}\n"
                       f"bandwidth: {[100.0] * len(dims)}\nlatency: {[500.0] * len(dims)}\n")
        kw["network"] = str(net)
    if groups is not None:
        (tmp / "groups.json").write_text(json.dumps(groups))
        kw["groups"] = str(tmp / "groups.json")
    path = tmp / ("sound.json" if system is not None else "system.json")
    path.write_text(json.dumps(case_system if system is None else system))
    kw["system"] = str(path)
    return str(prefix), kw


def sound_for(name: str) -> dict:
    dims = CASES[name][0]
    return sound(len(dims) if dims else 1)


def test_every_system_check_has_a_case():
    assert set(CASES) == set(SYSTEM_CODES)


@pytest.mark.parametrize("name", list(CASES))
def test_each_trap_is_found_and_a_sound_file_has_none(tmp_path, name):
    prefix, kw = make(tmp_path, name)
    d = diagnose(prefix, **kw)
    got = [f for f in d.findings if f.code == name]
    assert got, f"{name} not found; findings: {[f.code for f in d.findings]}"
    assert all(f.severity == CHECKS[name].severity for f in got)
    assert d.to_dict()["system"] == kw["system"]
    assert name in {f["check"] for f in d.to_dict()["findings"]}
    # the same set and network with a sound file: no finding of that check
    sound_kw = dict(kw, system=make(tmp_path, name, sound_for(name))[1]["system"])
    clean = diagnose(prefix, **sound_kw)
    assert name not in {f.code for f in clean.findings} or name == "no-network"


# exact texts of a few, as the user reads them
EXACT = {
    "hd-all-to-all": (0, (2,), "1 ALL_TO_ALL collective with halvingDoubling (node 2 ALL_TO_ALL: dimension 0 "
                      "(4 NPUs) halvingDoubling)",
                      'exits 1: "Exiting because of unknown communication type for HalvingDoubling collective '
                      'algorithm"'),
    "no-phase": (0, (2,), "1 collective that runs on no dimension under the system file (node 2 ALL_REDUCE: "
                 "all-reduce-implementation has 1 entry, involved dimension 1 left out)",
                 'the collective generates no phase and never finishes: exit 0, "Hardware Resource ... has '
                 'unreleased nodes", no rank finished'),
    "splits-invalid": (None, (), "preferred-dataset-splits is absent (read as 0)",
                       "divides by zero at the first collective (SIGFPE)"),
    "int-wrapped": (None, (), "endpoint-delay 4294967316 is read as 20", "reads the value into a C int, which "
                    "wraps around"),
    "key-typo": (None, (), "1 key ASTRA-sim does not read, close to a key it reads ('prefered-dataset-splits' "
                 "(did you mean 'preferred-dataset-splits'?))",
                 "ignores them: the intended settings keep their defaults"),
    "sub-group-ring": (0, (2,), "1 sub-group collective whose implementation list is replaced by ring (node 2 "
                       "ALL_REDUCE: group 1 (4 NPUs), all-reduce-implementation ['direct', 'direct'])",
                       "a group that is not the whole system runs one ring over its members in group-file order: "
                       "a list of several names is ignored (a one-entry list is used as written)"),
    "setting-ignored": (None, (), '1 setting ASTRA-sim 518bd51 does not read from this file, asking for something '
                        'else than what it does (inter-dimension-scheduling "offlineGreedy")',
                        "ignores them: dimensions are visited in ascending order"),
}


@pytest.mark.parametrize("name", list(EXACT))
def test_exact_messages(tmp_path, name):
    prefix, kw = make(tmp_path, name)
    f = next(f for f in diagnose(prefix, **kw).findings if f.code == name)
    assert (f.rank, f.node_ids, f.problem, f.effect) == EXACT[name]


def test_a_trap_brings_no_unrelated_finding(tmp_path):
    # each of these files has one trap (roofline-zero's also times the nodes by the roofline)
    implied = {"roofline-zero": {"roofline-on"}}
    for name in ("hd-all-to-all", "direct-unaware", "implementation-short", "local-mem-bw-zero", "one-flattened",
                 "tree-as-all-reduce", "roofline-zero", "endpoint-delay-zero", "sub-group-ring"):
        d = tmp_path / name
        d.mkdir()
        prefix, kw = make(d, name)
        codes = {f.code for f in diagnose(prefix, **kw).findings}
        assert codes - {name} == implied.get(name, set()), (name, codes)


def test_without_system_the_diagnosis_is_unchanged(tmp_path):
    prefix, kw = make(tmp_path, "hd-all-to-all")
    bare = dict(kw)
    del bare["system"]
    d = diagnose(prefix, **bare)
    assert d.findings == () and d.system is None and "system" not in d.to_dict()
    r = CliRunner().invoke(main, ["doctor", prefix, "-n", kw["network"], "--json"])
    assert r.exit_code == 0 and "system" not in json.loads(r.output)


def test_plans_follow_involved_dim_and_groups(tmp_path):
    # halvingDoubling on dimension 1 (size 3) only matters to collectives that involve it
    system = sound(2, **{IMPL[0]: ["ring", "halvingDoubling"]})
    (tmp_path / "s.json").write_text(json.dumps(system))
    (tmp_path / "net.yml").write_text("topology: [ Ring, Ring ]\nnpus_count: [ 2, 3 ]\n")
    ranks = [[comp(1), coll(2, AR, MIB, inv=[True, False], data=[1]), coll(3, AR, MIB, inv=[True, True], data=[2])]
             for _ in range(6)]
    prefix = write_set(tmp_path / "t", ranks)
    d = diagnose(prefix, network=tmp_path / "net.yml", system=tmp_path / "s.json")
    hd = [f for f in d.findings if f.code == "hd-not-power-of-two"]
    assert [f.node_ids for f in hd] == [(3,)] * 6


def test_sub_group_one_entry_lists_are_used_on_the_group(tmp_path):
    # a one-entry halvingDoubling list runs on the group's ring: 3 members is not a power of two
    system = sound(1, **{IMPL[0]: ["halvingDoubling"]})
    (tmp_path / "s.json").write_text(json.dumps(system))
    (tmp_path / "g.json").write_text(json.dumps({"1": [0, 1, 2], "2": [3, 4, 5]}))
    ranks = [[comp(1), coll(2, AR, MIB, inv=None, pg=str(r // 3 + 1), data=[1])] for r in range(6)]
    prefix = write_set(tmp_path / "t", ranks)
    d = diagnose(prefix, groups=tmp_path / "g.json", system=tmp_path / "s.json")
    f = next(f for f in d.findings if f.code == "hd-not-power-of-two")
    assert "group 1 (3 NPUs) halvingDoubling" in f.problem and d.fails


def test_endpoint_delay_zero_spares_a_group_collective_at_time_zero(tmp_path):
    # a group's ring pays a fixed 10 ns per message, not endpoint-delay: ASTRA-sim runs it (binary:
    # 2 groups of 2 on Ring 4, 64 KiB all-reduce at t = 0, endpoint-delay 0, every rank at 2,310 ns);
    # a collective on every rank at t = 0 still aborts
    (tmp_path / "s.json").write_text(json.dumps(sound(1, **{"endpoint-delay": 0})))
    (tmp_path / "g.json").write_text(json.dumps({"1": [0, 1], "2": [2, 3]}))
    grouped = write_set(tmp_path / "g", [[coll(1, AR, 1 << 16, inv=None, pg=str(r // 2 + 1))] for r in range(4)])
    d = diagnose(grouped, groups=tmp_path / "g.json", system=tmp_path / "s.json")
    assert "endpoint-delay-zero" not in {f.code for f in d.findings} and not d.fails
    whole = write_set(tmp_path / "w", [[coll(1, AR, 1 << 16)] for r in range(4)])
    assert "endpoint-delay-zero" in {f.code for f in diagnose(whole, system=tmp_path / "s.json").findings}


def test_all_gather_smaller_than_the_splits(tmp_path):
    system = sound(1, **{"preferred-dataset-splits": 4})
    (tmp_path / "s.json").write_text(json.dumps(system))
    prefix = write_set(tmp_path / "t", [[comp(1), coll(2, AG, 3, data=[1]), coll(3, AG, 4, data=[2])]] * 4)
    d = diagnose(prefix, system=tmp_path / "s.json")
    f = next(f for f in d.findings if f.code == "all-gather-small")
    assert f.problem == "1 ALL_GATHER collective smaller than the 4 splits (node 2: 3 B)" and d.splits == 4
    # the sizes are checked against the file's splits too
    assert "size-not-divisible" in {g.code for g in d.findings}


# ---------------------------------------------------------------- bad files and the command line

BAD = {
    "not-json": ("{bad", "not valid JSON"),
    "not-object": ("[1, 2]", "a JSON object"),
    "splits-type": (json.dumps(sound(1, **{"preferred-dataset-splits": "4"})), "preferred-dataset-splits must be"),
    "impl-type": (json.dumps(sound(1, **{IMPL[0]: "ring"})), "all-reduce-implementation must be a list"),
    "impl-name": (json.dumps(sound(1, **{IMPL[0]: ["Ring"]})), "all-reduce-implementation[0]: unknown collective "
                  "implementation 'Ring'; use ring"),
    "policy": (json.dumps(sound(1, **{"scheduling-policy": "lifo"})), "scheduling-policy must be one of"),
    "peak-perf": (json.dumps(sound(1, **{"peak-perf": "900"})), "peak-perf must be a number"),
    "custom-two": (json.dumps(sound(1, **{IMPL[0] + "-custom": ["a", "b"]})),
                   "all-reduce-implementation-custom must be a list of exactly one ET prefix"),
    "float-huge": (json.dumps(sound(1, **{"endpoint-delay": 1e12})), "endpoint-delay 1000000000000.0 is beyond a "
                   "C int"),
    "duplicate": ('{"scheduling-policy": "LIFO", "scheduling-policy": "FIFO"}', "scheduling-policy"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_system_files_are_one_line_errors(tmp_path, name):
    text, words = BAD[name]
    path = tmp_path / "bad.json"
    path.write_text(text)
    prefix = write_set(tmp_path / "t", [[comp(1), coll(2, AR, MIB, data=[1])]] * 2)
    with pytest.raises(LibraError) as e:
        diagnose(prefix, system=path)
    assert str(path) in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
    r = CliRunner().invoke(main, ["doctor", str(prefix), "--system", str(path)])
    assert r.exit_code == 1 and r.output.startswith("Error: ") and len(r.output.strip().splitlines()) == 1
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_cli_reports_system_findings_and_json(tmp_path):
    prefix, kw = make(tmp_path, "hd-all-to-all")
    r = CliRunner().invoke(main, ["doctor", prefix, "-n", kw["network"], "--system", kw["system"]])
    assert r.exit_code == 1
    assert r.output.splitlines()[0].startswith(f"{prefix} (with {kw['system']}): 4 ranks")
    assert "FAILS hd-all-to-all (ranks 0-3): 1 ALL_TO_ALL collective with halvingDoubling" in r.output
    r = CliRunner().invoke(main, ["doctor", prefix, "-n", kw["network"], "--system", kw["system"], "--json"])
    js = json.loads(r.output)
    assert js["system"] == kw["system"] and js["fails_in_astra_sim"] is True
    assert [f["check"] for f in js["findings"]] == ["hd-all-to-all"] * 4


def test_splits_come_from_the_system_file_and_must_agree(tmp_path):
    prefix, kw = make(tmp_path, "active-chunks")
    assert diagnose(prefix, **kw).splits == 4
    r = CliRunner().invoke(main, ["doctor", prefix, "--system", kw["system"], "--splits", "2"])
    assert r.exit_code == 1 and "preferred-dataset-splits is 4 but --splits is 2" in r.output
    assert CliRunner().invoke(main, ["doctor", prefix, "--system", kw["system"], "--splits", "4"]).exit_code == 0


def test_fix_never_touches_the_system_file(tmp_path):
    prefix, kw = make(tmp_path, "hd-all-to-all")
    before = Path(kw["system"]).read_bytes()
    (tmp_path / "out").mkdir()
    res = fix(prefix, tmp_path / "out" / "f", **kw)
    assert Path(kw["system"]).read_bytes() == before
    # the copy is diagnosed against the same file: the trap is still there, and --fix cannot help
    assert res.after.system == kw["system"] and res.after.fails
    assert not CHECKS["hd-all-to-all"].fixable


# ---------------------------------------------------------------- shipped, real and ASTRA-sim's own files

# the shipped samples on sample_4x4 with the files of tests/fixtures/system: the checks each finds
SHIPPED = {
    ("dlrm_16/dlrm", "ring_4x4.json"): [],
    ("dlrm_16/dlrm", "direct_4x4.json"): ["active-chunks", "direct-unaware", "key-ignored"],
    ("dlrm_16/dlrm", "halving_doubling_4x4.json"): ["hd-all-to-all"],
    ("dlrm_16/dlrm", "one_ring.json"): ["local-mem-bw-zero", "one-flattened"],
    ("gpt_tp2_pp2_dp4/gpt", "ring_4x4.json"): [],
    ("gpt_tp2_pp2_dp4/gpt", "direct_4x4.json"): ["active-chunks", "key-ignored", "sub-group-ring"],
    ("gpt_tp2_pp2_dp4/gpt", "halving_doubling_4x4.json"): ["sub-group-ring"],
    ("gpt_tp2_pp2_dp4/gpt", "one_ring.json"): ["local-mem-bw-zero"],
    ("dlrm_16/dlrm", "ring_user_4x4.json"): ["key-ignored"],     # site-comment (test_system_option.py)
    ("dlrm_16/dlrm", "hgx_knobs_4x4.json"): ["active-chunks", "direct-unaware", "key-ignored"],   # boost-mode
}


@pytest.mark.parametrize("prefix, system", list(SHIPPED))
def test_shipped_samples_with_the_fixture_system_files(prefix, system):
    d = diagnose(ROOT / "traces" / prefix, network=ROOT / "network_configs/sample_4x4.yml", system=SYSTEMS / system)
    assert sorted({f.code for f in d.findings}) == SHIPPED[prefix, system]
    assert d.fails == (system == "halving_doubling_4x4.json" and prefix.startswith("dlrm"))


def test_every_fixture_system_file_is_used():
    assert {s for _, s in SHIPPED} == {p.name for p in SYSTEMS.glob("*.json")}


def test_real_collectives_with_system_files(tmp_path):
    # param_dlrm8, converted from PyTorch: 5 all-to-alls and 3 all-reduces per rank, on all ranks
    res = fix(REAL / "param_dlrm8" / "param_dlrm8", tmp_path / "p", network=REAL / "ring8.yml")
    assert not res.after.fails
    for system, code, per_rank in ((sound(1), None, 0),
                                   (sound(1, **{k: ["halvingDoubling"] for k in IMPL}), "hd-all-to-all", 5),
                                   (without(sound(1), "local-mem-bw"), "local-mem-bw-zero", 3),
                                   (sound(1, **{IMPL[3]: ["doubleBinaryTree"]}), "tree-as-all-reduce", 5)):
        (tmp_path / "s.json").write_text(json.dumps(system))
        d = diagnose(tmp_path / "p", network=REAL / "ring8.yml", system=tmp_path / "s.json")
        got = [f for f in d.findings if f.code in SYSTEM_CODES]
        if code is None:
            assert got == []
        else:
            assert {f.code for f in got} == {code} and sorted(f.rank for f in got) == list(range(8))
            assert all(f.count == per_rank for f in got)
            assert d.fails == (CHECKS[code].severity == FAILS)


@pytest.mark.parametrize("name", ["ddp4", "tpdp4", "tpdp8", "pipeline4"])
def test_real_sets_without_typed_collectives_have_no_collective_trap(tmp_path, name):
    # their collectives are gloo CPU ops: a file that breaks every collective changes nothing
    n = int(name[-1])
    res = fix(REAL / name / name, tmp_path / name, network=REAL / f"ring{n}.yml")
    (tmp_path / "s.json").write_text(json.dumps(sound(1, **{k: ["halvingDoubling"] for k in IMPL},
                                                      **{"preferred-dataset-splits": 0})))
    d = diagnose(tmp_path / name, network=REAL / f"ring{n}.yml", groups=res.groups_file, system=tmp_path / "s.json")
    assert not d.fails and not [f for f in d.findings if f.code in SYSTEM_CODES]


EXAMPLES = os.environ.get("ASTRA_SIM_EXAMPLES", "")


@pytest.mark.skipif(not EXAMPLES, reason="set ASTRA_SIM_EXAMPLES to an ASTRA-sim checkout to read its system files")
def test_astra_sim_example_system_files_never_raise(tmp_path):
    files = sorted(Path(EXAMPLES, "examples", "system").glob("*/*.json"))
    assert files
    sets = [(ROOT / "traces/dlrm_16/dlrm", ROOT / "network_configs/sample_4x4.yml")]
    for p in sorted(Path(EXAMPLES, "examples", "workload", "microbenchmarks").glob("*/*npus_1MB")):
        npus = int(p.name.split("npus")[0])
        net = Path(EXAMPLES, "examples", "network", "analytical", f"Ring_{npus}npus.yml")
        prefix = next(p.glob("*.0.et")).with_suffix("").with_suffix("")
        sets.append((prefix, net if net.exists() else None))
    for system in files:
        for prefix, net in sets:
            args = ["doctor", str(prefix), "--system", str(system), "--json"] + (["-n", str(net)] if net else [])
            r = CliRunner().invoke(main, args)
            assert r.exit_code in (0, 1), (system, prefix, r.output)
            assert r.exception is None or isinstance(r.exception, SystemExit), (system, prefix, r.exception)
            if r.exit_code == 0 or r.output.startswith("{"):
                assert json.loads(r.output)["system"] == str(system)


# ---------------------------------------------------------------- the real binary

_BIN = os.environ.get("ASTRA_SIM_BIN", "")
# not run: the files they need are absent on purpose, or there is no network to run on
_NOT_RUN = {"custom-implementation", "custom-splits", "per-node-custom", "no-network"}


def _simulate(tmp: Path, prefix: str, kw: dict, system: Path, timeout: float = 120) -> tuple[int | None, list]:
    """(exit code, or None when it did not end within ``timeout`` s; (rank, finish ns) of the ranks that finished)."""
    (tmp / "mem.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    (tmp / "log").mkdir(exist_ok=True)
    args = [_BIN, f"--workload-configuration={prefix}", f"--system-configuration={system}",
            "--remote-memory-configuration=mem.json", f"--network-configuration={kw['network']}",
            "--logging-folder=log"]
    if "groups" in kw:
        args.append(f"--comm-group-configuration={kw['groups']}")
    try:
        p = subprocess.run(args, cwd=tmp, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, []
    return p.returncode, sorted((r.rank, r.finished_ns) for r in parse_output(p.stdout).ranks)


# WRONG traps: how the simulated time differs from the time with what the user meant
_MEANT = {
    "local-mem-bw-zero": ({"local-mem-bw": 1600}, "<"),           # reductions charged 0 ns
    "direct-unaware": ({IMPL[0]: ["ring"]}, "<"),                 # n - 1 messages at the cost of one
    "implementation-short": ({IMPL[0]: ["ring", "ring"]}, "<"),   # dimension 1's traffic never simulated
    "tree-as-all-reduce": ({IMPL[2]: ["ring"]}, ">"),             # a reduce-scatter run as all-reduce
    "active-chunks": ({"active-chunks-per-dimension": 1}, "<"),   # two chunks at full bandwidth each
    "sub-group-endpoint-delay": ({"endpoint-delay": 10}, "=="),  # 100 ns asked, 10 ns charged
    "replay-only": ({"replay-only": 0}, "<"),                     # the collective moves no bytes
    "one-flattened": ({IMPL[0]: ["ring", "ring"]}, ">"),          # one ring of 8 over dimension 0's links
}


@pytest.mark.astra
@pytest.mark.skipif(not (_BIN and os.access(_BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these")
@pytest.mark.parametrize("name", [n for n in CASES if n not in _NOT_RUN])
def test_astra_sim_does_what_the_diagnosis_says(tmp_path, name):
    prefix, kw = make(tmp_path, name)
    d = diagnose(prefix, **kw)
    # an all-gather smaller than its splits loops forever in Sys::generate_collective
    rc, done = _simulate(tmp_path, "t", kw, Path(kw["system"]), timeout=10 if name == "all-gather-small" else 120)
    npus = d.num_ranks
    if d.fails:
        assert rc != 0 or len(done) < npus, (rc, done)
    else:
        assert rc == 0 and len(done) == npus, (rc, done)
    if name in _MEANT:
        change, rel = _MEANT[name]
        meant = tmp_path / "meant.json"
        meant.write_text(json.dumps({**CASES[name][2], **change}))
        rc2, done2 = _simulate(tmp_path, "t", kw, meant)
        assert rc2 == 0 and len(done2) == npus
        got, want = max(t for _, t in done), max(t for _, t in done2)
        assert {"<": got < want, ">": got > want, "==": got == want}[rel], (got, want)


@pytest.mark.astra
@pytest.mark.skipif(not (_BIN and os.access(_BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these")
@pytest.mark.parametrize("names", [["oneRing"], ["oneRing", "oneRing"], ["oneHalvingDoubling"], ["oneDirect", "ring"]])
def test_one_star_lists_run_communicator_groups(tmp_path, names):
    # a one* list flattens the all-ranks topology only: sub-groups run on their own ring
    prefix, kw = make(tmp_path, "sub-group-endpoint-delay", sound(2, **{k: names for k in IMPL}))
    d = diagnose(prefix, **kw)
    assert not d.fails and "no-phase" not in {f.code for f in d.findings}
    rc, done = _simulate(tmp_path, "t", kw, Path(kw["system"]))
    assert rc == 0 and len(done) == 8
