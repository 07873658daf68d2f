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

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v}


def split_size(size: int, splits: int, stats: WorkloadStats) -> int:
    """comm_size rounded to a multiple of preferred-dataset-splits.

    ASTRA-sim cuts a collective into ``splits`` chunks of size // splits and charges a remainder
    as one more full chunk (measured: 25% more time at splits 4 for any size not divisible by 4),
    so sizes are rounded by less than ``splits`` bytes to keep the simulated time meaningful."""
    if splits <= 1 or size <= 0 or size % splits == 0:
        return size
    stats.sizes_rounded_to_splits += 1
    return max(splits, int(round(size / splits)) * splits)
