"""``loop``: optimize, emit, simulate with ASTRA-sim, compare, calibrate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..files import write_json_atomic
from ..optimize.optimizer import OBJECTIVES
from .app import Command
from .format import fmt_time
from .optimize import OBJECTIVE_HELP
from .options import SharedOptions, workload_options


@click.command("loop", cls=Command)
@workload_options
@click.option("--objective", type=click.Choice(OBJECTIVES), default="perf", show_default=True, help=OBJECTIVE_HELP)
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
@click.pass_obj
def loop_command(shared: SharedOptions, objective, budget, time_target, binary, out_dir, splits, calibrate,
                 local_mem_bw, overlap, timeout, force, as_json):
    """Optimize, emit, simulate with ASTRA-sim, compare predicted with simulated time, and calibrate.

    The optimized design and the baselines (EqualBW, TrafficProportional) are simulated; every
    run directory is kept under --out, with loop.json summarizing them.

    \b
    Example:
      libra-astra loop traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml \\
          --cost network_configs/cost.yml --total-bw 400 --astra-sim $ASTRA_SIM_BIN --out runs/gpt3 --calibrate 2
    """
    from ..loop import run_loop

    net, cost, workloads, cons = shared.load(budget, time_target)
    echo = (lambda _line: None) if as_json else click.echo
    res = run_loop(workloads, net, cost, out_dir=out_dir, objective=objective, constraints=cons,
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
        click.echo(f"{r.iteration:>4} {r.name:<20} {fmt_time(r.predicted_ns):>14} {fmt_time(r.simulated_ns):>14} "
                   f"{r.error:>+9.3%}  " + ", ".join(f"{b:.3f}" for b in r.bw_gbps))
    for name, sp in data["simulated_speedup_of_best_over"].items():
        click.echo(f"simulated speedup of the best design over {name}: x{sp:.4f}")
    click.echo(f"best: iteration {res.best.iteration} ({fmt_time(res.best.simulated_ns)} simulated); {res.stop_reason}")
    click.echo(f"wrote {Path(out_dir) / 'loop.json'}")
