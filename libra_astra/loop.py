"""Closed loop: optimize -> emit -> simulate -> compare -> (calibrate -> re-optimize).

Iteration 0 optimizes with the time model that matches the emitted simulator settings (the
``pipelined`` model with the same chunk count, latency and local memory bandwidth, following each
rank's dependency graph unless ``overlap`` is off), then emits and
simulates the optimized design and the baselines (EqualBW and TrafficProportional, same total
bandwidth). Each later iteration calibrates: it simulates the current best design with one
dimension's bandwidth raised by ``probe`` at a time, fits a per-dimension efficiency so the model's
sensitivities match the simulator's, re-optimizes with it and simulates the new design. The loop
stops when the simulated time no longer improves by ``min_gain`` or after ``calibrate`` iterations.

Every run directory is kept under ``out_dir``: ``iter0/optimized/<workload>``, ``iter0/EqualBW/...``,
``iter1/probe-<dim>/...``, ``iter1/optimized/...``, plus ``loop.json`` with the summary.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .model.numbers import ratio
from .astra.emit import emit
from .astra.run import backend_of, resolve_binary, simulate
from .model.cost import CostModel
from .optimize.design import Design, WorkloadRef
from .errors import LibraError
from .model.network import Network
from .model.power import PowerModel
from .optimize.energy import energy_rate
from .optimize.tco import TcoSettings
from .optimize.optimizer import Constraints, Workload, optimize
from .timing.predict import predict
from .timing.model import TimeModel, simulator_model
from .timing.settings import header, model_settings


@dataclass(frozen=True)
class LoopRow:
    iteration: int
    name: str
    bw_gbps: tuple[float, ...]
    cost_usd: float
    predicted_ns: float
    simulated_ns: float
    run_dirs: tuple[str, ...]
    # Per workload (name, weight, predicted_ns, simulated_ns), unweighted; the totals are weighted sums.
    workloads: tuple[tuple[str, float, float, float], ...] = ()

    @property
    def error(self) -> float:
        """Relative prediction error, (predicted - simulated) / simulated."""
        return self.predicted_ns / self.simulated_ns - 1.0 if self.simulated_ns else math.nan


@dataclass(frozen=True)
class LoopResult:
    rows: tuple[LoopRow, ...]
    efficiency: tuple[tuple[float, ...], ...]     # per iteration
    best: LoopRow
    stop_reason: str
    splits: int
    binary: str
    notes: tuple[str, ...] = field(default=())
    time_model_settings: dict = field(default_factory=dict)   # of iteration 0 (timing.settings.model_settings)
    objective: str = "perf"

    def to_dict(self, net: Network) -> dict:
        def row(r: LoopRow) -> dict:
            return {"iteration": r.iteration, "name": r.name, "bandwidth_gbps": list(r.bw_gbps),
                    "cost_usd": r.cost_usd, "predicted_ns": r.predicted_ns, "simulated_ns": r.simulated_ns,
                    "relative_error": r.error, "run_dirs": list(r.run_dirs),
                    "workloads": [{"name": n, "weight": w, "predicted_ns": p, "simulated_ns": s}
                                  for n, w, p, s in r.workloads]}
        base = {r.name: r for r in self.rows if r.iteration == 0}
        opt0 = base.get("optimized")
        speedups = {name: ratio(r.simulated_ns, self.best.simulated_ns) for name, r in base.items() if name != "optimized"}
        return {
            "format": "libra_astra.loop", "version": 1,
            "dimensions": list(net.dim_names), "splits": self.splits, "binary": self.binary,
            "objective": self.objective, "time_model": self.time_model_settings,
            "rows": [row(r) for r in self.rows],
            "efficiency_per_iteration": [list(e) for e in self.efficiency],
            "best": row(self.best),
            "simulated_speedup_of_best_over": speedups,
            "first_optimized_simulated_ns": opt0.simulated_ns if opt0 else None,
            "stop_reason": self.stop_reason,
            "notes": list(self.notes),
        }


def run_loop(workloads: Sequence[Workload], net: Network, cost: CostModel, *,
             out_dir: str | Path, objective: str = "perf", constraints: Constraints = Constraints(),
             binary: str | None = None, splits: int = 1, local_mem_bw_gbps: float = 1e9, calibrate: int = 0,
             probe: float = 1.25, min_gain: float = 1e-3, timeout_s: float = 3600.0, overwrite: bool = False,
             overlap: bool = True, system: Mapping[str, Any] | None = None, power: PowerModel | None = None,
             tco: TcoSettings | None = None, on_event: Callable[[str], None] = lambda _msg: None,
             on_progress: Callable[[str], None] = lambda _msg: None,
             measured: Sequence[str] = ()) -> LoopResult:
    """Run the closed loop; see the module docstring. ``on_event`` receives a line per finished run,
    ``on_progress`` a line when each step (optimize, emit, simulate) starts. ``system``: the user's
    system.json as a design records it, emitted for every run (its splits and local-mem-bw are
    the caller's ``splits`` and ``local_mem_bw_gbps``). ``power``: the energy objectives' figures;
    each run's line then gives its energy per step at the simulated time. ``tco``: min-tco's prices.
    ``measured``: a measured run's Kineto traces (one workload, no calibration): optimize its
    GPU-faithful step instead (optimize/faithful.py); the runs simulate the traces at that optimum."""
    if not workloads:
        raise LibraError("the loop needs at least one workload")
    refs = tuple(WorkloadRef.of(w) for w in workloads)
    for ref in refs:
        if ref.traces is None and ref.demand is None:
            raise LibraError(f"workload {ref.name!r} has neither traces nor a demand file to emit")
    bin_path = resolve_binary(binary)
    aware = backend_of(os.fspath(binary or ""), bin_path) == "aware"
    if aware and net.num_dims > 1:
        raise LibraError(f"{Path(bin_path).name} (the congestion-aware backend) simulates one-dimensional networks "
                         f"only and {net.name} has {net.num_dims}; use AstraSim_Analytical_Congestion_Unaware")
    out = Path(out_dir)
    if os.path.lexists(out) and not overwrite:   # a dangling link counts as existing
        raise LibraError(f"{out}: already exists; choose a new --out directory or pass --force to replace runs in it")
    try:
        # without --force the directory must be new when it is made, not only when checked
        out.mkdir(parents=True, exist_ok=overwrite)
    except FileExistsError:
        raise LibraError(f"{out}: appeared while starting (another loop?); it is kept: choose a new --out "
                         "directory or pass --force") from None
    rows: list[LoopRow] = []

    def run_design(iteration: int, name: str, bw: Sequence[float], model: TimeModel) -> LoopRow:
        bw = tuple(float(b) for b in bw)
        design = Design(f"{name}-it{iteration}", net, bw, objective, model.kind, 0.0,
                        cost.network_cost_usd(net, bw), refs, time_model_settings=model_settings(model),
                        system=system)
        sim_total = pred_total = 0.0
        dirs, per = [], []
        for w, ref in zip(workloads, refs):
            run_dir = out / f"iter{iteration}" / name / _safe(ref.name)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            # The prediction recorded by emit uses the simulator's own settings (no fitted efficiency).
            step = f"iter {iteration} {name}, {ref.name}"
            on_progress(f"{step}: emitting")
            emit(design, run_dir, splits=splits, workload=ref.name, overwrite=overwrite,
                 local_mem_bw_gbps=local_mem_bw_gbps, demand=w.demand)
            on_progress(f"{step}: simulating")
            res = simulate(run_dir, bin_path, timeout_s=timeout_s, overwrite=overwrite)
            sim_total += w.weight * res.simulated_time_ns
            # emit's time-model prediction, or on the aware binary its exact model's (nan if refused)
            pred = res.predicted_time_ns if res.predicted_time_ns is not None else math.nan
            pred_total += w.weight * pred
            dirs.append(str(run_dir))
            per.append((ref.name, w.weight, pred, res.simulated_time_ns))
        row = LoopRow(iteration, name, bw, design.cost_usd, pred_total, sim_total, tuple(dirs), tuple(per))
        energy = "" if power is None else f"  energy {energy_rate(workloads, net, power).energy_j(bw, sim_total):,.6g} J"
        on_event(f"iter {iteration} {name:<20} simulated {sim_total / 1e6:12.4f} ms  predicted "
                 f"{pred_total / 1e6:12.4f} ms  error {row.error:+.3%}{energy}")
        rows.append(row)
        return row

    eff = [1.0] * net.num_dims
    model = simulator_model(splits, local_mem_bw_gbps, overlap=overlap, system=system)
    on_event(header(objective, model_settings(model)))
    if aware:
        on_event(f"note: {_AWARE_NOTE}")
    on_progress("optimizing")
    if measured:
        if len(workloads) != 1 or calibrate:
            raise LibraError("the GPU-faithful loop optimizes one measured run and fits no efficiency: give one "
                             "workload and drop --calibrate")
        from .optimize.faithful import faithful_model

        ft = faithful_model(measured, net, model)
        on_event(f"optimized for: the GPU-faithful step of {measured[0]} (its slowest rank, replayed as the GPU "
                 "ran it); predicted and simulated below: the traces as ASTRA-sim runs them")
        r = optimize([Workload(ft.demand, name="gpu-faithful")], net, cost, objective=objective,
                     constraints=constraints, model=replace(model, overlap=True, replay=ft), power=power, tco=tco)
    else:
        r = optimize(workloads, net, cost, objective=objective, constraints=constraints, model=model, power=power,
                     tco=tco)
    best = run_design(0, "optimized", r.bw_gbps, model)
    for name, ev in r.baselines.items():
        run_design(0, name, ev.bw_gbps, model)
    efficiencies = [tuple(eff)]
    stop = "no calibration asked (--calibrate 0)"
    for it in range(1, calibrate + 1):
        # Sensitivity of the simulated time to each dimension's bandwidth, versus the model's.
        for d, dim in enumerate(net.dims):
            bw = list(best.bw_gbps)
            bw[d] *= probe
            probe_row = run_design(it, f"probe-{dim.name}", bw, model)
            ds = best.simulated_ns - probe_row.simulated_ns
            cur = simulator_model(splits, local_mem_bw_gbps, efficiency=eff, system=system)
            dp = (sum(w.weight * predict(w.demand, best.bw_gbps, net, cur).time_ns for w in workloads)
                  - sum(w.weight * predict(w.demand, bw, net, cur).time_ns for w in workloads))
            if ds > 1e-6 * best.simulated_ns and dp > 1e-6 * best.simulated_ns:
                eff[d] *= dp / ds
        efficiencies.append(tuple(eff))
        model = simulator_model(splits, local_mem_bw_gbps, efficiency=eff, overlap=overlap, system=system)
        on_progress(f"iter {it}: optimizing with the fitted efficiencies")
        r = optimize(workloads, net, cost, objective=objective, constraints=constraints, model=model, baselines=False,
                     power=power, tco=tco)
        row = run_design(it, "optimized", r.bw_gbps, model)
        if row.simulated_ns < best.simulated_ns * (1 - min_gain):
            best = row
            stop = f"reached --calibrate {calibrate} iterations"
        else:
            if row.simulated_ns < best.simulated_ns:
                best = row
            stop = f"simulated time improved by less than {min_gain:.1%} at iteration {it}"
            break
    notes = ("prediction: pipelined time model replayed over each rank's dependency graph (one GPU compute "
             "node, one CPU op and one collective or send at a time per rank, as ASTRA-sim runs them; a receive "
             "waits for its send, a shared collective for every rank in it)",)
    if aware:
        notes = (f"prediction: libra-astra predict --backend aware, exact for this binary; {_AWARE_NOTE}",)
    if measured:
        notes += (f"optimized for the GPU-faithful step of the run measured in {measured[0]}: "
                  f"{r.best.time_ns / 1e6:.6f} ms at the optimum ({r.message})",)
    return LoopResult(tuple(rows), tuple(efficiencies), best, stop, splits, bin_path, notes,
                      model_settings(simulator_model(splits, local_mem_bw_gbps, overlap=overlap, system=system)),
                      objective)


_AWARE_NOTE = ("the optimizer's time model does not follow the congestion-aware backend (messages share links "
               "there), so designs are optimized for the congestion-unaware one; predicted times here are the "
               "aware backend's exact model's")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "workload"
