"""Network and cost files: loading, NPU coordinates, the linear cost model, and every validation message."""

from pathlib import Path

import pytest
import yaml

from libra_astra.model.cost import cost_from_dict, load_cost
from libra_astra.errors import LibraError
from libra_astra.model.network import dump_network, load_network, network_from_dict

CONFIGS = Path(__file__).resolve().parent.parent / "network_configs"


def one_dim(**kw):
    return {"name": "n", "dimensions": [{"name": "a", "topology": "Ring", "npus": 4, **kw}]}


def test_shipped_networks_load():
    net3 = load_network(CONFIGS / "paper_3d.yml")
    assert net3.npus_per_dim == (16, 8, 32) and net3.npus_count == 4096
    assert [d.topology for d in net3.dims] == ["Ring", "FullyConnected", "Switch"]
    net4 = load_network(CONFIGS / "paper_4d.yml")
    assert net4.npus_per_dim == (4, 8, 4, 32) and net4.dim_names == ("chiplet", "package", "node", "pod")


def test_coordinates_dimension_zero_fastest():
    net = network_from_dict({"dimensions": [{"name": "a", "topology": "Ring", "npus": 4},
                                            {"name": "b", "topology": "Switch", "npus": 2},
                                            {"name": "c", "topology": "FullyConnected", "npus": 3}]})
    assert net.npu_id((1, 1, 2)) == 1 + 4 * (1 + 2 * 2)
    assert net.coords(21) == (1, 1, 2)
    assert all(net.npu_id(net.coords(i)) == i for i in range(net.npus_count))
    with pytest.raises(LibraError, match=r"NPU id 24 out of range 0\.\.23"):
        net.coords(24)
    with pytest.raises(LibraError, match=r"coordinate 2 out of range 0\.\.1"):
        net.npu_id((0, 2, 0))
    with pytest.raises(LibraError, match=r"2 coordinates for 3 dimensions"):
        net.npu_id((0, 0))


def test_dimension_lookup_by_name_or_index():
    net = load_network(CONFIGS / "paper_3d.yml")
    assert net.dim_index("pod") == 2 and net.dim_index("1") == 1 and net.dim_index(0) == 0
    with pytest.raises(LibraError) as e:
        net.dim_index("rack")
    assert str(e.value) == "network 'paper-3d': no dimension 'rack'; use an index 0..2 or one of ['package', 'node', 'pod']"


def test_network_round_trip_through_yaml(tmp_path):
    data = {"name": "rt", "dimensions": [
        {"name": "a", "topology": "Ring", "npus": 4, "latency_ns": 20.0, "cost_class": "X", "bw_min_gbps": 5.0},
        {"name": "b", "topology": "Switch", "npus": 8, "latency_ns": 700.0, "cost_class": "Y", "bw_max_gbps": 90.0}]}
    net = network_from_dict(data, "rt.yml")
    p = tmp_path / "rt.yml"
    p.write_text(dump_network(net))
    assert load_network(p) == net
    assert yaml.safe_load(p.read_text()) == data


@pytest.mark.parametrize("data, message", [
    (one_dim(topology="ring"),
     "n.yml: dimensions[0]: topology must be one of ['Ring', 'FullyConnected', 'Switch'] (case-sensitive), got 'ring'"),
    (one_dim(npus=1), "n.yml: dimensions[0]: npus must be an integer >= 2, got 1"),
    (one_dim(npus=2.5), "n.yml: dimensions[0]: npus must be an integer >= 2, got 2.5"),
    # 10**30 NPUs passed and broke the row builder's 64-bit hops
    (one_dim(npus=10 ** 30), "n.yml: dimensions[0]: npus = " + f"{10 ** 30:,}"
     + " is beyond 1,048,576 NPUs in one dimension; fix the network"),
    (one_dim(bandwidth=5),
     "n.yml: dimensions[0]: unknown key(s) ['bandwidth']; allowed: ['bw_max_gbps', 'bw_min_gbps', 'cost_class', "
     "'latency_ns', 'name', 'npus', 'topology']"),
    ({"name": "x", "dims": []}, "n.yml: unknown key(s) ['dims']; allowed: name, description, dimensions"),
    ({"name": "x", "dimensions": []}, "n.yml: 'dimensions' must be a non-empty list of dimensions"),
    ({"dimensions": [{"name": "a", "topology": "Ring", "npus": 4}, {"name": "a", "topology": "Switch", "npus": 4}]},
     "n.yml: dimension names must be unique; repeated: ['a']"),
    (one_dim(bw_min_gbps=10, bw_max_gbps=5), "n.yml: dimensions[0]: bw_max_gbps 5 is below bw_min_gbps 10"),
    (one_dim(bw_max_gbps=0), "n.yml: dimensions[0]: bw_max_gbps must be a number > 0 and <= 1e+09, got 0"),
    (one_dim(latency_ns=-1), "n.yml: dimensions[0]: latency_ns must be a number >= 0 and <= 1e+12, got -1"),
    # 1e300 ns per hop was taken and printed times of 1e300 s
    (one_dim(latency_ns=1e300), "n.yml: dimensions[0]: latency_ns must be a number >= 0 and <= 1e+12, got 1e+300"),
    (one_dim(bw_min_gbps=1e300), "n.yml: dimensions[0]: bw_min_gbps must be a number >= 0 and <= 1e+09, got 1e+300"),
    (one_dim(name="1x"), "n.yml: dimensions[0]: name '1x' must start with a letter and use letters, digits, '_' or '-'"),
    ({"dimensions": [{"name": "a", "topology": "Ring"}]},
     "n.yml: dimensions[0]: missing 'npus' (NPU count of this dimension, >= 2)"),
    ([1], "n.yml: expected a mapping with 'name' and 'dimensions', got list"),
    (one_dim(cost_class=5), "n.yml: dimensions[0]: cost_class must be a string, got 5"),
])
def test_network_errors(data, message):
    with pytest.raises(LibraError) as e:
        network_from_dict(data, "n.yml")
    assert str(e.value) == message


