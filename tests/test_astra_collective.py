"""ASTRA-sim's timing of collectives per system.json setting, against closed forms
(docs/astra-sim-settings.md derives each one; tests/test_astra_recorded_settings.py checks the
module against the real binary's output)."""

from __future__ import annotations

import pytest

from libra_astra.errors import LibraError
from libra_astra.timing.astra_collective import (
    Coll, Link, astra_bw_gbps, chain_time_ns, collective_time_ns, rank_finish_ns)
from libra_astra.timing.astra_settings import SystemSettings, parse_implementation, settings_from_json

AR, RS, AG, A2A = "ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL"
ED, MEM, LAT = 10, 1600.0, 500.0
MIB = 1 << 20


def link(topology="Ring", npus=8, bw=100.0, lat=LAT):
    return Link(topology, npus, astra_bw_gbps(bw), lat)


def sys1(impl="ring", dims=1, **kw):
    kw = {"endpoint_delay_ns": ED, "local_mem_bw_gbps": MEM, **kw}
    return SystemSettings.uniform(dims, impl, **kw)


def D(lk: Link, hops: int, b: int) -> int:
    return int(hops * lk.latency_ns + b / lk.bw_gbps)


def R(b: int) -> int:
    return 3 * int(b / (MEM * 1e9) * 1e9)


def h1(lk: Link) -> int:
    return 2 if lk.topology == "Switch" else 1


def ring_hops(lk: Link, off: int) -> int:
    return min(off, lk.npus - off) if lk.topology == "Ring" else h1(lk)


def one(kind, lk, impl="ring", size=MIB, **kw):
    return collective_time_ns(kind, size, [True], [lk], sys1(impl, **kw))


