"""The search end to end: space, branch and bound on Dask, simulations, results files."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .algorithms import ALGORITHMS, auto_model
from .catalog import load_catalog
from .confirm import confirm_or_reason
from .dask_engine import Runner, cluster
from .engine import Settings, check_problem, enumerate_space, run_search, SearchResult
from .evaluate import Problem, evaluate_chunk
from .results import gain_over_ring, implementations_text, write_results
from .space import JobOptions
from .upstream import Constraints, CostModel, LibraError, PowerModel, TcoSettings, TimeModel, TraceSpec


@dataclass
class Report:
    result: SearchResult
    problem: Problem
    settings: Settings
    sims: dict
    files: dict
    level_names: tuple
    enumerate_s: float
    notes: list


def run(spec: TraceSpec, spec_path: str, npus: int, cost: CostModel, catalog_path: str, objective: str,
        cons: Constraints, model: TimeModel, blocks: Sequence[str], max_dims: int, sp: str,
        micro_batches: Sequence[int], hbm_bytes: float, optimizer_bytes: float, top: int,
        max_evals: int | None, time_limit: float | None, n_sim: int, binary: str | None, timeout: float,
        local_mem_bw: float, scheduler: str | None, workers: int | None, out: Path, overwrite: bool,
        progress: Callable, on_note: Callable[[str], None] = lambda _m: None, threads: bool = False,
        shapes: Sequence[tuple[int, ...]] | None = None, power: PowerModel | None = None,
        tco: TcoSettings | None = None, job: JobOptions = JobOptions(), algorithms: str = "ring") -> Report:
    catalog = load_catalog(catalog_path)
    if algorithms not in ALGORITHMS:
        raise LibraError(f"--algorithms: unknown value {algorithms!r}; use one of {', '.join(ALGORITHMS)}")
    if algorithms == "auto":
        auto_model(model, 1)      # refuses a model without algorithms
    problem = Problem(spec, catalog, cost, objective, cons, model, power, tco, algorithms)
    check_problem(problem)
    for b in blocks:
        if b not in ("Ring", "FullyConnected", "Switch"):
            raise LibraError(f"--blocks: unknown building block {b!r}; use Ring, FullyConnected, Switch")
    st = Settings(npus=npus, max_dims=max_dims, blocks=tuple(blocks), sp=sp, micro_batches=tuple(micro_batches),
                  top=top, hbm_bytes=hbm_bytes, optimizer_bytes_per_param=optimizer_bytes,
                  max_evaluations=max_evals, time_limit_s=time_limit,
                  shapes=tuple(tuple(s) for s in shapes) if shapes else None, job=job, lazy=True)
    notes: list[str] = []
    sims: dict = {}
    with cluster(scheduler, workers, threads=threads) as client:
        runner = Runner(client, problem)
        on_note(f"dask: {len(client.scheduler_info().get('workers', {}))} worker(s) at {client.scheduler.address}")
        t0 = time.perf_counter()
        space = enumerate_space(problem, st, runner.map)
        t_enum = time.perf_counter() - t0
        on_note(f"space: {space.counts.candidates_total:,} candidates; {space.size:,} after rules, memory and "
                f"block dominance, in {len(space.deferred):,} parallelizations ({t_enum:.1f} s)")
        res = run_search(problem, space, st, lambda ch, thr: runner.submit(evaluate_chunk, ch, thr),
                         runner.wait_any, on_progress=progress)
        ranked = res.ranked()
        if n_sim and ranked and not res.stop_reason.startswith("interrupted"):
            futs = []
            for i, o in enumerate(ranked[:n_sim]):
                futs.append(runner.submit(confirm_or_reason, o.candidate, o.bw_gbps, o.time_ns,
                                          str(out / "sim" / f"rank{i + 1}"),
                                          spec_path, binary, local_mem_bw, timeout, overwrite,
                                          o.implementations))
            try:
                for i, f in enumerate(futs):
                    got = f.result()     # confirm_or_reason returns a failure as {"failed": ...}
                    if "failed" in got:
                        notes.append(f"simulation of design {i + 1} failed: {got['failed']}")
                    else:
                        sims[i] = got
            except KeyboardInterrupt:
                notes.append("interrupted during simulation; simulated designs so far kept")
    summary = _summary(problem, st, res, spec_path, catalog_path, t_enum)
    level_names = tuple(lv.name for lv in catalog.levels)
    files = write_results(out, ranked, objective, level_names, summary, sims, top=top, overwrite=overwrite)
    if files["plot_note"]:
        notes.append(files["plot_note"])
    return Report(res, problem, st, sims, files, level_names, t_enum, notes)


def _summary(problem: Problem, st: Settings, res: SearchResult, spec_path: str, catalog_path: str,
             t_enum: float) -> dict:
    c = problem.constraints
    m = problem.model
    return {"spec": str(spec_path), "catalog": str(catalog_path), "cost": problem.cost.name,
            "npus": st.npus, "max_dims": st.max_dims, "blocks": list(st.blocks), "objective": problem.objective,
            "job_axes": {k: (list(v) if v is not None else "spec") for k, v in vars(st.job).items()},
            "constraints": {"total_bw_gbps": c.total_bw_gbps, "total_bw_is_upper_bound": c.total_bw_is_upper_bound,
                            "budget_usd": c.budget_usd, "time_target_ns": c.time_target_ns},
            "time_model": {"kind": m.kind, "splits": m.splits, "local_mem_bw_gbps": m.local_mem_bw_gbps,
                           "overlap": m.overlap},
            "memory": {"hbm_bytes": st.hbm_bytes, "reserve_fraction": st.hbm_reserve,
                       "optimizer_bytes_per_param": st.optimizer_bytes_per_param,
                       "per_parallelization_bytes": res.memory},
            "counts": res.counts.to_dict(), "stop_reason": res.stop_reason,
            "proven_gap": res.proven_gap, "lower_bound_of_rest": res.lower_bound_rest if
            math.isfinite(res.lower_bound_rest) else None,
            "enumerate_s": t_enum, "search_s": res.elapsed_s,
            **({"algorithms": problem.algorithms} if problem.algorithms != "ring" else {})}


# the energy objectives' values get their own column (perf's is the time, min-cost's the cost)
OBJECTIVE_UNITS = {"min-energy": "J per step", "perf-per-watt": "J (time x peak W)",
                   "min-tco": "USD per run"}


def _bound_text(obj: str, value: float) -> str:
    if obj == "min-cost":
        return _usd(value)
    if obj in OBJECTIVE_UNITS:
        return f"{value:,.6g} {OBJECTIVE_UNITS[obj]}"
    return _t(value)


def print_report(rep: Report, echo: Callable[[str], None]) -> None:
    res, prob = rep.result, rep.problem
    ranked = res.ranked()
    c = res.counts
    obj = prob.objective
    unit = OBJECTIVE_UNITS.get(obj)
    w = max([22] + [len(o.candidate.par.label) for o in ranked[:rep.settings.top]])
    auto = prob.algorithms == "auto"
    wa = max([10] + [len(implementations_text(o, short=True)) for o in ranked[:rep.settings.top]]) if auto else 0
    echo(f"{'#':>3} {'shape':<12} {'blocks':<12} {'parallel':<{w}} {'placement':<18} {'GB/s per dim':<26} "
         f"{'cost':>13} {'predicted':>12} {'gap':>8}" + (f" {obj + ', ' + unit:>22}" if unit else "")
         + (f" {'algorithms':<{wa}} {'vs ring':>8}" if auto else ""))
    for i, o in enumerate(ranked[:rep.settings.top]):
        k = o.candidate
        blocks = "x".join({"Ring": "R", "FullyConnected": "F", "Switch": "S"}[b] for b in k.blocks)
        echo(f"{i + 1:>3} {'x'.join(map(str, k.shape)):<12} {blocks:<12} {k.par.label:<{w}} {k.placement_text:<18} "
             f"{' '.join(f'{b:.1f}' for b in o.bw_gbps):<26} {_usd(o.cost_usd):>13} {_t(o.time_ns):>12} "
             f"{o.rel_gap:>8.1e}" + (f" {o.objective_value:>22,.6g}" if unit else "")
             + (f" {implementations_text(o, short=True):<{wa}} {_gain_text(o):>8}" if auto else ""))
    pruned = sum(c.pruned_bound.values())
    echo("")
    echo(f"space: {c.candidates_total:,} candidates ({c.networks_total:,} networks x parallelizations x placements)")
    echo(f"  pruned before evaluation: {c.pruned_block_limit:,} block size limits, {c.pruned_memory:,} memory "
         f"({c.parallelizations_total - c.parallelizations_valid} parallelizations break the generator's rules, "
         f"{c.memory_pruned_parallelizations} exceed HBM), {c.pruned_dominated:,} dominated blocks")
    by = ", ".join(f"{n:,} by the {k} bound" for k, n in sorted(c.pruned_bound.items())) or "none"
    echo(f"  of {res.space_size:,} left: evaluated {c.evaluated:,} ({c.infeasible:,} infeasible), pruned {pruned:,} "
         f"({by}), not reached {c.not_reached:,}")
    if c.memory_pruned_parallelizations or c.parallelizations_valid:
        fit = c.parallelizations_valid - c.memory_pruned_parallelizations
        echo(f"  programs built for {c.expanded_parallelizations:,} of the {fit:,} parallelizations that fit; the "
             "others' closed-form bound is at least the K-th best")
    echo(f"  {res.stop_reason}; {rep.enumerate_s:.1f} s enumerating, {res.elapsed_s:.1f} s searching")
    if auto:
        echo("  algorithms: chosen per design with its bandwidths (r ring, d direct, hd halvingDoubling, per dimension; "
             "kinds not listed: ring); vs ring: the same design with ring everywhere / chosen (-: infeasible with ring)")
    if res.counts.not_reached:
        echo(f"  proven: the best design is within {res.proven_gap:.2%} of the optimum over the whole space "
             f"(every candidate not reached has a lower bound >= {_bound_text(obj, res.lower_bound_rest)})")
    if rep.sims:
        echo("")
        echo(f"{'#':>3} {'predicted':>14} {'simulated':>14} {'error':>9}  run")
        for i, s in sorted(rep.sims.items()):
            echo(f"{i + 1:>3} {_t(s['predicted_ns']):>14} {_t(s['simulated_ns']):>14} {s['error']:>+9.3%}  {s['run_dir']} "
                 f"(simulated in {s['simulate_s']:.1f} s)")
    for n in rep.notes:
        echo(n)
    for f in rep.files["files"]:
        if f.endswith(("ranked.csv", "search.json")):
            echo(f"wrote {f}")


def _gain_text(o) -> str:
    g = gain_over_ring(o)
    return f"x{g:.4f}" if math.isfinite(g) else "-"     # ring everywhere infeasible there


def _t(ns: float) -> str:
    if not math.isfinite(ns):
        return "-"
    return f"{ns / 1e6:.4f} ms" if ns < 1e9 else f"{ns / 1e9:.4f} s"


def _usd(v: float) -> str:
    return "-" if not math.isfinite(v) else f"${v:,.0f}"
