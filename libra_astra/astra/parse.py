"""Parse ASTRA-sim's standard output (pure functions over text; 1 cycle = 1 ns).

Per rank it prints ``sys[R] finished, T cycles, exposed communication E cycles.`` and then
statistics lines ``sys[R], Wall time: W``, ``sys[R], GPU time: G``, ``sys[R], Comm time: C``,
``sys[R], Total compute-communication overlap: O`` (and CPU / Remote mem / Replay times when such
nodes ran), each behind a log prefix ``[timestamp] [logger] [info]``. Ranks finish in any order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import IO, Any, Iterable, Iterator

from ..errors import LibraError

_INT64_MAX = (1 << 63) - 1
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


class OutputParser:
    """Parses ASTRA-sim's output one line at a time (the output can be gigabytes: never held whole).

    Raises LibraError on output no real run prints: a rank finishing twice, negative or absurdly
    large cycle counts, non-finite statistics.
    """

    def __init__(self) -> None:
        self.finished: dict[int, tuple[int, int]] = {}
        self.stats: dict[int, dict[str, float]] = {}

    def feed(self, line: str) -> None:
        if "sys[" not in line:
            return
        m = _FINISHED.search(line)
        if m:
            r, t, e = m.group(1), m.group(2), m.group(3)
            if max(len(r), len(t), len(e)) > 19 or int(r) > _INT64_MAX or int(t) > _INT64_MAX or int(e) > _INT64_MAX:
                raise LibraError(f"ASTRA-sim output has an absurd number in {line.strip()[:120]!r}; it is not the "
                                 "output of a working simulator")
            rank, time, exposed = int(r), int(t), int(e)
            if exposed < 0:
                raise LibraError(f"ASTRA-sim output reports negative exposed communication ({exposed} cycles) for "
                                 f"sys[{rank}]; the simulator is broken or the output is not its own")
            if exposed > time:
                raise LibraError(f"ASTRA-sim output reports sys[{rank}] with exposed communication {exposed} above "
                                 f"its finish time {time} cycles; the output is inconsistent")
            if rank in self.finished:
                raise LibraError(f"ASTRA-sim output reports sys[{rank}] finished twice; is it the output of one run?")
            self.finished[rank] = (time, exposed)
            return
        m = _STAT.search(line)
        if m and m.group(2) in _STAT_FIELDS:
            if len(m.group(1)) > 19:
                return
            value = float(m.group(3))
            if not math.isfinite(value):
                raise LibraError(f"ASTRA-sim output has a non-finite statistic in {line.strip()[:120]!r}")
            self.stats.setdefault(int(m.group(1)), {})[_STAT_FIELDS[m.group(2)]] = value

    def result(self) -> ParsedOutput:
        return ParsedOutput(tuple(RankStats(r, t, e, **self.stats.get(r, {}))
                                  for r, (t, e) in sorted(self.finished.items())))


def parse_output(text: str | Iterable[str]) -> ParsedOutput:
    """Per-rank finish times and statistics from ASTRA-sim's standard output.

    Raises
    ------
    LibraError
        If one rank reports ``finished`` twice (two runs' output mixed together), or the output
        holds numbers no real run prints (see :class:`OutputParser`).
    """
    p = OutputParser()
    for line in (text.splitlines() if isinstance(text, str) else text):
        p.feed(line)
    return p.result()


def line_chunks(stream: IO[bytes], max_line: int) -> Iterator[tuple[bytes, bool]]:
    """The output as chunks of at most ``max_line`` bytes, each with whether it starts a line:
    the rest of a longer line follows in chunks that do not (readers skip them, so memory stays
    bounded by one chunk however long a line is)."""
    starts = True
    while chunk := stream.readline(max_line):
        yield chunk, starts
        starts = chunk.endswith(b"\n")