@pytest.mark.parametrize("topology", ["Ring", "Switch", "FullyConnected"])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_phases_have_their_closed_forms(topology, n):
    lk = link(topology, n)
    m = MIB
    d, dg = D(lk, h1(lk), m // n), D(lk, h1(lk), m)
    assert one(AR, lk) == ED + 2 * (n - 1) * (d + ED) + (n - 1) * R(m // n)
    assert one(RS, lk) == ED + (n - 1) * (d + ED + R(m // n))
    assert one(AG, lk) == ED + (n - 1) * (dg + ED)
    assert one(A2A, lk) == ED + n * (n - 1) // 2 * (d + ED)


def test_ring_example_of_the_documentation():
    assert one(AR, link()) == 25_931


@pytest.mark.parametrize("topology", ["Ring", "Switch"])
def test_direct_sends_its_n_minus_1_messages_at_once(topology):
    lk, n, m = link(topology), 8, MIB
    worst = max(D(lk, ring_hops(lk, j), m // n) for j in range(1, n))
    assert one(RS, lk, "direct") == 2 * ED + R(m // n) + worst
    assert one(A2A, lk, "direct") == 2 * ED + worst
    assert one(AG, lk, "direct") == 2 * ED + max(D(lk, ring_hops(lk, j), m) for j in range(1, n))
    if topology == "Switch":        # equal delays: reduce-scatter half, then all-gather half
        assert one(AR, lk, "direct") == 3 * ED + 2 * worst + R(m // n)


def test_direct_all_reduce_waits_for_every_first_half_message():
    # Ring 8 with latency: the all-gather half starts at the first reduced packet after the
    # farthest message (4 hops) arrived, and ends when the farthest message of it is in.
    lk, n, m = link(), 8, MIB
    arrive = [ED + D(lk, ring_hops(lk, j), m // n) for j in range(1, n)]
    start = min(a + ED + R(m // n) for a in arrive if a + ED + R(m // n) >= max(arrive))
    farthest = max(D(lk, ring_hops(lk, j), m // n) for j in range(1, n))
    assert one(AR, lk, "direct") == start + farthest + ED
    assert one(AR, lk, "direct") == 6_713


def test_a_direct_window_is_slower_than_full_direct_and_faster_than_ring():
    lk = link()
    for kind in (AR, RS, AG, A2A):
        assert one(kind, lk, "direct") < one(kind, lk, "direct2") < one(kind, lk, "ring")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_halving_doubling_closed_forms(n):
    lk, m = link(npus=n), MIB
    L = n.bit_length() - 1
    rs_steps = [(1 << s, m >> (s + 1)) for s in range(L)]                   # partner, bytes
    ag_steps = [(n >> (s + 1), (m // n) << s) for s in range(L)]
    red = sum(R(m >> (s + 1)) for s in range(1, L))                         # L - 1 reductions
    rs = ED + sum(D(lk, ring_hops(lk, o), b) + ED for o, b in rs_steps) + red
    assert one(RS, lk, "halvingDoubling") == rs
    assert one(AR, lk, "halvingDoubling") == rs + sum(D(lk, ring_hops(lk, o), b) + ED for o, b in rs_steps[::-1])
    assert one(AG, lk, "halvingDoubling", size=m // n) == ED + sum(D(lk, ring_hops(lk, o), b) + ED
                                                                  for o, b in ag_steps)


def test_double_binary_tree_ranks_finish_by_their_tree_position():
    # First tree: positions 0..6 in order under root 7; 3 is the subtree's root, 1 and 5 its
    # children, the even positions leaves. Every message is the whole 1 MiB.
    lk, m = link(), MIB
    up_leaf = ED + D(lk, 1, m)
    send_1 = up_leaf + ED + R(m)
    send_3 = send_1 + D(lk, 2, m) + ED + R(m)
    root = send_3 + D(lk, 4, m) + ED + R(m)
    mid = root + D(lk, 4, m) + ED + R(m)
    quarter = mid + D(lk, 2, m) + ED + R(m)
    leaf = quarter + D(lk, 1, m) + ED
    expected = (leaf, quarter, leaf, mid, leaf, quarter, leaf, root)
    for kind in (AR, RS, AG, A2A):       # every kind runs as an all-reduce of the whole size
        assert rank_finish_ns([Coll(kind, m, (True,))], [lk], sys1("doubleBinaryTree")) == expected
    assert expected == (75_485, 65_210, 75_485, 52_470, 75_485, 65_210, 75_485, 38_730)


def test_double_binary_tree_chain_is_not_a_sum_of_collectives():
    lk, s = link(), sys1("doubleBinaryTree")
    c = Coll(AR, MIB, (True,))
    single = chain_time_ns([c], [lk], s)
    two = rank_finish_ns([c, c], [lk], s)
    # The second collective uses the other tree, and ranks start it when they are done.
    assert max(two) < 2 * single and len(set(two)) > 1


def test_chunks_pay_a_whole_extra_chunk_for_a_remainder_and_run_in_series():
    lk = link()
    chunk = one(AR, lk, size=MIB // 4)
    assert one(AR, lk, size=MIB, splits=4) == 4 * chunk
    assert one(AR, lk, size=MIB + 3, splits=4) == 5 * chunk


def test_active_chunks_run_concurrently_at_full_bandwidth():
    lk = link()
    chunk = one(RS, lk, size=MIB // 4)
    assert one(RS, lk, splits=4, active_chunks=2) == 2 * chunk
    assert one(RS, lk, splits=4, active_chunks=4) == chunk
    assert one(RS, lk, splits=1, active_chunks=4) == one(RS, lk)


def test_queues_per_dimension_multiply_the_concurrent_chunks():
    lk = link()
    chunk = one(AG, lk, size=MIB // 4)
    assert one(AG, lk, size=MIB, splits=4, queues_per_dim=2) == 2 * chunk
    assert one(AG, lk, size=MIB, splits=4, queues_per_dim=2, active_chunks=2) == 2 * chunk


def test_localbwaware_all_reduce_pipelines_two_dimensions():
    r, sw = link("Ring", 4, 200.0, 0.0), link("Switch", 4, 50.0, 0.0)
    size, k = 1 << 30, 4
    c = size // k
    ideal = {"endpoint_delay_ns": 1, "local_mem_bw_gbps": 1e9}
    a = collective_time_ns(RS, c, [True], [r], sys1(**ideal))
    b = collective_time_ns(AR, c // 4, [True], [sw], sys1(**ideal))
    g = collective_time_ns(AG, c // 4, [True], [r], sys1(**ideal))
    s = sys1(dims=2, splits=k, **ideal)
    # The all-reduce stage is the bottleneck: the first reduce-scatter, k all-reduces, the last all-gather.
    assert b > a and collective_time_ns(AR, size, [True, True], [r, sw], s) == a + k * b + g
    assert a + k * b + g == pytest.approx(9.375e6, rel=1e-5)    # measured: 9.375 ms


def test_baseline_runs_a_full_all_reduce_in_every_dimension():
    r, sw = link("Ring", 4), link("Switch", 4)
    base = collective_time_ns(AR, MIB, [True, True], [r, sw], sys1(dims=2, collective_optimization="baseline"))
    assert base == one(AR, r) + one(AR, sw)
    assert base > collective_time_ns(AR, MIB, [True, True], [r, sw], sys1(dims=2))


def test_scheduling_policy_changes_nothing():
    r, sw = link("Ring", 4), link("Switch", 4)
    colls = [Coll(AR, MIB, (True, True)), Coll(A2A, MIB, (True, False))]
    times = {p: chain_time_ns(colls, [r, sw], sys1(dims=2, splits=4, scheduling_policy=p))
             for p in ("LIFO", "FIFO", "EXPLICIT")}
    assert len(set(times.values())) == 1


def test_a_chain_of_symmetric_collectives_is_their_sum():
    r, sw = link("Ring", 4), link("Switch", 4)
    s = sys1(dims=2, splits=2, active_chunks=2)
    colls = [Coll(AR, MIB, (True, True)), Coll(AG, MIB // 16, (False, True)), Coll(A2A, MIB, (True, True))]
    assert chain_time_ns(colls, [r, sw], s) == sum(chain_time_ns([c], [r, sw], s) for c in colls)


def test_one_ring_is_one_ring_over_every_npu_on_dimension_0_links():
    r, sw = link("Ring", 4), link("Switch", 4)
    flat = collective_time_ns(AR, MIB, [True, False], [r, sw], sys1("oneRing", dims=2))
    assert flat == one(AR, link("Ring", 16))
    # involved_dim is read per logical dimension: only its first entry counts.
    with pytest.raises(LibraError, match="involves no dimension"):
        collective_time_ns(AR, MIB, [False, True], [r, sw], sys1("oneRing", dims=2))


def test_a_short_implementation_list_leaves_higher_dimensions_out():
    r, sw = link("Ring", 4), link("Switch", 4)
    s = SystemSettings(("ring",), ("ring",), ("ring",), ("ring",), endpoint_delay_ns=ED, local_mem_bw_gbps=MEM)
    assert collective_time_ns(AR, MIB, [True, True], [r, sw], s) == one(AR, r)


def test_zero_byte_all_reduce_runs_with_npu_sized_chunks():
    lk = link()
    assert one(AR, lk, size=0, splits=4) == 4 * one(AR, lk, size=8)


def test_bandwidth_is_read_as_gib_per_second():
    assert astra_bw_gbps(100) == pytest.approx(107.3741824)
    assert astra_bw_gbps(100 * 1e9 / 2**30) == pytest.approx(100.0)


@pytest.mark.parametrize("name, parsed", [
    ("ring", ("ring", False, -1)), ("oneRing", ("ring", True, -1)), ("direct", ("direct", False, -1)),
    ("direct16", ("direct", False, 16)), ("oneDirect4", ("direct", True, 4)),
    ("halvingDoubling", ("halvingDoubling", False, -1)), ("oneHalvingDoubling", ("halvingDoubling", True, -1)),
    ("doubleBinaryTree", ("doubleBinaryTree", False, -1)),
])
def test_implementation_names(name, parsed):
    assert parse_implementation(name) == parsed


@pytest.mark.parametrize("name", ["Ring", "onering", "oneDoubleBinaryTree", "direct0", "directX", "hd", 3])
def test_unknown_implementation_names_are_refused(name):
    with pytest.raises(LibraError, match="unknown collective implementation"):
        SystemSettings.uniform(1, name)


@pytest.mark.parametrize("kw, match", [
    ({"splits": 0}, "preferred-dataset-splits"), ({"splits": 2**31}, "preferred-dataset-splits"),
    ({"active_chunks": 0}, "active-chunks"), ({"endpoint_delay_ns": -1}, "endpoint-delay"),
    ({"endpoint_delay_ns": 1.5}, "endpoint-delay"), ({"local_mem_bw_gbps": -1}, "local-mem-bw"),
    ({"local_mem_bw_gbps": float("nan")}, "local-mem-bw"), ({"collective_optimization": "hier"}, "optimization"),
    ({"scheduling_policy": "lifo"}, "scheduling-policy"), ({"queues_per_dim": 0}, "queues"),
])
def test_bad_settings_are_refused_in_one_line(kw, match):
    with pytest.raises(LibraError, match=match) as e:
        SystemSettings.uniform(1, "ring", **kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("impl, kind, npus, size, match", [
    ("halvingDoubling", A2A, 8, MIB, "no all-to-all"),
    ("halvingDoubling", AR, 6, MIB, "power of two"),
    ("doubleBinaryTree", AR, 6, MIB, "power of two"),
    ("ring", AG, 8, 3, "0-byte chunks"),
])
def test_runs_astra_sim_cannot_finish_are_refused(impl, kind, npus, size, match):
    with pytest.raises(LibraError, match=match):
        collective_time_ns(kind, size, [True], [link(npus=npus)], sys1(impl, splits=4))


def test_reductions_need_local_mem_bw():
    s = SystemSettings.uniform(1, "ring")
    assert collective_time_ns(AG, MIB, [True], [link()], s) > 0
    for kind, impl in ((RS, "ring"), (AR, "doubleBinaryTree"), (AG, "doubleBinaryTree")):
        with pytest.raises(LibraError, match="local-mem-bw is 0 or absent"):
            collective_time_ns(kind, MIB, [True], [link()], SystemSettings.uniform(1, impl, local_mem_bw_gbps=0))


def test_inputs_that_do_not_fit_the_network_are_refused():
    with pytest.raises(LibraError, match="involved_dim has 2 entries"):
        collective_time_ns(AR, MIB, [True, True], [link()], sys1())
    with pytest.raises(LibraError, match="2 entries for a network of 1"):
        collective_time_ns(AR, MIB, [True], [link()], sys1(dims=2))
    with pytest.raises(LibraError, match="network dimension 0"):
        collective_time_ns(AR, MIB, [True], [Link("Torus", 8, 1.0, 0.0)], sys1())
    with pytest.raises(LibraError, match="simulates only"):
        collective_time_ns("P2P", MIB, [True], [link()], sys1())


def test_system_json_is_read_as_astra_sim_reads_it():
    data = {"scheduling-policy": "FIFO", "collective-optimization": "baseline", "preferred-dataset-splits": 4.7,
            "endpoint-delay": 10, "local-mem-bw": 1600, "all-reduce-implementation": ["direct", "ring"],
            "all-gather-implementation": ["ring", "ring"], "boost-mode": 1}
    s = settings_from_json(data, "sys.json", queues_per_dim=2)
    assert (s.splits, s.all_reduce, s.all_gather, s.reduce_scatter, s.queues_per_dim) == (
        4, ("direct", "ring"), ("ring", "ring"), (), 2)
    assert (s.active_chunks, s.collective_optimization, s.local_mem_bw_gbps) == (1, "baseline", 1600)
    assert settings_from_json({k: v for k, v in data.items() if k != "local-mem-bw"}).local_mem_bw_gbps == 0
    with pytest.raises(LibraError, match="reduce-scatter-implementation has 0 entries"):
        collective_time_ns(RS, MIB, [True, True], [link(), link()], s)


@pytest.mark.parametrize("data, match", [
    ({"collective-optimization": "baseline", "preferred-dataset-splits": 1}, "missing 'scheduling-policy'"),
    ({"scheduling-policy": "LIFO", "preferred-dataset-splits": 1}, "missing 'collective-optimization'"),
    ({"scheduling-policy": "LIFO", "collective-optimization": "baseline"}, "missing 'preferred-dataset-splits'"),
    ({"scheduling-policy": "LIFO", "collective-optimization": "baseline", "preferred-dataset-splits": 1,
      "model-shared-bus": 1}, "model-shared-bus"),
    ({"scheduling-policy": "LIFO", "collective-optimization": "baseline", "preferred-dataset-splits": 1,
      "all-reduce-implementation": ["rings"]}, r"all-reduce-implementation\[0\]"),
    ([1], "expected a JSON object"),
])
def test_bad_system_json_names_the_file_and_key(data, match):
    with pytest.raises(LibraError, match=match) as e:
        settings_from_json(data, "my/sys.json")
    assert str(e.value).startswith("my/sys.json: ")
