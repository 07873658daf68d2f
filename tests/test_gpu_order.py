"""doctor --fix --gpu-order: the GPU-faithful dependencies written into a trace set."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.doctor.gpu_order import add_gpu_order
from libra_astra.traces import chakra_io as cio

REAL = Path(__file__).parent / "fixtures" / "real"
DLRM = REAL / "param_dlrm8" / "param_dlrm8"
BIN = os.environ.get("ASTRA_SIM_BIN", "")


def _gpu(node, stream):
    node.attr.append(cio.make_attr("stream", "int64_val", stream))
    return node


def _rank():
    return [cio.comp_node(0, "aten::mm", 5, is_cpu_op=True),
            _gpu(cio.comp_node(1, "gemm", 3, ctrl_deps=[0]), 7),
            cio.comp_node(2, "nccl:all_reduce", 2, ctrl_deps=[0], is_cpu_op=True),
            _gpu(cio.coll_node(3, "ncclKernel_AllReduce", "ALL_REDUCE", 4096, ctrl_deps=[2]), 20),
            cio.comp_node(4, "aten::relu", 2, ctrl_deps=[2], is_cpu_op=True),
            _gpu(cio.comp_node(5, "relu_kernel", 1, ctrl_deps=[4]), 7),
            # a CPU tensor's value: launches nothing, waits for nothing
            cio.comp_node(6, "aten::item", 1, ctrl_deps=[4], is_cpu_op=True),
            # a GPU tensor's value: launches the device-to-host copy, so it synchronizes
            cio.comp_node(7, "aten::_local_scalar_dense", 4, ctrl_deps=[6], is_cpu_op=True),
            _gpu(cio.comp_node(8, "Memcpy DtoH (Device -> Pageable)", 1, ctrl_deps=[7]), 7),
            cio.comp_node(9, "aten::add", 1, ctrl_deps=[7], is_cpu_op=True),
            cio.comp_node(10, "cudaDeviceSynchronize", 3, ctrl_deps=[9], is_cpu_op=True)]


def test_each_rule_adds_its_dependency():
    nodes, counts = _rank(), Counter()
    add_gpu_order(nodes, counts)
    deps = {n.id: sorted(n.ctrl_deps) for n in nodes}
    assert deps[3] == [1, 2]          # the collective after the compute launched before it
    assert deps[5] == [1, 3, 4]       # stream order, and after the collective
    assert deps[6] == [4]             # a CPU tensor's item: no wait
    assert deps[7] == [5, 6]          # the value copy that launched a copy waits for the GPU before it
    assert deps[8] == [5, 7]          # stream order
    assert deps[9] == [7] and deps[10] == [8, 9]   # a synchronization waits, launched or not
    assert deps[0] == [] and deps[2] == [0]
    assert counts == Counter({"GPU nodes wait for the previous node of their stream": 2,
                              "collectives wait for the GPU compute launched before them": 1,
                              "GPU compute waits for the collectives launched before it on other streams": 1,
                              "CPU operators that synchronize wait for the GPU node launched before them": 2})


def test_a_value_copy_launched_through_its_data_dependency_waits():
    nodes = [cio.comp_node(0, "aten::mm", 5, is_cpu_op=True),
             _gpu(cio.comp_node(1, "gemm", 3, ctrl_deps=[0]), 7),
             cio.comp_node(2, "aten::item", 1, ctrl_deps=[0], is_cpu_op=True),
             _gpu(cio.comp_node(3, "Memcpy DtoH (Device -> Pageable)", 1), 7)]
    nodes[3].data_deps.append(2)
    add_gpu_order(nodes, Counter())
    assert list(nodes[2].ctrl_deps) == [0, 1]


def test_adding_twice_adds_nothing_more():
    nodes, counts = _rank(), Counter()
    add_gpu_order(nodes, counts)
    again = Counter()
    add_gpu_order(nodes, again)
    assert not again


def test_gpu_order_needs_fix():
    res = CliRunner().invoke(main, ["doctor", str(DLRM), "--gpu-order"])
    assert res.exit_code == 2 and "--fix --out" in res.output


def test_dlrm_copy(tmp_path):
    res = CliRunner().invoke(main, ["doctor", str(DLRM), "--fix", "--gpu-order", "--out", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    assert "GPU nodes wait for the previous node of their stream" in res.output
    # 8 collectives per rank, each after the compute before it and before the compute after it
    assert "collectives wait for the GPU compute launched before them: 64" in res.output
    # its 57 aten::item per rank read CPU tensors (no CUDA call in the profile, no copy in the ET)
    assert "CPU operators that synchronize" not in res.output
    _, nodes = cio.read_et(tmp_path / "d.0.et")
    ids = {n.id for n in nodes}
    assert all(d in ids and d < n.id for n in nodes for d in n.ctrl_deps)   # acyclic, in launch order


@pytest.mark.astra
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run this")
def test_astra_sim_runs_the_copy_as_predicted(tmp_path):
    from libra_astra.astra.predict_inputs import SimInputs, predict_inputs

    assert CliRunner().invoke(main, ["doctor", str(DLRM), "--fix", "--gpu-order", "--out", str(tmp_path / "d")]).exit_code == 0
    from libra_astra.measure.calibrate import calibrate
    from libra_astra.measure.calibrate_files import write_calibration
    from libra_astra.measure.measurement import measure
    from libra_astra.model.network import load_network

    # the network and system.json calibrated from the same run's Kineto traces
    net = load_network(REAL / "ring8.yml")
    write_calibration(calibrate(measure([str(DLRM)], net), net), tmp_path)
    proc = subprocess.run([BIN, "--workload-configuration=d", "--system-configuration=system.json",
                           "--network-configuration=astra-network.yml", "--remote-memory-configuration=memory.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {int(r): int(t) for r, t in re.findall(r"sys\[(\d+)\] finished, (\d+) cycles", proc.stdout)}
    pred = predict_inputs(SimInputs(str(tmp_path / "d"), str(tmp_path / "astra-network.yml"),
                                    str(tmp_path / "system.json")))
    assert [got[r] for r in range(8)] == [r.finished_ns for r in pred.prediction.ranks]
