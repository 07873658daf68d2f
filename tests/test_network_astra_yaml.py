"""ASTRA-sim's own analytical network YAML as --network: read as the simulator reads it, refused
with one line naming the key when malformed, and equal to our network file of the same machine."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.astra.emit import network_yaml
from libra_astra.astra.logical import plan_for_groups
from libra_astra.cli import main
from libra_astra.errors import LibraError
from cli_run import run
from libra_astra.model.network import default_cost_classes, load_network, with_cost_classes

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "network_configs"
SAMPLE = ROOT / "traces" / "gpt3_tp8_dp8" / "gpt3"

# The layout of ASTRA-sim's examples/network/analytical/*.yml; the bandwidth is what we optimize.
THREE_D = """topology: [ Ring, FullyConnected, Switch ]
npus_count: [ 16, 8, 32 ]
bandwidth: [ 100.0, 50.0, 25.0 ]  # GB/s
latency: [ 500.0, 400.0, 700.0 ]  # ns
"""


def write(tmp_path, text, name="net.yml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_astra_sim_network_file_reads_as_its_dimensions(tmp_path):
    net = load_network(write(tmp_path, THREE_D, "paper.yml"))
    assert net.name == "paper"
    assert net.dim_names == ("dim0", "dim1", "dim2")
    assert [d.topology for d in net.dims] == ["Ring", "FullyConnected", "Switch"]
    assert net.npus_per_dim == (16, 8, 32)
    assert [d.latency_ns for d in net.dims] == [500.0, 400.0, 700.0]
    assert all(d.bw_max_gbps is None and d.bw_min_gbps == 0 for d in net.dims)
    # the file names no cost class: pod outermost, then node and package
    assert [d.cost_class for d in net.dims] == ["InterPackage", "InterNode", "InterPod"]


def test_default_cost_classes_by_level_and_the_option_that_sets_others(tmp_path):
    assert default_cost_classes(1) == ("InterNode",)
    assert default_cost_classes(2) == ("InterNode", "InterPod")
    assert default_cost_classes(4) == ("InterChiplet", "InterPackage", "InterNode", "InterPod")
    assert default_cost_classes(5) == ("InterChiplet",) * 2 + ("InterPackage", "InterNode", "InterPod")
    net = load_network(write(tmp_path, THREE_D, "paper.yml"))
    assert [d.cost_class for d in with_cost_classes(net, ["A", "B", "C"]).dims] == ["A", "B", "C"]
    with pytest.raises(LibraError) as e:
        with_cost_classes(net, ["A", "B"])
    assert str(e.value) == ("--cost-classes: give one cost class per dimension of network 'paper' (3), innermost "
                            "first, e.g. InterPackage,InterNode,InterPod; got ['A', 'B']")
    path = write(tmp_path, THREE_D, "paper.yml")
    cost = CONFIGS / "cost.yml"
    r = run("optimize", "--demand", _demand(tmp_path, net), "-n", path, "--cost", cost, "--total-bw", 300, "--json")
    default = json.loads(r.output)["optimum"]["cost_usd"]
    r = run("optimize", "--demand", _demand(tmp_path, net), "-n", path, "--cost", cost, "--total-bw", 300, "--json",
            "--cost-classes", "InterPod,InterPod,InterPod")
    assert json.loads(r.output)["optimum"]["cost_usd"] > default > 0


def _demand(tmp_path, net):
    from libra_astra.demand.types import demand_to_dict, make_collective, single_class

    d = single_class("ar", net.npus_per_dim, 1e5, [make_collective("ALL_REDUCE", 2**28, net.npus_per_dim, net=net)])
    p = tmp_path / "ar.json"
    p.write_text(json.dumps(demand_to_dict(d)))
    return p


def test_emitted_network_file_reads_back_as_the_logical_network(tmp_path):
    phys = load_network(CONFIGS / "paper_3d.yml")
    # a group of every second NPU of the package ring splits it into two logical dimensions
    lnet, _ = plan_for_groups(phys, (150.0, 100.0, 50.0), {1: list(range(0, 16, 2))})
    assert len(lnet.dims) == 4
    net = load_network(write(tmp_path, network_yaml(lnet, "d")))
    assert [(d.topology, d.npus, d.latency_ns) for d in net.dims] == \
        [(d.topology, d.npus, d.latency_ns) for d in lnet.dims]


@pytest.mark.parametrize("text, message", [
    (THREE_D.replace("npus_count: [ 16, 8, 32 ]", "npus_count: [ 16, 8 ]"),
     "'topology' has 3 entries but 'npus_count' has 2; give one per dimension"),
    (THREE_D.replace("latency: [ 500.0, 400.0, 700.0 ]  # ns", "latency: 500"),
     "'latency' must be a non-empty list with one entry per dimension, got 500"),
    (THREE_D + "links: [ 1 ]\n", "unknown key(s) ['links']; allowed: ['topology', 'npus_count', 'latency', 'bandwidth']"),
    (THREE_D.replace("Switch", "switch"), "dimensions[2]: topology must be one of ['Ring', 'FullyConnected', 'Switch'] "
                                          "(case-sensitive), got 'switch'"),
    (THREE_D.replace("16, 8, 32", "16, 1, 32"), "dimensions[1]: npus"),
])
def test_malformed_astra_sim_network_names_the_file_and_key(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(LibraError) as e:
        load_network(p)
    assert str(e.value).startswith(f"{p} (ASTRA-sim network): ")
    assert message in str(e.value)


def test_optimize_on_an_astra_sim_network_file_gives_our_files_design(tmp_path):
    """The sample network (Switch 8 at 250 ns, Ring 8 at 1000 ns) written as ASTRA-sim writes it."""
    p = write(tmp_path, "topology: [ Switch, Ring ]\nnpus_count: [ 8, 8 ]\nbandwidth: [ 1, 1 ]\n"
                        "latency: [ 250, 1000 ]\n")

    def run(net):
        r = CliRunner().invoke(main, ["optimize", str(SAMPLE), "--network", str(net), "--total-bw", "400", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)["optimum"]

    ours, theirs = run(CONFIGS / "sample_8x8.yml"), run(p)
    assert theirs["bandwidth_gbps"] == ours["bandwidth_gbps"]
    assert theirs["time_ns"] == ours["time_ns"]


def test_astra_sims_example_networks_load():
    root = os.environ.get("ASTRA_SIM_EXAMPLES")
    if not root:
        pytest.skip("set ASTRA_SIM_EXAMPLES to an ASTRA-sim checkout to read its example networks")
    files = sorted(Path(root, "examples", "network", "analytical").glob("*.yml"))
    assert files, f"no examples/network/analytical/*.yml under {root}"
    for f in files:
        net = load_network(f)
        assert net.npus_count >= 2 and all(d.latency_ns >= 0 for d in net.dims)
