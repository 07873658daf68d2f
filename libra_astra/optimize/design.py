"""A network design: bandwidth per dimension for a network and the workloads it was made for.

Design JSON, version 1 (``"format": "libra_astra.design"``), written by ``libra-astra optimize``
and read by ``libra-astra emit``::

    {
      "format": "libra_astra.design", "version": 1,
      "name": "gpt3-paper3d-perf",
      "network": {...},                    # the network file's content (see model/network.py)
      "bandwidth_gbps": [200.0, 100.0, 50.0],
      "objective": "perf",
      "time_model": "pipelined",
      "time_model_settings": {"kind": "pipelined", "splits": 1, "overlap": true, "latency": true,
                              "local_mem_bw_gbps": 1e9},   # what emit simulates (timing/settings.py)
      "predicted_time_ns": 1.23e9,
      "cost_usd": 4.5e6,
      "workloads": [
        {"name": "gpt3", "weight": 1.0,
         "demand": "/abs/path/demand.json",   # or null
         "traces": "/abs/path/traces/gpt3",   # Chakra ET prefix, or null
         "comm_groups": "/abs/path/groups.json",  # or null
         "type_cpu_collectives": true,            # optional: gloo collectives typed (default false)
         "cpu_collective_groups": "/abs/path/cpu_groups.yml"}  # optional: their process groups
      ],
      "result": {...}                       # solver report and baselines (informational)
    }
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..model.numbers import ratio
from ..demand.workload import Workload
from ..errors import LibraError
from ..files import read_json
from ..model.network import Network, network_from_dict
from ..timing.settings import model_from_settings
from ..model.numbers import check_int, check_number, check_str

if TYPE_CHECKING:
    from ..timing.model import TimeModel
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
    type_cpu_collectives: bool = False
    cpu_collective_groups: str | None = None   # mapping file of typed collectives' groups

    @classmethod
    def of(cls, w: Workload) -> "WorkloadRef":
        """The design file's record of a loaded workload."""
        return cls(w.name, w.weight, w.source.demand, w.source.traces, w.source.comm_groups,
                   w.source.type_cpu_collectives, w.source.cpu_collective_groups)


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
    # The time model the bandwidths were optimized for (timing/settings.py); emit simulates it.
    time_model_settings: Mapping[str, Any] = field(default_factory=dict)
    # The user's ASTRA-sim system.json ({"path", "settings": its keys as written}), if optimized
    # with --system: emit writes it back.
    system: Mapping[str, Any] | None = None


