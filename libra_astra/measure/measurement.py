"""A real run measured from its ranks' Kineto traces: the step per rank, start to end across the
ranks, what filled each step, and every collective with its transfer and waits.

Given a network, each collective's process group is placed on the network's dimensions (the
same rule the demand uses: a sub-grid runs hierarchically, anything else as one flat ring).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import LibraError
from ..model.collectives import flat_ring_dims, group_participation
from ..model.network import Network
from ..traces.cpu_groups import GroupMap
from .collectives import MeasuredCollective, clock_offsets, match, measured_collectives
from .gloo import run_comms
from .kineto import RankProfile, read_profiles
from .step import RankStep, no_step_note, rank_step


@dataclass(frozen=True)
class Measurement:
    """What the profiles of one job measured (times in ns)."""

    source: str
    world_size: int
    ranks: tuple[RankStep, ...]
    collectives: tuple[MeasuredCollective, ...]
    dims: tuple[str, ...]             # per collective: the network dimensions it crosses ("" without a network)
    clock_offsets_ns: tuple[int, ...]  # per rank present
    assumptions: tuple[str, ...]
    group_map: GroupMap | None = None   # the groups given for a CPU run's gloo collectives
    host_only: bool = False             # a CPU run: no device activity in any profile

    @property
    def mean_step_ns(self) -> float:
        return sum(r.step_ns for r in self.ranks) / len(self.ranks)

    @property
    def max_step_ns(self) -> float:
        return max(r.step_ns for r in self.ranks)

    @property
    def span_ns(self) -> float:
        """From the first rank's step start to the last rank's step end (corrected clocks); with
        several steps, the mean over the steps every rank profiled."""
        n = min(len(r.windows) for r in self.ranks)
        return sum(max(r.windows[k][1] for r in self.ranks) - min(r.windows[k][0] for r in self.ranks)
                   for k in range(n)) / n

    @property
    def step_noise(self) -> tuple[float, int] | None:
        """(the largest relative standard error of a rank's mean step, that rank); None when some
        rank profiled one step: a prediction cannot be judged closer than this error."""
        if any(len(r.windows) < 2 for r in self.ranks):
            return None
        rel, rank = max((r.step_sem_ns / r.step_ns, r.rank) for r in self.ranks)
        return rel, rank

    def step_of(self, rank: int) -> RankStep:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise LibraError(f"{self.source}: no profile of rank {rank}")


def collective_dims(net: Network, group: Sequence[int], source: str) -> tuple[int, ...]:
    """The network dimensions a group's collective crosses."""
    if max(group) >= net.npus_count:
        raise LibraError(f"{source}: process group {list(group)[:8]} names rank {max(group)} but network "
                         f"{net.name!r} has {net.npus_count} NPUs; use the network the job ran on")
    parts = group_participation(net, group)
    if parts is None:
        return flat_ring_dims(net, group)[0]
    return tuple(d for d, p in enumerate(parts) if p > 1)


def measure_profiles(profiles: list[RankProfile], notes: list[str], network: Network | None = None,
                     source: str = "", group_map: GroupMap | None = None) -> Measurement:
    """``group_map``: the process groups of a CPU run's gloo collectives (gloo.py)."""
    world = max([p.world_size or 0 for p in profiles] + [max(p.rank for p in profiles) + 1])
    if network is not None and network.npus_count != world:
        raise LibraError(f"{source}: the job has {world} ranks but network {network.name!r} has "
                         f"{network.npus_count} NPUs; use the network the job ran on")
    comms = run_comms(profiles, world, notes, group_map)
    unknown = sum(1 for cs in comms.values() for c in cs if c.size_bytes == 0)
    if unknown:
        notes.append(f"{unknown} communication kernel(s) without a recorded size (no 'In msg nelems' or "
                     "'Input Dims' on the launching operator): size 0")
    instances = match(profiles, comms, world, notes)
    ranks = [p.rank for p in profiles]
    offsets = clock_offsets(instances, ranks, notes)
    colls = measured_collectives(instances, offsets, world)
    if any(not c.complete for c in colls):
        notes.append("collectives with missing members: their transfer is the shortest instance among the "
                     "ranks present (an upper bound)")
    steps = tuple(rank_step(p, comms[p.rank], offsets[p.rank]) for p in profiles)
    if (note := no_step_note(profiles)) is not None:
        notes.append(note)
    counts = {s.steps for s in steps}
    if len(counts) > 1:
        notes.append(f"the ranks profiled {min(counts)}..{max(counts)} steps; each rank's step is its mean")
    dims = tuple("+".join(network.dims[d].name for d in collective_dims(network, c.group, source))
                 if network is not None else "" for c in colls)
    return Measurement(source, world, steps, tuple(colls), dims, tuple(offsets[r] for r in ranks), tuple(notes),
                       group_map, all(not p.device for p in profiles))


def measure(inputs: Sequence[str | Path], network: Network | None = None,
            group_map: GroupMap | None = None) -> Measurement:
    """Read the profiles named by ``inputs`` (PREFIX, directory or files) and measure them."""
    profiles, notes = read_profiles(inputs)
    return measure_profiles(profiles, notes, network, str(inputs[0]), group_map)


def step_noise_note(m: Measurement) -> str | None:
    """How well the measurement itself knows the mean step, in one line (None: one step per rank)."""
    if m.step_noise is None:
        return None
    rel, rank = m.step_noise
    r = m.step_of(rank)
    d = r.step_durations_ns
    return (f"the measured steps vary (rank {rank}'s {len(d)} steps take {min(d) / 1e6:.3f} to {max(d) / 1e6:.3f} ms): "
            f"its mean step is known to +-{rel:.1%} (standard error), so errors within about twice that are "
            "inside the measurement's own noise; profile more steps to narrow it")


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    noise = m.step_noise
    return {
        "format": "libra_astra.measurement", "version": 1, "source": m.source, "world_size": m.world_size,
        "host_only": m.host_only,
        "step_mean_ns": m.mean_step_ns, "step_max_ns": m.max_step_ns, "start_to_end_ns": m.span_ns,
        "step_sem_rel_max": None if noise is None else noise[0],
        "ranks": [{"rank": r.rank, "steps": r.steps, "start_ns": r.start_ns, "end_ns": r.end_ns,
                   "step_ns": r.step_ns, "gpu_compute_ns": r.gpu_compute_ns, "exposed_comm_ns": r.exposed_comm_ns,
                   "cpu_bound_ns": r.cpu_bound_ns, "idle_ns": r.idle_ns, "comm_ns": r.comm_ns,
                   "clock_offset_ns": off, "steps_ns": list(r.step_durations_ns), "step_sem_ns": r.step_sem_ns}
                  for r, off in zip(m.ranks, m.clock_offsets_ns)],
        "collectives": [{"index": c.index, "kind": c.kind, "size_bytes": c.size_bytes, "group": list(c.group),
                         "group_name": c.group_name, "dims": d, "ranks": list(c.ranks),
                         "durations_ns": list(c.durations_ns), "starts_ns": list(c.starts_ns),
                         "transfer_ns": c.transfer_ns, "transfer_rank": c.transfer_rank,
                         "wait_mean_ns": c.wait_mean_ns, "wait_max_ns": c.wait_max_ns, "complete": c.complete}
                        for c, d in zip(m.collectives, m.dims)],
        "assumptions": list(m.assumptions),
    }
