"""``libra-astra search`` and ``libra-astra sweep``: the co-design search and grids of optimizations."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import click

from ..errors import LibraError
from .app import Command


def _fmt_time(ns: float) -> str:
    if not math.isfinite(ns):
        return "-"
    if ns >= 1e9:
        return f"{ns / 1e9:.4f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.4f} ms"
    return f"{ns / 1e3:.4f} us"


class _Progress:
    """One refreshed line on stderr, only when it is a terminal (and not --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.on = not quiet and sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, total: int, threshold: float) -> None:
        if not self.on:
            return
        now = time.perf_counter()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        kth = _fmt_time(threshold) if math.isfinite(threshold) else "-"
        click.echo(f"\r  {done}/{total} candidates settled, K-th best {kth}, {now - self.t0:.0f} s   ",
                   nl=False, err=True)

    def end(self) -> None:
        if self.on:
            click.echo("", err=True)


def _shapes(_ctx, _param, values):
    out = []
    for text in values:
        parts = text.lower().replace(" ", "").split("x")
        if not all(x.isdigit() and int(x) >= 2 for x in parts):
            raise click.BadParameter(f"{text!r}: give NPUs per dimension as integers >= 2 joined by 'x', e.g. 4x8x32")
        out.append(tuple(int(x) for x in parts))
    return tuple(out)


def _degrees(values, option: str):
    """Degrees of a repeatable option: integers >= 1, or "all" (every divisor: an empty tuple)."""
    if not values:
        return None
    if "all" in values:
        return ()
    out = []
    for v in values:
        if not str(v).isdigit() or int(v) < 1:
            raise click.BadParameter(f"{v!r}: give an integer >= 1 or all", param_hint=option)
        out.append(int(v))
    return tuple(out)


def _job_options(schedules, virtual_stages, zeros, recomputes, cps, eps):
    from ..search.space import JobOptions
    return JobOptions(
        schedules=(("gpipe", "1f1b", "interleaved") if "all" in schedules else tuple(schedules)) or None,
        virtual_stages=tuple(virtual_stages) or None,
        zero=((0, 1, 2, 3) if "all" in zeros else tuple(int(z) for z in zeros)) or None,
        recompute=(("none", "selective", "full") if "all" in recomputes else tuple(recomputes)) or None,
        cp=cps, ep=eps)


def _default_catalog(cost_path: str) -> str:
    p = Path(cost_path).parent / "catalog.yml"
    if p.is_file():
        return str(p)
    p = Path("network_configs/catalog.yml")
    if p.is_file():
        return str(p)
    raise LibraError(f"no building-block catalog: give --catalog FILE (none beside {cost_path}); "
                     "see network_configs/catalog.yml")


def _model(kind: str, splits: int, local_mem_bw: float, overlap: bool):
    from ..search.upstream import TimeModel, simulator_model
    if kind == "pipelined":
        return simulator_model(splits, local_mem_bw, overlap=overlap)
    return TimeModel("libra", overlap=overlap)


@click.command("search", cls=Command)
@click.option("--model-spec", "spec_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Generator spec (docs/tracegen.md): the model; its parallelization and network are varied.")
@click.option("--npus", type=click.IntRange(min=2), help="NPU count [default: the spec's].")
@click.option("--cost", "cost_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Cost file (unit prices per cost class).")
@click.option("--catalog", "catalog_path", type=click.Path(exists=True, dir_okay=False),
              help="Building blocks per level [default: catalog.yml beside --cost].")
@click.option("--total-bw", type=click.FloatRange(min=0, min_open=True), help="Sum of per-NPU bandwidths, GB/s.")
@click.option("--total-bw-max", type=click.FloatRange(min=0, min_open=True), help="Upper bound on that sum, GB/s.")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True), help="Upper bound on network cost, USD.")
@click.option("--time-target", type=click.FloatRange(min=0, min_open=True), help="Time target, ns (min-cost).")
@click.option("--objective", type=click.Choice(("perf", "perf-per-cost", "min-cost", "min-energy", "perf-per-watt",
                                               "min-tco")), default="perf", show_default=True,
              help="What to rank by; the energy objectives (docs/energy.md) need --power, min-tco also the TCO "
                   "settings; their bound is the NPUs' share over each path's compute (weaker than perf's).")
@click.option("--power", "power_path", type=click.Path(exists=True, dir_okay=False),
              help="Power YAML with figures for every cost class of the catalog (network_configs/power.yml).")
@click.option("--electricity-usd-per-kwh", "usd_per_kwh", type=click.FloatRange(min=0),
              help="Electricity price, USD per kWh (min-tco).")
@click.option("--lifetime-years", type=click.FloatRange(min=0, min_open=True),
              help="Years over which the cluster's capital is amortized (min-tco).")
