"""Per-dimension traffic of collectives: hand-worked values of the hierarchical table, flat rings, hops."""

import pytest

from libra_astra.model import collectives as coll
from libra_astra.demand.types import make_collective
from libra_astra.errors import LibraError
from libra_astra.model.network import network_from_dict

# Ring 4 x Switch 2 x FullyConnected 3 = 24 NPUs; NPU id = a0 + 4 * (a1 + 2 * a2).
NET = network_from_dict({"name": "t", "dimensions": [
    {"name": "a", "topology": "Ring", "npus": 4},
    {"name": "b", "topology": "Switch", "npus": 2},
    {"name": "c", "topology": "FullyConnected", "npus": 3},
]})


@pytest.mark.parametrize("kind, size, parts, expected", [
    # m = 1200: dim a 2*1200*3/4 = 1800, carry 300; dim b 2*300/2 = 300, carry 150; dim c 2*150*2/3 = 200.
    ("ALL_REDUCE", 1200, (4, 2, 3), (1800, 300, 200)),
    ("REDUCE_SCATTER", 1200, (4, 2, 3), (900, 150, 100)),
    # The all-gather shard grows in descending order: c 100*2 = 200 (carry 300), b 300 (carry 600), a 600*3.
    ("ALL_GATHER", 100, (4, 2, 3), (1800, 300, 200)),
    # All-to-all keeps its size: 1200*3/4, 1200/2, 1200*2/3.
    ("ALL_TO_ALL", 1200, (4, 2, 3), (900, 600, 800)),
    # Partial participation: unused dimensions carry nothing and do not shrink the message.
    ("ALL_REDUCE", 1200, (1, 2, 1), (0, 1200, 0)),
    ("ALL_REDUCE", 1200, (4, 1, 3), (1800, 0, 400)),
    ("ALL_REDUCE", 1200, (2, 2, 1), (1200, 600, 0)),        # carry 600 into dim b
    ("ALL_GATHER", 100, (1, 2, 3), (0, 300, 200)),
    ("ALL_GATHER", 100, (4, 1, 1), (300, 0, 0)),
    ("REDUCE_SCATTER", 1200, (1, 1, 3), (0, 0, 800)),
    ("ALL_TO_ALL", 1200, (4, 1, 1), (900, 0, 0)),
    ("ALL_REDUCE", 1200, (1, 1, 1), (0, 0, 0)),
])
def test_hierarchical_traffic_hand_worked(kind, size, parts, expected):
    got = coll.hierarchical_traffic_bytes(kind, size, parts)
    assert got == pytest.approx(expected, rel=1e-15, abs=0)


def test_all_gather_is_descending_not_ascending():
    # Ascending order would give (300, 400, 1600) for the same shard.
    assert coll.hierarchical_traffic_bytes("ALL_GATHER", 100, (4, 2, 3)) != pytest.approx((300, 400, 1600))
    assert coll.dim_order("ALL_GATHER", 3) == (2, 1, 0)
    assert coll.dim_order("ALL_REDUCE", 3) == (0, 1, 2)


def test_all_gather_of_a_shard_equals_the_second_half_of_an_all_reduce():
    # An all-reduce of S is a reduce-scatter of S plus an all-gather of the S / N shard.
    parts = (4, 2, 3)
    ar = coll.hierarchical_traffic_bytes("ALL_REDUCE", 2400, parts)
    rs = coll.hierarchical_traffic_bytes("REDUCE_SCATTER", 2400, parts)
    ag = coll.hierarchical_traffic_bytes("ALL_GATHER", 2400 / 24, parts)
    assert [r + g for r, g in zip(rs, ag)] == pytest.approx(ar)


