"""``loop``: optimize, emit, simulate with ASTRA-sim, compare, calibrate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import LibraError
from ..timing.settings import DEFAULT_LOCAL_MEM_BW_GBPS, DEFAULT_SPLITS, OBJECTIVES
from .numbers import FiniteFloat
from .app import Command
from .common import check_plot, draw, plot_option
from .optimize import OBJECTIVE_HELP
from .measured import design_comparison, echo_comparison, measured_option
from .options import SharedOptions, power_options, workload_options
from .progress import Progress
from .show import format_loop


@click.command("loop", cls=Command)
@workload_options
@power_options
@click.option("--objective", type=click.Choice(OBJECTIVES), default="perf", show_default=True, help=OBJECTIVE_HELP)
@click.option("--budget", type=FiniteFloat(), help="Upper bound on network cost, USD.")
@click.option("--time-target", type=FiniteFloat(), help="Time target in ns for --objective min-cost.")
@click.option("--astra-sim", "binary", type=click.Path(dir_okay=False),
              help="ASTRA-sim analytical binary [default: $ASTRA_SIM_BIN]: congestion-unaware, or congestion-aware "
                   "(told by its name; 1-D networks, compared with its exact model).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="New directory that keeps every iteration's inputs and outputs.")
@click.option("--splits", type=click.IntRange(min=1), default=None,
              help=f"preferred-dataset-splits of the emitted runs (chunks per collective) [default: {DEFAULT_SPLITS}, "
                   "or --system's].")
@click.option("--calibrate", type=click.IntRange(min=0), default=0, show_default=True,
              help="Calibration iterations: fit per-dimension efficiency from the simulator, re-optimize.")
@click.option("--local-mem-bw", "local_mem_bw", type=FiniteFloat(0, strict_min=True), default=None,
              help="ASTRA-sim local-mem-bw of the emitted runs, GB/s (also used by the model) "
                   f"[default: {DEFAULT_LOCAL_MEM_BW_GBPS:g}, or --system's].")
@click.option("--system", "system_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Your ASTRA-sim system.json, read unmodified: its preferred-dataset-splits and local-mem-bw "
                   "set the model and the runs, which simulate it with only the implementation lists sized to "
                   "the emitted network and the splits set; a setting the model does not time exactly is refused.")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="Optimize the dependency-aware time (as the simulator runs the traces) or the no-overlap sum.")
@click.option("--timeout", type=FiniteFloat(), default=3600.0, show_default=True, help="Seconds per simulator run.")
@click.option("--force", is_flag=True, help="Reuse an existing --out directory, replacing its runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@plot_option("predicted and simulated time of every run")
@measured_option
@click.option("--gpu-faithful", "gpu_faithful", is_flag=True,
              help="With --measured: optimize the measured run's GPU-faithful step (its slowest rank, replayed as "
                   "the GPU ran it, each collective's transfer from the time model; exact, certified) instead of the "
                   "traces' time, then simulate the traces at that optimum; one workload, no --calibrate.")
@click.pass_obj
def loop_command(shared: SharedOptions, objective, budget, time_target, binary, out_dir, splits, calibrate,
                 local_mem_bw, system_path, overlap, timeout, force, as_json, plot_out, measured, gpu_faithful):
    """Optimize, emit, simulate with ASTRA-sim, compare predicted with simulated time, and calibrate.

    The optimized design and the baselines (EqualBW, TrafficProportional) are simulated; every
    run directory is kept under --out, with loop.json summarizing them.

    \b
    Example (with ASTRA_SIM_BIN set):
      libra-astra loop traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --total-bw 400 --out runs/gpt3-loop --calibrate 2 --plot loop.svg --force
    """
    from ..astra.run import resolve_binary
    from ..files import write_json_atomic
    from ..loop import run_loop

    check_plot(plot_out, force)
    if gpu_faithful and not measured:
        raise LibraError("--gpu-faithful optimizes a measured run: give its Kineto traces with --measured KINETO")
    user = None
    if system_path is not None:
        from ..model.network import load_network
        from .options import read_system_option

        user = read_system_option(system_path, load_network(shared.network_path).dims, splits, local_mem_bw)
        splits, local_mem_bw = user.splits, user.local_mem_bw_gbps
    splits = DEFAULT_SPLITS if splits is None else splits
    local_mem_bw = DEFAULT_LOCAL_MEM_BW_GBPS if local_mem_bw is None else local_mem_bw
    binary = resolve_binary(binary)        # before the traces are read: a missing simulator fails at once
    net, cost, workloads, cons = shared.load(budget, time_target, objective=objective)
    from ..demand.workload import demand_warnings
    warnings = demand_warnings(workloads)
    with Progress("loop") as p:
        def echo(line: str) -> None:
            if not as_json:
                p.clear()
                click.echo(line)

        for line in warnings:
            echo(f"warning: {line}")
        res = run_loop(workloads, net, cost, out_dir=out_dir, objective=objective, constraints=cons,
                       binary=binary, splits=splits, calibrate=calibrate, timeout_s=timeout, overwrite=force,
                       local_mem_bw_gbps=local_mem_bw, overlap=overlap, on_event=echo,
                       system=None if user is None else user.to_dict(), on_progress=p.note,
                       power=shared.power(net), tco=shared.tco(), measured=measured if gpu_faithful else ())
    data = res.to_dict(net)
    cmp = None
    if measured:
        from ..astra.record import read_sim
        from ..measure.compare import comparison_to_dict

        if len(workloads) != 1:
            raise LibraError(f"--measured compares one run; give one workload, not {len(workloads)}")
        # the best design against the run, beside what ASTRA-sim simulated for each rank of it
        sim = read_sim(res.best.run_dirs[0], net.npus_count) if res.best.run_dirs else None
        per_rank = {r.rank: r.finished_ns for r in sim.ranks} if sim is not None else {}
        other = [per_rank[r] for r in range(net.npus_count)] if len(per_rank) == net.npus_count else None
        cmp = design_comparison(measured, net, res.best.bw_gbps, splits, local_mem_bw,
                                None if user is None else user.to_dict(), other, shared.cpu_collective_groups)
        data["measured"] = comparison_to_dict(cmp)
    write_json_atomic(Path(out_dir) / "loop.json", data, overwrite=force)
    if as_json:
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo("")
        click.echo(format_loop({**data, "time_model": None}))
        if cmp is not None:
            echo_comparison(cmp, "ASTRA-sim (simulated)")
        click.echo(f"wrote {Path(out_dir) / 'loop.json'}")
    draw("loop", data, plot_out, force, echo=not as_json)
