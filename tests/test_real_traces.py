"""The committed real PyTorch -> Chakra converter outputs (tests/fixtures/real), read unmodified."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.model.network import load_network
from libra_astra.traces import chakra_io as cio
from libra_astra.traces.cpu_collectives import count_in_bytes, describe, typed_rank
from libra_astra.traces.files import read_file_bytes
from libra_astra.timing.model import simulator_model
from libra_astra.timing.predict import predict

REAL = Path(__file__).parent / "fixtures" / "real"
SETS = {"ddp4": "ring4", "tpdp4": "ring2x2", "tpdp8": "ring2x4", "pipeline4": "ring4", "param_dlrm8": "ring8",
        "astra_megatron8": "ring8"}


def prefix(name: str) -> Path:
    return REAL / name / name


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_set_reads_unmodified(name):
    net = load_network(REAL / f"{SETS[name]}.yml")
    d, s = demand_from_traces(prefix(name), net)
    # the converter keeps a dependency on its removed root node 0 in every file
    assert s.missing_deps >= net.npus_count and all(dep == 0 for _, _, dep in s.missing_dep_examples)
    assert s.cpu_time_ns[1] > 0


def test_dlrm_collectives_and_cpu_time():
    net = load_network(REAL / "ring8.yml")
    d, s = demand_from_traces(prefix("param_dlrm8"), net)
    assert [len(rc.collectives) for rc in d.rank_classes] == [8] * 8
    assert sorted(c.type for c in d.rank_classes[0].collectives) == ["ALL_REDUCE"] * 3 + ["ALL_TO_ALL"] * 5
    assert s.untyped_cpu_collectives == 0  # its c10d:: ops launched the NCCL kernels the converter typed
    # the last all-reduce has another node id on every rank (1600, 1601, ... 1606): matched by order
    ids = {max(n.id for n in cio.read_et(REAL / "param_dlrm8" / f"param_dlrm8.{r}.et.gz")[1]
               if n.type == cio.pb.COMM_COLL_NODE) for r in range(8)}
    assert len(ids) > 1 and not s.notes[0].startswith("rank")
    # the CPU ops dominate: ASTRA-sim ran this set for 23,175,293 ns at 100 GB/s (recorded run)
    p = predict(d, (100.0,), net, simulator_model(1, 1e9))
    assert p.time_ns == pytest.approx(23_175_293, rel=1e-3)


def test_gloo_ops_are_counted_by_default_and_typed_on_request():
    net = load_network(REAL / "ring2x2.yml")
    d, s = demand_from_traces(prefix("tpdp4"), net)
    assert s.untyped_cpu_collectives == 16 and not any(rc.collectives for rc in d.rank_classes)
    assert count_in_bytes(read_file_bytes(REAL / "tpdp4" / "tpdp4.0.et.gz")) == (4, 4)
    d, s = demand_from_traces(prefix("tpdp4"), net, type_cpu_collectives=True)
    kinds = [(c.type, c.size_bytes) for c in d.rank_classes[0].collectives]
    # 8x32 fp32 all-reduce, 256-float shard all-gather, 2x512 reduce-scatter input, 4x128 all-to-all
    assert kinds == [("ALL_REDUCE", 1024.0), ("ALL_GATHER", 1024.0), ("REDUCE_SCATTER", 4096.0),
                     ("ALL_TO_ALL", 2048.0)]
    assert s.node_counts["INVALID"] == 16   # each gloo: op replaced by its typed c10d:: op, not counted twice


def test_gloo_sends_get_their_peer_from_the_op():
    meta, nodes = cio.read_et(REAL / "pipeline4" / "pipeline4.0.et.gz")
    send = next(n for n in nodes if n.name == "c10d::send")
    c = describe(send)
    assert (c.kind, c.size_bytes, c.peer) == ("SEND", 8 * 64 * 4, 2)
    assert typed_rank(nodes, 0, 4, "pipeline4.0") == 6
    typed = next(n for n in nodes if n.id == send.id)
    assert typed.type == cio.pb.COMM_SEND_NODE and cio.node_attrs(typed)["comm_dst"] == 2
    assert cio.node_attrs(typed)["is_cpu_op"] is False


@pytest.mark.astra
@pytest.mark.skipif(not os.environ.get("ASTRA_SIM_BIN"), reason="needs ASTRA_SIM_BIN")
@pytest.mark.parametrize("name,typed", [("param_dlrm8", False), ("tpdp4", True), ("pipeline4", True)])
def test_loop_on_real_traces_matches_the_simulator(tmp_path, name, typed):
    from libra_astra.demand.workload import load_workloads
    from libra_astra.loop import run_loop
    from libra_astra.model.cost import load_cost
    from libra_astra.optimize.optimizer import Constraints
    net = load_network(REAL / f"{SETS[name]}.yml")
    wl = load_workloads((str(prefix(name)),), (), (), net, None, type_cpu_collectives=typed)
    cost = load_cost(Path(__file__).parents[1] / "network_configs" / "cost.yml")
    res = run_loop(wl, net, cost, out_dir=tmp_path / "loop", constraints=Constraints(total_bw_gbps=100.0),
                   binary=os.environ["ASTRA_SIM_BIN"], splits=1)
    assert len(res.rows) == 3
    for r in res.rows:
        assert abs(r.error) < 0.01, (r.name, r.predicted_ns, r.simulated_ns)


def test_peers_of_converter_sends_come_from_their_launcher_or_a_two_rank_group():
    launch = cio.comp_node(5, "c10d::send", 3, is_cpu_op=True)
    launch.inputs.values = "[[[1, 2, 0, 16, 4, 'cpu']], '<Object>', 3, 7]"
    send = cio.pb.Node(id=6, name="ncclDevKernel_SendRecv", type=cio.pb.COMM_SEND_NODE, data_deps=[5])
    send.attr.add(name="comm_size", int64_val=64)
    recv = cio.pb.Node(id=7, name="ncclDevKernel_SendRecv", type=cio.pb.COMM_RECV_NODE)
    recv.attr.add(name="comm_size", int64_val=64)
    recv.attr.add(name="pg_name", string_val="4")
    lost = cio.pb.Node(id=8, name="ncclDevKernel_SendRecv", type=cio.pb.COMM_SEND_NODE)
    from libra_astra.traces.cpu_collectives import infer_peers
    assert infer_peers([launch, send, recv, lost], 1, {"4": (1, 2)}) == (2, 1)
    assert {k: cio.node_attrs(send)[k] for k in ("comm_src", "comm_dst", "comm_tag")} == \
        {"comm_src": 1, "comm_dst": 3, "comm_tag": 7}
    assert (cio.node_attrs(recv)["comm_src"], cio.node_attrs(recv)["comm_dst"]) == (2, 1)
    assert "comm_dst" not in cio.node_attrs(lost)


def test_optimize_a_set_whose_time_is_zero_reports_no_speedup(tmp_path):
    # ddp4 without typing: no network demand and no GPU compute, so the no-overlap time is 0
    from click.testing import CliRunner
    from libra_astra.cli import main
    args = [str(prefix("ddp4")), "-n", str(REAL / "ring4.yml"), "--cost",
            str(Path(__file__).parents[1] / "network_configs" / "cost.yml"), "--total-bw", "100",
            "--model", "libra", "--no-overlap", "-o", str(tmp_path / "d.json")]
    res = CliRunner().invoke(main, ["optimize"] + args)
    assert res.exit_code == 0, res.output
    assert "time      0.0 ns" in res.output and "speedup x1.0000" in res.output  # 0 against 0
    gap = float(res.output.split("relative duality gap ")[1].split(";")[0])
    assert gap < 1e-6   # measured on the problem's own scale, not against the optimum's 0
    assert "warning: ddp4: 8 c10d:: and 8 gloo: CPU op(s) are collectives" in res.output
    res = CliRunner().invoke(main, ["show", str(tmp_path / "d.json")])
    assert res.exit_code == 0 and "speedup x1.0000" in res.output, res.output


@pytest.mark.parametrize("network", ["ring4", "ring2x2"])
def test_emit_of_typed_gloo_set_is_what_the_simulator_runs(tmp_path, network):
    # METADATA groups reach the emitted run; no dependency on an absent node, no METADATA or
    # INVALID node, every collective a COMM node with is_cpu_op false, no gloo: op left
    import json
    from libra_astra.astra.emit import emit
    from libra_astra.optimize.design import Design, WorkloadRef
    net = load_network(REAL / f"{network}.yml")
    design = Design("d", net, (50.0,) * net.num_dims,
                    workloads=(WorkloadRef("job", traces=str(prefix("tpdp4")), type_cpu_collectives=True),))
    emit(design, tmp_path / "run")
    groups = json.loads((tmp_path / "run" / "comm_groups.json").read_text()) \
        if (tmp_path / "run" / "comm_groups.json").exists() else {}
    for r in range(4):
        _, nodes = cio.read_et(next((tmp_path / "run" / "workload").glob(f"*.{r}.et")))
        ids = {n.id for n in nodes}
        assert all(d in ids for n in nodes for d in list(n.data_deps) + list(n.ctrl_deps))
        assert not any(n.type in (cio.pb.METADATA_NODE, cio.pb.INVALID_NODE) for n in nodes)
        assert not any(n.name.startswith("gloo:") for n in nodes)
        colls = [n for n in nodes if n.type == cio.pb.COMM_COLL_NODE]
        assert len(colls) == 4 and all(cio.node_attrs(n)["is_cpu_op"] is False for n in colls)
        for n in colls:
            pg = cio.node_attrs(n).get("pg_name")
            assert pg is None or (pg in groups and r in groups[pg])
