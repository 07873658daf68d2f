"""Traces -> per-dimension demand: hand-worked small trace sets, Chakra's Text converter, bad input."""

import gzip
import json
import subprocess
import sys

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from click.testing import CliRunner

from libra_astra.traces import chakra_io as cio
from libra_astra.cli.demand import demand_command
from libra_astra.demand.summary import summary_to_dict
from libra_astra.demand.types import Dag, demand_from_dict, demand_to_dict, load_demand
from libra_astra.errors import LibraError
from libra_astra.demand.workload import load_workloads
from libra_astra.model.network import Dimension, Network, dump_network, network_from_dict
from libra_astra.demand.from_traces import demand_from_traces

# Ring 4 (dim 0) x Switch 2 (dim 1): rank r sits at (r % 4, r // 4)
NET = Network("n8", (Dimension("row", "Ring", 4, 100.0), Dimension("col", "Switch", 2, 200.0)))
GROUPS = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}


def write_set(path, prefix, per_rank, gz=False):
    for r, nodes in enumerate(per_rank):
        data = cio.encode_et(nodes)
        if gz:
            (path / f"{prefix}.{r}.et.gz").write_bytes(gzip.compress(data))
        else:
            (path / f"{prefix}.{r}.et").write_bytes(data)
    return path / prefix


def rank_nodes(r, pg=None, metadata=None):
    """COMP 10 us -> AR 1 KiB on the rank's row group -> AG 256 B over dim 1 -> send/recv 4 KiB -> COMP 20 us."""
    y = r // 4
    nodes = []
    if metadata is not None:
        m = pb.Node(id=100, name="## process_group:init ##", type=pb.METADATA_NODE)
        m.inputs.values = str([json.dumps(metadata)])
        nodes.append(m)
    nodes += [
        cio.comp_node(1, "fwd", 10, ctrl_deps=[100] if metadata is not None else []),
        cio.coll_node(2, "tp_ar", "ALL_REDUCE", 1024, pg_name=pg or str(y + 1), data_deps=[1]),
        cio.coll_node(3, "ag", "ALL_GATHER", 256, involved_dim=[False, True], data_deps=[2]),
        (cio.send_node(4, "pp", 4096, r, r + 4, 0, data_deps=[3]) if y == 0
         else cio.recv_node(4, "pp", 4096, r - 4, r, 0, data_deps=[3])),
        cio.comp_node(5, "bwd", 20, data_deps=[4]),
    ]
    return nodes


