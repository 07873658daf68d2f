"""emit(): ASTRA-sim input files, logical-network splits, trace rewriting and demand synthesis."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from chakra.schema.protobuf import et_def_pb2 as pb

from libra_astra.traces import chakra_io as cio
from libra_astra.astra import emit
from libra_astra.astra.logical import Splitter, progression_split_points
from libra_astra.demand.types import Dag, RankClass, Demand, demand_to_dict, make_collective, single_class
from libra_astra.optimize.design import Design, WorkloadRef, design_to_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict

GIB = 2**30
GB_PER_GIB = 2**30 / 1e9
SYSTEM_KEYS = {
    "scheduling-policy", "endpoint-delay", "active-chunks-per-dimension", "preferred-dataset-splits",
    "all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
    "all-to-all-implementation", "collective-optimization", "local-mem-bw", "roofline-enabled", "peak-perf",
}


def net_of(*dims):
    return network_from_dict({"name": "n", "dimensions": [
        {"name": f"d{i}", "topology": t, "npus": n, "latency_ns": lat} for i, (t, n, lat) in enumerate(dims)]})


def demand_design(tmp_path, net, bw, demand, name="w"):
    p = tmp_path / f"{name}.demand.json"
    p.write_text(json.dumps(demand_to_dict(demand)))
    return Design("d", net, tuple(bw), workloads=(WorkloadRef(name, demand=str(p)),))


def ar_design(tmp_path, bw=(200 * GB_PER_GIB, 50 * GB_PER_GIB), lat=(0.0, 0.0)):
    net = net_of(("Ring", 4, lat[0]), ("Switch", 4, lat[1]))
    d = single_class("ar", [4, 4], 0.0, [make_collective("ALL_REDUCE", GIB, [4, 4])])
    return demand_design(tmp_path, net, bw, d)


def read_rank(run, prefix, r):
    return cio.read_et(run / "workload" / f"{prefix}.{r}.et")[1]


def attrs(n):
    return cio.node_attrs(n)


# ------------------------------------------------------------------ configuration files


def test_network_yaml_is_gib_per_s_with_gb_comment(tmp_path):
    res = emit(ar_design(tmp_path), tmp_path / "run")
    text = (tmp_path / "run" / "network.yml").read_text()
    cfg = yaml.safe_load(text)
    assert set(cfg) == {"topology", "npus_count", "bandwidth", "latency"}
    assert cfg["topology"] == ["Ring", "Switch"] and cfg["npus_count"] == [4, 4]
    assert cfg["bandwidth"] == pytest.approx([200.0, 50.0], rel=1e-12)
    assert cfg["latency"] == [0.0, 0.0]
    assert "# GB/s: [ 214.7483648" in text
    assert res.npus_count == 16


def test_system_and_memory_files(tmp_path):
    emit(ar_design(tmp_path), tmp_path / "run", splits=4, local_mem_bw_gbps=1600.0, endpoint_delay_ns=10)
    system = json.loads((tmp_path / "run" / "system.json").read_text())
    assert set(system) == SYSTEM_KEYS
    for key in ("all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
                "all-to-all-implementation"):
        assert system[key] == ["ring", "ring"]
    assert system["active-chunks-per-dimension"] == 1
    assert system["collective-optimization"] == "localBWAware"
    assert system["preferred-dataset-splits"] == 4
    assert system["local-mem-bw"] == 1600.0 and system["endpoint-delay"] == 10
    assert system["roofline-enabled"] == 0
    assert json.loads((tmp_path / "run" / "memory.json").read_text()) == {"memory-type": "NO_MEMORY_EXPANSION"}
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["preferred_dataset_splits"] == 4
    assert manifest["mlc_chakra_version"]
    assert manifest["design"]["bandwidth_gbps"] == pytest.approx([200 * GB_PER_GIB, 50 * GB_PER_GIB])


def test_command_line_and_run_sh(tmp_path):
    res = emit(ar_design(tmp_path), tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["simulator"]["command_line"] == (
        "AstraSim_Analytical_Congestion_Unaware --workload-configuration=workload/w "
        "--system-configuration=system.json --network-configuration=network.yml "
        "--remote-memory-configuration=memory.json --logging-folder=log")
    assert res.command_line == manifest["simulator"]["command_line"]
    sh = tmp_path / "run" / "run.sh"
    assert os.access(sh, os.X_OK)
    text = sh.read_text()
    assert '"${ASTRA_SIM_BIN:-AstraSim_Analytical_Congestion_Unaware}"' in text
    assert "--workload-configuration=workload/w" in text and "--logging-folder=log" in text
    assert sorted(p.name for p in (tmp_path / "run" / "workload").iterdir()) == sorted([f"w.{r}.et" for r in range(16)] + ["w.set.json"])


def test_existing_directory_refused_then_replaced_with_force(tmp_path):
    design = ar_design(tmp_path)
    emit(design, tmp_path / "run")
    with pytest.raises(LibraError, match="already exists; choose another directory or pass --force"):
        emit(design, tmp_path / "run")
    (tmp_path / "run" / "notes.txt").write_text("x")   # not emit's: --force keeps it
    emit(design, tmp_path / "run", splits=2, overwrite=True)
    assert (tmp_path / "run" / "notes.txt").read_text() == "x"
    assert json.loads((tmp_path / "run" / "system.json").read_text())["preferred-dataset-splits"] == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_force_refuses_to_replace_a_foreign_directory(tmp_path):
    (tmp_path / "mine").mkdir()
    with pytest.raises(LibraError, match="is not an emitted directory"):
        emit(ar_design(tmp_path), tmp_path / "mine", overwrite=True)


def test_zero_latency_with_zero_endpoint_delay_refused(tmp_path):
    with pytest.raises(LibraError, match="latency 0 and endpoint-delay is 0"):
        emit(ar_design(tmp_path), tmp_path / "run", endpoint_delay_ns=0)
    emit(ar_design(tmp_path, lat=(500.0, 700.0)), tmp_path / "run", endpoint_delay_ns=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"splits": 0}, r"splits .preferred-dataset-splits. must be an integer from 1 to 2,147,483,647 .ASTRA-sim's int., got 0"),
    # 10**21 was written to system.json, where ASTRA-sim's int would wrap around
    ({"endpoint_delay_ns": 10 ** 21},
     r"endpoint delay must be an integer number of ns from 0 to 2,147,483,647 .ASTRA-sim's int., got 1000000000000000000000"),
    ({"local_mem_bw_gbps": 0.0}, "local memory bandwidth must be > 0"),
    ({"scheduling_policy": "RANDOM"}, "scheduling policy must be one of"),
])
def test_bad_options(tmp_path, kwargs, message):
    with pytest.raises(LibraError, match=message):
        emit(ar_design(tmp_path), tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


def test_workload_choice(tmp_path):
    d = ar_design(tmp_path)
    two = Design(d.name, d.network, d.bandwidth_gbps, workloads=(d.workloads[0], WorkloadRef("other", demand=d.workloads[0].demand)))
    with pytest.raises(LibraError, match=r"has 2 workloads \['w', 'other'\]; choose one with --workload NAME"):
        emit(two, tmp_path / "run")
    res = emit(two, tmp_path / "run", workload="other")
    assert res.workload == "other" and (tmp_path / "run" / "workload" / "other.0.et").is_file()
    with pytest.raises(LibraError, match="has no workload 'x'"):
        emit(two, tmp_path / "run2", workload="x")


def test_design_file_path_accepted(tmp_path):
    p = tmp_path / "design.json"
    p.write_text(json.dumps(design_to_dict(ar_design(tmp_path))))
    assert emit(p, tmp_path / "run").npus_count == 16


# ------------------------------------------------------------------ logical network


def test_progression_split_points():
    assert progression_split_points([0, 1, 2, 3], 8) == (1, 4)
    assert progression_split_points([4, 5, 6, 7], 8) == (1, 4)
    assert progression_split_points([1, 5], 8) == (4, 8)
    assert progression_split_points([0, 2, 4, 6], 8) == (2, 8)
    assert progression_split_points([2, 3, 4, 5], 8) is None  # not aligned
    assert progression_split_points([0, 1, 3], 8) is None  # not a progression
    assert progression_split_points([0, 1, 2], 8) is None  # 3 does not divide 8
    assert progression_split_points([3], 8) == (1, 1)


def test_ring_of_8_with_groups_of_4_becomes_two_dims():
    net = net_of(("Ring", 8, 100.0), ("Switch", 2, 700.0))
    sp = Splitter(net)
    assert sp.add_members([0, 1, 2, 3])
    assert sp.add_members([0, 4])
    lnet = sp.network([100.0, 25.0])
    assert [(d.name, d.npus, d.stride, d.latency_ns, d.bw_gbps) for d in lnet.dims] == [
        ("d0_0", 4, 1, 100.0, 100.0), ("d0_1", 2, 4, 400.0, 100.0), ("d1", 2, 1, 700.0, 25.0)]
    assert lnet.slice_mask([4, 5, 6, 7]) == (True, False, False)
    assert lnet.slice_mask([1, 5]) == (False, True, False)
    assert lnet.slice_mask([1, 5, 9, 13]) == (False, True, True)
    assert lnet.slice_mask([0, 1, 2]) is None
    assert lnet.coords(13) == (1, 1, 1) and lnet.npu_id((1, 1, 1)) == 13


def test_conflicting_groups_stay_irregular():
    net = net_of(("Ring", 12, 0.0))
    sp = Splitter(net)
    assert sp.add_members([0, 1, 2, 3])
    assert not sp.add_members([0, 1, 2])  # split points 3 and 4 make no divisibility chain
    assert [d.npus for d in sp.network([1.0]).dims] == [4, 3]


def test_demand_participants_split_larger_group_innermost():
    net = net_of(("Ring", 8, 0.0), ("Switch", 4, 0.0))
    tp = make_collective("ALL_REDUCE", 1e6, [4, 1])
    dp = make_collective("ALL_REDUCE", 1e6, [2, 4])
    from libra_astra.astra.logical import plan_for_demand
    lnet = plan_for_demand(net, [10.0, 5.0], single_class("x", [8, 4], 0.0, [dp, tp]))
    assert [(d.npus, d.stride) for d in lnet.dims] == [(4, 1), (2, 4), (4, 1)]
    assert lnet.run_for(0, 4) == (0,) and lnet.run_for(0, 2) == (1,) and lnet.run_for(0, 8) == (0, 1)
    assert lnet.run_for(0, 3) is None


# ------------------------------------------------------------------ trace rewriting


def write_trace(prefix, ranks, nodes_of):
    for r in range(ranks):
        cio.write_et(f"{prefix}.{r}.et", nodes_of(r), overwrite=True)


def coll(i, name, kind, size, deps=(), pg=None, inv=None):
    return cio.coll_node(i, name, kind, size, pg_name=pg, involved_dim=inv, data_deps=deps)


def meta_node(i, deps=()):
    n = pb.Node(id=i, name="meta", type=pb.METADATA_NODE)
    n.data_deps.extend(deps)
    return n


def tp_dp_traces(tmp_path):
    """Ring 8: TP groups {0..3}, {4..7} (ids 1, 2); DP groups {r, r+4} (ids 3..6)."""
    groups = {1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}
    groups.update({3 + r: [r, r + 4] for r in range(4)})
    gpath = tmp_path / "g.json"
    cio.write_comm_groups(gpath, groups)

    def nodes(r):
        tp, dp = (1 if r < 4 else 2), 3 + r % 4
        return [
            cio.comp_node(0, "fwd", 10),
            meta_node(1, deps=[0]),
            coll(2, "tp", "ALL_REDUCE", 1 << 20, deps=[1], pg=str(tp)),
            coll(3, "dp", "ALL_REDUCE", 1 << 20, deps=[0], pg=str(dp)),  # independent of tp
            coll(4, "all", "ALL_GATHER", 1 << 10, deps=[2, 3]),
            coll(5, "bar", "BARRIER", 0, deps=[4]),
            cio.comp_node(6, "bwd", 5, data_deps=[5, 99]),  # 99 does not exist
        ]
    prefix = tmp_path / "tr" / "job"
    prefix.parent.mkdir()
    write_trace(prefix, 8, nodes)
    net = net_of(("Ring", 8, 100.0))
    return Design("d", net, (50.0,), workloads=(WorkloadRef("job", traces=str(prefix), comm_groups=str(gpath)),))


def test_trace_rewrite_splits_dimension_and_turns_groups_into_dims(tmp_path):
    design = tp_dp_traces(tmp_path)
    before = {p.name: p.read_bytes() for p in (tmp_path / "tr").iterdir()}
    res = emit(design, tmp_path / "run")
    assert {p.name: p.read_bytes() for p in (tmp_path / "tr").iterdir()} == before  # user files untouched
    assert [(d.npus, d.stride) for d in res.network.dims] == [(4, 1), (2, 4)]
    cfg = yaml.safe_load((tmp_path / "run" / "network.yml").read_text())
    assert cfg["npus_count"] == [4, 2] and cfg["latency"] == [100.0, 400.0]
    assert json.loads((tmp_path / "run" / "system.json").read_text())["all-reduce-implementation"] == ["ring", "ring"]
    assert not (tmp_path / "run" / "comm_groups.json").exists()
    for r in (0, 6):
        nodes = read_rank(tmp_path / "run", "job", r)
        by_name = {n.name: n for n in nodes}
        assert "meta" not in by_name
        assert list(by_name["tp"].data_deps) == [0]  # re-linked through the removed METADATA node
        assert attrs(by_name["tp"])["involved_dim"] == [True, False] and "pg_name" not in attrs(by_name["tp"])
        assert attrs(by_name["dp"])["involved_dim"] == [False, True] and "pg_name" not in attrs(by_name["dp"])
        assert attrs(by_name["all"])["involved_dim"] == [True, True]
        # collectives chained in issue order: dp waits for tp
        assert list(by_name["dp"].ctrl_deps) == [by_name["tp"].id]
        assert attrs(by_name["bar"])["comm_type"] == pb.ALL_REDUCE and attrs(by_name["bar"])["comm_size"] == 0
        assert list(by_name["bwd"].data_deps) == [5]
        assert all(attrs(n).get("is_cpu_op") is False for n in nodes if n.type == pb.COMM_COLL_NODE)
    stats = json.loads((tmp_path / "run" / "manifest.json").read_text())["workload_stats"]
    assert stats["nodes_removed"] == 8 and stats["dangling_deps_dropped"] == 8
    assert stats["group_collectives_to_dims"] == 16 and stats["converted_types"] == {"BARRIER": 8}


def test_irregular_groups_stay_comm_groups(tmp_path):
    groups = {1: [0, 1, 2, 5], 2: [3, 4, 6, 7]}
    gpath = tmp_path / "g.json"
    cio.write_comm_groups(gpath, groups)
    prefix = tmp_path / "job"
    write_trace(prefix, 8, lambda r: [coll(0, "x", "ALL_REDUCE", 4096, pg="1" if r in groups[1] else "2")])
    design = Design("d", net_of(("Ring", 4, 10.0), ("Ring", 2, 10.0)), (10.0, 10.0),
                    workloads=(WorkloadRef("job", traces=str(prefix), comm_groups=str(gpath)),))
    res = emit(design, tmp_path / "run")
    assert "--comm-group-configuration=comm_groups.json" in res.args
    assert json.loads((tmp_path / "run" / "comm_groups.json").read_text()) == {"1": [0, 1, 2, 5], "2": [3, 4, 6, 7]}
    a = attrs(read_rank(tmp_path / "run", "job", 5)[0])
    assert a["pg_name"] == "1" and a["involved_dim"] == [True, True]


def test_trace_errors(tmp_path):
    prefix = tmp_path / "job"
    write_trace(prefix, 4, lambda r: [coll(0, "x", "REDUCE", 64)])
    design = Design("d", net_of(("Ring", 4, 10.0)), (10.0,), workloads=(WorkloadRef("job", traces=str(prefix)),))
    with pytest.raises(LibraError, match=r"job.0.et: node 0 \('x'\): ASTRA-sim cannot simulate REDUCE"):
        emit(design, tmp_path / "run")
    write_trace(prefix, 4, lambda r: [coll(0, "x", "ALL_REDUCE", 64, pg="7")])
    with pytest.raises(LibraError, match="uses communicator group '7', which the design's comm_groups file does not define"):
        emit(design, tmp_path / "run")
    write_trace(prefix, 3, lambda r: [coll(0, "x", "ALL_REDUCE", 64)])
    (tmp_path / "job.3.et").unlink()
    with pytest.raises(LibraError, match="job.3.et: trace file for rank 3 not found"):
        emit(design, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------ synthesis from a demand


def test_demand_synthesis_chain_counts_and_partial_split(tmp_path):
    net = net_of(("Ring", 8, 0.0), ("Switch", 2, 0.0))
    tp = make_collective("ALL_REDUCE", 1000, [4, 1], count=2.5, name="tp")
    dp = make_collective("REDUCE_SCATTER", 3000, [2, 2], name="dp")
    demand = single_class("x", [8, 2], 1_500_400.0, [tp, dp])
    res = emit(demand_design(tmp_path, net, [100.0, 10.0], demand), tmp_path / "run")
    assert res.network.npus_per_dim == (4, 2, 2)
    nodes = read_rank(tmp_path / "run", "w", 9)
    assert [n.type for n in nodes] == [pb.COMP_NODE] + [pb.COMM_COLL_NODE] * 4
    assert nodes[0].duration_micros == 1500
    assert [attrs(n)["comm_size"] for n in nodes[1:]] == [833, 833, 833, 3000]  # 2.5 runs as 3 of 1000 * 2.5 / 3
    assert [attrs(n)["involved_dim"] for n in nodes[1:]] == [[True, False, False]] * 3 + [[False, True, True]]
    assert [list(n.ctrl_deps) for n in nodes] == [[], [0], [1], [2], [3]]


def test_a_count_below_the_rounding_slack_runs_once(tmp_path):
    # ceil(count - 1e-9) is 0 for a count of 1e-12: it divided the size by zero runs
    net = net_of(("Ring", 8, 0.0), ("Switch", 2, 0.0))
    tiny = make_collective("ALL_REDUCE", 1000, [8, 1], count=1e-12, name="tiny")
    emit(demand_design(tmp_path, net, [100.0, 10.0], single_class("x", [8, 2], 1000.0, [tiny])), tmp_path / "run")
    nodes = read_rank(tmp_path / "run", "w", 3)
    assert [n.type for n in nodes] == [pb.COMP_NODE, pb.COMM_COLL_NODE]
    assert attrs(nodes[1])["comm_size"] == 1       # 1e-9 bytes, rounded up to the smallest message


def test_demand_synthesis_dag_and_p2p(tmp_path):
    net = net_of(("Ring", 4, 0.0))
    c = make_collective("ALL_REDUCE", 4096, [4])
    from libra_astra.demand.types import Collective
    p2p = Collective("P2P", 512, (2,), (512.0,), (1,), algorithm="p2p")
    rc = RankClass(3000.0, (c, p2p), dag=Dag((("comp", 1000.0), ("coll", 0), ("comp", 2000.0), ("coll", 1)),
                                             ((0, 2), (1, 2), (2, 3))))
    demand = Demand("x", (4,), (rc,))
    emit(demand_design(tmp_path, net, [10.0], demand), tmp_path / "run")
    nodes = read_rank(tmp_path / "run", "w", 3)
    kinds = [(n.name, n.type, sorted(n.ctrl_deps)) for n in nodes]
    assert kinds == [("comp0", pb.COMP_NODE, []), ("coll0", pb.COMM_COLL_NODE, []), ("comp2", pb.COMP_NODE, [0, 1]),
                     ("coll1.send", pb.COMM_SEND_NODE, [1, 2]), ("coll1.recv", pb.COMM_RECV_NODE, [1, 2])]
    send, recv = attrs(nodes[3]), attrs(nodes[4])
    assert (send["comm_src"], send["comm_dst"], recv["comm_src"], recv["comm_dst"]) == (3, 0, 2, 3)
    assert send["comm_tag"] == recv["comm_tag"] and send["comm_size"] == 512


def test_demand_rank_classes_must_cover_every_npu(tmp_path):
    net = net_of(("Ring", 4, 0.0))
    c = make_collective("ALL_REDUCE", 64, [4])
    demand = Demand("x", (4,), (RankClass(0.0, (c,), 2, (0, 1)), RankClass(0.0, (c,), 1, (2,))))
    with pytest.raises(LibraError, match=r"ranks \[3\] are in no rank class"):
        emit(demand_design(tmp_path, net, [10.0], demand), tmp_path / "run")


def test_flat_ring_collective_approximated_per_dimension(tmp_path):
    net = net_of(("Ring", 4, 0.0), ("Switch", 2, 0.0))
    from libra_astra.demand.types import Collective
    flat = Collective("ALL_REDUCE", 600.0, (3, 1), (400.0, 0.0), (4, 0), algorithm="flat_ring")
    emit(demand_design(tmp_path, net, [10.0, 10.0], single_class("x", [4, 2], 0.0, [flat])), tmp_path / "run")
    (node,) = read_rank(tmp_path / "run", "w", 0)
    a = attrs(node)
    assert a["involved_dim"] == [True, False]
    assert a["comm_size"] == round(400 * 4 / (2 * 3))  # ring all-reduce over 4 sends 400 bytes per NPU


def test_manifest_records_the_prediction_for_the_emitted_settings(tmp_path):
    from libra_astra.timing.predict import predict
    from libra_astra.timing.model import TimeModel

    net = net_of(("Ring", 4, 500.0), ("Switch", 4, 700.0))
    c = make_collective("ALL_REDUCE", 2**26, (4, 4), net=net)
    dem = single_class("one", (4, 4), 1e5, [c])
    design = demand_design(tmp_path, net, (120.0, 40.0), dem)
    emit(design, tmp_path / "run", splits=4, local_mem_bw_gbps=1600.0)
    pred = json.loads((tmp_path / "run" / "manifest.json").read_text())["prediction"]
    model = TimeModel("pipelined", splits=4, latency=True, local_mem_bw_gbps=1600.0, overlap=True)
    assert pred["time_ns"] == pytest.approx(predict(dem, (120.0, 40.0), net, model).time_ns, rel=1e-12)
    assert "4 chunks per collective" in pred["model"] and "local-mem-bw 1600 GB/s" in pred["model"]


def test_collective_sizes_are_rounded_to_a_multiple_of_the_splits(tmp_path):
    net = net_of(("Ring", 4, 500.0), ("Switch", 4, 700.0))
    d = single_class("odd", (4, 4), 0.0, [make_collective("ALL_REDUCE", 1_000_003.4, (4, 4), net=net),
                                           make_collective("ALL_GATHER", 6, (4, 1), net=net)])
    res = emit(demand_design(tmp_path, net, (100.0, 50.0), d), tmp_path / "run", splits=4)
    sizes = [attrs(n)["comm_size"] for n in read_rank(tmp_path / "run", "w", 0) if n.type == pb.COMM_COLL_NODE]
    assert sizes == [1_000_004, 8]
    assert res.stats["sizes_rounded_to_splits"] == 2
    assert any("rounded to a multiple of 4 bytes" in n for n in res.notes)
