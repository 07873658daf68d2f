"""The process group of typed gloo collectives: the user's mapping file, what the trace settles,
and the guesses the report names (traces/cpu_groups.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.demand.from_traces import demand_from_traces, summary_to_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import load_network
from libra_astra.traces import chakra_io as cio
from libra_astra.traces.cpu_collectives import describe, typed_rank
from libra_astra.traces.cpu_groups import GroupTally, group_map_from_data, load_group_map

REAL = Path(__file__).parent / "fixtures" / "real"
TPDP8 = REAL / "tpdp8" / "tpdp8"
NET8 = REAL / "ring2x4.yml"      # dimension 0: tpdp8's TP groups, dimension 1: its DP groups
TP8 = [[0, 1], [2, 3], [4, 5], [6, 7]]


def _write(tmp_path: Path, entries, name: str = "groups.yml") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(entries))   # JSON is YAML too; a .json name takes the JSON reader
    return p


def _bytes(d, kind: str) -> list[float]:
    """Bytes per NPU per dimension of the collectives of ``kind``, rank class 0."""
    out = [0.0, 0.0]
    for c in d.rank_classes[0].collectives:
        if c.type == kind:
            out = [a + b * c.count for a, b in zip(out, c.traffic_bytes)]
    return out


def test_tp_all_reduce_of_tp_x_dp_is_a_named_guess_and_the_mapping_puts_it_on_tp(tmp_path):
    net = load_network(NET8)
    d, s = demand_from_traces(TPDP8, net, type_cpu_collectives=True)
    # the 8x32 fp32 all-reduce's tensors do not fix its group: guessed as the world, so it also
    # crosses the DP dimension, although the job ran it in its TP group
    assert _bytes(d, "ALL_REDUCE")[1] > 0
    assert s.cpu_groups == {"given": 0, "named": 0, "fixed": 16, "guessed": 16}
    guess = next(n for n in s.notes if n.startswith("process group guessed for 16 typed CPU collective(s)"))
    assert "c10d::allreduce_ #1 (1,024 B) on ranks 0-7 -> all ranks" in guess and "--cpu-collective-groups" in guess

    groups = _write(tmp_path, [{"op": "c10d::allreduce_", "ranks": TP8},
                               {"op": "c10d::alltoall_base_", "ranks": "all"}])
    d2, s2 = demand_from_traces(TPDP8, net, cpu_collective_groups=groups)
    assert _bytes(d2, "ALL_REDUCE") == [1024.0, 0.0]   # 2 m (p - 1) / p on a ring of 2, nothing on DP
    for kind in ("ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"):   # settled by the trace, or the same world
        assert _bytes(d2, kind) == _bytes(d, kind)
    assert s2.cpu_groups == {"given": 16, "named": 0, "fixed": 16, "guessed": 0}
    assert not any("guessed" in n for n in s2.notes)
    data = summary_to_dict(s2)["cpu_collective_groups"]
    assert data["given"] == 16 and data["guessed_ops"] == []
    assert summary_to_dict(s)["cpu_collective_groups"]["guessed_ops"][0] == {
        "op": "c10d::allreduce_", "nth": 1, "size_bytes": 1024, "ranks": list(range(8)), "group": None}


def test_group_ids_and_sets_of_ranks_name_the_same_groups(tmp_path):
    net = load_network(NET8)
    by_sets = demand_from_traces(TPDP8, net, cpu_collective_groups=_write(
        tmp_path, [{"op": "c10d::allreduce_", "ranks": TP8}], "a.json"))[0]
    by_ids = demand_from_traces(TPDP8, net, cpu_collective_groups=_write(
        tmp_path, [{"op": "c10d::allreduce_", "group": [1, "2", 3, 4]}], "b.yml"))[0]
    assert by_sets.rank_classes == by_ids.rank_classes


def _pipeline_rank0():
    return cio.read_et(REAL / "pipeline4" / "pipeline4.0.et.gz")[1]


def _groups_of(nodes) -> list:
    return [cio.node_attrs(n).get("pg_name") for n in nodes if n.type == cio.pb.COMM_COLL_NODE]


def test_nth_and_size_pick_occurrences_and_the_first_matching_entry_decides():
    # pipeline4 rank 0: four c10d::allreduce_ (stage {0, 1}); its one group besides the world is a guess
    tally = GroupTally()
    nodes = _pipeline_rank0()
    typed_rank(nodes, 0, 4, "p.0", tally=tally)
    assert _groups_of(nodes) == ["1"] * 4 and tally.counts["guessed"] == 4
    sizes = [describe(n).size_bytes for n in _pipeline_rank0() if n.name == "c10d::allreduce_"]
    assert sizes == [16384, 256, 16384, 256]
    gm = group_map_from_data([{"op": "c10d::allreduce_", "nth": 2, "ranks": "all"},
                              {"op": "c10d::allreduce_", "size_bytes": 16384, "ranks": [[0, 1], [2, 3]]},
                              {"op": "c10d::allreduce_", "group": 0}], "m.yml")   # pg_name 0: the world
    tally = GroupTally()
    nodes = _pipeline_rank0()
    typed_rank(nodes, 0, 4, "p.0", gm, tally)
    assert _groups_of(nodes) == ["1", None, "1", None]
    assert tally.counts == {"given": 4, "named": 0, "fixed": 0, "guessed": 0}
    tally.check_used(gm)
    # an entry that earlier entries leave nothing to is refused, as a mistake would be
    shadowed = group_map_from_data([{"op": "c10d::allreduce_", "ranks": "all"},
                                    {"op": "c10d::allreduce_", "nth": 1, "group": 1}], "m.yml")
    tally = GroupTally()
    typed_rank(_pipeline_rank0(), 0, 4, "p.0", shadowed, tally)
    with pytest.raises(LibraError, match=r"^m.yml: entry 2 \(c10d::allreduce_\) matches no typed collective"):
        tally.check_used(shadowed)


def test_desc_names_the_group_by_its_metadata_description():
    nodes = cio.read_et(TPDP8.parent / "tpdp8.2.et.gz")[1]
    meta = next(n for n in nodes if n.type == cio.pb.METADATA_NODE)
    # as DeviceMesh records them: the TP group {2, 3} described mesh_tp, the DP group mesh_dp
    meta.inputs.values = meta.inputs.values.replace('"pg_desc": "undefined", "backend_config": "cpu:gloo,cuda:gloo", '
                                                    '"ranks": [2, 3]', '"pg_desc": "mesh_tp", "backend_config": '
                                                    '"cpu:gloo,cuda:gloo", "ranks": [2, 3]', 1)
    assert "mesh_tp" in meta.inputs.values
    typed_rank(nodes, 2, 8, "t.2", group_map_from_data([{"op": "c10d::allreduce_", "desc": "mesh_tp"},
                                                         {"op": "c10d::alltoall_base_", "desc": "default_pg"}],
                                                        "m.yml"))
    assert _groups_of(nodes) == ["2", "2", "5", None]   # all-reduce, all-gather, reduce-scatter, all-to-all


def _op(name: str, values: str, pg_name: str | None = None):
    n = cio.comp_node(7, name, 3, is_cpu_op=True)
    n.inputs.values = values
    if pg_name is not None:
        n.attr.add(name="pg_name", string_val=pg_name)
    return n


def test_all_to_all_splits_fix_the_group_and_a_recorded_pg_name_is_taken():
    t = "[1, 2, 0, 64, 4, 'cpu']"
    assert describe(_op("c10d::alltoall_base_", f"[{t}, {t}, '<Object>', [16, 48], [32, 32], False, -1]")).group_size == 2
    assert describe(_op("c10d::alltoall_base_", f"[{t}, {t}, '<Object>', [], [], False, -1]")).group_size == 0
    assert describe(_op("c10d::alltoall_", f"[[{t}, {t}, {t}], [{t}, {t}, {t}], '<Object>']")).group_size == 3
    meta = cio.pb.Node(id=1, name="## process_group:init ##", type=cio.pb.METADATA_NODE)
    meta.inputs.values = json.dumps([json.dumps([{"pg_name": "0", "ranks": []}, {"pg_name": "3", "ranks": [0, 1]},
                                                 {"pg_name": "4", "ranks": [0, 2]}])])
    ops = [meta, _op("c10d::alltoall_base_", f"[{t}, {t}, '<Object>', [32, 32], [32, 32], False, -1]"),
           _op("c10d::allreduce_", f"[[{t}], '<Object>', '<Object>', '<None>', False, -1]", pg_name="4"),
           _op("c10d::allreduce_", f"[[{t}], '<Object>', '<Object>', '<None>', False, -1]")]
    for i, n in enumerate(ops):
        n.id = i + 1
    tally = GroupTally()
    typed_rank(ops, 0, 4, "t.0", tally=tally)
    # two groups of 2 hold rank 0: the all-to-all's is a guess; the op that names its group keeps it
    assert _groups_of(ops) == ["3", "4", None]
    assert tally.counts == {"given": 0, "named": 1, "fixed": 0, "guessed": 2}


@pytest.mark.parametrize("entries,message", [
    ({"op": "c10d::allreduce_", "ranks": "all"}, "a CPU collective group file is a non-empty list of entries"),
    ([{"op": "allreduce_", "ranks": "all"}], "entry 1: op must name a c10d op as the trace does"),
    ([{"op": "c10d::allreduce_"}], "entry 1 (c10d::allreduce_): give the group the op used as exactly one of"),
    ([{"op": "c10d::allreduce_", "ranks": "all", "group": 1}], "; it has ranks and group"),
    ([{"op": "c10d::allreduce_", "rank": "all"}], "entry 1: unknown key 'rank'; the keys are op, nth,"),
    ([{"op": "c10d::allreduce_", "ranks": [[0, 1], [1, 2]]}], "rank 1 is in ranks twice"),
    ([{"op": "c10d::allreduce_", "ranks": [0, "1"]}], "ranks must be all, a list of ranks or a list of such lists"),
    ([{"op": "c10d::allreduce_", "nth": 0, "ranks": "all"}], "nth must be an occurrence number >= 1"),
    ([{"op": "c10d::allreduce_", "size_bytes": -1, "ranks": "all"}], "size_bytes must be an integer >= 0"),
    ([{"op": "c10d::allreduce_", "group": []}], "group must be a group id"),
    ([{"op": "c10d::allreduce_", "ranks": [[0, 1], [2, 3]]}],
     "entry 1 (c10d::allreduce_): rank 4 issues this op but is in none of the sets of ranks; add the set"),
    ([{"op": "c10d::allreduce_", "ranks": [[0, 2], [1, 3], [4, 6], [5, 7]]}],
     "ranks [0, 2] are none of rank 0's process groups (its METADATA groups: 0 all ranks (pg_desc default_pg), "
     "1 [0, 1] (pg_desc undefined), 5 [0, 2, 4, 6] (pg_desc undefined)"),
    ([{"op": "c10d::allreduce_", "ranks": [[0, 1], [2, 3], [4, 5], [6, 7, 8]]}], "rank 8 is outside 0..7"),
    ([{"op": "c10d::allreduce_", "group": [1, 2, 9]}], "none of groups 1, 2, 9 holds rank 4, which issues this op"),
    ([{"op": "c10d::allreduce_", "desc": "tp"}], "rank 0's METADATA has no process group with pg_desc 'tp'"),
    ([{"op": "c10d::_allgather_base_", "ranks": "all"}],
     "rank 0's op has tensors for a group of 2 ranks, but the entry gives all ranks (8 ranks); fix the entry"),
    ([{"op": "c10d::allreduce", "ranks": "all"}],
     "entry 1 (c10d::allreduce) matches no typed collective of the trace that earlier entries leave (its typed "
     "collectives: "
     "c10d::allreduce_, c10d::_allgather_base_, c10d::_reduce_scatter_base_, c10d::alltoall_base_)"),
    ([{"op": "c10d::allreduce_", "nth": 2, "ranks": "all"}], "entry 1 (c10d::allreduce_) matches no typed"),
])
def test_a_bad_mapping_is_one_line_naming_the_file_and_entry(tmp_path, entries, message):
    path = _write(tmp_path, entries)
    with pytest.raises(LibraError) as e:
        demand_from_traces(TPDP8, load_network(NET8), cpu_collective_groups=path)
    text = str(e.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
    res = CliRunner().invoke(main, ["demand", str(TPDP8), "-n", str(NET8), "--cpu-collective-groups", str(path)])
    assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output


def test_a_mapping_file_that_is_not_yaml_is_refused_naming_it(tmp_path):
    p = tmp_path / "g.yml"
    p.write_text("- op: [unclosed\n")
    with pytest.raises(LibraError) as e:
        load_group_map(p)
    assert str(p) in str(e.value)


def test_cli_demand_json_and_optimize_warning_name_the_guess(tmp_path):
    res = CliRunner().invoke(main, ["demand", str(TPDP8), "-n", str(NET8), "--type-cpu-collectives", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["cpu_collective_groups"]["guessed"] == 16
    cost = Path(__file__).parents[1] / "network_configs" / "cost.yml"
    args = [str(TPDP8), "-n", str(NET8), "--cost", str(cost), "--total-bw", "100", "--model", "libra"]
    res = CliRunner().invoke(main, ["optimize", "--type-cpu-collectives"] + args)
    assert res.exit_code == 0, res.output
    assert "warning: tpdp8: process group guessed for 16 typed CPU collective(s)" in res.output
    groups = _write(tmp_path, [{"op": "c10d::allreduce_", "ranks": TP8}, {"op": "c10d::alltoall_base_", "ranks": "all"}])
    out = tmp_path / "d.json"
    res = CliRunner().invoke(main, ["optimize", "--cpu-collective-groups", str(groups), "-o", str(out)] + args)
    assert res.exit_code == 0 and "guessed" not in res.output, res.output
    wl = json.loads(out.read_text())["workloads"][0]
    assert wl["type_cpu_collectives"] is True and wl["cpu_collective_groups"] == str(groups.resolve())


def test_emit_types_the_collectives_on_the_mapped_groups(tmp_path):
    # the run ASTRA-sim gets carries the groups the demand used: the TP all-reduce on dimension 0 only
    from libra_astra.astra.emit import emit
    from libra_astra.optimize.design import Design, WorkloadRef, design_from_dict, design_to_dict
    net = load_network(NET8)
    groups = _write(tmp_path, [{"op": "c10d::allreduce_", "ranks": TP8}])

    def all_reduce_dims(run: Path, **ref) -> list:
        design = Design("d", net, (50.0, 50.0), workloads=(WorkloadRef("job", traces=str(TPDP8), **ref),))
        design = design_from_dict(design_to_dict(design))
        emit(design, run)
        _, nodes = cio.read_et(run / "workload" / "tpdp8.0.et")
        n = next(n for n in nodes if n.name == "c10d::allreduce_")
        return cio.node_attrs(n)["involved_dim"]

    assert list(all_reduce_dims(tmp_path / "guess", type_cpu_collectives=True)) == [True, True]
    assert list(all_reduce_dims(tmp_path / "given", cpu_collective_groups=str(groups))) == [True, False]
    manifest = json.loads((tmp_path / "given" / "manifest.json").read_text())
    assert manifest["design"]["workloads"][0]["cpu_collective_groups"] == str(groups)
