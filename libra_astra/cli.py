"""The ``libra-astra`` command line: thin click commands over the library.

Only click and light modules are imported here: numpy, scipy and the Chakra schema are imported by
the command that runs, so ``--help`` and shell completion start at once (tools/bench_cli_start.py).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from typing import TYPE_CHECKING

from . import __version__
from .cli_common import check_plot, draw, plot_option, progress, quiet_option
from .cli_show import format_frontier, format_loop
from .errors import LibraError
from .labels import (DEFAULT_LOCAL_MEM_BW_GBPS, DEFAULT_MODEL, DEFAULT_SPLITS, MODELS, OBJECTIVES, header,
                     model_settings, resolve_model)

if TYPE_CHECKING:  # pragma: no cover
    from .optimize import Constraints, OptimizeResult, Workload
    from .timing import TimeModel


class _Group(click.Group):
    """Turns LibraError into a one-line message and exit code 2, with no traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LibraError as e:
            raise click.ClickException(str(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="libra-astra")
@quiet_option
def main() -> None:
    """LIBRA bandwidth optimization for multi-dimensional training networks.

    \b
    Chakra ET traces -> demand -> optimize -> emit ASTRA-sim inputs -> simulate -> loop.
    Run `libra-astra COMMAND --help` for each step.
    """


def _fmt_time(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.4f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.4f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.4f} us"
    return f"{ns:.1f} ns"


def _fmt_usd(usd: float) -> str:
    return f"${usd:,.0f}" if usd >= 100 else f"${usd:,.2f}"


def load_workloads(traces: tuple[str, ...], demands: tuple[str, ...], weights: tuple[float, ...], net,
                   comm_groups: str | None) -> tuple[list[Workload], list[WorkloadRef]]:
    """Workloads from trace prefixes (first) and demand files (then), with weights in that order."""
    from .demand import load_demand
    from .design import WorkloadRef
    from .optimize import Workload
    from .trace_demand import default_groups_path, demand_from_traces, is_trace_prefix

    n = len(traces) + len(demands)
    if n == 0:
        raise LibraError("no workload: give a trace PREFIX or --demand FILE")
    if weights and len(weights) != n:
        raise LibraError(f"--weight given {len(weights)} times for {n} workloads; give one per workload, in order "
                         "(trace prefixes first, then --demand files)")
    ws = list(weights) if weights else [1.0] * n
    out, refs = [], []
    for i, prefix in enumerate(traces):
        if not is_trace_prefix(prefix):
            raise LibraError(f"{prefix}: no trace files {prefix}.0.et (or .et.gz); give the prefix of PREFIX.N.et files")
        groups = comm_groups or default_groups_path(prefix)
        with progress(f"reading {prefix}") as p:
            d, _ = demand_from_traces(prefix, net, comm_groups=groups, on_progress=p)
        out.append(Workload(d, ws[i], Path(prefix).name))
        refs.append(WorkloadRef(Path(prefix).name, ws[i], None, str(Path(prefix).resolve()),
                                str(Path(groups).resolve()) if groups else None))
    for j, path in enumerate(demands):
        d = load_demand(path)
        d.check_network(net, path)
        w = ws[len(traces) + j]
        out.append(Workload(d, w, d.name))
        refs.append(WorkloadRef(d.name, w, str(Path(path).resolve()), None, None))
    return out, refs


def build_constraints(net, total_bw, total_bw_max, budget, time_target, exprs, constraints_file) -> Constraints:
    from .constraints import load_constraints_file, parse_constraints
    from .optimize import Constraints

    if total_bw is not None and total_bw_max is not None:
        raise LibraError("give either --total-bw (equality) or --total-bw-max (upper bound), not both")
    linear = parse_constraints(exprs, net)
    if constraints_file:
        linear += load_constraints_file(constraints_file, net)
    total = total_bw if total_bw is not None else total_bw_max
    return Constraints(total, total_bw_max is not None, budget, time_target, linear)


def load_inputs(network_path, cost_path, traces, demands, weights, comm_groups, total_bw, total_bw_max, budget,
                time_target, exprs, constraints_file):
    """(network, cost model, workloads, their references, constraints) from the common options."""
    from .cost import load_cost
    from .network import load_network

    net = load_network(network_path)
    cost = load_cost(cost_path)
    workloads, refs = load_workloads(traces, demands, weights, net, comm_groups)
    cons = build_constraints(net, total_bw, total_bw_max, budget, time_target, exprs, constraints_file)
    return net, cost, workloads, refs, cons


def _model(model: str | None, splits: int | None, overlap: bool | None = None,
           local_mem_bw: float | None = None) -> TimeModel:
    # None means "not given": the shared defaults apply and options the model ignores are refused.
    return resolve_model(model, splits, local_mem_bw, overlap)


_common = [
    click.option("--network", "network_path", required=True, type=click.Path(exists=True, dir_okay=False),
                 help="Network YAML (network_configs/*.yml)."),
    click.option("--cost", "cost_path", required=True, type=click.Path(exists=True, dir_okay=False),
                 help="Cost model YAML with unit prices per cost class."),
    click.option("--demand", "demands", multiple=True, type=click.Path(exists=True, dir_okay=False),
                 help="Demand JSON (repeatable: several workloads)."),
    click.option("--weight", "weights", multiple=True, type=float,
                 help="Weight per workload, in order: trace prefixes, then --demand files."),
    click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False),
                 help="ASTRA-sim communicator-group JSON for the trace prefixes [default: PREFIX.groups.json "
                      "when it exists]."),
    click.option("--total-bw", type=float, help="Total bandwidth per NPU over all dimensions, GB/s (equality)."),
    click.option("--total-bw-max", type=float, help="Upper bound on total bandwidth per NPU, GB/s."),
    click.option("--constraint", "exprs", multiple=True, metavar="EXPR",
                 help="Linear constraint, e.g. 'bw[0] >= bw[1]' or 'bw[pod] + bw[node] == 200' (repeatable)."),
    click.option("--constraints-file", type=click.Path(exists=True, dir_okay=False),
                 help="File with one constraint per line ('#' starts a comment)."),
    click.option("--model", type=click.Choice(list(MODELS)), default=None,
                 help=f"Time model [default: {DEFAULT_MODEL}]: pipelined is what ASTRA-sim computes with the "
                      "settings emit writes (chunk pipeline, per-hop latency); libra is the LIBRA paper's max "
                      "over dimensions of traffic/bandwidth."),
    click.option("--splits", type=click.IntRange(min=1), default=None,
                 help=f"For --model pipelined: chunks per collective (ASTRA-sim preferred-dataset-splits); the "
                      f"design keeps it for emit [default: {DEFAULT_SPLITS}]."),
    click.option("--local-mem-bw", "local_mem_bw", type=click.FloatRange(min=0, min_open=True),
                 help="For --model pipelined: local memory GB/s that each reduction step reads and writes "
                      f"(ASTRA-sim's local-mem-bw) [default: {DEFAULT_LOCAL_MEM_BW_GBPS:g}, as emit writes]."),
    click.option("--overlap/--no-overlap", default=None,
                 help="Time a rank by its longest dependency path (compute/communication overlap, as the "
                      "simulator runs it) or by the sum [default: overlap for pipelined, sum for libra]."),
]


