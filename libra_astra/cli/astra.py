"""``emit`` and ``simulate`` commands: a design -> ASTRA-sim inputs -> simulated times."""

from __future__ import annotations

import json
import shlex

import click

from .app import Command
from .format import fmt_ms
from .numbers import FiniteFloat
from .progress import Progress


@click.command("emit", cls=Command)
@click.argument("design", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory to create for the ASTRA-sim inputs.")
@click.option("--workload", default=None, metavar="NAME",
              help="Which of the design's workloads to emit (needed when it has several).")
@click.option("--splits", default=None, type=click.IntRange(min=1),
              help="preferred-dataset-splits k: 1 sums per-dimension times; larger k pipelines chunks across "
                   "dimensions [default: the design's; another value than the design's is refused].")
@click.option("--endpoint-delay", "endpoint_delay_ns", default=1, show_default=True, type=click.IntRange(min=0),
              help="endpoint-delay in ns (0 is refused when a dimension has latency 0: ASTRA-sim aborts).")
@click.option("--local-mem-bw", "local_mem_bw_gbps", default=None, type=FiniteFloat(0, strict_min=True),
              help="local-mem-bw in GB/s; each reducing step costs 3 * bytes / local-mem-bw [default: the "
                   "design's; another value than the design's is refused].")
@click.option("--system", "system_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Your ASTRA-sim system.json, written back with every key kept and only the implementation "
                   "lists (one entry per emitted dimension) and preferred-dataset-splits set [default: the one "
                   "the design was optimized with, if any]; its splits and local-mem-bw must be the design's.")
@click.option("--force", is_flag=True, help="Replace an existing emitted directory.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def emit_command(design: str, out_dir: str, workload: str | None, splits: int | None, endpoint_delay_ns: int,
                 local_mem_bw_gbps: float | None, system_path: str | None, force: bool, as_json: bool) -> None:
    """Write ASTRA-sim inputs (network.yml, system.json, memory.json, per-rank ET, run.sh) for DESIGN.

    Bandwidths are written in the GiB/s ASTRA-sim reads (GB/s * 1e9 / 2^30). Communicator groups
    covering part of a dimension split it into logical dimensions; manifest.json records the split,
    the settings and the exact command line.

    \b
    Examples (design.json from the optimize command's first example):
      libra-astra emit design.json --out runs/gpt3 --force
      libra-astra emit design.json --out runs/gpt3-again --workload gpt3 --json --force
    """
    from ..astra import emit
    from ..timing.model import simulator_model
    from ..timing.settings import DEFAULT_LOCAL_MEM_BW_GBPS, describe_settings, model_settings

    system = None
    if system_path is not None:
        from ..optimize.design import load_design
        from .options import read_system_option

        design = load_design(design)
        user = read_system_option(system_path, design.network.dims, splits, local_mem_bw_gbps)
        splits, local_mem_bw_gbps, system = user.splits, user.local_mem_bw_gbps, user.to_dict()
    with Progress(f"emit {out_dir}") as p:
        res = emit(design, out_dir, splits=splits, workload=workload, overwrite=force, system=system,
                   endpoint_delay_ns=endpoint_delay_ns, local_mem_bw_gbps=local_mem_bw_gbps, on_progress=p)
    pred = res.prediction or {}
    if as_json:
        click.echo(json.dumps({"path": str(res.path), "workload": res.workload, "source": res.source,
                               "npus": res.npus_count, "splits": res.splits, "local_mem_bw_gbps": res.local_mem_bw_gbps,
                               "network": res.network.to_dict(), "prediction": pred, "notes": list(res.notes),
                               "command_line": res.command_line}, indent=1))
        return
    mem = res.local_mem_bw_gbps or DEFAULT_LOCAL_MEM_BW_GBPS
    settings = pred.get("time_model_settings") or model_settings(simulator_model(res.splits, mem))
    click.echo(f"simulator settings: {describe_settings(settings)}")
    shape = " x ".join(f"{d.topology}({d.npus})" for d in res.network.dims)
    click.echo(f"wrote {res.path}: workload {res.workload!r} from {res.source}, {res.npus_count} NPUs, "
               f"network {shape}, splits {res.splits}")
    if pred.get("time_ns") is not None:
        click.echo(f"predicted time: {fmt_ms(pred['time_ns'])} (libra_astra, for these settings; simulate compares)")
    else:
        click.echo(f"predicted time: unavailable ({pred.get('unavailable', 'no demand')})")
    if res.source == "demand":
        click.echo("  note: this workload is synthesized from the demand file, not your traces; to simulate the "
                   "traces themselves, optimize from the trace prefix and emit that design")
    for note in res.notes:
        click.echo(f"  note: {note}")
    q = shlex.quote(str(res.path))
    click.echo(f"run it: libra-astra simulate {q}   (or {shlex.quote(str(res.path / 'run.sh'))} with ASTRA_SIM_BIN set)")


@click.command("simulate", cls=Command)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--astra-sim", "binary", default=None, metavar="BIN",
              help="ASTRA-sim analytical binary (default: $ASTRA_SIM_BIN): AstraSim_Analytical_Congestion_Unaware, "
                   "or ..._Congestion_Aware (told by its name; one-dimensional networks only).")
