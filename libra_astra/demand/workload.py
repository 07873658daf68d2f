"""A workload: one demand, its weight in the objective, and the files it was read from.

The source travels with the demand so that a design can record where each workload came from
(and ``emit`` can read the same traces again) without a second list kept in step with the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..errors import LibraError
from ..model.network import Network
from ..traces.files import default_groups_path, is_trace_prefix
from .from_traces import demand_from_traces
from .types import Demand, load_demand


@dataclass(frozen=True)
class WorkloadSource:
    """The files a workload's demand was read from (absolute paths, or None)."""

    demand: str | None = None        # demand JSON
    traces: str | None = None        # Chakra ET prefix (PREFIX.RANK.et)
    comm_groups: str | None = None   # communicator-group JSON used with the traces
    type_cpu_collectives: bool = False  # gloo collectives typed from their c10d:: CPU ops
    cpu_collective_groups: str | None = None  # the process groups of typed collectives (traces/cpu_groups.py)


@dataclass(frozen=True)
class Workload:
    demand: Demand
    weight: float = 1.0
    name: str = ""
    source: WorkloadSource = field(default_factory=WorkloadSource)


def load_workloads(traces: Sequence[str], demands: Sequence[str], weights: Sequence[float], net: Network,
                   comm_groups: str | None = None,
                   on_progress: Callable[[str, int, int], None] | None = None,
                   type_cpu_collectives: bool = False, cpu_collective_groups: str | None = None) -> list[Workload]:
    """Workloads from trace prefixes (first) and demand files (then), with weights in that order.

    ``comm_groups`` applies to every trace prefix; without it each prefix uses its
    ``PREFIX.groups.json`` when that exists. ``on_progress(prefix, ranks_read, ranks)`` follows
    the reading of each trace set. ``cpu_collective_groups`` (a mapping file) applies to every
    trace prefix and implies ``type_cpu_collectives``.
    """
    typed = type_cpu_collectives or cpu_collective_groups is not None
    cpu_groups = str(Path(cpu_collective_groups).resolve()) if cpu_collective_groups is not None else None
    n = len(traces) + len(demands)
    if n == 0:
        raise LibraError("no workload: give a trace PREFIX or --demand FILE")
    if weights and len(weights) != n:
        raise LibraError(f"--weight given {len(weights)} times for {n} workloads; give one per workload, in order "
                         "(trace prefixes first, then --demand files)")
    ws = list(weights) if weights else [1.0] * n
    out = []
    for i, prefix in enumerate(traces):
        if not is_trace_prefix(prefix):
            raise LibraError(f"{prefix}: no trace files {prefix}.0.et (or .et.gz); give the prefix of PREFIX.N.et files")
        groups = comm_groups or default_groups_path(prefix)
        step = None if on_progress is None else (lambda done, total, p=prefix: on_progress(p, done, total))
        d, _ = demand_from_traces(prefix, net, comm_groups=groups, on_progress=step,
                                  type_cpu_collectives=typed, cpu_collective_groups=cpu_groups)
        source = WorkloadSource(None, str(Path(prefix).resolve()), str(Path(groups).resolve()) if groups else None,
                                typed, cpu_groups)
        out.append(Workload(d, ws[i], Path(prefix).name, source))
    for j, path in enumerate(demands):
        d = load_demand(path)
        d.check_network(net, path)
        out.append(Workload(d, ws[len(traces) + j], d.name, WorkloadSource(str(Path(path).resolve()))))
    return out


# Demand notes that change what the optimizer sees: traffic the trace holds but the demand lacks,
# and traffic put on a process group the trace does not name.
_DOUBTFUL = ("without comm_dst", "CPU op(s) are collectives", "process group guessed")


def demand_warnings(workloads: Sequence[Workload]) -> list[str]:
    """Why some of the workloads' communication is not in their demand, or not surely on the
    dimensions it is charged to, one line each."""
    return [f"{w.name}: {n}" for w in workloads for n in w.demand.notes if any(k in n for k in _DOUBTFUL)]
