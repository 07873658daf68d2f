"""``optimize`` and ``pareto``: workloads -> the best bandwidth per dimension (or the frontier)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from ..errors import LibraError
from ..files import check_writable, write_json_atomic
from ..model.cost import CostModel
from ..model.network import Network
from ..optimize.design import Design, WorkloadRef, design_to_dict, result_to_dict
from ..optimize.optimizer import OBJECTIVES, OptimizeResult, optimize, pareto
from .app import Command
from .format import fmt_time, fmt_usd
from .options import SharedOptions, time_model_options, workload_options

OBJECTIVE_HELP = "perf: min time; perf-per-cost: min time x cost; min-cost: min cost with --time-target."


def _print_result(r: OptimizeResult, net: Network, cost: CostModel, n_workloads: int) -> None:
    b = r.best
    click.echo(f"objective {r.objective} on {net.name} ({net.npus_count:,} NPUs), {n_workloads} workload(s), "
               f"{r.num_collectives:,} collectives -> {r.num_terms} distinct terms")
    prices = cost.price_usd_per_gbps(net)
    total = sum(b.bw_gbps)
    click.echo(f"  {'dimension':<12} {'topology':<15} {'npus':>5} {'GB/s per NPU':>13} {'share':>7} {'cost':>14}")
    for d, bw, p in zip(net.dims, b.bw_gbps, prices):
        click.echo(f"  {d.name:<12} {d.topology:<15} {d.npus:>5} {bw:>13.4f} {bw / total:>6.1%} {fmt_usd(p * bw):>14}")
    click.echo(f"  {'total':<12} {'':<15} {'':>5} {total:>13.4f} {'':>7} {fmt_usd(b.cost_usd):>14}")
    click.echo(f"time      {fmt_time(b.time_ns)} = compute {fmt_time(b.compute_ns)} + communication "
               f"{fmt_time(b.communication_ns)}")
    click.echo(f"cost      {fmt_usd(b.cost_usd)}   time x cost {b.time_cost_ns_usd / 1e9:,.6g} s*USD")
    for name, e in r.baselines.items():
        flag = "" if e.feasible else "  (violates the constraints)"
        click.echo(f"vs {name:<20} time {fmt_time(e.time_ns):>12}  speedup x{e.time_ns / b.time_ns:.4f}  "
                   f"perf/cost gain x{e.time_cost_ns_usd / b.time_cost_ns_usd:.4f}{flag}")
    gap = f"{r.rel_gap:.2e}" if math.isfinite(r.rel_gap) else "unknown"
    click.echo(f"solver    {r.message}; relative duality gap {gap}; {r.newton_steps} Newton steps; "
               f"{r.solve_time_s * 1e3:.2f} ms")


@click.command("optimize", cls=Command)
@workload_options
@time_model_options
@click.option("--objective", type=click.Choice(OBJECTIVES), default="perf", show_default=True, help=OBJECTIVE_HELP)
@click.option("--budget", type=float, help="Upper bound on network cost, USD.")
@click.option("--time-target", type=float, help="Time target in ns for --objective min-cost.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the design JSON here (for 'emit').")
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
@click.pass_obj
def optimize_command(shared: SharedOptions, objective, budget, time_target, as_json, output, force):
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
    net, cost, workloads, cons = shared.load(budget, time_target)
    if objective != "min-cost" and time_target is not None:
        raise LibraError("--time-target only applies to --objective min-cost")
    r = optimize(workloads, net, cost, objective=objective, constraints=cons, model=shared.time_model())
    data = result_to_dict(r, net)
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        _print_result(r, net, cost, len(workloads))
    if output:
        design = Design(Path(output).stem, net, r.bw_gbps, objective, shared.model, r.best.time_ns, r.best.cost_usd,
                        tuple(WorkloadRef.of(w) for w in workloads),
                        {**data, "splits": shared.splits, "overlap": shared.overlap})
        write_json_atomic(output, design_to_dict(design), overwrite=force)
        if not as_json:
            click.echo(f"wrote {output}")


@click.command("pareto", cls=Command)
@workload_options
@time_model_options
@click.option("--min-budget", type=float, required=True, help="Lowest cost budget, USD.")
@click.option("--max-budget", type=float, required=True, help="Highest cost budget, USD.")
@click.option("--points", type=click.IntRange(min=2), default=10, show_default=True, help="Budgets, spaced geometrically.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the frontier as JSON here.")
@click.option("--force", is_flag=True, help="Overwrite an existing --output file.")
@click.pass_obj
def pareto_command(shared: SharedOptions, min_budget, max_budget, points, output, force):
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
    net, cost, workloads, cons = shared.load()
    budgets = [min_budget * (max_budget / min_budget) ** (i / (points - 1)) for i in range(points)]
    results = pareto(workloads, net, cost, budgets, constraints=cons, model=shared.time_model())
    rows = []
    click.echo(f"{'budget USD':>16} {'cost USD':>16} {'time':>14}  bandwidth GB/s per dimension ({', '.join(net.dim_names)})")
    for bud, r in zip(budgets, results):
        rows.append({"budget_usd": bud, "cost_usd": r.best.cost_usd, "time_ns": r.best.time_ns,
                     "bandwidth_gbps": list(r.bw_gbps), "relative_gap": r.rel_gap})
        click.echo(f"{bud:>16,.0f} {r.best.cost_usd:>16,.0f} {fmt_time(r.best.time_ns):>14}  "
                   + ", ".join(f"{b:.3f}" for b in r.bw_gbps))
    if output:
        write_json_atomic(output, {"format": "libra_astra.pareto", "version": 1, "dimensions": list(net.dim_names),
                                   "points": rows}, overwrite=force)
        click.echo(f"wrote {output}")
