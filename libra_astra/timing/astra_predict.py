"""What ASTRA-sim 518bd51 (analytical, congestion-unaware, or congestion-aware with
``AstraSystem.backend``) would print for a demand read from traces, without running it: each
rank's finish time and exposed communication.

The demand's rank classes are replayed together as ASTRA-sim runs their DAGs (predict.py's replay:
one GPU compute, one CPU op and one collective or send at a time per rank, receives waiting for
their sends, a collective shared with other classes starting when they are ready for it), with
every node's time from astra_durations.py (custom collectives: astra_custom.py); where a collective
runs a double binary tree, each rank at its place in the tree (astra_trees.py). ASTRA-sim's
"exposed communication" of a rank is its finish time minus its summed GPU compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from ..demand.types import Demand
from ..errors import LibraError
from .astra_durations import (AstraSystem, arrival_skew, check_cycles, check_start_at_zero, gpu_compute_ns,
                              node_durations)
from .astra_trees import refine_trees
from .plan import plan_of
from .predict import replay_ends


class RankTime(NamedTuple):
    """One rank as ASTRA-sim reports it (``sys[R] finished, T cycles, exposed communication E
    cycles.``); 1 cycle = 1 ns."""

    rank: int
    finished_ns: int
    exposed_comm_ns: int
    compute_ns: int          # summed GPU compute
    rank_class: int


@dataclass(frozen=True)
class AstraPrediction:
    ranks: tuple[RankTime, ...]             # rank order
    class_finish_ns: tuple[int, ...]        # per rank class: its slowest rank
    class_compute_ns: tuple[int, ...]       # per rank class: GPU compute of one rank
    uneven_classes: tuple[int, ...]         # classes whose ranks' collective times differ (trees)
    # Collectives shared by rank classes whose ranks arrive at different times: how many, and the
    # widest spread (ns). The replay starts such a collective when its last rank arrives; ASTRA-sim
    # lets the early ranks begin, so its times can differ by about that much per such collective.
    skewed: int = 0
    skew_ns: int = 0

    @property
    def time_ns(self) -> int:
        """The slowest rank's finish time (ASTRA-sim's simulated time)."""
        return max((r.finished_ns for r in self.ranks), default=0)

    @property
    def slowest(self) -> RankTime:
        return max(self.ranks, key=lambda r: (r.finished_ns, -r.rank))

    @property
    def mean_ns(self) -> float:
        return sum(r.finished_ns for r in self.ranks) / len(self.ranks) if self.ranks else 0.0

    def astra_lines(self) -> list[str]:
        """The lines ASTRA-sim prints for these ranks (its ``finished`` line per rank)."""
        return [f"sys[{r.rank}] finished, {r.finished_ns} cycles, exposed communication {r.exposed_comm_ns} cycles."
                for r in self.ranks]


def predict_astra(d: Demand, system: AstraSystem) -> AstraPrediction:
    """ASTRA-sim's per-rank answer for demand ``d`` (read from traces, with DAGs) on ``system``.

    Raises
    ------
    LibraError
        A collective ASTRA-sim never finishes, exits on or that is not modeled (astra_durations),
        or ranks that wait on each other in a cycle (ASTRA-sim would never finish them).
    """
    plan = plan_of(d)
    durs = node_durations(d, plan, system)
    check_start_at_zero(d, plan, durs.dur, system)
    if durs.trees:
        return _trees(d, system, plan.offsets, durs)
    r = replay_ends(d, durs.dur)
    check_cycles(r)
    skew = arrival_skew(plan, r.finish)
    ranks: dict[int, RankTime] = {}
    class_finish, class_compute = [], []
    for ci, rc in enumerate(d.rank_classes):
        last = r.class_last(ci)
        finish = int(round(r.end_ns(last))) if last >= 0 else 0
        compute = gpu_compute_ns(rc)
        class_finish.append(finish)
        class_compute.append(compute)
        for rank in rc.ranks or range(rc.num_ranks):
            ranks[rank] = RankTime(rank, finish, finish - compute, compute, ci)
    return _prediction(d, ranks, class_finish, class_compute, (), skew)


def _trees(d: Demand, system: AstraSystem, offsets, durs) -> AstraPrediction:
    """Double binary trees: each rank at its place in the trees (astra_trees.py)."""
    finish, skew = refine_trees(d, offsets, durs, system.system_source, system.backend)
    ranks: dict[int, RankTime] = {}
    class_finish, class_compute, uneven = [], [], []
    for ci, rc in enumerate(d.rank_classes):
        c = gpu_compute_ns(rc)
        ts = {rank: int(round(finish[rank])) for rank in rc.ranks}
        for rank, t in ts.items():
            ranks[rank] = RankTime(rank, t, t - c, c, ci)
        class_finish.append(max(ts.values()))
        class_compute.append(c)
        if len(set(ts.values())) > 1:
            uneven.append(ci)
    return _prediction(d, ranks, class_finish, class_compute, tuple(uneven), skew)


def _prediction(d: Demand, ranks: dict[int, RankTime], class_finish: list[int], class_compute: list[int],
                uneven: tuple[int, ...], skew: tuple[int, int]) -> AstraPrediction:
    missing = sorted(set(range(math.prod(d.npus_per_dim))) - set(ranks))
    if missing:
        raise LibraError(f"the demand has no rank class for rank(s) {missing[:8]}; read it from every rank's trace")
    return AstraPrediction(tuple(ranks[k] for k in sorted(ranks)), tuple(class_finish), tuple(class_compute), uneven,
                           *skew)
