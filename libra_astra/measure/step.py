"""One rank's measured step and what filled it.

The step is the ``ProfilerStep#N`` annotation (without one, the whole profile, stated as an
assumption). Each instant of the step is counted once, in this order:

- **GPU compute**: a kernel, memory copy or set other than communication runs on some stream;
- **exposed communication**: only communication runs (NCCL kernels; gloo operators on a CPU run);
- **CPU-bound**: the device is idle while the step's thread runs an operator, not counting the
  time it blocks in a synchronization (``cuda*Synchronize``, a synchronous ``cudaMemcpy``);
- **idle**: none of these (the thread between operators, or blocked with the device idle).

On a CPU-only run (no device activity) the host is the device: an instant is **CPU-bound** when
the step's thread runs an operator other than communication, else **exposed communication** when
a gloo collective runs on a worker thread, else idle (GPU compute is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .comms import RankComm, is_comm_name
from .kineto import RankProfile

_SYNC_CALLS = ("synchronize", "cudamemcpy")


@dataclass(frozen=True)
class RankStep:
    """One rank's step (ns; mean over the profiled steps) and its breakdown."""

    rank: int
    steps: int
    start_ns: int           # first step's start on the corrected clock
    end_ns: int             # last step's end on the corrected clock
    step_ns: float
    gpu_compute_ns: float
    exposed_comm_ns: float
    cpu_bound_ns: float
    idle_ns: float
    comm_ns: float          # communication activity inside the steps, exposed or not
    windows: tuple[tuple[int, int], ...] = ()   # each step's (start, end) on the corrected clock

    @property
    def step_durations_ns(self) -> tuple[int, ...]:
        return tuple(e - s for s, e in self.windows)

    @property
    def step_sem_ns(self) -> float:
        """Standard error of the mean step (sample standard deviation / sqrt(steps)); 0 for one step,
        which says nothing about how much the step varies."""
        d = self.step_durations_ns
        if len(d) < 2:
            return 0.0
        return float(np.std(np.asarray(d, dtype=np.float64), ddof=1)) / len(d) ** 0.5


def _spans(spans) -> np.ndarray:
    """Spans as an (n, 2) int64 array (the caller may pass one already, to select from once per window)."""
    if isinstance(spans, np.ndarray):
        return spans
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def _active(spans: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Whether some span [start, end) holds each point."""
    if not len(spans):
        return np.zeros(len(points), dtype=bool)
    starts, ends = np.sort(spans[:, 0]), np.sort(spans[:, 1])
    return (np.searchsorted(starts, points, "right") - np.searchsorted(ends, points, "right")) > 0


def breakdown(window: tuple[int, int], comp, comm, cpu, sync,
              host_first: bool = False) -> tuple[float, float, float, float, float]:
    """(GPU compute, exposed communication, CPU-bound, idle, all communication) ns inside ``window``;
    ``host_first``: a CPU-only run, where the step thread's work hides communication."""
    lo, hi = window
    # times relative to the window: epoch nanoseconds are beyond a double's exact integers
    rel = []
    for spans in (comp, comm, cpu, sync):
        arr = _spans(spans)
        rel.append(arr[(arr[:, 1] > lo) & (arr[:, 0] < hi)] - lo)
    edges = np.unique(np.concatenate([np.array([0, hi - lo], dtype=np.int64)]
                                     + [np.clip(r, 0, hi - lo).ravel() for r in rel]))
    if len(edges) < 2:
        return 0.0, 0.0, 0.0, float(hi - lo), 0.0
    # doubled so that every segment's midpoint is an integer
    mids, width = edges[:-1] + edges[1:], np.diff(edges).astype(np.float64)
    comp, comm, cpu, sync = (2 * r for r in rel)
    a_comp, a_comm = _active(comp, mids), _active(comm, mids)
    a_cpu = _active(cpu, mids) & ~_active(sync, mids)
    g = float(width[a_comp].sum())
    if host_first:
        c = float(width[a_cpu & ~a_comp].sum())
        x = float(width[a_comm & ~a_comp & ~a_cpu].sum())
    else:
        x = float(width[a_comm & ~a_comp].sum())
        c = float(width[a_cpu & ~a_comp & ~a_comm].sum())
    return g, x, c, float(hi - lo) - g - x - c, float(width[a_comm].sum())


def step_windows(prof: RankProfile) -> tuple[list[tuple[int, int]], int | None]:
    """The rank's step windows and the thread that ran them (None: no ProfilerStep, the whole profile)."""
    if prof.steps:
        return [(s.start_ns, s.end_ns) for s in prof.steps], prof.steps[0].tid
    return [(prof.first_ns, prof.last_ns)], None


def no_step_note(profiles: list[RankProfile]) -> str | None:
    """The assumption made for the ranks whose profile has no ProfilerStep, in one line."""
    ranks = [p.rank for p in profiles if not p.steps]
    if not ranks:
        return None
    shown = ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
    return (f"no ProfilerStep annotation on rank(s) {shown}: their step is the whole profile (profile with "
            "torch.profiler's schedule and call prof.step() each step)")


def rank_step(prof: RankProfile, comms: list[RankComm], offset_ns: int) -> RankStep:
    windows, tid = step_windows(prof)
    comp = [(d.start_ns, d.end_ns) for d in prof.device if not d.name.lower().startswith("nccl")]
    comm = [(c.start_ns, c.end_ns) for c in comms]
    main = tid if tid is not None else _busiest_thread(prof)
    cpu = [(o.start_ns, o.end_ns) for o in prof.host
           if o.tid == main and not o.annotation and not is_comm_name(o.name)]
    sync = [(c.start_ns, c.end_ns) for c in prof.runtime if c.tid == main
            and (c.name.lower().endswith("synchronize") or c.name.lower() in ("cudamemcpy", "cudamemcpy2d"))]
    comp, comm, cpu, sync = (_spans(x) for x in (comp, comm, cpu, sync))
    sums = np.zeros(5)
    for w in windows:
        sums += breakdown(w, comp, comm, cpu, sync, host_first=not prof.device)
    n = len(windows)
    total = sum(e - s for s, e in windows)
    g, x, c, i, a = (sums / n).tolist()
    return RankStep(prof.rank, n, windows[0][0] - offset_ns, windows[-1][1] - offset_ns, total / n, g, x, c, i, a,
                    tuple((s - offset_ns, e - offset_ns) for s, e in windows))


def _busiest_thread(prof: RankProfile) -> int | None:
    busy: dict[int, int] = {}
    for o in prof.host:
        if not o.annotation:
            busy[o.tid] = busy.get(o.tid, 0) + o.end_ns - o.start_ns
    return max(busy, key=busy.get) if busy else None

