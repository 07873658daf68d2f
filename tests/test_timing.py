"""Time models: LIBRA's max, the pipelined model against times measured on ASTRA-sim, demand times."""

import pytest

from libra_astra.demand.types import Collective, Demand, RankClass, make_collective
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict
from libra_astra.timing.model import LIBRA, TimeModel, collective_rows, collective_time_ns, demand_time

GIB = 2 ** 30


def ring4_switch4(lat0: float, lat1: float):
    return network_from_dict({"name": "r4s4", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 4, "latency_ns": lat0},
        {"name": "switch", "topology": "Switch", "npus": 4, "latency_ns": lat1},
    ]})


# Measured on ASTRA-sim (analytical, congestion unaware): Ring 4 x Switch 4, one 1 GiB all-reduce
# over all 16 NPUs, bandwidths as written in its YAML (GiB/s), times in ms. Columns: ideal
# (latency 0, local-mem-bw huge) k = 1, 4, 16, 64; realistic (latency 500 / 700 ns,
# local-mem-bw 1600) k = 1, 4. tools/validate_sim.py repeats such comparisons against $ASTRA_SIM_BIN.
REFERENCE = [
    ((100, 100), (18.750, 15.000, 15.000, 15.000), (20.649, 16.522)),
    ((200, 50), (15.000, 9.375, 7.969, 7.618), (16.899, 10.167)),
    ((50, 200), (31.875, 30.000, 30.000, 30.001), (33.774, 31.522)),
    ((150, 50), (17.500, 10.000, 10.000, 10.000), (19.399, 11.522)),
    ((300, 25), (20.000, 16.250, 15.313, 15.078), (21.899, 17.042)),
]


def gib_per_s(values):
    # ASTRA-sim reads its bandwidth values as GiB/s.
    return [v * 2 ** 30 / 1e9 for v in values]


@pytest.mark.parametrize("bw, ideal, realistic", REFERENCE)
def test_pipelined_model_matches_astra_sim(bw, ideal, realistic):
    net = ring4_switch4(0.0, 0.0)
    c = make_collective("ALL_REDUCE", GIB, (4, 4), net=net)
    for k, ms in zip((1, 4, 16, 64), ideal):
        got = collective_time_ns(c, gib_per_s(bw), net, TimeModel("pipelined", splits=k)) / 1e6
        assert got == pytest.approx(ms, rel=1e-3), f"ideal k={k}"
    net = ring4_switch4(500.0, 700.0)
    c = make_collective("ALL_REDUCE", GIB, (4, 4), net=net)
    for k, ms in zip((1, 4), realistic):
        got = collective_time_ns(c, gib_per_s(bw), net, TimeModel("pipelined", splits=k, local_mem_bw_gbps=1600)) / 1e6
        assert got == pytest.approx(ms, rel=1e-3), f"realistic k={k}"


def test_pipelined_realistic_hand_worked():
    # 100/100 GiB/s, k = 1: T0 = 1.5 GiB / B = 15 ms, T1 = 0.375 GiB / B = 3.75 ms; reductions
    # 3 * 0.75 GiB / 1600 = 1.50995 ms and a quarter of it; latency 6 hops * 500 + 12 hops * 700 ns.
    net = ring4_switch4(500.0, 700.0)
    c = make_collective("ALL_REDUCE", GIB, (4, 4), net=net)
    red0 = 3 * 0.75 * GIB / 1600
    expected = 15e6 + 3.75e6 + red0 + red0 / 4 + 6 * 500 + 12 * 700
    got = collective_time_ns(c, gib_per_s((100, 100)), net, TimeModel("pipelined", local_mem_bw_gbps=1600))
    assert got == pytest.approx(expected, rel=1e-12)


def test_libra_model_is_the_max_over_dimensions():
    net = network_from_dict({"dimensions": [{"name": f"d{i}", "topology": "Ring", "npus": 4} for i in range(3)]})
    c = make_collective("ALL_REDUCE", 1200, (4, 1, 4), net=net)       # traffic (1800, 0, 450)
    A, g = collective_rows(c, net, LIBRA)
    assert A.tolist() == [[1800, 0, 0], [0, 0, 450]] and g.tolist() == [0, 0]
    assert collective_time_ns(c, [9, 1, 1], net) == pytest.approx(450)      # dim 2 is the bottleneck
    assert collective_time_ns(c, [9, 1, 9], net) == pytest.approx(200)
    # An unused dimension may have 0 GB/s; a used one at 0 GB/s takes forever.
    assert collective_time_ns(c, [9, 0, 9], net) == pytest.approx(200)
    assert collective_time_ns(c, [0, 9, 9], net) == float("inf")