def test_network_file_errors(tmp_path):
    with pytest.raises(LibraError) as e:
        load_network(tmp_path / "none.yml")
    assert str(e.value) == f"{tmp_path / 'none.yml'}: network file not found"
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\ndimensions: [\n  {name: a,\n")
    with pytest.raises(LibraError, match=r"bad\.yml: not valid YAML at line \d+; fix the syntax of the network file$"):
        load_network(bad)


def test_shipped_cost_prices_per_dimension():
    net = load_network(CONFIGS / "paper_3d.yml")
    cost = load_cost(CONFIGS / "cost.yml")
    # Ring/InterPackage: link 4; FullyConnected/InterNode: link 7.4 (no switch); Switch/InterPod:
    # link 12.3 + switch 24 + NIC 48. Every dimension's links add up to N * B.
    assert cost.price_usd_per_gbps(net) == pytest.approx((4096 * 4.0, 4096 * 7.4, 4096 * 84.3))
    assert cost.network_cost_usd(net, [100, 50, 10]) == pytest.approx(4096 * (400 + 370 + 843))


def test_cost_is_linear_in_bandwidth():
    net = load_network(CONFIGS / "paper_4d.yml")
    cost = load_cost(CONFIGS / "cost.yml")
    a, b = [10.0, 20.0, 30.0, 40.0], [1.0, 0.0, 7.0, 2.5]
    mix = [2 * x + 3 * y for x, y in zip(a, b)]
    assert cost.network_cost_usd(net, mix) == pytest.approx(2 * cost.network_cost_usd(net, a) + 3 * cost.network_cost_usd(net, b))
    assert cost.network_cost_usd(net, [0, 0, 0, 0]) == 0


def test_switch_parts_apply_to_switch_dimensions_only():
    cost = cost_from_dict({"unit_prices_usd_per_gbps": {"K": {"link": 1.0, "switch": 10.0, "nic": 100.0}}}, "c.yml")
    net = network_from_dict({"dimensions": [{"name": t.lower(), "topology": t, "npus": 2, "cost_class": "K"}
                                            for t in ("Ring", "FullyConnected", "Switch")]})
    n = net.npus_count
    assert cost.price_usd_per_gbps(net) == pytest.approx((101 * n, 101 * n, 111 * n))
    assert cost.name == "c" and cost.currency == "USD"


def prices(**kw):
    return {"name": "c", "unit_prices_usd_per_gbps": {"P": {"link": 1.0, **kw}}}


@pytest.mark.parametrize("data, message", [
    (prices(switch=-1), "c.yml: unit_prices_usd_per_gbps.P.switch: must be a finite number >= 0 and <= 1e+09 (USD per GB/s), got -1"),
    (prices(nic=True), "c.yml: unit_prices_usd_per_gbps.P.nic: must be a finite number >= 0 and <= 1e+09 (USD per GB/s), got True"),
    (prices(link=float("inf")), "c.yml: unit_prices_usd_per_gbps.P.link: must be a finite number >= 0 and <= 1e+09 (USD per GB/s), got inf"),
    # 1e300 was taken and printed a cost of 2.6e303 USD and time x cost inf
    (prices(link=1e300), "c.yml: unit_prices_usd_per_gbps.P.link: must be a finite number >= 0 and <= 1e+09 (USD per GB/s), got 1e+300"),
    (prices(optics=3), "c.yml: unit_prices_usd_per_gbps.P: unknown part(s) ['optics']; allowed: ['link', 'switch', 'nic']"),
    ({"prices": {}}, "c.yml: unknown key(s) ['prices']; allowed: name, currency, description, unit_prices_usd_per_gbps"),
    ({"name": "c"}, "c.yml: 'unit_prices_usd_per_gbps' must map cost classes to {link, switch, nic} prices"),
    ([], "c.yml: expected a mapping with 'unit_prices_usd_per_gbps'"),
    ({"unit_prices_usd_per_gbps": {"P": 3}}, "c.yml: unit_prices_usd_per_gbps.P: expected a mapping with link, switch, nic"),
])
def test_cost_errors(data, message):
    with pytest.raises(LibraError) as e:
        cost_from_dict(data, "c.yml")
    assert str(e.value) == message


def test_cost_class_missing_for_a_dimension(tmp_path):
    p = tmp_path / "c.yml"
    p.write_text(yaml.safe_dump(prices()))
    cost = load_cost(p)
    net = network_from_dict(one_dim(cost_class="Q"), "n.yml")
    with pytest.raises(LibraError) as e:
        cost.price_usd_per_gbps(net)
    assert str(e.value) == ("cost model 'c': no unit prices for cost class 'Q' of dimension 'a'; add it under "
                            "unit_prices_usd_per_gbps (known: ['P'])")
    with pytest.raises(LibraError) as e:
        load_cost(tmp_path / "missing.yml")
    assert str(e.value) == f"{tmp_path / 'missing.yml'}: cost file not found"


def test_ids_array_inverts_coords_array():
    import numpy as np
    from libra_astra.model.network import Dimension, Network
    net = Network("g", (Dimension("a", "Ring", 3), Dimension("b", "Switch", 4), Dimension("c", "FullyConnected", 2)))
    ids = np.arange(net.npus_count)
    coords = net.coords_array(ids)
    assert [tuple(r) for r in coords] == [net.coords(int(i)) for i in ids]
    assert net.ids_array(coords).tolist() == ids.tolist()
