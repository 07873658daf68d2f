"""The ``libra-astra`` command line: thin click commands over the library."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from . import __version__
from .constraints import load_constraints_file, parse_constraints
from .cost import load_cost
from .demand import load_demand
from .design import Design, WorkloadRef, design_to_dict
from .errors import LibraError
from .fileio import check_writable, write_json_atomic
from .network import load_network
from .optimize import OBJECTIVES, Constraints, OptimizeResult, Workload, optimize, pareto
from .timing import TimeModel
from .trace_demand import default_groups_path, demand_from_traces, is_trace_prefix


class _Group(click.Group):
    """Turns LibraError into a one-line message and exit code 2, with no traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LibraError as e:
            raise click.ClickException(str(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="libra-astra")
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
        d, _ = demand_from_traces(prefix, net, comm_groups=groups)
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
    net = load_network(network_path)
    cost = load_cost(cost_path)
    workloads, refs = load_workloads(traces, demands, weights, net, comm_groups)
    cons = build_constraints(net, total_bw, total_bw_max, budget, time_target, exprs, constraints_file)
    return net, cost, workloads, refs, cons


def _model(model: str, splits: int, overlap: bool = False, local_mem_bw: float | None = None) -> TimeModel:
    return TimeModel(model, splits=splits, overlap=overlap, local_mem_bw_gbps=local_mem_bw)


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
    click.option("--model", type=click.Choice(["libra", "pipelined"]), default="libra", show_default=True,
                 help="Time model: LIBRA's max over dimensions, or ASTRA-sim's chunk pipeline."),
    click.option("--splits", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Chunks per collective for --model pipelined (ASTRA-sim preferred-dataset-splits)."),
    click.option("--local-mem-bw", "local_mem_bw", type=click.FloatRange(min=0, min_open=True),
                 help="For --model pipelined: local memory GB/s that each reduction step reads and writes "
                      "(ASTRA-sim's local-mem-bw) [default: unlimited]."),
    click.option("--overlap/--no-overlap", default=False, show_default=True,
                 help="Time a rank by its longest dependency path (compute/communication overlap) instead of "
                      "summing; uses the traces' dependency graphs."),
]


def _apply(options):
    def deco(f):
        for opt in reversed(options):
            f = opt(f)
        return f
    return deco


def _result_dict(r: OptimizeResult, net) -> dict:
    def ev(e):
        return {"bandwidth_gbps": list(e.bw_gbps), "time_ns": e.time_ns, "compute_ns": e.compute_ns,
                "communication_ns": e.communication_ns, "cost_usd": e.cost_usd,
                "time_x_cost_ns_usd": e.time_cost_ns_usd, "feasible": e.feasible}
    out = {
        "objective": r.objective,
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
    return out


def _print_result(r: OptimizeResult, net, cost, n_workloads: int) -> None:
    b = r.best
    click.echo(f"objective {r.objective} on {net.name} ({net.npus_count:,} NPUs), {n_workloads} workload(s), "
               f"{r.num_collectives:,} collectives -> {r.num_terms} distinct terms")
    prices = cost.price_usd_per_gbps(net)
    total = sum(b.bw_gbps)
    click.echo(f"  {'dimension':<12} {'topology':<15} {'npus':>5} {'GB/s per NPU':>13} {'share':>7} {'cost':>14}")
    for d, bw, p in zip(net.dims, b.bw_gbps, prices):
        click.echo(f"  {d.name:<12} {d.topology:<15} {d.npus:>5} {bw:>13.4f} {bw / total:>6.1%} {_fmt_usd(p * bw):>14}")
    click.echo(f"  {'total':<12} {'':<15} {'':>5} {total:>13.4f} {'':>7} {_fmt_usd(b.cost_usd):>14}")
    click.echo(f"time      {_fmt_time(b.time_ns)} = compute {_fmt_time(b.compute_ns)} + communication "
               f"{_fmt_time(b.communication_ns)}")
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
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
def optimize_cmd(traces, network_path, cost_path, demands, weights, comm_groups, total_bw, total_bw_max, exprs,
                 constraints_file, model, splits, local_mem_bw, overlap, objective, budget, time_target, as_json, output, force):
    """Find the bandwidth per dimension that minimizes training time (or time x cost, or cost).

    Workloads are Chakra ET trace prefixes (PREFIX.0.et ...) and/or --demand files.

    \b
    Examples:
      libra-astra optimize --demand d.json --network network_configs/paper_3d.yml \\
          --cost network_configs/cost.yml --total-bw 300
      libra-astra optimize traces/gpt3_tp8_dp8/gpt3 --network traces/gpt3_tp8_dp8/network.yml \\
          --cost network_configs/cost.yml --total-bw 400 --constraint 'bw[0] >= 2*bw[1]' -o design.json
      libra-astra optimize --demand d.json --network N.yml --cost C.yml --objective perf-per-cost --total-bw 500
      libra-astra optimize --demand d.json --network N.yml --cost C.yml --objective min-cost --time-target 2e9
    """
    if output:
        check_writable(output, force)
    net, cost, workloads, refs, cons = load_inputs(network_path, cost_path, traces, demands, weights, comm_groups,
                                                   total_bw, total_bw_max, budget, time_target, exprs,
                                                   constraints_file)
    if objective != "min-cost" and time_target is not None:
        raise LibraError("--time-target only applies to --objective min-cost")
    r = optimize(workloads, net, cost, objective=objective, constraints=cons, model=_model(model, splits, overlap, local_mem_bw))
    data = _result_dict(r, net)
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        _print_result(r, net, cost, len(workloads))
    if output:
        design = Design(Path(output).stem, net, r.bw_gbps, objective, model, r.best.time_ns, r.best.cost_usd,
                        tuple(refs), {**data, "splits": splits, "overlap": overlap})
        write_json_atomic(output, design_to_dict(design), overwrite=force)
        if not as_json:
            click.echo(f"wrote {output}")


@main.command("pareto")
@click.argument("traces", nargs=-1, metavar="[PREFIX]...")
@_apply(_common)
@click.option("--min-budget", type=float, required=True, help="Lowest cost budget, USD.")
@click.option("--max-budget", type=float, required=True, help="Highest cost budget, USD.")
@click.option("--points", type=click.IntRange(min=2), default=10, show_default=True, help="Budgets, spaced geometrically.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the frontier as JSON here.")
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
def pareto_cmd(traces, network_path, cost_path, demands, weights, comm_groups, total_bw, total_bw_max, exprs,
               constraints_file, model, splits, local_mem_bw, overlap, min_budget, max_budget, points, output, force):
    """Time-versus-cost frontier: the fastest design for each budget.

    \b
    Example:
      libra-astra pareto --demand d.json --network network_configs/paper_3d.yml \\
          --cost network_configs/cost.yml --min-budget 2e7 --max-budget 2e8 --points 8 -o frontier.json
    """
    if not 0 < min_budget < max_budget:
        raise LibraError("--min-budget must be > 0 and below --max-budget")
    if output:
        check_writable(output, force)
    net, cost, workloads, _, cons = load_inputs(network_path, cost_path, traces, demands, weights, comm_groups,
                                                total_bw, total_bw_max, None, None, exprs, constraints_file)
    budgets = [min_budget * (max_budget / min_budget) ** (i / (points - 1)) for i in range(points)]
    results = pareto(workloads, net, cost, budgets, constraints=cons,
                     model=_model(model, splits, overlap, local_mem_bw))
    rows = []
    click.echo(f"{'budget USD':>16} {'cost USD':>16} {'time':>14}  bandwidth GB/s per dimension ({', '.join(net.dim_names)})")
    for bud, r in zip(budgets, results):
        rows.append({"budget_usd": bud, "cost_usd": r.best.cost_usd, "time_ns": r.best.time_ns,
                     "bandwidth_gbps": list(r.bw_gbps), "relative_gap": r.rel_gap})
        click.echo(f"{bud:>16,.0f} {r.best.cost_usd:>16,.0f} {_fmt_time(r.best.time_ns):>14}  "
                   + ", ".join(f"{b:.3f}" for b in r.bw_gbps))
    if output:
        write_json_atomic(output, {"format": "libra_astra.pareto", "version": 1, "dimensions": list(net.dim_names),
                                   "points": rows}, overwrite=force)
        click.echo(f"wrote {output}")


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
@click.option("--splits", type=click.IntRange(min=1), default=1, show_default=True,
              help="preferred-dataset-splits of the emitted runs (chunks per collective).")
@click.option("--calibrate", type=click.IntRange(min=0), default=0, show_default=True,
              help="Calibration iterations: fit per-dimension efficiency from the simulator, re-optimize.")
@click.option("--local-mem-bw", "local_mem_bw", type=click.FloatRange(min=0, min_open=True), default=1e9,
              show_default=True, help="ASTRA-sim local-mem-bw of the emitted runs, GB/s (also used by the model).")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="Optimize the dependency-aware time (as the simulator runs the traces) or the no-overlap sum.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds per simulator run.")
@click.option("--force", is_flag=True, help="Reuse an existing --out directory, replacing its runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def loop_cmd(traces, network_path, cost_path, demands, weights, comm_groups, total_bw, total_bw_max, exprs,
             constraints_file, objective, budget, time_target, binary, out_dir, splits, calibrate, local_mem_bw,
             overlap, timeout, force, as_json):
    """Optimize, emit, simulate with ASTRA-sim, compare predicted with simulated time, and calibrate.

    The optimized design and the baselines (EqualBW, TrafficProportional) are simulated; every
    run directory is kept under --out, with loop.json summarizing them.

    \b
    Example:
      libra-astra loop traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --total-bw 400 --astra-sim $ASTRA_SIM_BIN --out runs/gpt3 --calibrate 2
    """
    from .loop import run_loop

    net, cost, workloads, refs, cons = load_inputs(network_path, cost_path, traces, demands, weights, comm_groups,
                                                   total_bw, total_bw_max, budget, time_target, exprs,
                                                   constraints_file)
    echo = (lambda _line: None) if as_json else click.echo
    res = run_loop(workloads, refs, net, cost, out_dir=out_dir, objective=objective, constraints=cons,
                   binary=binary, splits=splits, calibrate=calibrate, timeout_s=timeout, overwrite=force,
                   local_mem_bw_gbps=local_mem_bw, overlap=overlap, on_event=echo)
    data = res.to_dict(net)
    write_json_atomic(Path(out_dir) / "loop.json", data, overwrite=True)
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    click.echo("")
    click.echo(f"{'iter':>4} {'design':<20} {'predicted':>14} {'simulated':>14} {'error':>9}  bandwidth GB/s "
               f"({', '.join(net.dim_names)})")
    for r in res.rows:
        click.echo(f"{r.iteration:>4} {r.name:<20} {_fmt_time(r.predicted_ns):>14} {_fmt_time(r.simulated_ns):>14} "
                   f"{r.error:>+9.3%}  " + ", ".join(f"{b:.3f}" for b in r.bw_gbps))
    for name, sp in data["simulated_speedup_of_best_over"].items():
        click.echo(f"simulated speedup of the best design over {name}: x{sp:.4f}")
    click.echo(f"best: iteration {res.best.iteration} ({_fmt_time(res.best.simulated_ns)} simulated); {res.stop_reason}")
    click.echo(f"wrote {Path(out_dir) / 'loop.json'}")


def _register() -> None:
    # Commands of the other steps live beside the library parts they drive.
    from .cli_astra import emit_command, simulate_command
    from .cli_demand import demand_command
    from .tracegen.cli import generate_command
    main.add_command(generate_command, "generate")
    main.add_command(demand_command, "demand")
    main.add_command(emit_command, "emit")
    main.add_command(simulate_command, "simulate")
    __import__("libra_astra.cli_search").cli_search.register(main)


_register()


def run() -> None:  # pragma: no cover - console entry
    main(prog_name="libra-astra")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