@click.option("--timeout", "timeout_s", default=3600.0, show_default=True, type=FiniteFloat(0, strict_min=True),
              help="Stop the simulator after this many seconds.")
@click.option("--force", is_flag=True, help="Replace the results of an earlier run (RUN_DIR/sim).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-memory-check", is_flag=True,
              help="Start even when the simulator would need more memory than is available (about 1.6 KB "
                   "per ET node; it is then likely to be killed).")
def simulate_command(run_dir: str, binary: str | None, timeout_s: float, force: bool, as_json: bool,
                     no_memory_check: bool) -> None:
    """Run ASTRA-sim on RUN_DIR (made by `libra-astra emit`) and report every rank's time.

    Output goes to RUN_DIR/sim (stdout.txt, stderr.txt, log/, result.json). A run fails unless
    the simulator exits 0 and every NPU reports that it finished.

    \b
    Examples (with ASTRA_SIM_BIN set; runs/gpt3 from the emit command's example):
      libra-astra simulate runs/gpt3 --force
      libra-astra simulate runs/gpt3 --astra-sim "$ASTRA_SIM_BIN" --timeout 600 --json --force
    """
    from ..astra import simulate

    with Progress("simulate") as p:
        p.note(f"running ASTRA-sim on {run_dir}")
        res = simulate(run_dir, binary, timeout_s=timeout_s, overwrite=force, check_memory=not no_memory_check)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=1))
        return
    slowest = max(res.ranks, key=lambda r: r.finished_ns)
    fastest = min(res.ranks, key=lambda r: r.finished_ns)
    exposed = max(r.exposed_comm_ns for r in res.ranks)
    click.echo(f"simulated time: {fmt_ms(res.simulated_time_ns)} (rank {slowest.rank}; fastest rank {fastest.rank} "
               f"{fmt_ms(fastest.finished_ns)}), {res.npus_count} NPUs")
    click.echo(f"exposed communication: up to {fmt_ms(exposed)} (ASTRA-sim's figure: a rank's finish time minus "
               "its summed GPU compute, so CPU-op time and idle time are in it); host time "
               f"{res.wall_seconds:.2f} s; results in {res.sim_dir}")
    if any(r.wall_time_ns is None for r in res.ranks):
        click.echo("(ranks that ran a CPU op print only their finished line: ASTRA-sim's statistics report "
                   "supports GPU and communication nodes only)")
    if res.backend == "aware":
        # emit's prediction follows the optimizer's time model, which has no link contention
        err = res.prediction_error
        click.echo(f"predicted by libra-astra predict --backend aware: {fmt_ms(res.predicted_time_ns)} "
                   f"(error {err:+.3%} against the simulator)" if err is not None else
                   f"prediction: {res.prediction_by}")
    elif res.predicted_time_ns is not None:
        from ..astra import load_manifest

        err = res.prediction_error
        click.echo(f"predicted by libra_astra at emit: {fmt_ms(res.predicted_time_ns)} "
                   + (f"(error {err:+.3%} against the simulator)" if err is not None else "(simulated time 0)"))
        label = (load_manifest(run_dir).prediction or {}).get("model")
        if label:
            click.echo(f"  with {label}")
