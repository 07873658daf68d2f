"""``optimize`` and ``pareto``: workloads -> the best bandwidth per dimension (or the frontier)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..model.numbers import ratio
from ..errors import LibraError
from ..timing.settings import DEFAULT_LOCAL_MEM_BW_GBPS, OBJECTIVES, header, model_settings
from .numbers import FiniteFloat
from .app import Command
from .common import check_plot, draw, plot_option
from .format import fmt_time, fmt_usd
from .measured import GPU_FAITHFUL_HELP, design_comparison, echo_comparison, echo_faithful, measured_option
from .options import SharedOptions, power_options, time_model_options, workload_options
from .progress import Progress
from .show import format_energy, format_frontier, format_tco

if TYPE_CHECKING:  # the library is imported by the command that runs
    from ..model.cost import CostModel
    from ..model.network import Network
    from ..optimize.optimizer import OptimizeResult

OBJECTIVE_HELP = ("perf: min time; perf-per-cost: min time x cost; min-cost: min cost with --time-target; "
                  "min-energy: min J per step; perf-per-watt: min time x peak power; min-tco: min USD of the run, "
                  "capital amortized + electricity (the last three need --power).")


def _print_result(r: OptimizeResult, net: Network, cost: CostModel | None, n_workloads: int, data: dict) -> None:
    """``cost`` None: no cost file was given, so no cost is shown (every design would cost $0)."""
    b = r.best
    if data.get("time_model"):
        click.echo(header(r.objective, data["time_model"]))
    for note in data.get("notes", []):
        click.echo(f"note: {note}")
    click.echo(f"network {net.name} ({net.npus_count:,} NPUs), {n_workloads} workload{'s' if n_workloads > 1 else ''}, "
               f"{r.num_collectives:,} collectives -> {r.num_terms} distinct terms")
    prices = cost.price_usd_per_gbps(net) if cost is not None else None
    total = sum(b.bw_gbps)
    click.echo(f"  {'dimension':<12} {'topology':<15} {'npus':>5} {'GB/s per NPU':>13} {'share':>7}"
               + (f" {'cost':>14}" if prices else ""))
    for i, (d, bw) in enumerate(zip(net.dims, b.bw_gbps)):
        click.echo(f"  {d.name:<12} {d.topology:<15} {d.npus:>5} {bw:>13.4f} {bw / total:>6.1%}"
                   + (f" {fmt_usd(prices[i] * bw):>14}" if prices else ""))
    click.echo(f"  {'total':<12} {'':<15} {'':>5} {total:>13.4f}" + (f" {'':>7} {fmt_usd(b.cost_usd):>14}" if prices else ""))
    several = n_workloads > 1
    other = float((data.get("breakdown") or {}).get("optimum", {}).get("cpu_and_idle_ns", 0.0))
    if other > 0:
        # CPU ops (real PyTorch traces) and waiting: exposed, but not the network's
        click.echo(f"time      {fmt_time(b.time_ns)} = compute {fmt_time(b.compute_ns)} + communication "
                   f"{fmt_time(b.communication_ns - other)} + CPU ops and waiting {fmt_time(other)}"
                   + ("   (weighted sum over the workloads)" if several else ""))
    else:
        click.echo(f"time      {fmt_time(b.time_ns)} = compute {fmt_time(b.compute_ns)} + communication "
                   f"{fmt_time(b.communication_ns)}" + ("   (weighted sum over the workloads)" if several else ""))
    if several:
        for w in data.get("workloads", []):
            click.echo(f"  {w['name']:<18} weight {w['weight']:g}: {fmt_time(w['time_ns'])} = compute "
                       f"{fmt_time(w['compute_ns'])} + communication {fmt_time(w['communication_ns'])}")
    if prices:
        click.echo(f"cost      {fmt_usd(b.cost_usd)}   time x cost {b.time_cost_ns_usd / 1e9:,.6g} s*USD")
    for name, e in r.baselines.items():
        flag = "" if e.feasible else "  (violates the constraints)"
        gain = (f"  perf/cost gain {_x(ratio(e.time_cost_ns_usd, b.time_cost_ns_usd) if b.cost_usd else None, 'cost 0')}"
                if prices else "")
        click.echo(f"vs {name:<20} time {fmt_time(e.time_ns):>12}  speedup {_x(ratio(e.time_ns, b.time_ns))}{gain}{flag}")
    gap = f"{r.rel_gap:.2e}" if math.isfinite(r.rel_gap) else "unknown"
    click.echo(f"solver    {r.message}; relative duality gap {gap}; {r.newton_steps} Newton steps; "
               f"{r.solve_time_s * 1e3:.2f} ms")
    if data.get("energy"):
        for line in format_energy(data["energy"]):
            click.echo(line)
    if data.get("tco"):
        for line in format_tco(data["tco"]):
            click.echo(line)



def _auto_base(tm, net: Network, record: dict | None, value: str = "auto"):
    """(model, system record) that --algorithms auto chooses within: the user's system.json, or
    the one emit writes (ring everywhere)."""
    from ..astra.emit import system_config
    from ..timing.system_phases import timing_of

    if tm.kind != "pipelined":
        raise LibraError(f"--algorithms {value} applies to --model pipelined only (the LIBRA model has no "
                         "algorithms); drop --model libra")
    if record is None:
        settings = system_config(net.num_dims, splits=tm.splits, endpoint_delay_ns=1,
                                 local_mem_bw_gbps=float(tm.local_mem_bw_gbps), peak_perf_tflops=1000.0,
                                 scheduling_policy="LIFO")
        record = {"path": "system.json written by emit", "settings": settings}
    return replace(tm, system=timing_of(record)), record


def _chosen_record(record: dict, timing) -> dict:
    from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS

    settings = dict(record["settings"])
    for kind, names in zip(KINDS, timing.implementations):
        settings[IMPLEMENTATION_KEYS[kind]] = list(names)
    return {"path": f"{record['path']}, implementations chosen by --algorithms auto", "settings": settings}


def _print_choice(choice, net: Network) -> None:
    from ..timing.astra_settings import IMPLEMENTATION_KEYS

    click.echo(f"algorithms {choice.combinations} combination{'s' if choice.combinations != 1 else ''} solved, "
               f"{len(choice.pruned)} choice{'s' if len(choice.pruned) != 1 else ''} pruned (never faster)")
    for kind, d in choice.free:
        click.echo(f"  {IMPLEMENTATION_KEYS[kind]:<30} {net.dims[d].name:<10} {choice.timing.implementation(kind, d)}")
    if choice.open_combinations:
        click.echo(f"  {choice.open_combinations} other combination{'s' if choice.open_combinations != 1 else ''} "
                   "could be better: their optimum is only bounded (see the solver line)")
    if choice.trees:
        for kind, d, why in choice.refused:
            click.echo(f"  no doubleBinaryTree for {IMPLEMENTATION_KEYS[kind]} on {net.dims[d].name}: {why}")
        if choice.tree_chosen:
            free = "infeasible" if choice.tree_free is None else r_value(choice.tree_free)
            click.echo(f"  best without trees: {free}; with trees each tree collective counts its slowest rank, an "
                       "upper bound on ASTRA-sim's time of a chain of them ('libra-astra predict' on the emitted "
                       "run times every rank)")
        elif choice.tree_best is not None:
            click.echo(f"  best with a tree: {r_value(choice.tree_best)} (each tree collective its slowest rank: "
                       "ASTRA-sim can run a chain of them faster; 'libra-astra predict' on its emitted run tells)")
    if choice.ring is None:
        click.echo(f"  vs ring everywhere: infeasible -> {r_value(choice.result)}")
        return
    gain = ratio(choice.ring.fun, choice.result.fun)
    click.echo(f"  vs ring everywhere: {r_value(choice.ring)} -> {r_value(choice.result)}"
               + (f" (x{gain:.4f})" if gain is not None else ""))


def r_value(r) -> str:
    return fmt_time(r.best.time_ns) if r.objective != "min-cost" else fmt_usd(r.best.cost_usd)


def tco_dict(workloads, net, cost, power, r: OptimizeResult, shared: SharedOptions) -> dict:
    """The result's "tco": the run's total cost of ownership (USD) at the optimum and the baselines."""
    from ..optimize.tco import tco_parts

    out = tco_parts(workloads, net, cost, power, shared.tco(), r.best.bw_gbps, r.best.time_ns)
    out["baselines_tco_usd"] = {name: tco_parts(workloads, net, cost, power, shared.tco(), e.bw_gbps,
                                                e.time_ns)["tco_usd"] for name, e in r.baselines.items()}
    return out


def energy_dict(workloads, net, power, r: OptimizeResult, shared: SharedOptions) -> dict:
    """The result's "energy": the optimum's step (J, W) and each baseline's energy (J)."""
    from ..optimize.energy import energy_report

    def report(e):
        return energy_report(workloads, net, power, e.bw_gbps, e.time_ns, shared.samples_per_step,
                             shared.tokens_per_step)
    out = {"power_model": power.name, **report(r.best).to_dict()}
    out["baselines_energy_j"] = {name: report(e).energy_j for name, e in r.baselines.items()}
    return out