def _apply(options):
    def deco(f):
        for opt in reversed(options):
            f = opt(f)
        return f
    return deco


def _result_dict(r: OptimizeResult, net, model: TimeModel | None = None, workloads=()) -> dict:
    from .report import time_breakdown, workload_times

    def ev(e):
        return {"bandwidth_gbps": list(e.bw_gbps), "time_ns": e.time_ns, "compute_ns": e.compute_ns,
                "communication_ns": e.communication_ns, "cost_usd": e.cost_usd,
                "time_x_cost_ns_usd": e.time_cost_ns_usd, "feasible": e.feasible}
    out = {
        "objective": r.objective,
        "time_model": model_settings(model) if model is not None else None,
        "dimensions": list(net.dim_names),
        "optimum": ev(r.best),
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
        out["baselines"][name] = {**ev(e), "speedup_of_optimum": e.time_ns / r.best.time_ns,
                                  "perf_per_cost_gain_of_optimum": e.time_cost_ns_usd / r.best.time_cost_ns_usd}
    if model is not None and workloads:
        out["workloads"] = workload_times(workloads, net, r.bw_gbps, model)
        out["breakdown"] = {name: time_breakdown(workloads, net, e.bw_gbps, model)
                            for name, e in [("optimum", r.best), *r.baselines.items()]}
    return out


def _print_result(r: OptimizeResult, net, cost, n_workloads: int, data: dict | None = None) -> None:
    b = r.best
    if data is not None and data.get("time_model"):
        click.echo(header(r.objective, data["time_model"]))
    click.echo(f"network {net.name} ({net.npus_count:,} NPUs), {n_workloads} workload{'s' if n_workloads > 1 else ''}, "
               f"{r.num_collectives:,} collectives -> {r.num_terms} distinct terms")
    prices = cost.price_usd_per_gbps(net)
    total = sum(b.bw_gbps)
    click.echo(f"  {'dimension':<12} {'topology':<15} {'npus':>5} {'GB/s per NPU':>13} {'share':>7} {'cost':>14}")
    for d, bw, p in zip(net.dims, b.bw_gbps, prices):
        click.echo(f"  {d.name:<12} {d.topology:<15} {d.npus:>5} {bw:>13.4f} {bw / total:>6.1%} {_fmt_usd(p * bw):>14}")
    click.echo(f"  {'total':<12} {'':<15} {'':>5} {total:>13.4f} {'':>7} {_fmt_usd(b.cost_usd):>14}")
    several = n_workloads > 1
    click.echo(f"time      {_fmt_time(b.time_ns)} = compute {_fmt_time(b.compute_ns)} + communication "
               f"{_fmt_time(b.communication_ns)}" + ("   (weighted sum over the workloads)" if several else ""))
    if several and data is not None:
        for w in data.get("workloads", []):
            click.echo(f"  {w['name']:<18} weight {w['weight']:g}: {_fmt_time(w['time_ns'])} = compute "
                       f"{_fmt_time(w['compute_ns'])} + communication {_fmt_time(w['communication_ns'])}")
    click.echo(f"cost      {_fmt_usd(b.cost_usd)}   time x cost {b.time_cost_ns_usd / 1e9:,.6g} s*USD")
    for name, e in r.baselines.items():
        flag = "" if e.feasible else "  (violates the constraints)"
        click.echo(f"vs {name:<20} time {_fmt_time(e.time_ns):>12}  speedup x{e.time_ns / b.time_ns:.4f}  "
                   f"perf/cost gain x{e.time_cost_ns_usd / b.time_cost_ns_usd:.4f}{flag}")
    gap = f"{r.rel_gap:.2e}" if math.isfinite(r.rel_gap) else "unknown"
    click.echo(f"solver    {r.message}; relative duality gap {gap}; {r.newton_steps} Newton steps; "
               f"{r.solve_time_s * 1e3:.2f} ms")


@main.command("optimize")
@click.argument("traces", nargs=-1, metavar="[PREFIX]...")
@_apply(_common)
@click.option("--objective", type=click.Choice(OBJECTIVES), default="perf", show_default=True,
              help="perf: min time; perf-per-cost: min time x cost; min-cost: min cost with --time-target.")
@click.option("--budget", type=float, help="Upper bound on network cost, USD.")
@click.option("--time-target", type=float, help="Time target in ns for --objective min-cost.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the design JSON here (for 'emit').")
@plot_option("bandwidth per dimension and the time breakdown, optimum vs baselines")
@click.option("--force", is_flag=True, help="Overwrite an existing --output or --plot file.")
def optimize_cmd(traces, network_path, cost_path, demands, weights, comm_groups, total_bw, total_bw_max, exprs,
                 constraints_file, model, splits, local_mem_bw, overlap, objective, budget, time_target, as_json, output,
                 plot_out, force):
    """Find the bandwidth per dimension that minimizes training time (or time x cost, or cost).

    Workloads are Chakra ET trace prefixes (PREFIX.0.et ...) and/or --demand files.

    \b
    Examples (from a checkout; gpt3.demand.json comes from the demand command's example):
      libra-astra optimize traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --total-bw 400 -o design.json --force
      libra-astra optimize --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --total-bw 400 --constraint 'bw[node] >= 2*bw[pod]' --plot opt.svg --force
      libra-astra optimize --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --objective perf-per-cost --total-bw 400 --model libra
      libra-astra optimize --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --objective min-cost --time-target 1.3e8 --total-bw-max 1000
    """
    from .design import Design, design_to_dict
    from .fileio import check_writable, write_json_atomic
    from .optimize import optimize

    if output:
        check_writable(output, force)
    check_plot(plot_out, force)
    tm = _model(model, splits, overlap, local_mem_bw)
    net, cost, workloads, refs, cons = load_inputs(network_path, cost_path, traces, demands, weights, comm_groups,
                                                   total_bw, total_bw_max, budget, time_target, exprs,
                                                   constraints_file)
    if objective != "min-cost" and time_target is not None:
        raise LibraError("--time-target only applies to --objective min-cost")
    with progress("optimize") as p:
        p.note(f"solving ({objective}, {tm.kind} model)")
        r = optimize(workloads, net, cost, objective=objective, constraints=cons, model=tm)
    data = _result_dict(r, net, tm, workloads)
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        _print_result(r, net, cost, len(workloads), data)
    if output:
        design = Design(Path(output).stem, net, r.bw_gbps, objective, tm.kind, r.best.time_ns, r.best.cost_usd,
                        tuple(refs), data, model_settings(tm))
        write_json_atomic(output, design_to_dict(design), overwrite=force)
        if not as_json:
            click.echo(f"wrote {output}")
    draw("result", data, plot_out, force, echo=not as_json)


@main.command("pareto")
@click.argument("traces", nargs=-1, metavar="[PREFIX]...")
@_apply(_common)
@click.option("--min-budget", type=float, required=True, help="Lowest cost budget, USD.")
@click.option("--max-budget", type=float, required=True, help="Highest cost budget, USD.")
@click.option("--points", type=click.IntRange(min=2), default=10, show_default=True, help="Budgets, spaced geometrically.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the frontier as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the frontier as JSON instead of a table.")
@plot_option("time versus cost and the bandwidth per dimension along the frontier")
@click.option("--force", is_flag=True, help="Overwrite an existing --output or --plot file.")
def pareto_cmd(traces, network_path, cost_path, demands, weights, comm_groups, total_bw, total_bw_max, exprs,
               constraints_file, model, splits, local_mem_bw, overlap, min_budget, max_budget, points, output, as_json,
               plot_out, force):
    """Time-versus-cost frontier: the fastest design for each budget.

    \b
    Example:
      libra-astra pareto --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --min-budget 2e5 --max-budget 2e6 --points 6 -o frontier.json --force
    """
    from .fileio import check_writable, write_json_atomic
    from .optimize import pareto

    if not 0 < min_budget < max_budget:
        raise LibraError("--min-budget must be > 0 and below --max-budget")
    if output:
        check_writable(output, force)
    check_plot(plot_out, force)
    tm = _model(model, splits, overlap, local_mem_bw)
    net, cost, workloads, _, cons = load_inputs(network_path, cost_path, traces, demands, weights, comm_groups,
                                                total_bw, total_bw_max, None, None, exprs, constraints_file)
    budgets = [min_budget * (max_budget / min_budget) ** (i / (points - 1)) for i in range(points)]
    with progress("pareto") as p:
        p.note(f"{points} budgets")
        results = pareto(workloads, net, cost, budgets, constraints=cons, model=tm)
    rows = [{"budget_usd": bud, "cost_usd": r.best.cost_usd, "time_ns": r.best.time_ns,
             "bandwidth_gbps": list(r.bw_gbps), "relative_gap": r.rel_gap} for bud, r in zip(budgets, results)]
    data = {"format": "libra_astra.pareto", "version": 1, "objective": "perf", "time_model": model_settings(tm),
            "dimensions": list(net.dim_names), "points": rows}
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo(format_frontier(data))
    if output:
        write_json_atomic(output, data, overwrite=force)
        if not as_json:
            click.echo(f"wrote {output}")
    draw("frontier", data, plot_out, force, echo=not as_json)


@main.command("loop")
@click.argument("traces", nargs=-1, metavar="[PREFIX]...")
@_apply(_common[:8] + _common[8:9])
@click.option("--objective", type=click.Choice(OBJECTIVES), default="perf", show_default=True)
@click.option("--budget", type=float, help="Upper bound on network cost, USD.")
@click.option("--time-target", type=float, help="Time target in ns for --objective min-cost.")
@click.option("--astra-sim", "binary", type=click.Path(dir_okay=False),
              help="ASTRA-sim analytical congestion-unaware binary [default: $ASTRA_SIM_BIN].")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="New directory that keeps every iteration's inputs and outputs.")
