"""Confirm designs in ASTRA-sim: generate the candidate's traces, emit the design, simulate it.

A task of its own (``confirm``), so the simulations of the top K designs run on the cluster like
the evaluations; a worker finds the binary through ``binary`` or its own ASTRA_SIM_BIN.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from .evaluate import Candidate, Problem, candidate_spec, programs_for
from .spec_demand import demand_from_spec
from .upstream import Design, LibraError, WorkloadRef, emit, generate, load_yaml, resolve_binary, simulate


def candidate_raw_spec(raw: Mapping[str, Any], cand: Candidate) -> dict:
    """The generator spec (as YAML data) of a candidate, from the base spec's data."""
    out = {k: v for k, v in raw.items() if k not in ("network", "parallel", "placement")}
    out["network"] = {"npus_per_dim": list(cand.shape)}
    model = dict(raw["model"])
    if model.get("type") == "transformer":
        model["micro_batch"] = cand.par.micro_batch
        par = dict(raw.get("parallel") or {})
        par.update(tp=cand.par.tp, pp=cand.par.pp, dp=cand.par.dp, cp=cand.par.cp, ep=cand.par.ep,
                   sequence_parallel=cand.par.sp, schedule=cand.par.schedule, zero=cand.par.zero,
                   recompute=cand.par.recompute)
        if cand.par.virtual_stages > 1:
            par["virtual_stages"] = cand.par.virtual_stages
        else:
            par.pop("virtual_stages", None)
        out["parallel"] = par
        out["placement"] = {a: list(d) for a, d in cand.placement} or {"dp": [0]}
    elif raw.get("parallel") is not None:
        out["parallel"] = raw["parallel"]
    out["model"] = model
    return out


def confirm(problem: Problem, cand: Candidate, bw_gbps: tuple[float, ...], predicted_ns: float, run_dir: str,
            spec_path: str, binary: str | None, local_mem_bw_gbps: float, timeout_s: float,
            overwrite: bool = False, implementations: tuple = ()) -> dict:
    """Generate, emit and simulate one design; returns predicted, simulated and their error.
    ``implementations`` (--algorithms auto): the lists chosen per kind, written to system.json."""
    t0 = time.perf_counter()
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = candidate_raw_spec(load_yaml(spec_path, "trace spec"), cand)
    prefix = out / "traces" / problem.spec.name
    gen = generate(raw, prefix, overwrite=overwrite)
    net = problem.catalog.network(cand.shape, cand.blocks, cand.levels)
    ref = WorkloadRef(problem.spec.name, 1.0, None, str(prefix.resolve()),
                      str(gen.groups_path.resolve()) if gen.groups_path else None)
    system = None
    if implementations:
        from .algorithms import system_record
        system = system_record(net.num_dims, problem.model, implementations)
    design = Design(f"{problem.spec.name}-{net.name}-{cand.par.label}", net, tuple(bw_gbps), problem.objective,
                    problem.model.kind, predicted_ns, problem.cost.network_cost_usd(net, bw_gbps), (ref,),
                    system=system)
    t_gen = time.perf_counter() - t0
    # The demand built from the spec equals the traces' (tested), so emit need not read them back.
    spec = candidate_spec(problem.spec, net, cand.par, cand.placement)
    demand = demand_from_spec(spec, net, programs=programs_for(problem.spec, cand.par), labels=False)
    emit(design, out / "astra", splits=problem.model.splits, overwrite=overwrite,
         local_mem_bw_gbps=local_mem_bw_gbps, demand=demand)
    t_emit = time.perf_counter() - t0 - t_gen
    res = simulate(out / "astra", resolve_binary(binary), timeout_s=timeout_s, overwrite=overwrite)
    sim = float(res.simulated_time_ns)
    return {"run_dir": str(out / "astra"), "predicted_ns": predicted_ns, "simulated_ns": sim,
            "error": predicted_ns / sim - 1.0, "emit_predicted_ns": res.predicted_time_ns,
            "generate_s": t_gen, "emit_s": t_emit, "simulate_s": res.wall_seconds}


def confirm_or_reason(*args: Any, **kwargs: Any) -> dict:
    """:func:`confirm`, with a failure the user can fix returned as ``{"failed": message}``: Dask logs
    a task that raises with its whole traceback, noise around a one-line reason."""
    try:
        return confirm(*args, **kwargs)
    except LibraError as e:
        return {"failed": str(e)}