@pytest.mark.parametrize("kind, p, size, traffic, steps", [
    ("ALL_REDUCE", 4, 1000, 1500, 6),
    ("REDUCE_SCATTER", 4, 1000, 750, 3),
    ("ALL_GATHER", 4, 1000, 3000, 3),
    ("ALL_TO_ALL", 4, 1000, 750, 3),
    ("P2P", 2, 1000, 1000, 1),
    ("ALL_REDUCE", 1, 1000, 0, 0),
])
def test_single_ring(kind, p, size, traffic, steps):
    assert coll.ring_traffic_bytes(kind, size, p) == pytest.approx(traffic)
    assert coll.ring_steps(kind, p) == steps


def test_hops_per_topology():
    ring8 = network_from_dict({"dimensions": [{"topology": "Ring", "npus": 8}]}).dims[0]
    assert [ring8.hops(0, b) for b in range(8)] == [0, 1, 2, 3, 4, 3, 2, 1]
    assert NET.dims[1].hops(0, 1) == 2          # Switch: up and down
    assert NET.dims[2].hops(0, 2) == 1          # FullyConnected: direct
    assert NET.dims[2].hops(1, 1) == 0


def test_default_hops_of_a_collective():
    c = make_collective("ALL_REDUCE", 1200, (4, 2, 3), net=NET)
    # Ring 4: 6 steps of 1 hop; Switch 2: 2 steps of 2 hops; FullyConnected 3: 4 steps of 1 hop.
    assert c.hops == (6, 4, 4)
    assert c.traffic_bytes == pytest.approx((1800, 300, 200))
    assert make_collective("ALL_GATHER", 100, (1, 2, 1), net=NET).hops == (0, 2, 0)


def test_group_participation_of_sub_grids():
    # coords (a0, a1, a2) -> a0 + 4 a1 + 8 a2
    assert coll.group_participation(NET, [0, 1, 4, 5]) == (2, 2, 1)
    assert coll.group_participation(NET, [0, 8, 16]) == (1, 1, 3)
    assert coll.group_participation(NET, list(range(24))) == (4, 2, 3)
    assert coll.group_participation(NET, [3, 3, 3]) == (1, 1, 1)
    assert coll.group_participation(NET, [0, 1, 4]) is None          # not a product of coordinate sets
    assert coll.group_participation(NET, [0, 5]) is None


def test_flat_ring_crosses_the_lowest_differing_dimensions():
    # Ring 0 -> 1 (dim a, 1 hop), 1 -> 4 (coords (1,0,0) vs (0,1,0): dim a, 1 hop), 4 -> 0 (dim b, Switch: 2 hops).
    dims, max_hops = coll.flat_ring_dims(NET, [4, 0, 1])
    assert dims == (0, 1) and max_hops == 2
    # 3 members all-reduce 300 bytes: 2 * 300 * 2 / 3 = 400 on every crossed dimension.
    assert coll.flat_ring_traffic_bytes(NET, "ALL_REDUCE", 300, [0, 1, 4]) == pytest.approx((400, 400, 0))
    # Ring 0 -> 8 -> 16 -> 0 stays in dim c.
    assert coll.flat_ring_dims(NET, [16, 0, 8]) == ((2,), 1)
    # Ring 0 -> 2 on the Ring dimension: 2 hops each way.
    assert coll.flat_ring_dims(NET, [0, 2]) == ((0,), 2)


def test_collective_errors():
    with pytest.raises(LibraError) as e:
        coll.check_type("BROADCAST", "layer3")
    assert str(e.value) == ("layer3: unsupported collective type 'BROADCAST'; use one of "
                            "['ALL_REDUCE', 'REDUCE_SCATTER', 'ALL_GATHER', 'ALL_TO_ALL', 'P2P']")
    with pytest.raises(LibraError, match=r"^empty communicator group$"):
        coll.group_participation(NET, [])
    with pytest.raises(LibraError, match=r"^NPUs 5 and 5 are the same NPU$"):
        NET.lowest_differing_dim(5, 5)
    with pytest.raises(LibraError, match=r"NPU id 24 out of range 0\.\.23"):
        coll.group_participation(NET, [0, 24])
