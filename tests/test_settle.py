"""The one-pass release of the replays' collectives (measure/settle.py) against the whole-rank
iteration it replaced, on real profiles, and on graphs small enough to time by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from libra_astra.measure import cpu_replay as cpu_mod
from libra_astra.measure import replay as gpu_mod
from libra_astra.measure.kineto import read_profiles
from libra_astra.measure.measurement import measure_profiles
from libra_astra.measure.settle import RankEvents, settle_events
from libra_astra.traces.cpu_groups import load_group_map

REAL = Path(__file__).parent / "fixtures" / "real"


def _chain(durs: list[int], coll_at: int, lag_ns: int = 0) -> RankEvents:
    """Nodes one after the other; node ``coll_at`` is collective 0, taking 100 ns after its release."""
    def start_of(k, start, end):
        return (end[k - 1] if k else 0) + lag_ns

    def end_of(k, start, end, release):
        return max(start[k], release) + 100 if k == coll_at else start[k] + durs[k]

    return RankEvents([[2 * (k - 1) + 1] if k else [] for k in range(len(durs))], [()] * len(durs),
                      [0 if k == coll_at else None for k in range(len(durs))], start_of, end_of)


def test_a_collective_starts_when_its_last_member_is_ready():
    # rank 0 is ready at 10, rank 1 at 50 on its clock, which runs 7 ns ahead: 43 on the shared one
    out = settle_events({0: _chain([10, 0, 5], 1), 1: _chain([50, 0, 5], 1)}, {0: 0, 1: 7})
    assert out[0] == ([0, 10, 143], [10, 143, 148])
    assert out[1] == ([0, 50, 150], [50, 150, 155])


def test_ranks_waiting_on_each_other_in_a_cycle_are_not_solved():
    # node 0's start needs node 1's end, which needs node 0: no order exists
    g = RankEvents([[3], [1]], [(), ()], [None, None], lambda k, s, e: 0, lambda k, s, e, r: s[k] + 1)
    assert settle_events({0: g}, {0: 0}) is None


def _both(monkeypatch, run):
    fast = run()
    monkeypatch.setattr(cpu_mod, "settle_events", lambda *a: None)
    monkeypatch.setattr(gpu_mod, "settle_events", lambda *a: None)
    slow = run()
    monkeypatch.undo()
    return fast, slow


@pytest.mark.parametrize("scale", [0, 1, 3])
def test_gpu_replay_equals_the_iteration_on_a_real_run(monkeypatch, scale):
    prefix = str(REAL / "param_dlrm8" / "param_dlrm8")
    profiles, notes = read_profiles([prefix])
    m = measure_profiles(profiles, notes, None, prefix)
    fast, slow = _both(monkeypatch, lambda: gpu_mod.replay(profiles, m.collectives,
                                                           lambda c: scale * c.transfer_ns + 1000, m.world_size,
                                                           m.clock_offsets_ns))
    assert fast == slow


@pytest.mark.parametrize("scale", [0, 1, 3])
def test_host_replay_equals_the_iteration_on_a_real_run(monkeypatch, scale):
    prefix = str(REAL / "measured" / "tpdp4k" / "tpdp4k")
    gm = load_group_map(REAL / "measured" / "tpdp4k" / "tpdp4k.groups.yml")
    profiles, notes = read_profiles([prefix])
    m = measure_profiles(profiles, notes, None, prefix, gm)
    fast, slow = _both(monkeypatch, lambda: cpu_mod.cpu_replay(profiles, m.collectives,
                                                               lambda c: scale * c.transfer_ns + 1000, 4,
                                                               m.clock_offsets_ns, gm))
    assert fast == slow
    if scale == 1:
        # the transfers as measured plus 1 us each: every step at least as long as measured
        assert all(r.step_ns >= s.step_ns for r, s in zip(fast, m.ranks))