def design_to_dict(d: Design) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": d.name,
        "network": d.network.to_dict(),
        "bandwidth_gbps": list(d.bandwidth_gbps),
        "objective": d.objective,
        "time_model": d.time_model,
        "time_model_settings": dict(d.time_model_settings) or {"kind": d.time_model},
        "predicted_time_ns": d.predicted_time_ns,
        "cost_usd": d.cost_usd,
        "workloads": [
            {"name": w.name, "weight": w.weight, "demand": w.demand, "traces": w.traces, "comm_groups": w.comm_groups,
             **({"type_cpu_collectives": True} if w.type_cpu_collectives else {}),
             **({"cpu_collective_groups": w.cpu_collective_groups} if w.cpu_collective_groups else {})}
            for w in d.workloads
        ],
        "result": dict(d.result),
        **({"system": dict(d.system)} if d.system is not None else {}),
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
    raw_wl = data.get("workloads", [])
    if not isinstance(raw_wl, list):
        raise LibraError(f"{source}: workloads must be a list of objects, got {type(raw_wl).__name__}")
    workloads = []
    for i, w in enumerate(raw_wl):
        where = f"{source}: workloads[{i}]"
        if not isinstance(w, Mapping):
            raise LibraError(f"{where} must be an object")
        paths = [check_str(w.get(k), where, k, optional=True) for k in ("demand", "traces", "comm_groups")]
        typed = w.get("type_cpu_collectives", False)
        if not isinstance(typed, bool):
            raise LibraError(f"{where}: type_cpu_collectives must be true or false, got {typed!r}")
        cpu_groups = check_str(w.get("cpu_collective_groups"), where, "cpu_collective_groups", optional=True)
        workloads.append(WorkloadRef(str(w.get("name", f"w{i}")),
                                     check_number(w.get("weight", 1.0), where, "weight", minimum=0, finite=True), *paths,
                                     typed or cpu_groups is not None, cpu_groups))
    result = data.get("result", {})
    if not isinstance(result, Mapping):
        raise LibraError(f"{source}: result must be an object, got {type(result).__name__}")
    for b in bw:   # a petabyte per second per NPU is far beyond any link, and stays finite in GiB/s
        check_number(b, source, "bandwidth_gbps", minimum=0, maximum=1e15, finite=True)
    kind = str(data.get("time_model", "libra"))
    settings = data.get("time_model_settings")
    if settings is None:
        # Files written before the settings were stored kept them in the result.
        settings = {"kind": kind, "overlap": bool(result.get("overlap", False))}
        if kind == "pipelined":
            mem = result.get("local_mem_bw_gbps")
            settings.update(splits=check_int(result.get("splits", 1), source, "result.splits", minimum=1),
                            latency=True,
                            local_mem_bw_gbps=None if mem is None else check_number(
                                mem, source, "result.local_mem_bw_gbps", minimum=0, strict=True, finite=True))
    elif not isinstance(settings, Mapping) or settings.get("kind") != kind:
        raise LibraError(f"{source}: time_model_settings must be an object whose kind is the time_model {kind!r}, "
                         f"got {str(settings)[:80]!r}")
    else:
        # what emit and the loop read back (splits, local-mem-bw, ...) must make a time model
        model_from_settings(settings, source)
    system = data.get("system")
    if system is not None and not (isinstance(system, Mapping) and isinstance(system.get("path"), str)
                                   and isinstance(system.get("settings"), Mapping)):
        raise LibraError(f"{source}: system must be an object with a path and the system.json settings, "
                         f"got {str(system)[:80]!r}")
    return Design(str(data.get("name", Path(source).stem)), net, tuple(float(b) for b in bw),
                  str(data.get("objective", "perf")), kind,
                  check_number(data.get("predicted_time_ns", 0.0), source, "predicted_time_ns", minimum=0, finite=True),
                  check_number(data.get("cost_usd", 0.0), source, "cost_usd", minimum=0, finite=True),
                  tuple(workloads), result, dict(settings), None if system is None else dict(system))


def load_design(path: str | Path) -> Design:
    data = read_json(path, "design", f"make one with 'libra-astra optimize ... -o {path}'")
    return design_from_dict(data, str(path))


def _evaluation_to_dict(e: "Evaluation") -> dict[str, Any]:
    return {"bandwidth_gbps": list(e.bw_gbps), "time_ns": e.time_ns, "compute_ns": e.compute_ns,
            "communication_ns": e.communication_ns, "cost_usd": e.cost_usd,
            "time_x_cost_ns_usd": e.time_cost_ns_usd, "feasible": e.feasible}


def result_to_dict(r: "OptimizeResult", net: Network, model: "TimeModel | None" = None,
                   workloads: Sequence["Workload"] = ()) -> dict[str, Any]:
    """The design file's ``result``: the solver report and the baselines (also ``optimize --json``);
    given the model and workloads, also its settings, each workload's time and the time breakdown."""
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
        out["baselines"][name] = {**_evaluation_to_dict(e), "speedup_of_optimum": ratio(e.time_ns, r.best.time_ns),
                                  "perf_per_cost_gain_of_optimum": (ratio(e.time_cost_ns_usd, r.best.time_cost_ns_usd)
                                                                   if r.best.cost_usd else None)}
    if model is not None:
        from ..timing.settings import model_settings
        from .report import time_breakdown, workload_times

        out["time_model"] = model_settings(model)
        flat = [w.name for w in workloads if any(rc.dag is None for rc in w.demand.rank_classes)]
        if model.overlap and flat:
            out["notes"] = [f"{', '.join(flat)}: no dependency graph (a demand file without \"dag\"), so its time "
                            "is the no-overlap sum"]
        if workloads:
            out["workloads"] = workload_times(workloads, net, r.bw_gbps, model)
            out["breakdown"] = {name: time_breakdown(workloads, net, e.bw_gbps, model)
                                for name, e in [("optimum", r.best), *r.baselines.items()]}
    return out