@click.option("--splits", type=click.IntRange(min=1), default=DEFAULT_SPLITS, show_default=True,
              help="preferred-dataset-splits of the emitted runs (chunks per collective).")
@click.option("--calibrate", type=click.IntRange(min=0), default=0, show_default=True,
              help="Calibration iterations: fit per-dimension efficiency from the simulator, re-optimize.")
@click.option("--local-mem-bw", "local_mem_bw", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_LOCAL_MEM_BW_GBPS, show_default=True,
              help="ASTRA-sim local-mem-bw of the emitted runs, GB/s (also used by the model).")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="Optimize the dependency-aware time (as the simulator runs the traces) or the no-overlap sum.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds per simulator run.")
@click.option("--force", is_flag=True, help="Reuse an existing --out directory, replacing its runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@plot_option("predicted and simulated time of every run")
def loop_cmd(traces, network_path, cost_path, demands, weights, comm_groups, total_bw, total_bw_max, exprs,
             constraints_file, objective, budget, time_target, binary, out_dir, splits, calibrate, local_mem_bw,
             overlap, timeout, force, as_json, plot_out):
    """Optimize, emit, simulate with ASTRA-sim, compare predicted with simulated time, and calibrate.

    The optimized design and the baselines (EqualBW, TrafficProportional) are simulated; every
    run directory is kept under --out, with loop.json summarizing them.

    \b
    Example (with ASTRA_SIM_BIN set):
      libra-astra loop traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --total-bw 400 --out runs/gpt3-loop --calibrate 2 --plot loop.svg --force
    """
    from .astra.run import resolve_binary
    from .fileio import write_json_atomic
    from .loop import run_loop

    check_plot(plot_out, force)
    binary = resolve_binary(binary)        # before the traces are read: a missing simulator fails at once
    net, cost, workloads, refs, cons = load_inputs(network_path, cost_path, traces, demands, weights, comm_groups,
                                                   total_bw, total_bw_max, budget, time_target, exprs,
                                                   constraints_file)
    with progress("loop") as p:
        def echo(line: str) -> None:
            if not as_json:
                p.clear()
                click.echo(line)

        res = run_loop(workloads, refs, net, cost, out_dir=out_dir, objective=objective, constraints=cons,
                       binary=binary, splits=splits, calibrate=calibrate, timeout_s=timeout, overwrite=force,
                       local_mem_bw_gbps=local_mem_bw, overlap=overlap, on_event=echo, on_progress=p.note)
    data = res.to_dict(net)
    write_json_atomic(Path(out_dir) / "loop.json", data, overwrite=True)
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo("")
        click.echo(format_loop({**data, "time_model": None}))
        click.echo(f"wrote {Path(out_dir) / 'loop.json'}")
    draw("loop", data, plot_out, force, echo=not as_json)


def _register() -> None:
    # Commands of the other steps live beside the library parts they drive.
    from .cli_astra import emit_command, simulate_command
    from .cli_demand import demand_command
    from .cli_show import plot_command, show_command
    from .cli_generate import generate_command
    main.add_command(generate_command, "generate")
    main.add_command(demand_command, "demand")
    main.add_command(emit_command, "emit")
    main.add_command(simulate_command, "simulate")
    main.add_command(show_command, "show")
    main.add_command(plot_command, "plot")


_register()


def run() -> None:  # pragma: no cover - console entry
    main(prog_name="libra-astra")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