def test_hand_worked_demand(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    d, s = demand_from_traces(prefix, NET, comm_groups=GROUPS)
    assert d.npus_per_dim == (4, 2)
    assert [rc.ranks for rc in d.rank_classes] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    senders, receivers = d.rank_classes
    ar, ag, p2p = senders.collectives
    # all-reduce of 1024 B on a row of the Ring 4: 2 * 1024 * 3/4 on dim 0, 6 ring steps of 1 hop
    assert (ar.type, ar.participants, ar.traffic_bytes, ar.hops, ar.algorithm, ar.group) == \
        ("ALL_REDUCE", (4, 1), (1536.0, 0.0), (6, 0), "hierarchical", "1")
    # all-ranks all-gather with involved_dim [F, T]: shard * (2 - 1) on dim 1, one step of 2 switch hops
    assert (ag.participants, ag.traffic_bytes, ag.hops, ag.group) == ((1, 2), (0.0, 256.0), (0, 2), "all")
    # send r -> r + 4 crosses dim 1 (the switch: 2 hops)
    assert (p2p.type, p2p.traffic_bytes, p2p.hops, p2p.algorithm) == ("P2P", (0.0, 4096.0), (0, 2), "p2p")
    assert receivers.collectives[0].group == "2" and len(receivers.collectives) == 2
    assert senders.compute_time_ns == receivers.compute_time_ns == 30000.0
    # the all-gather over dim 1 pairs each sender with a receiver: it starts when both classes are ready
    assert senders.dag == Dag((("comp", 10000.0), ("coll", 0.0), ("coll", 1.0), ("coll", 2.0), ("comp", 20000.0)),
                              ((0, 1), (1, 2), (2, 3), (3, 4)), links=(), syncs=((2, 1, 2),))
    # the receive stays in the graph with 0 ns on no slot, waiting for the senders' send
    assert receivers.dag.nodes[3] == ("free", 0.0)
    assert (receivers.dag.links, receivers.dag.syncs) == (((3, 0, 3),), ((2, 0, 2),))
    # each receiver names its sender (r - 4): what a class split by tree places needs
    assert receivers.dag.senders == ((0, 1, 2, 3),) and senders.dag.senders == ()
    assert demand_from_dict(demand_to_dict(d)) == d
    bad = demand_to_dict(d)
    bad["rank_classes"][1]["dag"]["senders"] = [[0, 1, 2]]
    with pytest.raises(LibraError, match=r"rank_classes\[1\]: dag senders must list one rank below 8 per rank of "
                                         r"the class \(4\); fix or remove it"):
        demand_from_dict(bad, "d.json")
    # summary: mean bytes per NPU
    assert s.bytes_by_type == {"ALL_GATHER": (0.0, 256.0), "ALL_REDUCE": (1536.0, 0.0), "P2P": (0.0, 2048.0)}
    assert s.skipped == {"COMM_RECV (charged on the send side)": 4}
    assert s.node_counts == {"COMP": 16, "COMM_SEND": 4, "COMM_RECV": 4, "COMM_COLL": 16}
    assert [(g.key, g.source, g.size, g.participants, g.collectives) for g in s.groups] == [
        ("", "all ranks", 8, (1, 2), 8), ("1", "comm groups", 4, (4, 1), 4), ("2", "comm groups", 4, (4, 1), 4)]
    assert s.files_decoded == 8 and s.programs == 8


def test_demand_json_round_trip(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    d, _ = demand_from_traces(prefix, NET, comm_groups=GROUPS)
    data = demand_to_dict(d)
    assert data["dim_names"] == ["row", "col"] and data["version"] == 1
    back = demand_from_dict(json.loads(json.dumps(data)))
    assert back == d and back.dim_names == ("row", "col")


def test_demand_file_without_dimension_names_still_reads(tmp_path):
    """Files written before the names were kept: no names, dimensions labelled by index."""
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    d, _ = demand_from_traces(prefix, NET, comm_groups=GROUPS)
    data = demand_to_dict(d)
    del data["dim_names"]
    old = demand_from_dict(data)
    assert old.dim_names == () and old.dim_labels == ("dim0", "dim1")
    assert old.rank_classes == d.rank_classes and "dim_names" not in demand_to_dict(old)
    old.check_network(NET)            # nothing to compare the network's names with: accepted
    # an ASTRA-sim network file names no dimension: its placeholders are not written as names
    astra = network_from_dict({"topology": ["Ring", "Switch"], "npus_count": [4, 2], "latency": [100, 200]})
    unnamed, _ = demand_from_traces(prefix, astra, comm_groups=GROUPS)
    assert unnamed.dim_names == () and "dim_names" not in demand_to_dict(unnamed)
    d.check_network(astra)            # and such a network takes a named demand of its shape


def test_dimension_names_checked_against_the_network(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    d, _ = demand_from_traces(prefix, NET, comm_groups=GROUPS)
    path = tmp_path / "d.json"
    path.write_text(json.dumps(demand_to_dict(d)))
    renamed = Network("n8b", (Dimension("ring", "Ring", 4, 100.0), Dimension("switch", "Switch", 2, 200.0)))
    with pytest.raises(LibraError) as e:
        load_workloads((), (str(path),), (), renamed)
    assert str(e.value) == (f"{path}: \"dim_names\" ['row', 'col'] differ from the dimensions ['ring', 'switch'] "
                            "of network 'n8b'; rebuild the demand for this network, or, if only the names "
                            "changed, edit \"dim_names\" to match")
    # same shape, names swapped: the demand's dimensions are most likely the other way round
    swapped = Network("n8c", (Dimension("col", "Ring", 4, 100.0), Dimension("row", "Switch", 2, 200.0)))
    with pytest.raises(LibraError, match=r"of network 'n8c' \(the same names in another order\); rebuild"):
        load_workloads((), (str(path),), (), swapped)
    assert load_workloads((), (str(path),), (), NET)[0].demand == d


@pytest.mark.parametrize("names, shown", [("row", "'row'"), (["row"], "['row']"), (["row", "row"], "['row', 'row']"),
                                          (["row", ""], "['row', '']"), (["row", 2], "['row', 2]")])
def test_bad_dimension_names_refused(tmp_path, names, shown):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    d, _ = demand_from_traces(prefix, NET, comm_groups=GROUPS)
    path = tmp_path / "d.json"
    path.write_text(json.dumps({**demand_to_dict(d), "dim_names": names}))
    with pytest.raises(LibraError) as e:
        load_demand(path)
    assert str(e.value) == (f"{path}: dim_names must be a list of 2 distinct non-empty names (one per dimension, "
                            f"as in npus_per_dim), got {shown}; fix it or remove the key")


def test_groups_from_metadata_and_file_priority(tmp_path):
    meta = [{"pg_name": "0", "ranks": []}, {"pg_name": "1", "ranks": [0, 1, 2, 3]},
            {"pg_name": "2", "ranks": [4, 5, 6, 7]}]
    prefix = write_set(tmp_path, "m", [rank_nodes(r, metadata=meta) for r in range(8)], gz=True)
    d, s = demand_from_traces(prefix, NET)
    assert d.rank_classes[0].collectives[0].participants == (4, 1)
    assert s.groups[1].source == "trace METADATA"
    assert s.skipped == {"METADATA": 8, "COMM_RECV (charged on the send side)": 4}
    # a comm-group file overrides METADATA: here METADATA's group 2 is wrong, the file's is right
    bad_meta = [{"pg_name": "1", "ranks": [0, 1, 2, 3]}, {"pg_name": "2", "ranks": [4, 5, 6, 9]}]
    prefix2 = write_set(tmp_path, "b", [rank_nodes(r, metadata=bad_meta) for r in range(8)])
    g = tmp_path / "g.json"
    g.write_text(json.dumps({"2": [4, 5, 6, 7]}))
    d2, s2 = demand_from_traces(prefix2, NET, comm_groups=g)
    assert [(x.key, x.source) for x in s2.groups] == [("", "all ranks"), ("1", "trace METADATA"),
                                                      ("2", "comm-groups file")]
    assert d2.rank_classes[1].collectives[0].participants == (4, 1)


def test_irregular_group_is_a_flat_ring(tmp_path):
    per_rank = []
    for r in range(8):
        nodes = [cio.comp_node(1, "c", 1)]
        if r in (0, 1, 5):
            nodes.append(cio.coll_node(2, "ar", "ALL_REDUCE", 300, pg_name="3", data_deps=[1]))
        per_rank.append(nodes)
    prefix = write_set(tmp_path, "f", per_rank)
    d, s = demand_from_traces(prefix, NET, comm_groups={"3": [0, 1, 5]})
    c = d.rank_classes[0].collectives[0]
    # ring 0 -> 1 (dim 0) -> 5 (dim 1) -> 0 (dim 0): 2 * 300 * 2/3 on both; 4 steps, slowest hop the switch (2 x 200 ns)
    assert (c.algorithm, c.traffic_bytes, c.hops, c.participants) == ("flat_ring", (400.0, 400.0), (0, 8), (2, 2))
    assert [rc.ranks for rc in d.rank_classes] == [(0, 1, 5), (2, 3, 4, 6, 7)]
    assert d.notes == ("group 3 (members 0, 1, 5) is not a sub-grid of the network: modelled as ASTRA-sim runs it, "
                       "one flat ring over the sorted members, charged on dimension(s) [0, 1]",)


def test_involved_dim_absent_means_first_four_dims(tmp_path):
    prefix = write_set(tmp_path, "a", [[cio.coll_node(1, "ar", "ALL_REDUCE", 800)]] * 8)
    d, _ = demand_from_traces(prefix, NET)
    c = d.rank_classes[0].collectives[0]
    # hierarchical: dim 0 2 * 800 * 3/4 = 1200, carry 200; dim 1 2 * 200 * 1/2 = 200
    assert c.participants == (4, 2) and c.traffic_bytes == (1200.0, 200.0)
    assert d.rank_classes[0].num_ranks == 8


def test_roofline_compute(tmp_path):
    nodes = [cio.comp_node(1, "compute_bound", 7, num_ops=2 * 10**9, tensor_size=10**6),
             cio.comp_node(2, "memory_bound", 7, num_ops=10**6, tensor_size=10**6, data_deps=[1]),
             cio.comp_node(3, "no_tensor_size", 7, num_ops=10**6, data_deps=[2])]
    prefix = write_set(tmp_path, "r", [nodes] * 8)
    d, s = demand_from_traces(prefix, NET, peak_tflops=100.0, mem_bw_gbps=1000.0)
    # min(1e5 ops/ns, 1000 B/ns * 2000 ops/B) -> 2e9 / 1e5 = 20000 ns; OI 1 -> 1e6 / 1000 = 1000 ns;
    # no tensor_size -> 0 ns (ASTRA-sim skips it)
    assert [v for _, v in d.rank_classes[0].dag.nodes] == [20000.0, 1000.0, 0.0]
    assert d.rank_classes[0].compute_time_ns == 21000.0
    assert s.skipped == {"COMP without num_ops or tensor_size (0 ns under roofline, as in ASTRA-sim)": 8}
    d2, _ = demand_from_traces(prefix, NET)
    assert d2.rank_classes[0].compute_time_ns == 21000.0  # 3 x 7 us from duration_micros


def run_text_converter(tmp_path, text, npus, passes=1):
    src = tmp_path / "model.txt"
    src.write_text(text)
    subprocess.run([sys.executable, "-m", "chakra.src.converter.converter", "--log-filename",
                    str(tmp_path / "conv.log"), "Text", "--input", str(src), "--output", str(tmp_path / "text"),
                    "--num-npus", str(npus), "--num-passes", str(passes)],
                   check=True, cwd=tmp_path, capture_output=True)
    return tmp_path / "text"


def test_chakra_text_converter_data_parallel(tmp_path):
    prefix = run_text_converter(tmp_path, "DATA\n3\n"
                                "conv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1000 10\n"
                                "conv2 -1 7 NONE 0 7 NONE 0 7 ALLREDUCE 2000 10\n"
                                "fc -1 3 NONE 0 3 NONE 0 3 ALLREDUCE 4096 10\n", npus=4, passes=2)
    net = Network("r4", (Dimension("ring", "Ring", 4, 0.0),))
    d, s = demand_from_traces(prefix, net)
    # the converter numbers nodes across ranks, so no two files are alike, but their programs are
    assert s.files_decoded == 4 and len(d.rank_classes) == 1 and d.rank_classes[0].num_ranks == 4
    rc = d.rank_classes[0]
    # per pass: fwd 5+7+3, weight grad 5+7+3, input grad 7+3 (none for the first layer); cycles read as us
    assert rc.compute_time_ns == 2 * 40 * 1000.0
    # backward visits layers last to first; no involved_dim -> all of the ring; 2 * S * 3/4 each
    assert [(c.type, c.size_bytes, c.traffic_bytes) for c in rc.collectives] == \
        [("ALL_REDUCE", float(sz), (1.5 * sz,)) for sz in (4096, 2000, 1000) * 2]
    assert len(rc.dag.nodes) == 22


def test_chakra_text_converter_none_is_a_zero_size_all_reduce(tmp_path):
    prefix = run_text_converter(tmp_path, "MODEL\n2\n"
                                "l1 -1 4 ALLGATHER 64 4 NONE 0 4 NONE 0 10\n"
                                "l2 -1 4 ALLGATHER 128 4 ALLREDUCE 32 4 NONE 0 10\n", npus=4)
    net = Network("r4", (Dimension("ring", "Ring", 4, 0.0),))
    d, s = demand_from_traces(prefix, net)
    colls = d.rank_classes[0].collectives
    # forward all-gathers, then the input-gradient collective of l2 only (none for the first layer)
    assert [(c.type, c.size_bytes) for c in colls] == [("ALL_GATHER", 64.0), ("ALL_GATHER", 128.0),
                                                       ("ALL_REDUCE", 32.0)]
    d2, s2 = demand_from_traces(run_text_converter(tmp_path, "MODEL\n2\n"
                                                   "l1 -1 4 NONE 0 4 NONE 0 4 NONE 0 10\n"
                                                   "l2 -1 4 NONE 0 4 NONE 0 4 NONE 0 10\n", npus=4), net)
    assert [(c.type, c.size_bytes, c.traffic_bytes) for c in d2.rank_classes[0].collectives] == \
        [("ALL_REDUCE", 0.0, (0.0,))] * 3
    assert s2.notes == ("12 zero-size collective(s) (Chakra's Text converter writes NONE as a zero-size ALL_REDUCE): "
                        "kept, they cost latency only",)


# ---------------------------------------------------------------- bad input


def err(prefix, net=NET, **kw):
    with pytest.raises(LibraError) as e:
        demand_from_traces(prefix, net, **kw)
    return str(e.value)


def test_rank_count_differs_from_network(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(4)])
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}: found 4 rank files (ranks up to 3) but network 'n8' has 8 NPUs; use a network with 4 NPUs "
        "or traces for 8 ranks")


