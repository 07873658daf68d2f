"""One candidate, evaluated exactly: its network, its demand from the spec, and optimize()."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Sequence

from .catalog import Catalog
from .space import Parallelization, spec_parallel
from .spec_demand import Programs, demand_from_spec, prepare
from .upstream import (Constraints, CostModel, InfeasibleError, LibraError, Network, Plan, PowerModel, TcoSettings,
                       TimeModel, TraceSpec, TransformerModel, Workload, build_plan, optimize, place_axes)


@dataclass(frozen=True)
class Candidate:
    """A design point: network shape and blocks, parallelization and its placement."""

    shape: tuple[int, ...]
    blocks: tuple[str, ...]
    levels: tuple[int, ...]
    par: Parallelization
    placement: tuple[tuple[str, tuple[int, ...]], ...]   # axis -> dims, innermost axis first
    bound: float = 0.0
    bound_name: str = ""

    @property
    def placement_text(self) -> str:
        return " ".join(f"{a}:{'+'.join(map(str, dims))}" for a, dims in self.placement) or "-"


@dataclass(frozen=True)
class Problem:
    """Everything a worker needs besides the candidate (sent once per task chunk)."""

    spec: TraceSpec
    catalog: Catalog
    cost: CostModel
    objective: str
    constraints: Constraints
    model: TimeModel
    power: PowerModel | None = None       # the energy objectives' figures
    tco: TcoSettings | None = None        # min-tco's prices and lifetime
    algorithms: str = "ring"              # "auto": implementations chosen per candidate (algorithms.py)


@dataclass(frozen=True)
class Outcome:
    candidate: Candidate
    status: str                     # "ok" | "infeasible" | "pruned"
    objective_value: float = math.nan
    time_ns: float = math.nan
    cost_usd: float = math.nan
    bw_gbps: tuple[float, ...] = ()
    compute_ns: float = math.nan
    dual_bound: float = math.nan
    rel_gap: float = math.nan
    solver: str = ""
    eval_s: float = 0.0
    reason: str = ""
    # --algorithms auto: the implementation lists per kind (timing.astra_settings.KINDS order) and
    # the same candidate's optimum with ring everywhere
    implementations: tuple[tuple[str, ...], ...] = ()
    ring_value: float = math.nan


def candidate_spec(base: TraceSpec, net: Network, par: Parallelization,
                   placement: Sequence[tuple[str, Sequence[int]]]) -> TraceSpec:
    """The spec of a candidate: the base spec's model with this parallelization and placement."""
    if not isinstance(base.model, TransformerModel):
        layout = place_axes(net, {"dp": None}, {"dp": list(range(net.num_dims))}, f"network {net.name!r}")
        return replace(base, layout=layout)
    degrees = par.degrees()
    layout = place_axes(net, degrees, {a: list(d) for a, d in placement}, base.source)
    model = replace(base.model, micro_batch=par.micro_batch)
    return replace(base, model=model, layout=layout, parallel=spec_parallel(par, base))


_CACHE: dict = {}   # per process: parallelization -> [flat spec, plan, Programs or None]


def _cached(base: TraceSpec, par: Parallelization) -> list:
    key = (base.source, base.name, base.model, base.tflops, base.mem_bw_gbps, base.iterations,
           base.parallel.grad_bucket_bytes, par)
    got = _CACHE.get(key)
    if got is None:
        from .upstream import Dimension
        n = math.prod(par.degree_tuple())
        flat = Network("flat", (Dimension("d0", "Ring", n),))
        order = [(a, (0,)) for a, d in par.degrees().items() if d > 1]
        spec = candidate_spec(base, flat, par, order)
        if len(_CACHE) > 64:
            _CACHE.clear()
        got = _CACHE[key] = [spec, build_plan(spec, names=False), None]
    return got


def plan_for(base: TraceSpec, par: Parallelization) -> Plan:
    """The generator's programs of a parallelization, without op names (cached per process; they do
    not depend on the network or the placement). The bounds need only these."""
    return _cached(base, par)[1]


def programs_for(base: TraceSpec, par: Parallelization) -> Programs:
    """Programs of a parallelization with the analysis the demand needs (cached per process)."""
    got = _cached(base, par)
    if got[2] is None:
        got[2] = prepare(got[0], got[1])
    return got[2]


def evaluate(problem: Problem, cand: Candidate) -> Outcome:
    """Exact optimum of one candidate (optimize() with the problem's time model; with
    ``algorithms`` auto, the implementations chosen with the bandwidths)."""
    t0 = time.perf_counter()
    net = problem.catalog.network(cand.shape, cand.blocks, cand.levels)
    spec = candidate_spec(problem.spec, net, cand.par, cand.placement)
    demand = demand_from_spec(spec, net, programs=programs_for(problem.spec, cand.par), labels=False)
    workloads = [Workload(demand, 1.0, spec.name)]
    impls, ring_value = (), math.nan
    try:
        if problem.algorithms == "auto":
            from .algorithms import choose
            choice = choose(workloads, net, problem.cost, problem.objective, problem.constraints, problem.model,
                            problem.power, problem.tco)
            r, impls = choice.result, choice.timing.implementations
            ring_value = choice.ring.fun if choice.ring is not None else math.inf   # ring: infeasible
        else:
            r = optimize(workloads, net, problem.cost, objective=problem.objective, constraints=problem.constraints,
                         model=problem.model, baselines=False, power=problem.power, tco=problem.tco)
    except InfeasibleError as e:
        return Outcome(cand, "infeasible", reason=str(e), eval_s=time.perf_counter() - t0)
    except LibraError as e:
        return Outcome(cand, "infeasible", reason=str(e), eval_s=time.perf_counter() - t0)
    b = r.best
    return Outcome(cand, "ok", r.fun, b.time_ns, b.cost_usd, tuple(b.bw_gbps), b.compute_ns, r.dual_bound, r.rel_gap,
                   r.message, time.perf_counter() - t0, implementations=impls, ring_value=ring_value)


def evaluate_chunk(problem: Problem, cands: Sequence[Candidate], threshold: float) -> list[Outcome]:
    """Evaluate candidates whose bound is below ``threshold`` (the search's current K-th best)."""
    out = []
    for c in cands:
        if c.bound >= threshold:
            out.append(Outcome(c, "pruned", reason=c.bound_name))
        else:
            out.append(evaluate(problem, c))
    return out
