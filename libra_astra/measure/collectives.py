"""Each collective across the ranks: its instances matched, its wait separated from its transfer,
and the ranks' clocks checked against each other.

The k-th collective a rank issues in a process group is the k-th of every member of that group
(NCCL requires it). A collective cannot end on any rank before the last member has started it,
so on the earlier ranks a kernel's duration includes waiting for the slowest one: the shortest
instance across the ranks is the transfer, and the rest of each rank's instance is its wait.

Clocks: on one host the ranks share a clock. If some instance ends on one rank before it
starts on another, the clocks cannot agree; each rank's offset is then the median, over its
collectives, of its end minus the median end of the same collective, and cross-rank times
are taken on the corrected clocks (stated as an assumption). A CPU run's sends and receives are
left out of this check: gloo's send may end before the receive starts.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from ..errors import LibraError
from ..model.collectives import P2P
from .comms import RankComm
from .kineto import RankProfile

# Kernels of one collective end together within NCCL's final handshake; a gap above this
# between one rank's end and another's start cannot be a shared clock.
CLOCK_TOLERANCE_NS = 2_000


@dataclass(frozen=True)
class MeasuredCollective:
    """One collective: every present member's instance, its transfer and waits (ns)."""

    index: int
    kind: str
    size_bytes: int
    group: tuple[int, ...]
    group_name: str
    ranks: tuple[int, ...]           # the members whose profile is present, ascending
    starts_ns: tuple[int, ...]       # per present member, on the corrected clocks
    durations_ns: tuple[int, ...]
    transfer_ns: int                 # the shortest instance
    transfer_rank: int
    complete: bool                   # every member's profile present

    @property
    def waits_ns(self) -> tuple[int, ...]:
        return tuple(d - self.transfer_ns for d in self.durations_ns)

    @property
    def wait_mean_ns(self) -> float:
        return sum(self.waits_ns) / len(self.waits_ns)

    @property
    def wait_max_ns(self) -> int:
        return max(self.waits_ns)


def _group_key(c: RankComm, world: int) -> tuple[int, ...]:
    return c.group if c.group else tuple(range(world))


def match(profiles: Sequence[RankProfile], comms: dict[int, list[RankComm]], world: int,
          notes: list[str]) -> list[list[tuple[int, RankComm]]]:
    """Instances of each collective, as lists of (rank, activity), in the order of first issue."""
    present = {p.rank for p in profiles}
    seq: dict[tuple[int, ...], dict[int, list[RankComm]]] = {}
    for r in sorted(comms):
        for c in comms[r]:
            seq.setdefault(_group_key(c, world), {}).setdefault(r, []).append(c)
    out: list[list[tuple[int, RankComm]]] = []
    for group, by_rank in seq.items():
        members = [r for r in group if r in present]
        counts = {r: len(by_rank.get(r, [])) for r in members}
        n = min(counts.values()) if counts else 0
        if len(set(counts.values())) > 1:
            notes.append(f"group {list(group)}: the ranks issued {min(counts.values())}..{max(counts.values())} "
                         f"collectives; the first {n} of each are matched")
        for k in range(n):
            inst = [(r, by_rank[r][k]) for r in members]
            kinds = {c.kind for _, c in inst}
            if len(kinds) > 1:
                (r0, c0), (r1, c1) = inst[0], next(x for x in inst if x[1].kind != inst[0][1].kind)
                raise LibraError(f"{profiles[0].source}: collective {k} of group {list(group)} is {c0.kind} on rank "
                                 f"{r0} but {c1.kind} on rank {r1}; give profiles of the same step of one job")
            out.append(inst)
    out.sort(key=lambda inst: min(c.launch_ns for _, c in inst))
    return out


def clock_offsets(instances: list[list[tuple[int, RankComm]]], ranks: Sequence[int],
                  notes: list[str]) -> dict[int, int]:
    """Each rank's clock offset (0 when the clocks agree; see the module docstring)."""
    offsets = {r: 0 for r in ranks}
    # gloo's send returns once the socket took the message: it may end before the receive starts
    instances = [inst for inst in instances if not all(c.kind == P2P and not c.on_gpu for _, c in inst)]
    broken = [inst for inst in instances if len(inst) > 1
              and min(c.end_ns for _, c in inst) + CLOCK_TOLERANCE_NS < max(c.start_ns for _, c in inst)]
    if not broken:
        return offsets
    diffs: dict[int, list[int]] = {r: [] for r in ranks}
    for inst in instances:
        mid = statistics.median(c.end_ns for _, c in inst)
        for r, c in inst:
            diffs[r].append(c.end_ns - mid)
    for r in ranks:
        offsets[r] = int(statistics.median(diffs[r])) if diffs[r] else 0
    worst = max(abs(v) for v in offsets.values())
    notes.append(f"clocks disagree: {len(broken)} collective(s) end on one rank before they start on another; "
                 f"each rank's clock is shifted to align the collectives' ends (offsets up to {worst / 1e3:.1f} us)")
    return offsets


def measured_collectives(instances: list[list[tuple[int, RankComm]]], offsets: dict[int, int],
                         world: int) -> list[MeasuredCollective]:
    out = []
    for i, inst in enumerate(instances):
        inst = sorted(inst, key=lambda x: x[0])
        durs = tuple(c.end_ns - c.start_ns for _, c in inst)
        j = min(range(len(inst)), key=lambda k: (durs[k], inst[k][0]))
        group = _group_key(inst[0][1], world)
        out.append(MeasuredCollective(
            i, inst[0][1].kind, max(c.size_bytes for _, c in inst), group, inst[0][1].group_name,
            tuple(r for r, _ in inst), tuple(c.start_ns - offsets[r] for r, c in inst), durs, durs[j], inst[j][0],
            len(inst) == len(group)))
    return out
