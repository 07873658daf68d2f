"""Parse ASTRA-sim's standard output (pure functions over text; 1 cycle = 1 ns).

Per rank it prints ``sys[R] finished, T cycles, exposed communication E cycles.`` and then
statistics lines ``sys[R], Wall time: W``, ``sys[R], GPU time: G``, ``sys[R], Comm time: C``,
``sys[R], Total compute-communication overlap: O`` (and CPU / Remote mem / Replay times when such
nodes ran), each behind a log prefix ``[timestamp] [logger] [info]``. Ranks finish in any order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import LibraError

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (-?\d+) cycles\.")
_STAT = re.compile(r"sys\[(\d+)\], ([A-Za-z][A-Za-z -]*?): (-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")
# Statistics labels as printed -> RankStats field.
_STAT_FIELDS = {
    "Wall time": "wall_time_ns",
    "GPU time": "gpu_time_ns",
    "CPU time": "cpu_time_ns",
    "Comm time": "comm_time_ns",
    "Total compute-communication overlap": "overlap_ns",
}


@dataclass(frozen=True)
class RankStats:
    """One rank's result; times in ns. Statistics the simulator did not print are None."""

    rank: int
    finished_ns: int
    exposed_comm_ns: int
    wall_time_ns: float | None = None
    gpu_time_ns: float | None = None
    cpu_time_ns: float | None = None
    comm_time_ns: float | None = None
    overlap_ns: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class ParsedOutput:
    """Every rank that reported ``finished``, sorted by rank."""

    ranks: tuple[RankStats, ...]

    @property
    def simulated_time_ns(self) -> int:
        """Time of the last rank to finish (0 if none finished)."""
        return max((r.finished_ns for r in self.ranks), default=0)

    def missing(self, npus_count: int) -> tuple[int, ...]:
        """Ranks 0..npus_count-1 with no ``finished`` line."""
        done = {r.rank for r in self.ranks}
        return tuple(r for r in range(npus_count) if r not in done)


def parse_output(text: str | Iterable[str]) -> ParsedOutput:
    """Per-rank finish times and statistics from ASTRA-sim's standard output.

    Raises
    ------
    LibraError
        If one rank reports ``finished`` twice (two runs' output mixed together).
    """
    lines = text.splitlines() if isinstance(text, str) else text
    finished: dict[int, tuple[int, int]] = {}
    stats: dict[int, dict[str, float]] = {}
    for line in lines:
        m = _FINISHED.search(line)
        if m:
            r = int(m.group(1))
            if r in finished:
                raise LibraError(f"ASTRA-sim output reports sys[{r}] finished twice; is it the output of one run?")
            finished[r] = (int(m.group(2)), int(m.group(3)))
            continue
        m = _STAT.search(line)
        if m and m.group(2) in _STAT_FIELDS:
            value = float(m.group(3))
            stats.setdefault(int(m.group(1)), {})[_STAT_FIELDS[m.group(2)]] = value
    ranks = tuple(RankStats(r, t, e, **stats.get(r, {})) for r, (t, e) in sorted(finished.items()))
    return ParsedOutput(ranks)
