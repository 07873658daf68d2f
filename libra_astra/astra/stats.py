"""What the rewrite or synthesis of a workload changed (recorded in the manifest), and the one
size rule both follow."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WorkloadStats:
    """Counts of what the rewrite or synthesis changed, summed over ranks (goes to the manifest)."""

    ranks: int = 0
    nodes_written: int = 0
    nodes_removed: int = 0
    dangling_deps_dropped: int = 0
    collectives: int = 0
    group_collectives_to_dims: int = 0
    flat_ring_collectives: int = 0
    trivial_collectives_to_comp: int = 0
    converted_types: dict[str, int] = field(default_factory=dict)
    chained_deps_added: int = 0
    approximated_collectives: int = 0
    capped_repeats: int = 0
    compute_rounding_ns: float = 0.0
    empty_ranks: int = 0
    sizes_rounded_to_splits: int = 0

    def add(self, other: "WorkloadStats") -> None:
        """Add the counts of ``other`` (what one more rank file changed)."""
        for k, v in other.__dict__.items():
            if k == "converted_types":
                for name, c in v.items():
                    self.converted_types[name] = self.converted_types.get(name, 0) + c
            elif v:
                setattr(self, k, getattr(self, k) + v)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v}

    def notes(self, source: str, splits: int) -> list[str]:
        """What the counters mean, for the manifest's notes (``source``: "traces" or "demand")."""
        out = [t.format(n=getattr(self, f), splits=splits) for f, t in _REWRITE_NOTES if getattr(self, f)]
        for name, n in sorted(self.converted_types.items()):
            to = "REDUCE_SCATTER" if name == "REDUCE_SCATTER_BLOCK" else "zero-byte ALL_REDUCE"
            out.append(f"{n} {name} collectives emitted as {to} (ASTRA-sim aborts on {name})")
        out += [t.format(n=getattr(self, f), splits=splits) for f, t in _CHAIN_NOTES if getattr(self, f)]
        if source == "demand":
            out.append(_SYNTHESIS_NOTE)
        out += [t.format(n=getattr(self, f), splits=splits) for f, t in _SYNTHESIS_NOTES if getattr(self, f)]
        return out


# The note of each non-zero counter, in the order the notes are listed.
_REWRITE_NOTES = (
    ("nodes_removed", "{n} METADATA/INVALID nodes removed, dependencies re-linked through them"),
    ("dangling_deps_dropped", "{n} dependencies on nodes absent from their file dropped"),
    ("group_collectives_to_dims", "{n} group collectives turned into all-rank collectives over involved_dim"),
    ("flat_ring_collectives", "{n} collectives on irregular groups kept as communicator groups "
                              "(ASTRA-sim runs them as one flat ring over the sorted members)"),
    ("trivial_collectives_to_comp", "{n} collectives reaching no other NPU replaced by zero-time compute"),
)
_CHAIN_NOTES = (
    ("chained_deps_added", "{n} control dependencies added to chain collectives in issue order"),
    ("sizes_rounded_to_splits", "{n} collective sizes rounded to a multiple of {splits} bytes "
                                "(ASTRA-sim charges a remainder chunk as a full chunk)"),
)
_SYNTHESIS_NOTE = ("workload synthesized from the demand: per rank class compute then collectives in order "
                   "(or the class's dag); a collective with count c runs ceil(c) times with size * c / runs bytes; "
                   "compute rounded to whole microseconds; counts below describe one rank per class")
_SYNTHESIS_NOTES = (
    ("approximated_collectives", "{n} collectives (flat-ring, or participants that fit no logical "
                                 "dimension) emitted as one collective per dimension with the demand's bytes per NPU there"),
    ("capped_repeats", "{n} collectives with a count above max_repeats run fewer, larger times"),
    ("compute_rounding_ns", "compute rounded to whole microseconds: {n:.0f} ns of absolute rounding"),
    ("empty_ranks", "{n} ranks had no node and got one zero-time compute node"),
)


def split_size(size: int, splits: int, stats: WorkloadStats) -> int:
    """comm_size rounded to a multiple of preferred-dataset-splits.

    ASTRA-sim cuts a collective into ``splits`` chunks of size // splits and charges a remainder
    as one more full chunk (measured: 25% more time at splits 4 for any size not divisible by 4),
    so sizes are rounded by less than ``splits`` bytes to keep the simulated time meaningful."""
    if splits <= 1 or size <= 0 or size % splits == 0:
        return size
    stats.sizes_rounded_to_splits += 1
    return max(splits, int(round(size / splits)) * splits)