@click.option("--run-steps", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Training steps of the run (min-tco).")
@click.option("--npu-usd", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Capital per NPU with its share of the node, USD (min-tco).")
@click.option("--usd-per-provisioned-w", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Capital per W of peak cluster power, USD (min-tco).")
@click.option("--blocks", default="Ring,FullyConnected,Switch", show_default=True,
              help="Building blocks to try, comma-separated.")
@click.option("--shape", "shapes", multiple=True, callback=_shapes,
              help="Only this network shape, e.g. 2x16x2x64 (NPUs per dimension, innermost first; "
                   "repeatable) [default: every factorization of --npus].")
@click.option("--max-dims", type=click.IntRange(min=1, max=6), default=4, show_default=True)
@click.option("--sp", type=click.Choice(("both", "on", "off", "spec")), default="both", show_default=True,
              help="Sequence parallelism: try both, always, never, or as in the spec.")
@click.option("--micro-batch", "micro_batches", type=click.IntRange(min=1), multiple=True,
              help="Micro-batch sizes to try (repeatable) [default: the spec's].")
@click.option("--schedule", "schedules", type=click.Choice(("gpipe", "1f1b", "interleaved", "all")), multiple=True,
              help="Pipeline schedules to try (repeatable; all: the three) [default: the spec's].")
@click.option("--virtual-stages", type=click.IntRange(min=2), multiple=True,
              help="Model chunks per pipeline rank for the interleaved schedule (repeatable) [default: the spec's, "
                   "at least 2].")
@click.option("--zero", "zeros", type=click.Choice(("0", "1", "2", "3", "all")), multiple=True,
              help="ZeRO stages to try (repeatable) [default: the spec's].")
@click.option("--recompute", "recomputes", type=click.Choice(("none", "selective", "full", "all")), multiple=True,
              help="Activation recomputation modes to try (repeatable) [default: the spec's].")
@click.option("--cp", "cps", multiple=True, callback=lambda c, p, v: _degrees(v, "--cp"),
              help="Context-parallel degrees to try (repeatable; all: every divisor) [default: the spec's].")
@click.option("--ep", "eps", multiple=True, callback=lambda c, p, v: _degrees(v, "--ep"),
              help="Expert-parallel degrees to try (repeatable; all: every divisor of the experts) "
                   "[default: the spec's].")
@click.option("--hbm-gb", type=click.FloatRange(min=0, min_open=True),
              help="Device memory per NPU, GB (1e9 B); 10% is kept free [default: the spec's compute: hbm_gb, "
                   "else 80].")
@click.option("--optimizer-bytes", type=click.FloatRange(min=0), default=12.0, show_default=True,
              help="Optimizer state per parameter, bytes (Adam with fp32 master weights: 12).")
@click.option("--model", "model_kind", type=click.Choice(("pipelined", "libra")), default="pipelined",
              show_default=True, help="Time model (pipelined: what the simulator computes).")
@click.option("--splits", type=click.IntRange(min=1), default=1, show_default=True,
              help="Chunks per collective (preferred-dataset-splits).")
@click.option("--local-mem-bw", type=click.FloatRange(min=0, min_open=True), default=1e9, show_default=True,
              help="Local memory bandwidth of the simulated system, GB/s.")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="Dependency-aware time (as the simulator runs the traces) or the no-overlap sum.")
@click.option("--algorithms", type=click.Choice(("ring", "auto")), default="ring", show_default=True,
              help="Collective implementations: ring everywhere, or auto: chosen per candidate with its bandwidths "
                   "among ring, direct and halvingDoubling (optimize --algorithms auto; exact), with bounds that hold "
                   "for every implementation (docs/search.md).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Designs to rank.")
@click.option("--max-evals", type=click.IntRange(min=1), help="Stop after this many exact evaluations.")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), help="Stop starting evaluations after S seconds.")
@click.option("--simulate", "n_sim", type=click.IntRange(min=0), default=0, show_default=True,
              help="Emit and simulate the best K designs in ASTRA-sim.")
@click.option("--astra-sim", "binary", type=click.Path(dir_okay=False),
              help="ASTRA-sim binary [default: $ASTRA_SIM_BIN, also on remote workers].")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds per simulation.")
