"""``libra-astra sweep``: a grid of workloads x networks x bandwidth/budget x objectives.

Sweep file (YAML)::

    cost: network_configs/cost.yml          # relative paths resolve against the sweep file
    workloads:                              # generator specs (demand built from the spec on each
      - traces/gpt3_tp8_dp8/spec.yml        #   network of its shape) or demand files (*.json)
    networks: [network_configs/sample_8x8.yml]
    total_bw_gbps: [400, 800]               # equality; or total_bw_max_gbps: [...] (upper bound)
    budgets_usd: [1.0e6]                    # optional; each value is another grid axis
    objectives: [perf, perf-per-cost]     # also min-cost's kin: min-energy, perf-per-watt, min-tco
    power: network_configs/power.yml        # optional: energy per step (J) of every point; the energy objectives
    tco: {usd_per_kwh: 0.1, lifetime_years: 4, run_steps: 100000, npu_usd: 30000, usd_per_provisioned_w: 0}
                                            # optional: the run's TCO (USD) of every point; min-tco
    model: {kind: pipelined, splits: 1, local_mem_bw_gbps: 1.0e9, overlap: true}
    simulate: false                         # true: generate, emit and simulate every point

Each grid point is one optimize() task on the cluster; a workload whose shape does not match a
network is skipped and reported. The rows go to ``sweep.csv`` and ``sweep.json``.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .dask_engine import cluster
from .spec_demand import demand_from_spec
from .upstream import (Constraints, Design, LibraError, Workload, WorkloadRef, emit, generate, load_cost,
                       load_demand, load_network, load_spec, load_yaml, optimize, resolve_binary, simulate, simulator_model,
                       TcoSettings, TimeModel, check_number, energy_rate, load_power, tco_rate, write_json_atomic,
                       write_text_atomic)

FIELDS = ("workload", "network", "total_bw_gbps", "total_bw_is_upper_bound", "budget_usd", "objective", "status",
          "time_ns", "cost_usd", "bandwidth_gbps", "rel_gap", "solve_s", "simulated_ns", "sim_error", "note",
          "objective_value", "energy_j", "tco_usd")
SWEEP_OBJECTIVES = ("perf", "perf-per-cost", "min-energy", "perf-per-watt", "min-tco")


@dataclass(frozen=True)
class Point:
    workload: str
    network: str
    total_bw: float | None
    upper: bool
    budget: float | None
    objective: str


def _paths(raw: Any, base: Path, key: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise LibraError(f"sweep file: {key} must be a list of file paths, got {raw!r}")
    return [str(p if Path(p).is_absolute() else base / p) for p in raw]


def _nums(raw: Any, key: str) -> list:
    if raw is None:
        return [None]
    if not isinstance(raw, list) or not raw or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                      and x > 0 for x in raw):
        raise LibraError(f"sweep file: {key} must be a non-empty list of numbers > 0, got {raw!r}")
    return [float(x) for x in raw]


def load_sweep(path: str | Path) -> tuple[list[Point], dict]:
    p = Path(path)
    data = load_yaml(p, "sweep")
    if not isinstance(data, Mapping):
        raise LibraError(f"{p}: expected a mapping with workloads, networks, cost (see 'libra-astra sweep --help')")
    allowed = {"cost", "workloads", "networks", "total_bw_gbps", "total_bw_max_gbps", "budgets_usd", "objectives",
               "model", "simulate", "description", "name", "power", "tco"}
    bad = set(data) - allowed
    if bad:
        raise LibraError(f"{p}: unknown key(s) {sorted(bad)}; allowed: {sorted(allowed)}")
    base = p.parent
    workloads = _paths(data.get("workloads"), base, "workloads")
    networks = _paths(data.get("networks"), base, "networks")
    if not workloads or not networks or not isinstance(data.get("cost"), str):
        raise LibraError(f"{p}: needs workloads (specs or demand files), networks and cost")
    if "total_bw_gbps" in data and "total_bw_max_gbps" in data:
        raise LibraError(f"{p}: give total_bw_gbps or total_bw_max_gbps, not both")
    upper = "total_bw_max_gbps" in data
    bws = _nums(data.get("total_bw_max_gbps" if upper else "total_bw_gbps"), "total_bw_gbps")
    budgets = _nums(data.get("budgets_usd"), "budgets_usd")
    objectives = data.get("objectives", ["perf"])
    if not isinstance(objectives, list) or any(o not in SWEEP_OBJECTIVES for o in objectives):
        raise LibraError(f"{p}: objectives must be a list of {', '.join(SWEEP_OBJECTIVES)}, got {objectives!r}")
    power_path = data.get("power")
    if power_path is not None:
        if not isinstance(power_path, str):
            raise LibraError(f"{p}: power must be a file path, got {power_path!r}")
        power_path = str(base / power_path) if not Path(power_path).is_absolute() else power_path
        load_power(power_path)                       # a bad file stops the sweep before any point runs
    tco = _tco(data.get("tco"), p)
    if any(o in ("min-energy", "perf-per-watt", "min-tco") for o in objectives) and power_path is None:
        raise LibraError(f"{p}: the energy objectives need power: a power file (network_configs/power.yml)")
    if "min-tco" in objectives and tco is None:
        raise LibraError(f"{p}: objective min-tco needs tco: {{usd_per_kwh, lifetime_years, ...}}")
    m = data.get("model") or {}
    if not isinstance(m, Mapping) or set(m) - {"kind", "splits", "local_mem_bw_gbps", "overlap"}:
        raise LibraError(f"{p}: model takes kind, splits, local_mem_bw_gbps, overlap")
    kind = m.get("kind", "pipelined")
    splits = int(m.get("splits", 1))
    mem = float(m.get("local_mem_bw_gbps", 1e9))
    overlap = bool(m.get("overlap", True))
    model = simulator_model(splits, mem, overlap=overlap) if kind == "pipelined" else TimeModel("libra",
                                                                                              overlap=overlap)
    cost_path = str(base / data["cost"]) if not Path(data["cost"]).is_absolute() else data["cost"]
    points = [Point(w, n, bw, upper, bud, obj) for w, n, bw, bud, obj in
              itertools.product(workloads, networks, bws, budgets, objectives)]
    return points, {"cost": cost_path, "model": model, "simulate": bool(data.get("simulate", False)),
                    "local_mem_bw_gbps": mem, "power": power_path, "tco": tco}


def _tco(raw: Any, p: Path) -> TcoSettings | None:
    if raw is None:
        return None
    keys = ("usd_per_kwh", "lifetime_years", "run_steps", "usd_per_provisioned_w", "npu_usd")
    if not isinstance(raw, Mapping) or set(raw) - set(keys) or not {"usd_per_kwh", "lifetime_years"} <= set(raw):
        raise LibraError(f"{p}: tco takes usd_per_kwh and lifetime_years (required), run_steps, usd_per_provisioned_w, "
                         f"npu_usd, got {raw!r}")
    vals = {k: check_number(raw[k], f"{p}: tco.{k}", minimum=0) for k in keys if k in raw}
    t = TcoSettings(**vals)
    t.check()
    return t


def run_point(pt: Point, cost_path: str, model: TimeModel, sim: bool, binary: str | None, out_dir: str,
              local_mem_bw: float, overwrite: bool, power_path: str | None = None,
              tco: TcoSettings | None = None) -> dict:
    """One grid point: demand, optimize and (optionally) generate + emit + simulate."""
    row: dict[str, Any] = {"workload": pt.workload, "network": pt.network, "total_bw_gbps": pt.total_bw,
                           "total_bw_is_upper_bound": pt.upper, "budget_usd": pt.budget, "objective": pt.objective}
    t0 = time.perf_counter()
    try:
        net = load_network(pt.network)
        cost = load_cost(cost_path)
        if pt.workload.endswith(".json"):
            demand = load_demand(pt.workload)
            demand.check_network(net, pt.workload)
            spec = None
        else:
            spec = load_spec(pt.workload)
            if tuple(spec.net.npus_per_dim) != net.npus_per_dim:
                raise LibraError(f"{pt.workload}: the spec places its groups on shape {list(spec.net.npus_per_dim)}, "
                                 f"network {pt.network} has {list(net.npus_per_dim)}; pair it with a network of that shape")
            demand = demand_from_spec(spec, net, labels=False)
        cons = Constraints(pt.total_bw, pt.upper, pt.budget)
        power = load_power(power_path) if power_path else None
        r = optimize([Workload(demand)], net, cost, objective=pt.objective, constraints=cons, model=model,
                     baselines=False, power=power, tco=tco)
    except LibraError as e:
        row.update(status="skipped", note=str(e))
        return row
    row.update(status="ok", time_ns=r.best.time_ns, cost_usd=r.best.cost_usd,
               bandwidth_gbps=" ".join(f"{b:.6g}" for b in r.bw_gbps), rel_gap=r.rel_gap,
               solve_s=time.perf_counter() - t0, objective_value=r.fun)
    if power is not None:
        row["energy_j"] = energy_rate([Workload(demand)], net, power).energy_j(r.bw_gbps, r.best.time_ns)
        if tco is not None:
            row["tco_usd"] = tco_rate([Workload(demand)], net, cost, power, tco).tco_usd(r.bw_gbps, r.best.time_ns)
    if sim and spec is not None:
        name = "".join(ch if ch.isalnum() else "_" for ch in
                       f"{Path(pt.workload).parent.name}-{net.name}-{pt.total_bw}-{pt.budget}-{pt.objective}")
        run = Path(out_dir) / "sim" / name
        gen = generate(pt.workload, run / "traces" / spec.name, overwrite=overwrite)
        ref = WorkloadRef(spec.name, 1.0, None, str((run / "traces" / spec.name).resolve()),
                          str(gen.groups_path.resolve()) if gen.groups_path else None)
        design = Design(name, net, tuple(r.bw_gbps), pt.objective, model.kind, r.best.time_ns, r.best.cost_usd, (ref,))
        emit(design, run / "astra", splits=model.splits, overwrite=overwrite, local_mem_bw_gbps=local_mem_bw,
             demand=demand)
        s = simulate(run / "astra", resolve_binary(binary), overwrite=overwrite)
        row.update(simulated_ns=float(s.simulated_time_ns), sim_error=r.best.time_ns / s.simulated_time_ns - 1.0)
    return row


def run_file(path: str | Path, out: Path, *, binary: str | None = None, scheduler: str | None = None,
             workers: int | None = None, overwrite: bool = False, threads: bool = False,
             on_progress: Callable = lambda *_: None) -> list[dict]:
    points, opts = load_sweep(path)
    if opts["simulate"]:
        binary = resolve_binary(binary)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with cluster(scheduler, workers, threads=threads) as client:
        from distributed import as_completed
        futs = {client.submit(run_point, pt, opts["cost"], opts["model"], opts["simulate"], binary, str(out),
                              opts["local_mem_bw_gbps"], overwrite, opts["power"], opts["tco"], pure=False): i
                for i, pt in enumerate(points)}
        got: dict[int, dict] = {}
        try:
            for f in as_completed(futs):
                got[futs[f]] = f.result()
                on_progress(len(got), len(points), math.inf)
        except KeyboardInterrupt:
            pass
        rows = [got[i] for i in sorted(got)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in FIELDS})
    write_text_atomic(out / "sweep.csv", buf.getvalue(), overwrite)
    write_json_atomic(out / "sweep.json", {"format": "libra_astra.sweep", "version": 1, "sweep": str(path),
                                           "points": len(points), "finished": len(rows), "rows": rows}, overwrite)
    return rows


def print_table(rows: list[dict], echo: Callable[[str], None]) -> None:
    energy = any(r.get("energy_j") is not None for r in rows)
    tco = any(r.get("tco_usd") is not None for r in rows)
    echo(f"{'workload':<28} {'network':<22} {'bw':>7} {'budget':>10} {'objective':<14} {'time':>12} {'cost':>12} "
         f"{'GB/s per dim':<24} {'simulated':>12} {'error':>8}" + (f" {'J per step':>14}" if energy else "")
         + (f" {'TCO USD/run':>14}" if tco else ""))
    for r in rows:
        name = Path(r["workload"]).parent.name + "/" + Path(r["workload"]).name
        if r["status"] != "ok":
            echo(f"{name:<28} {Path(r['network']).stem:<22} skipped: {r.get('note', '')}")
            continue
        sim = r.get("simulated_ns")
        sim_t = f"{sim / 1e6:.4f} ms" if sim else "-"
        err = f"{r['sim_error']:+.3%}" if sim else "-"
        echo(f"{name:<28} {Path(r['network']).stem:<22} {r['total_bw_gbps'] or '-':>7} {r['budget_usd'] or '-':>10} "
             f"{r['objective']:<14} {r['time_ns'] / 1e6:>9.4f} ms {r['cost_usd']:>12,.0f} {r['bandwidth_gbps']:<24} "
             f"{sim_t:>12} {err:>8}" + (f" {r.get('energy_j') or 0:>14,.6g}" if energy else "")
             + (f" {r.get('tco_usd') or 0:>14,.2f}" if tco else ""))
