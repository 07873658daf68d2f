"""A network design: bandwidth per dimension for a network and the workloads it was made for.

Design JSON, version 1 (``"format": "libra_astra.design"``), written by ``libra-astra optimize``
and read by ``libra-astra emit``::

    {
      "format": "libra_astra.design", "version": 1,
      "name": "gpt3-paper3d-perf",
      "network": {...},                    # the network file's content (see model/network.py)
      "bandwidth_gbps": [200.0, 100.0, 50.0],
      "objective": "perf",
      "time_model": "libra",
      "predicted_time_ns": 1.23e9,
      "cost_usd": 4.5e6,
      "workloads": [
        {"name": "gpt3", "weight": 1.0,
         "demand": "/abs/path/demand.json",   # or null
         "traces": "/abs/path/traces/gpt3",   # Chakra ET prefix, or null
         "comm_groups": "/abs/path/groups.json"}  # or null
      ],
      "result": {...}                       # solver report and baselines (informational)
    }
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..demand.workload import Workload
from ..errors import LibraError
from ..files import read_json
from ..model.network import Network, network_from_dict

if TYPE_CHECKING:
    from .optimizer import Evaluation, OptimizeResult

FORMAT = "libra_astra.design"
VERSION = 1


@dataclass(frozen=True)
class WorkloadRef:
    """Where one workload of a design came from (absolute paths, or None)."""

    name: str
    weight: float = 1.0
    demand: str | None = None
    traces: str | None = None
    comm_groups: str | None = None

    @classmethod
    def of(cls, w: Workload) -> "WorkloadRef":
        """The design file's record of a loaded workload."""
        return cls(w.name, w.weight, w.source.demand, w.source.traces, w.source.comm_groups)


@dataclass(frozen=True)
class Design:
    name: str
    network: Network
    bandwidth_gbps: tuple[float, ...]
    objective: str = "perf"
    time_model: str = "libra"
    predicted_time_ns: float = 0.0
    cost_usd: float = 0.0
    workloads: tuple[WorkloadRef, ...] = ()
    result: Mapping[str, Any] = field(default_factory=dict)


def design_to_dict(d: Design) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": d.name,
        "network": d.network.to_dict(),
        "bandwidth_gbps": list(d.bandwidth_gbps),
        "objective": d.objective,
        "time_model": d.time_model,
        "predicted_time_ns": d.predicted_time_ns,
        "cost_usd": d.cost_usd,
        "workloads": [
            {"name": w.name, "weight": w.weight, "demand": w.demand, "traces": w.traces, "comm_groups": w.comm_groups}
            for w in d.workloads
        ],
        "result": dict(d.result),
    }


def design_from_dict(data: Any, source: str = "<design>") -> Design:
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise LibraError(f"{source}: not a design file (\"format\" must be {FORMAT!r}); make one with 'libra-astra optimize -o'")
    if data.get("version") != VERSION:
        raise LibraError(f"{source}: design version {data.get('version')!r} is not supported; this libra_astra reads version {VERSION}")
    net = network_from_dict(data.get("network"), f"{source}: network")
    bw = data.get("bandwidth_gbps")
    if (not isinstance(bw, list) or len(bw) != net.num_dims
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and b >= 0 for b in bw)):
        raise LibraError(f"{source}: bandwidth_gbps must list {net.num_dims} numbers >= 0 (one per dimension), got {bw!r}")
    workloads = []
    for i, w in enumerate(data.get("workloads", [])):
        if not isinstance(w, Mapping):
            raise LibraError(f"{source}: workloads[{i}] must be an object")
        workloads.append(WorkloadRef(str(w.get("name", f"w{i}")), float(w.get("weight", 1.0)), w.get("demand"),
                                     w.get("traces"), w.get("comm_groups")))
    return Design(str(data.get("name", Path(source).stem)), net, tuple(float(b) for b in bw),
                  str(data.get("objective", "perf")), str(data.get("time_model", "libra")),
                  float(data.get("predicted_time_ns", 0.0)), float(data.get("cost_usd", 0.0)),
                  tuple(workloads), data.get("result", {}))


def load_design(path: str | Path) -> Design:
    data = read_json(path, "design", f"make one with 'libra-astra optimize ... -o {path}'")
    return design_from_dict(data, str(path))


def _evaluation_to_dict(e: "Evaluation") -> dict[str, Any]:
    return {"bandwidth_gbps": list(e.bw_gbps), "time_ns": e.time_ns, "compute_ns": e.compute_ns,
            "communication_ns": e.communication_ns, "cost_usd": e.cost_usd,
            "time_x_cost_ns_usd": e.time_cost_ns_usd, "feasible": e.feasible}


def result_to_dict(r: "OptimizeResult", net: Network) -> dict[str, Any]:
    """The design file's ``result``: the solver report and the baselines (also ``optimize --json``)."""
    out = {
        "objective": r.objective,
        "dimensions": list(net.dim_names),
        "optimum": _evaluation_to_dict(r.best),
        "objective_value": r.fun,
        "dual_bound": r.dual_bound,
        "relative_gap": r.rel_gap if math.isfinite(r.rel_gap) else None,
        "success": r.success,
        "status": r.status,
        "message": r.message,
        "solve_time_s": r.solve_time_s,
        "newton_steps": r.newton_steps,
        "collectives": r.num_collectives,
        "merged_terms": r.num_terms,
        "baselines": {},
    }
    for name, e in r.baselines.items():
        out["baselines"][name] = {**_evaluation_to_dict(e), "speedup_of_optimum": e.time_ns / r.best.time_ns,
                                  "perf_per_cost_gain_of_optimum": e.time_cost_ns_usd / r.best.time_cost_ns_usd}
    return out