@click.option("--scheduler", help="Address of an existing Dask scheduler [default: a local cluster].")
@click.option("--workers", type=click.IntRange(min=1), help="Local worker processes [default: min(2, cores)].")
@click.option("--in-process", is_flag=True, help="One in-process local worker with threads (light; no processes).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (ranked.csv, pareto.csv, search.json, plots, simulations).")
@click.option("--force", is_flag=True, help="Replace the results in an existing output directory.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line.")
def search_command(spec_path, npus, cost_path, catalog_path, total_bw, total_bw_max, budget, time_target, objective,
                   power_path, usd_per_kwh, lifetime_years, run_steps, npu_usd, usd_per_provisioned_w, blocks, shapes,
                   max_dims, sp, micro_batches, schedules, virtual_stages, zeros, recomputes, cps, eps,
                   hbm_gb, optimizer_bytes, model_kind, splits, local_mem_bw, overlap, algorithms, top, max_evals, time_limit, n_sim,
                   binary, timeout, scheduler, workers, in_process, out_dir, force, quiet):
    """Search network shape, building blocks, parallelization and placement, with exact bandwidths.

    Every candidate's bandwidth per dimension comes from the exact optimizer; proven lower bounds
    skip candidates that cannot enter the top K. Runs on Dask (a local cluster by default).
    With --algorithms auto, each candidate's collective implementations are chosen too.

    \b
    Example:
      libra-astra search --model-spec traces/gpt3_tp8_dp8/spec.yml --npus 64 \\
          --cost network_configs/cost.yml --total-bw-max 800 --top 5 -o search64/
    """
    from ..search import driver
    from ..search.upstream import Constraints, load_cost, load_spec

    if total_bw is not None and total_bw_max is not None:
        raise LibraError("give --total-bw or --total-bw-max, not both")
    out = Path(out_dir)
    if (out / "search.json").exists() and not force:
        raise LibraError(f"{out}: holds an earlier search (search.json); choose another -o or pass --force")
    if n_sim and not binary:
        from ..search.upstream import resolve_binary
        binary = resolve_binary(None)
    spec = load_spec(spec_path)
    n_total = npus or spec.net.npus_count
    for shape in shapes:
        if math.prod(shape) != n_total:
            raise LibraError(f"--shape {'x'.join(map(str, shape))}: holds {math.prod(shape):,} NPUs, not the "
                             f"{n_total:,} of {'--npus' if npus else spec_path}; give a shape whose sizes multiply "
                             f"to {n_total:,}")
    cons = Constraints(total_bw if total_bw is not None else total_bw_max, total_bw_max is not None, budget,
                       time_target)
    names = tuple(b.strip() for b in blocks.split(",") if b.strip())
    power = tco = None
    if power_path:
        from ..search.upstream import load_power
        power = load_power(power_path)
    if usd_per_kwh is not None and lifetime_years is not None:
        from ..search.upstream import TcoSettings
        tco = TcoSettings(usd_per_kwh, lifetime_years, run_steps, usd_per_provisioned_w, npu_usd)
    progress = _Progress(quiet)
    echo = click.echo
    res = driver.run(spec, spec_path, n_total, load_cost(cost_path),
                     catalog_path or _default_catalog(cost_path), objective, cons,
                     _model(model_kind, splits, local_mem_bw, overlap), names, max_dims, sp, micro_batches,
                     (hbm_gb or spec.hbm_gb or 80.0) * 1e9, optimizer_bytes, top, max_evals, time_limit, n_sim, binary, timeout,
                     local_mem_bw, scheduler, workers, out, force, progress, on_note=lambda m: echo(m, err=True),
                     threads=in_process, shapes=shapes or None, power=power, tco=tco,
                     job=_job_options(schedules, virtual_stages, zeros, recomputes, cps, eps), algorithms=algorithms)
    progress.end()
    driver.print_report(res, echo)


@click.command("sweep", cls=Command)
@click.argument("sweep_file", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (sweep.csv, sweep.json, simulations).")
@click.option("--astra-sim", "binary", type=click.Path(dir_okay=False), help="ASTRA-sim binary [default: $ASTRA_SIM_BIN].")
@click.option("--scheduler", help="Address of an existing Dask scheduler [default: a local cluster].")
@click.option("--workers", type=click.IntRange(min=1), help="Local worker processes [default: min(2, cores)].")
@click.option("--in-process", is_flag=True, help="One in-process local worker with threads (light; no processes).")
@click.option("--force", is_flag=True, help="Replace the results in an existing output directory.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line.")
def sweep_command(sweep_file, out_dir, binary, scheduler, workers, in_process, force, quiet):
    """Run a grid of workloads x networks x bandwidth/budget x objectives through optimize.

    \b
    Example:
      libra-astra sweep network_configs/sweep_example.yml -o sweep1/
    """
    from ..search import sweep

    out = Path(out_dir)
    if (out / "sweep.json").exists() and not force:
        raise LibraError(f"{out}: holds an earlier sweep (sweep.json); choose another -o or pass --force")
    progress = _Progress(quiet)
    res = sweep.run_file(sweep_file, out, binary=binary, scheduler=scheduler, workers=workers, overwrite=force,
                         threads=in_process, on_progress=progress)
    progress.end()
    sweep.print_table(res, click.echo)