def test_missing_rank_file(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    (tmp_path / "t.6.et").unlink()
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}: 1 rank file(s) missing: {prefix}.6.et; every rank 0..7 needs a file")


def test_group_member_out_of_range(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    g = tmp_path / "g.json"
    g.write_text(json.dumps({"1": [0, 1, 2, 3], "2": [4, 5, 6, 8]}))
    assert err(prefix, comm_groups=g) == (
        f"{g}: group 2 has member(s) [8] outside 0..7 (the network has 8 NPUs); fix the group or use the "
        "matching network")


def test_metadata_group_out_of_range(tmp_path):
    meta = [{"pg_name": "1", "ranks": [0, 1, 2, 3]}, {"pg_name": "2", "ranks": [4, 5, 6, 9]}]
    prefix = write_set(tmp_path, "t", [rank_nodes(r, metadata=meta) for r in range(8)])
    assert err(prefix) == (
        f"{prefix}.0.et: METADATA process group 2 has rank(s) [9] outside 0..7 (the network has 8 NPUs); "
        "use the matching network")


def test_unknown_group(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    assert err(prefix, comm_groups={"1": [0, 1, 2, 3]}) == (
        f"{prefix}.4.et: node 2 uses communicator group '2', which is not defined (known groups: 1); give it in "
        "--comm-groups or fix pg_name")
    assert err(prefix) == (
        f"{prefix}.0.et: node 2 uses communicator group '1', which is not defined (no groups are defined); give "
        "it in --comm-groups or fix pg_name")


@pytest.mark.parametrize("kind", ["REDUCE", "GATHER", "SCATTER", "BROADCAST", "REDUCE_SCATTER_BLOCK", "BARRIER"])
def test_unsupported_collective(tmp_path, kind):
    nodes = [cio.comp_node(1, "c", 1), cio.coll_node(7, "x", kind, 64, data_deps=[1])]
    prefix = write_set(tmp_path, "u", [nodes] * 8)
    assert err(prefix) == (
        f"{prefix}.0.et: node 7 is a {kind} collective, which ASTRA-sim does not simulate; supported: "
        "ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER; rewrite it as one of these")


def test_dangling_dependency_is_satisfied_and_reported(tmp_path):
    # as PyTorch's Chakra converter writes every file: node 1 depends on node 0, which is not there
    nodes = [cio.comp_node(1, "root", 0, ctrl_deps=[0]), cio.comp_node(2, "c", 3, data_deps=[1, 7])]
    d, s = demand_from_traces(write_set(tmp_path, "t", [nodes] * 8), NET)
    rc = d.rank_classes[0]
    assert rc.dag.nodes == (("comp", 1.0), ("comp", 3000.0)) and rc.dag.deps == ((0, 1),)
    assert (s.missing_deps, s.missing_dep_examples[:3]) == (16, ((0, 1, 0), (0, 2, 7), (1, 1, 0)))
    assert s.notes[0].startswith("16 dependencies on nodes not in their file (rank 0 node 1 -> 0, rank 0 node 2 -> 7, ")
    assert summary_to_dict(s)["missing_deps"]["count"] == 16


def test_dependency_cycle(tmp_path):
    per_rank = [rank_nodes(r) for r in range(8)]
    per_rank[5][0].data_deps.append(5)
    prefix = write_set(tmp_path, "t", per_rank)
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}.5.et: dependency cycle through nodes 1 -> 2 -> 3 -> 4 -> 5 -> 1; remove one of these dependencies")


def test_truncated_file(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    p = tmp_path / "t.2.et"
    p.write_bytes(p.read_bytes()[:-1])
    assert err(prefix, comm_groups=GROUPS).startswith(f"{prefix}.2.et: truncated: the message at byte offset ")


def test_group_members_issue_different_collectives(tmp_path):
    per_rank = [rank_nodes(r) for r in range(8)]
    per_rank[2][1] = cio.coll_node(2, "tp_ar", "ALL_GATHER", 512, pg_name="1", data_deps=[1])
    prefix = write_set(tmp_path, "t", per_rank)
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}.2.et: rank 2 issues ALL_GATHER of 512 B as its collective #1 on group 1, but rank 0 issues "
        "ALL_REDUCE of 1024 B; members of a group must issue the same collectives in the same order")


