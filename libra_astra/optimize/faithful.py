"""The bandwidths that minimize a measured run's GPU-faithful step (measure/faithful_time.py),
beside the time model's optimum of the same run's traces.

The optimizer solves the GPU-faithful model like the overlap model: the slowest rank's replayed
step is a maximum over dependency paths of a constant plus collective times, so it adds each
rank's critical path at the design it reached until those are all in the problem. Both optima
are then timed by both models: the GPU-faithful step, and the time model's (ASTRA-sim's
semantics, what the simulator reproduces for the traces).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..demand.workload import Workload
from ..errors import LibraError
from ..measure.faithful_time import FaithfulTime, faithful_time
from ..measure.kineto import read_profiles
from ..measure.measurement import measure_profiles
from ..model.cost import CostModel
from ..model.network import Network
from ..timing.model import TimeModel
from .optimizer import Constraints, OptimizeResult, evaluate, optimize


@dataclass(frozen=True)
class FaithfulOptimum:
    result: OptimizeResult              # optimized for the GPU-faithful step; its times are that step
    rank_steps_ns: tuple[float, ...]    # each rank's GPU-faithful step at it
    floor_ns: float                     # the slowest rank's step with every modelled transfer free
    model_ns: float                     # the time model's time of the traces at it
    other: OptimizeResult               # the time model's optimum of the traces
    other_faithful_ns: float            # the GPU-faithful step at that optimum
    time: FaithfulTime


def faithful_model(measured: Sequence[str], net: Network, model: TimeModel) -> FaithfulTime:
    """The GPU-faithful step of the run whose Kineto traces are ``measured``, its collectives
    timed by ``model``."""
    profiles, notes = read_profiles(measured)
    m = measure_profiles(profiles, notes, net, str(measured[0]))
    if m.host_only:
        raise LibraError(f"{measured[0]}: a CPU-only (gloo) run has no GPU to be faithful to; --gpu-faithful "
                         "optimizes GPU runs (its host-faithful replay is shown by --measured alone)")
    return faithful_time(m, profiles, net, replace(model, overlap=False, replay=None))


def optimize_faithful(measured: Sequence[str], workloads: Sequence[Workload], net: Network, cost: CostModel,
                      objective: str, constraints: Constraints, model: TimeModel,
                      other: OptimizeResult, **kw) -> FaithfulOptimum:
    """``other``: the time model's optimum of ``workloads`` (the run's traces) under the same
    objective and constraints; ``kw`` go to optimize (power, tco)."""
    ft = faithful_model(measured, net, model)
    fm = replace(model, overlap=True, replay=ft)
    r = optimize([Workload(ft.demand, name="gpu-faithful")], net, cost, objective=objective,
                 constraints=constraints, model=fm, **kw)
    at = evaluate(workloads, net, cost, r.bw_gbps, constraints, model)
    return FaithfulOptimum(r, tuple(ft.rank_steps_ns(r.bw_gbps)), ft.floor_ns, at.time_ns, other,
                           ft.time_ns(other.bw_gbps), ft)


def faithful_to_dict(f: FaithfulOptimum, model_name: str) -> dict:
    r = f.result
    return {
        "model": "GPU-faithful: the measured run's slowest rank, replayed (stream order, launches, recorded waits "
                 "and syncs) with each collective's transfer from the time model",
        "objective": r.objective, "bandwidth_gbps": list(r.bw_gbps), "time_ns": r.best.time_ns,
        "cost_usd": r.best.cost_usd, "objective_value": r.fun, "dual_bound": r.dual_bound,
        "relative_gap": r.rel_gap, "success": r.success, "message": r.message,
        "rank_steps_ns": list(f.rank_steps_ns), "floor_ns": f.floor_ns,
        f"{model_name}_time_ns": f.model_ns,
        f"{model_name}_optimum": {"bandwidth_gbps": list(f.other.bw_gbps), "gpu_faithful_time_ns": f.other_faithful_ns,
                                  "time_ns": f.other.best.time_ns, "cost_usd": f.other.best.cost_usd},
    }