def test_pipelined_limits():
    net = ring4_switch4(0.0, 0.0)
    c = make_collective("ALL_REDUCE", GIB, (4, 4), net=net)
    bw = [80.0, 30.0]
    t0, t1 = 1.5 * GIB / 80, 0.375 * GIB / 30
    assert collective_time_ns(c, bw, net, TimeModel("pipelined", splits=1)) == pytest.approx(t0 + t1)
    assert collective_time_ns(c, bw, net, TimeModel("pipelined", splits=10 ** 7)) == pytest.approx(max(t0, t1), rel=1e-6)
    assert collective_time_ns(c, bw, net, LIBRA) == pytest.approx(max(t0, t1))


def test_pipelined_fill_for_reduce_scatter_uses_every_other_dimension():
    net = ring4_switch4(0.0, 0.0)
    c = make_collective("REDUCE_SCATTER", GIB, (4, 4), net=net)   # traffic 0.75 GiB, 0.1875 GiB
    k = 4
    t0, t1 = 0.75 * GIB / 50, 0.1875 * GIB / 20
    got = collective_time_ns(c, [50, 20], net, TimeModel("pipelined", splits=k))
    assert got == pytest.approx(max(t0 + t1 / k, t1 + t0 / k))


def test_efficiency_divides_bandwidth():
    net = ring4_switch4(0.0, 0.0)
    c = make_collective("ALL_REDUCE", GIB, (4, 4), net=net)
    base = collective_time_ns(c, [100, 100], net, TimeModel("pipelined"))
    half = collective_time_ns(c, [100, 100], net, TimeModel("pipelined", efficiency=(0.5, 1.0)))
    assert half - base == pytest.approx(1.5 * GIB / 100)


def test_flat_ring_time_is_set_by_the_slowest_crossed_dimension():
    net = ring4_switch4(100.0, 1000.0)
    c = Collective("ALL_REDUCE", 300.0, (2, 2), (400.0, 400.0), (1, 2), algorithm="flat_ring")
    assert collective_time_ns(c, [4, 2], net, LIBRA) == pytest.approx(200)
    # k chunks each pay the slowest crossed hop latency (2 hops * 1000 ns).
    assert collective_time_ns(c, [4, 2], net, TimeModel("pipelined", splits=3)) == pytest.approx(200 + 3 * 2000)


def test_demand_time_is_the_slowest_class_with_counts():
    net = ring4_switch4(0.0, 0.0)
    c = make_collective("ALL_REDUCE", 1000, (4, 1), count=3, net=net)     # traffic 1500 on dim 0
    fast = RankClass(1000.0, (c,))
    slow = RankClass(5000.0, (make_collective("ALL_REDUCE", 1000, (4, 1), net=net),))
    d = Demand("d", (4, 4), (fast, slow))
    br = demand_time(d, [10, 10], net)
    # fast: 1000 + 3 * 150 = 1450; slow: 5000 + 150 = 5150
    assert (br.total_ns, br.compute_ns, br.communication_ns, br.slowest_class) == pytest.approx((5150, 5000, 150, 1))
    br = demand_time(d, [0.1, 10], net)
    # fast: 1000 + 3 * 15000 = 46000; slow: 5000 + 15000 = 20000
    assert (br.total_ns, br.slowest_class) == pytest.approx((46000, 0))


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="ideal"), "unknown time model 'ideal'; use one of ['libra', 'pipelined']"),
    (dict(splits=0), "splits must be >= 1, got 0"),
    (dict(local_mem_bw_gbps=0), "local_mem_bw_gbps must be >= 1e-06 GB/s (a kilobyte per second), got 0"),
    # 1e-300 made the reduce copies take inf ns and the solver's start fail with an internal error
    (dict(local_mem_bw_gbps=1e-300), "local_mem_bw_gbps must be >= 1e-06 GB/s (a kilobyte per second), got 1e-300"),
    (dict(efficiency=(1.0, 0.0)), "dimension efficiencies must be > 0, got [1.0, 0.0]"),
])
def test_time_model_errors(kwargs, message):
    with pytest.raises(LibraError) as e:
        TimeModel(**kwargs)
    assert str(e.value) == message