def test_group_members_issue_different_counts(tmp_path):
    per_rank = [rank_nodes(r) for r in range(8)]
    per_rank[6].append(cio.coll_node(9, "extra", "ALL_REDUCE", 1024, pg_name="2", data_deps=[5]))
    prefix = write_set(tmp_path, "t", per_rank)
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}.6.et: rank 6 issues 2 collectives on group 2 but rank 4 issues 1; members of a group must "
        "issue the same collectives in the same order")


def test_all_ranks_collectives_must_agree(tmp_path):
    per_rank = [rank_nodes(r) for r in range(8)]
    per_rank[7][2] = cio.coll_node(3, "ag", "ALL_GATHER", 128, involved_dim=[False, True], data_deps=[2])
    prefix = write_set(tmp_path, "t", per_rank)
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}.7.et: rank 7 issues ALL_GATHER of 128 B as its collective #1 on all ranks over dimension(s) [1], "
        "but rank 3 issues ALL_GATHER of 256 B; members of a group must issue the same collectives in the same order")


def test_all_ranks_collectives_agree_per_sub_grid(tmp_path):
    # involved_dim [T, F]: each row of the Ring is its own communicator, so rows may differ
    per_rank = [[cio.coll_node(1, "ag", "ALL_GATHER", 256 * (1 + r // 4), involved_dim=[True, False])]
                for r in range(8)]
    d, s = demand_from_traces(write_set(tmp_path, "rows", per_rank), NET)
    assert [(rc.ranks, rc.collectives[0].traffic_bytes) for rc in d.rank_classes] == [
        ((0, 1, 2, 3), (768.0, 0.0)), ((4, 5, 6, 7), (1536.0, 0.0))]


def test_rank_outside_its_group(tmp_path):
    per_rank = [rank_nodes(r) for r in range(8)]
    per_rank[5] = rank_nodes(5, pg="1")
    prefix = write_set(tmp_path, "t", per_rank)
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}.5.et: node 2 of rank 5 runs a collective on group 1, whose members [0, 1, 2, 3] do not include "
        "rank 5; add the rank to the group or fix pg_name")


def test_bad_send(tmp_path):
    per_rank = [rank_nodes(r) for r in range(8)]
    per_rank[1][3] = cio.send_node(4, "pp", 64, 1, 1, 0, data_deps=[3])
    prefix = write_set(tmp_path, "t", per_rank)
    assert err(prefix, comm_groups=GROUPS) == (
        f"{prefix}.1.et: send node 4 has comm_dst 1, which is the sending rank itself; fix comm_dst")


def test_roofline_needs_both_values(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    assert err(prefix, peak_tflops=10.0) == (
        "roofline timing needs both peak_tflops and mem_bw_gbps (or neither, to use duration_micros)")


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli_set(tmp_path):
    prefix = write_set(tmp_path, "t", [rank_nodes(r) for r in range(8)])
    net = tmp_path / "net.yml"
    net.write_text(dump_network(NET))
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps(GROUPS))
    return prefix, net, groups


def test_cli_table_and_output(cli_set, tmp_path):
    prefix, net, groups = cli_set
    out = tmp_path / "d.json"
    args = [str(prefix), "--network", str(net), "--comm-groups", str(groups), "-o", str(out)]
    res = CliRunner().invoke(demand_command, args)
    assert res.exit_code == 0, res.output
    assert "  ALL_REDUCE      1.536 kB             0 B\n" in res.output
    assert "  P2P                  0 B        2.048 kB\n" in res.output
    row = "  1,2                           comm-groups file     4  [4, 1]        hierarchical            8\n"
    assert row in res.output
    assert "  0-3        4  30.000 us            3   1.536 kB   4.352 kB\n" in res.output
    assert "Rank classes (ranks with identical demand, computed once): 2" in res.output
    assert "Nodes without demand: COMM_RECV (charged on the send side) 4" in res.output
    assert load_demand(out).rank_classes[0].ranks == (0, 1, 2, 3)
    # never overwrite without --force
    res = CliRunner().invoke(demand_command, args)
    assert res.exit_code == 1
    assert res.output == f"Error: {out}: already exists; choose another path or pass --force to overwrite it\n"
    assert CliRunner().invoke(demand_command, args + ["--force"]).exit_code == 0


def test_cli_json_and_errors(cli_set):
    prefix, net, groups = cli_set
    args = [str(prefix), "--network", str(net), "--comm-groups", str(groups), "--json"]
    res = CliRunner().invoke(demand_command, args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["bytes_by_type"]["P2P"] == [0.0, 2048.0] and data["num_ranks"] == 8
    res = CliRunner().invoke(demand_command, [str(prefix), "--network", str(net)])
    assert res.exit_code == 1
    assert res.output.count("\n") == 1
    assert res.output.startswith(f"Error: {prefix}.0.et: node 2 uses communicator group")
    res = CliRunner().invoke(demand_command, [str(prefix), "--network", str(net), "--peak-tflops", "5"])
    assert res.output == "Error: give --peak-tflops and --mem-bw-gbps together (roofline timing), or neither\n"
    res = CliRunner().invoke(demand_command, ["--help"])
    assert "Example:" in res.output and "libra-astra demand" in res.output


def test_committed_gpt3_sample(tmp_path):
    """The shipped GPT-3 TP 8 x DP 8 traces: tensor-parallel groups on dim 0, data-parallel on dim 1."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "traces" / "gpt3_tp8_dp8"
    net = Network("8x8", (Dimension("tp", "Ring", 8, 0.0), Dimension("dp", "Switch", 8, 0.0)))
    d, s = demand_from_traces(root / "gpt3", net, comm_groups=root / "gpt3.groups.json")
    assert len(d.rank_classes) == 1 and d.rank_classes[0].num_ranks == 64
    parts = {c.participants for c in d.rank_classes[0].collectives}
    assert parts == {(8, 1), (1, 8)}
    assert {(g.size, g.participants) for g in s.groups} == {(8, (8, 1)), (8, (1, 8))}
    assert s.skipped == {}


def test_cpu_ops_are_timed_on_their_own_slot(tmp_path):
    cpu = cio.comp_node(1, "launch", 50, is_cpu_op=True)
    nodes = [cpu, cio.comp_node(2, "kernel", 7, data_deps=[1])]
    d, s = demand_from_traces(write_set(tmp_path, "c", [nodes] * 8), NET)
    rc = d.rank_classes[0]
    assert rc.compute_time_ns == 7000.0 and rc.dag.nodes == (("cpu", 50000.0), ("comp", 7000.0))
    assert s.skipped == {}
    assert s.cpu_time_ns == (50000.0, 50000.0)
    assert s.notes == ("8 CPU op(s) (0.400 ms over all ranks) timed from duration_micros on each rank's CPU-op "
                       "slot, as ASTRA-sim runs them: they count in the overlap model (--overlap), not in the "
                       "compute time",)


def test_identical_programs_are_analysed_once(tmp_path):
    # same program, node ids shifted per rank (as Chakra's Text converter writes them): one shape
    per_rank = [[cio.comp_node(100 * r + 1, "c", 3), cio.coll_node(100 * r + 2, "ar", "ALL_REDUCE", 64,
                                                                   data_deps=[100 * r + 1])] for r in range(8)]
    d, s = demand_from_traces(write_set(tmp_path, "s", per_rank), NET)
    assert (s.files_decoded, s.programs) == (8, 1)
    assert len(d.rank_classes) == 1 and d.rank_classes[0].ranks == tuple(range(8))


def pytorch_host_device_trace(rank, groups):
    """A minimal linked PyTorch host + device trace (the input of Chakra's PyTorch converter)."""
    def attrs(rf, op_schema=""):
        return [{"name": k, "type": "uint64", "value": v} for k, v in
                (("rf_id", rf), ("fw_parent", 0), ("seq_id", -1), ("scope", 0), ("tid", 1), ("fw_tid", 0))] + \
               [{"name": "op_schema", "type": "string", "value": op_schema}]

    def io(values=(), shapes=(), types=()):
        return {"values": list(values), "shapes": list(shapes), "types": list(types)}
    pg = next(name for name, members in groups if rank in members)
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [], "group_size": 4,
            "group_count": 3}] + [{"pg_name": name, "pg_desc": "undefined", "backend_config": "cuda:nccl",
                                   "ranks": members, "group_size": 2, "group_count": 3} for name, members in groups]
    nodes = [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0, "inputs": io(),
         "outputs": io(), "attrs": attrs(1)},
        {"id": 2, "name": "## process_group:init ##", "ctrl_deps": 1, "inputs": io([json.dumps(pgs)], [[]], ["String"]),
         "outputs": io(), "attrs": attrs(2), "ts": 10},
        {"id": 3, "name": "aten::mm", "ctrl_deps": 1, "inputs": io(), "outputs": io(),
         "attrs": attrs(3, "aten::mm(Tensor self, Tensor mat2) -> Tensor"), "exclusive_dur": 5, "ts": 20},
        {"id": 4, "name": "ampere_sgemm_128x64_nn", "ctrl_deps": 3, "inputs": io(), "outputs": io(), "attrs": attrs(4),
         "cat": "kernel", "exclusive_dur": 100, "ts": 30, "stream": 7},
        {"id": 5, "name": "record_param_comms", "ctrl_deps": 1, "inputs": io(), "outputs": io(),
         "attrs": attrs(5, "c10d::allreduce_"), "exclusive_dur": 3, "ts": 140},
        {"id": 6, "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
         "ctrl_deps": 5, "inputs": io([[1, 2, 0, 262144, 4, "cuda:0"]], [[262144]], ["Tensor(float)"]),
         "outputs": io(), "attrs": attrs(6), "cat": "kernel", "exclusive_dur": 50, "ts": 150, "stream": 20,
         "pg_name": pg},
    ]
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "t", "start_ts": 0, "finish_ts": 1000, "nodes": nodes}


