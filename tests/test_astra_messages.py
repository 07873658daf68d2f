"""astra_messages: every rank's phases replayed message by message on the congestion-unaware
network. Issued together it must give astra_collective's times (phases timed once); issued apart,
a rank's phase waits for its peers' messages (closed forms below; tests/test_predict_grid.py checks
it against the binary's output)."""

from __future__ import annotations

import random

import pytest

from libra_astra.timing.astra_collective import (Coll, Link, astra_bw_gbps, checked_links, collective_plan,
                                                 message_ns, rank_times)
from libra_astra.timing.astra_messages import message_rank_times
from libra_astra.timing.astra_settings import SystemSettings

KINDS = ("ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL")


def plans(colls, links, s):
    state: dict = {}
    return [collective_plan(c, links, s, state) for c in colls]


@pytest.mark.parametrize("seed", range(12))
def test_issued_together_every_rank_ends_as_the_phase_timing_says(seed):
    rng = random.Random(seed)
    dims = rng.choice([1, 2, 3])
    links = checked_links([Link(rng.choice(["Ring", "FullyConnected", "Switch"]), rng.choice([2, 4]),
                                astra_bw_gbps(rng.choice([25.0, 50.0, 100.0])), rng.choice([0.0, 100.0, 700.0]))
                           for _ in range(dims)])
    impls = [rng.choice(["ring", "direct", "halvingDoubling", "doubleBinaryTree", "direct2"]) for _ in range(dims)]
    if rng.random() < 0.3 and "doubleBinaryTree" not in impls:
        impls = [rng.choice(["oneRing", "oneDirect"])] * dims       # flattened: one ring over every NPU
    s = SystemSettings(all_reduce=tuple(impls), reduce_scatter=tuple(impls), all_gather=tuple(impls),
                       all_to_all=tuple("ring" if i == "halvingDoubling" else i for i in impls),
                       splits=rng.choice([1, 2, 4]), active_chunks=rng.choice([1, 2]), endpoint_delay_ns=10,
                       local_mem_bw_gbps=rng.choice([50.0, 1600.0]),
                       collective_optimization=rng.choice(["localBWAware", "baseline"]),
                       queues_per_dim=rng.choice([1, 2]))
    colls = [Coll(rng.choice(KINDS), rng.choice([1 << 12, 1 << 16, 100_003]),
                  tuple(rng.random() < 0.8 or d == 0 for d in range(dims))) for _ in range(rng.choice([1, 2]))]
    p = plans(colls, links, s)
    assert message_rank_times(p, links, s) == rank_times(p, links, s)


def test_a_late_peer_holds_a_direct_all_reduce_back_as_its_messages_say():
    # FullyConnected 2, direct all-reduce of one chunk: each rank sends half its chunk (M ns in the
    # network) after the memory bus (ed), reduces the peer's half once it is there and its own
    # packet is through the bus (ed + 3 x the reduction), sends the reduced half back and ends one
    # bus later when the peer's arrives. Rank 1 issues it dt late: it ends dt + the time alone
    # (rank 0's message is there before it needs it); rank 0 waits for rank 1's second message,
    # which leaves when rank 1 has both its own packet (dt + ed) and rank 0's half (ed + M).
    lk = checked_links([Link("FullyConnected", 2, astra_bw_gbps(50.0), 500.0)])
    s = SystemSettings.uniform(1, "direct", endpoint_delay_ns=10, local_mem_bw_gbps=1600.0)
    p = plans([Coll("ALL_REDUCE", 1 << 16, (True,))], lk, s)
    ed, m, red = 10, message_ns(lk[0], 1, 1 << 15), 3 * int((1 << 15) / 1600.0)
    alone = ed + m + ed + red + m + ed
    assert rank_times(p, lk, s) == (alone, alone)
    for dt in (0, 1, 37, 1110, 5000, 10 ** 6):
        early = max(dt + ed, ed + m) + ed + red + m + ed
        assert message_rank_times(p, lk, s, [0, dt]) == (early, dt + alone), dt


@pytest.mark.parametrize("shift", [0, 1, 999])
def test_issue_times_shifted_together_shift_every_end(shift):
    links = checked_links([Link("Ring", 2, astra_bw_gbps(25.0), 100.0), Link("Switch", 4, astra_bw_gbps(50.0), 700.0)])
    s = SystemSettings.uniform(2, "direct", endpoint_delay_ns=10, local_mem_bw_gbps=1600.0, splits=2)
    p = plans([Coll("ALL_REDUCE", 1 << 14, (True, True))], links, s)
    starts = [r * 131 % 977 for r in range(8)]
    base = message_rank_times(p, links, s, starts)
    assert message_rank_times(p, links, s, [t + shift for t in starts]) == tuple(t + shift for t in base)
    # and no rank ends before its own start plus the time the phases take alone
    alone = rank_times(p, links, s)
    assert all(e >= st + a for e, st, a in zip(base, starts, alone))