def _x(v: float | None, why: str = "time 0") -> str:
    return f"n/a ({why})" if v is None else f"x{v:.4f}"


@click.command("optimize", cls=Command)
@workload_options
@time_model_options
@power_options
@click.option("--objective", type=click.Choice(OBJECTIVES), default="perf", show_default=True, help=OBJECTIVE_HELP)
@click.option("--budget", type=FiniteFloat(), help="Upper bound on network cost, USD.")
@click.option("--time-target", type=FiniteFloat(), help="Time target in ns for --objective min-cost.")
@click.option("--algorithms", type=click.Choice(["system", "auto", "auto-tree"]), default="system",
              show_default=True,
              help="Collective implementation per dimension and kind: as the system settings give them (--system, "
                   "else ring, as emit writes), or auto: chosen with the bandwidths among ring, direct and "
                   "halvingDoubling, every combination solved (the design keeps the choice for emit); auto-tree: "
                   "doubleBinaryTree a candidate too where ASTRA-sim runs it (a chain of tree collectives is then "
                   "timed from above).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the design JSON here (for 'emit').")
@plot_option("bandwidth per dimension and the time breakdown, optimum vs baselines")
@click.option("--force", is_flag=True, help="Overwrite an existing --output or --plot file.")
@measured_option
@click.option("--gpu-faithful", "gpu_faithful", is_flag=True, help=GPU_FAITHFUL_HELP)
@click.pass_obj
def optimize_command(shared: SharedOptions, objective, budget, time_target, algorithms, as_json, output, plot_out,
                     force, measured, gpu_faithful):
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
      libra-astra optimize traces/dlrm_16/dlrm --network network_configs/sample_4x4.yml --total-bw 200 \\
          --algorithms auto
      libra-astra optimize --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --power network_configs/power.yml --objective min-energy --total-bw 400 --power-max 98000
      libra-astra optimize --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --power network_configs/power.yml --objective min-tco \\
          --total-bw-max 1000 --electricity-usd-per-kwh 0.1 --lifetime-years 4 --run-steps 1e5 --npu-usd 30000
      libra-astra optimize tests/fixtures/real/param_dlrm8/param_dlrm8 --network tests/fixtures/real/ring8.yml \\
          --cost network_configs/cost.yml --objective min-cost --time-target 24e6 \\
          --measured tests/fixtures/real/param_dlrm8/param_dlrm8 --gpu-faithful
    """
    from ..files import check_writable, write_json_atomic
    from ..optimize.design import Design, WorkloadRef, design_to_dict, result_to_dict
    from ..optimize.optimizer import optimize

    if output:
        check_writable(output, force)
    check_plot(plot_out, force)
    tm = shared.time_model()
    if gpu_faithful and not measured:
        raise LibraError("--gpu-faithful optimizes a measured run: give its Kineto traces with --measured KINETO")
    if gpu_faithful and algorithms != "system":
        raise LibraError("--gpu-faithful takes the implementations as the system settings give them; drop "
                         f"--algorithms {algorithms} (or choose them first and pass the design's system.json with --system)")
    if objective != "min-cost" and time_target is not None:
        raise LibraError("--time-target only applies to --objective min-cost")
    net, cost, workloads, cons = shared.load(budget, time_target, objective=objective)
    power = shared.power(net)
    system_record = None if shared.user_system is None else shared.user_system.to_dict()
    choice = None
    with Progress("optimize") as p:
        if algorithms != "system":
            from ..optimize.algorithms import choose_algorithms

            tm, system_record = _auto_base(tm, net, system_record, algorithms)
            p.note(f"choosing algorithms ({objective})")
            choice = choose_algorithms(workloads, net, cost, objective=objective, constraints=cons, model=tm,
                                       on_progress=lambda i, n: p(i, n, "combinations"), power=power,
                                       tco=shared.tco(), trees=algorithms == "auto-tree")
            r, tm = choice.result, replace(tm, system=choice.timing)
            system_record = _chosen_record(system_record, choice.timing)
        else:
            p.note(f"solving ({objective}, {tm.kind} model)")
            r = optimize(workloads, net, cost, objective=objective, constraints=cons, model=tm, power=power,
                         tco=shared.tco())
    data = result_to_dict(r, net, tm, workloads)
    if choice is not None:
        data["algorithms"] = choice.to_dict()
    if power is not None:
        data["energy"] = energy_dict(workloads, net, power, r, shared)
        if shared.tco() is not None:
            data["tco"] = tco_dict(workloads, net, cost, power, r, shared)
    cmp = faithful = None
    mem_bw = tm.local_mem_bw_gbps or DEFAULT_LOCAL_MEM_BW_GBPS
    if measured:
        if len(workloads) != 1:
            raise LibraError(f"--measured compares one run; give one workload, not {len(workloads)}")
        design_bw, design_ns = r.bw_gbps, r.best.time_ns
        if gpu_faithful:
            from ..optimize.faithful import faithful_to_dict, optimize_faithful

            with Progress("optimize") as p:
                p.note(f"solving the GPU-faithful model ({objective})")
                faithful = optimize_faithful(measured, workloads, net, cost, objective, cons, tm, r, power=power,
                                             tco=shared.tco())
            data["gpu_faithful"] = faithful_to_dict(faithful, "model")
            design_bw, design_ns = faithful.result.bw_gbps, faithful.model_ns
        # the optimum as emit would simulate it, beside the optimizer's own time of the workload
        loaded = None if faithful is None else (faithful.time.measurement, faithful.time.profiles)
        cmp = design_comparison(measured, net, design_bw, tm.splits, mem_bw, system_record,
                                [design_ns] * net.npus_count, shared.cpu_collective_groups, loaded)
        from ..measure.compare import comparison_to_dict

        data["measured"] = comparison_to_dict(cmp)
    from ..demand.workload import demand_warnings
    warnings = demand_warnings(workloads)
    if as_json:
        if warnings:
            data["warnings"] = warnings
        click.echo(json.dumps(data, indent=1))
    else:
        for line in warnings:
            click.echo(f"warning: {line}")
        _print_result(r, net, cost if shared.cost_path else None, len(workloads), data)
        if choice is not None:
            _print_choice(choice, net)
        if faithful is not None:
            echo_faithful(faithful, net, shared.cost_path)
        if cmp is not None:
            echo_comparison(cmp, f"optimizer ({tm.kind})")
    if output:
        # with --gpu-faithful the GPU-faithful optimum, timed as the simulator will run the traces
        best = r.best if faithful is None else replace(faithful.result.best, time_ns=faithful.model_ns)
        design = Design(Path(output).stem, net, best.bw_gbps, objective, tm.kind, best.time_ns, best.cost_usd,
                        tuple(WorkloadRef.of(w) for w in workloads), data, model_settings(tm), system_record)
        write_json_atomic(output, design_to_dict(design), overwrite=force)
        if not as_json:
            click.echo(f"wrote {output}")
    draw("result", data, plot_out, force, echo=not as_json)


@click.command("pareto", cls=Command)
@workload_options
@time_model_options
@power_options
@click.option("--versus", type=click.Choice(["cost", "energy", "tco"]), default="cost", show_default=True,
              help="Frontier of time versus network cost (budgets in USD), energy per step (budgets in J; needs "
                   "--power) or the run's TCO (budgets in USD; needs --power and the TCO settings).")
@click.option("--min-budget", type=FiniteFloat(), required=True, help="Lowest budget: USD, or J per step with --versus energy.")
@click.option("--max-budget", type=FiniteFloat(), required=True, help="Highest budget: USD, or J per step with --versus energy.")
@click.option("--points", type=click.IntRange(min=2), default=10, show_default=True, help="Budgets, spaced geometrically.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the frontier as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the frontier as JSON instead of a table.")
@plot_option("time versus cost and the bandwidth per dimension along the frontier")
@click.option("--force", is_flag=True, help="Overwrite an existing --output or --plot file.")
@click.pass_obj
def pareto_command(shared: SharedOptions, versus, min_budget, max_budget, points, output, as_json, plot_out, force):
    """Time-versus-cost (or energy, or TCO) frontier: the fastest design for each budget.

    \b
    Examples:
      libra-astra pareto --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --min-budget 2e5 --max-budget 2e6 --points 6 -o frontier.json --force
      libra-astra pareto --demand gpt3.demand.json --network network_configs/sample_8x8.yml \\
          --power network_configs/power.yml --versus energy --total-bw-max 1000 \\
          --min-budget 10500 --max-budget 11500 --points 5
    """
    from ..files import check_writable, write_json_atomic
    from ..optimize.optimizer import pareto

    if not 0 < min_budget < max_budget:
        raise LibraError("--min-budget must be > 0 and below --max-budget")
    if output:
        check_writable(output, force)
    check_plot(plot_out, force)
    tm = shared.time_model()
    net, cost, workloads, cons = shared.load(prices_for="pareto" if versus != "energy" else None)
    power, tco = shared.power(net), shared.tco()
    if versus != "cost" and power is None:
        raise LibraError(f"pareto --versus {versus} needs power figures: give --power FILE (e.g. network_configs/power.yml)")
    if versus == "tco" and tco is None:
        raise LibraError("pareto --versus tco needs --electricity-usd-per-kwh and --lifetime-years")
    budgets = [min_budget * (max_budget / min_budget) ** (i / (points - 1)) for i in range(points)]
    with Progress("pareto") as p:
        p.note(f"{points} budgets")
        results = pareto(workloads, net, cost, budgets, constraints=cons, model=tm, versus=versus, power=power,
                         tco=tco)
    rows = [{"budget_usd": bud, "cost_usd": r.best.cost_usd, "time_ns": r.best.time_ns,
             "bandwidth_gbps": list(r.bw_gbps), "relative_gap": r.rel_gap} for bud, r in zip(budgets, results)]
    if versus != "cost":
        from ..optimize.energy import energy_rate
        from ..optimize.tco import tco_rate
        for row, r in zip(rows, results):
            row["budget_j" if versus == "energy" else "budget_usd"] = row.pop("budget_usd")
            row["energy_j"] = energy_rate(workloads, net, power).energy_j(r.bw_gbps, r.best.time_ns)
            if versus == "tco":
                row["tco_usd"] = tco_rate(workloads, net, cost, power, tco).tco_usd(r.bw_gbps, r.best.time_ns)
    data = {"format": "libra_astra.pareto", "version": 1, "objective": "perf", "time_model": model_settings(tm),
            "versus": versus, "dimensions": list(net.dim_names), "points": rows}
    if shared.user_system is not None:
        data["system"] = shared.user_system.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo(format_frontier(data))
    if output:
        write_json_atomic(output, data, overwrite=force)
        if not as_json:
            click.echo(f"wrote {output}")
    draw("frontier", data, plot_out, force, echo=not as_json)