def test_chakra_pytorch_converter_process_groups(tmp_path):
    from chakra.src.converter.pytorch_converter import PyTorchConverter
    groups = [("1", [0, 1]), ("2", [2, 3])]
    for r in range(4):
        src = tmp_path / f"host_device.{r}.json"
        src.write_text(json.dumps(pytorch_host_device_trace(r, groups)))
        PyTorchConverter().convert(str(src), str(tmp_path / f"pt.{r}.et"), False)
    net = Network("2x2", (Dimension("a", "Ring", 2, 0.0), Dimension("b", "Switch", 2, 0.0)))
    d, s = demand_from_traces(tmp_path / "pt", net)
    assert [rc.ranks for rc in d.rank_classes] == [(0, 1, 2, 3)]
    rc = d.rank_classes[0]
    # the NCCL all-reduce of 262144 float32 on a group of two ring neighbours: 2 * 1 MiB * 1/2 on dim 0
    (c,) = rc.collectives
    assert (c.type, c.size_bytes, c.participants, c.traffic_bytes, c.group) == \
        ("ALL_REDUCE", 1048576.0, (2, 1), (1048576.0, 0.0), "1,2")
    assert rc.compute_time_ns == 100000.0  # the GPU kernel; CPU ops run on their own slot
    assert [(g.key, g.source, g.size) for g in s.groups] == [("1", "trace METADATA", 2), ("2", "trace METADATA", 2)]
    assert s.skipped == {"METADATA": 4}


def test_single_rank_trace_gets_a_message_without_contradiction(tmp_path):
    prefix = write_set(tmp_path, "one", [[cio.comp_node(1, "c", 3)]])
    assert err(prefix) == (
        f"{prefix}: found 1 rank file but network {NET.name!r} has 8 NPUs; a single-rank trace has no network "
        "traffic to size (every network dimension has at least 2 NPUs): record the job on as many ranks as the "
        "network has NPUs (8)")
