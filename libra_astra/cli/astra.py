"""``emit`` and ``simulate`` commands: a design -> ASTRA-sim inputs -> simulated times."""

from __future__ import annotations

import json

import click

from ..astra import emit, simulate
from .app import Command
from .format import fmt_ms


@click.command("emit", cls=Command)
@click.argument("design", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory to create for the ASTRA-sim inputs.")
@click.option("--workload", default=None, metavar="NAME",
              help="Which of the design's workloads to emit (needed when it has several).")
@click.option("--splits", default=1, show_default=True, type=click.IntRange(min=1),
              help="preferred-dataset-splits k: 1 sums per-dimension times; larger k pipelines chunks across dimensions.")
@click.option("--endpoint-delay", "endpoint_delay_ns", default=1, show_default=True, type=click.IntRange(min=0),
              help="endpoint-delay in ns (0 is refused when a dimension has latency 0: ASTRA-sim aborts).")
@click.option("--local-mem-bw", "local_mem_bw_gbps", default=1e9, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="local-mem-bw in GB/s; each reducing step costs 3 * bytes / local-mem-bw.")
@click.option("--force", is_flag=True, help="Replace an existing emitted directory.")
def emit_command(design: str, out_dir: str, workload: str | None, splits: int, endpoint_delay_ns: int,
                 local_mem_bw_gbps: float, force: bool) -> None:
    """Write ASTRA-sim inputs (network.yml, system.json, memory.json, per-rank ET, run.sh) for DESIGN.

    Bandwidths are written in the GiB/s ASTRA-sim reads (GB/s * 1e9 / 2^30). Communicator groups
    covering part of a dimension split it into logical dimensions; manifest.json records the split,
    the settings and the exact command line.

    \b
    Examples:
      libra-astra emit design.json --out runs/gpt3
      libra-astra emit design.json --out runs/gpt3-k4 --splits 4 --workload gpt3 --force
    """
    res = emit(design, out_dir, splits=splits, workload=workload, overwrite=force,
               endpoint_delay_ns=endpoint_delay_ns, local_mem_bw_gbps=local_mem_bw_gbps)
    shape = " x ".join(f"{d.topology}({d.npus})" for d in res.network.dims)
    click.echo(f"wrote {res.path}: workload {res.workload!r} from {res.source}, {res.npus_count} NPUs, "
               f"network {shape}, splits {res.splits}")
    for note in res.notes:
        click.echo(f"  note: {note}")
    click.echo(f"run it: libra-astra simulate {res.path}   (or {res.path}/run.sh with ASTRA_SIM_BIN set)")


@click.command("simulate", cls=Command)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--astra-sim", "binary", default=None, metavar="BIN",
              help="ASTRA-sim analytical binary (default: $ASTRA_SIM_BIN).")
@click.option("--timeout", "timeout_s", default=3600.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Stop the simulator after this many seconds.")
@click.option("--force", is_flag=True, help="Replace the results of an earlier run (RUN_DIR/sim).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def simulate_command(run_dir: str, binary: str | None, timeout_s: float, force: bool, as_json: bool) -> None:
    """Run ASTRA-sim on RUN_DIR (made by `libra-astra emit`) and report every rank's time.

    Output goes to RUN_DIR/sim (stdout.txt, stderr.txt, log/, result.json). A run fails unless
    the simulator exits 0 and every NPU reports that it finished.

    \b
    Examples:
      ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware libra-astra simulate runs/gpt3
      libra-astra simulate runs/gpt3 --astra-sim ./AstraSim_Analytical_Congestion_Unaware --timeout 600 --json
    """
    res = simulate(run_dir, binary, timeout_s=timeout_s, overwrite=force)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=1))
        return
    slowest = max(res.ranks, key=lambda r: r.finished_ns)
    fastest = min(res.ranks, key=lambda r: r.finished_ns)
    exposed = max(r.exposed_comm_ns for r in res.ranks)
    click.echo(f"simulated time: {fmt_ms(res.simulated_time_ns)} (rank {slowest.rank}; fastest rank {fastest.rank} "
               f"{fmt_ms(fastest.finished_ns)}), {res.npus_count} NPUs")
    click.echo(f"exposed communication: up to {fmt_ms(exposed)}; host time {res.wall_seconds:.2f} s; "
               f"results in {res.sim_dir}")
    if res.predicted_time_ns is not None:
        click.echo(f"predicted by libra_astra at emit: {fmt_ms(res.predicted_time_ns)} "
                   f"(error {res.prediction_error:+.3%} against the simulator)")
