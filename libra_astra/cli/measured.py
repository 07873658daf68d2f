"""``--measured KINETO``: the predicted-versus-measured table that predict, optimize and loop print."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import math

import click

from .format import fmt_time, fmt_usd, table

MEASURED_HELP = ("The run's Kineto traces (a PREFIX of PREFIX.RANK.json[.gz], a directory or a file; repeatable): "
                 "print each rank's measured step beside the GPU-faithful prediction (host-faithful on a CPU-only "
                 "gloo run) and the command's own.")


def measured_option(f: Callable) -> Callable:
    return click.option("--measured", "measured", multiple=True, metavar="KINETO", help=MEASURED_HELP)(f)


def run_settings(net, splits: int, local_mem_bw_gbps: float, system: Mapping[str, Any] | None):
    """The system settings emit would give the simulator: the user's system.json, else emit's own."""
    from ..timing.astra_settings import SystemSettings, settings_from_json

    if system is not None:
        return settings_from_json(system.get("settings", system), str(system.get("path", "system.json")))
    return SystemSettings.uniform(net.num_dims, "ring", splits=splits, endpoint_delay_ns=1,
                                  local_mem_bw_gbps=local_mem_bw_gbps)


CPU_GROUPS_HELP = ("The process group of each gloo collective of a CPU run that its Kineto trace leaves open "
                   "(a YAML/JSON list of {op, [nth], [size_bytes], ranks} entries, as for "
                   "--cpu-collective-groups on demand).")


def cpu_groups_option(f: Callable) -> Callable:
    return click.option("--cpu-collective-groups", "cpu_groups", type=click.Path(exists=True, dir_okay=False),
                        metavar="FILE", help=CPU_GROUPS_HELP)(f)


def load_cpu_groups(path: str | None):
    if path is None:
        return None
    from ..traces.cpu_groups import load_group_map

    return load_group_map(path)


def design_comparison(measured: Sequence[str], net, bw_gbps: Sequence[float], splits: int, local_mem_bw_gbps: float,
                      system: Mapping[str, Any] | None, other_ns: Sequence[float] | None,
                      cpu_groups: str | None = None, loaded=None):
    """The measured run against a design, with the system settings emit would give the simulator;
    ``cpu_groups``: the --cpu-collective-groups file, for a CPU run's gloo collectives too;
    ``loaded``: (measurement, profiles) if read already."""
    from ..measure.compare import compare_design

    return compare_design(measured, net, bw_gbps, run_settings(net, splits, local_mem_bw_gbps, system), other_ns,
                          load_cpu_groups(cpu_groups), loaded)


def _signed(ns: float) -> str:
    return ("-" if ns < 0 else "+") + fmt_time(abs(ns), 3)


def _pct(p: float | None, m: float) -> str:
    return "-" if p is None else f"{100 * (p - m) / m:+.1f}%"


def echo_comparison(cmp, other: str = "ASTRA-sim semantics") -> None:
    """Per rank, then mean and max: measured, GPU-faithful, ``other`` (the command's own); the residual."""
    click.echo(f"measured ({cmp.source}) against predicted; {cmp.label} = {cmp.model}")
    rows = [["rank", "measured", cmp.label, "error", other, "error"]]
    for r in cmp.ranks:
        rows.append([str(r.rank), fmt_time(r.measured_ns, 3), fmt_time(r.gpu_faithful_ns, 3),
                     _pct(r.gpu_faithful_ns, r.measured_ns),
                     fmt_time(r.astra_ns, 3) if r.astra_ns is not None else "-", _pct(r.astra_ns, r.measured_ns)])
    for agg in ("mean", "max"):
        meas, gf, astra = (getattr(cmp, agg)(f) for f in ("measured_ns", "gpu_faithful_ns", "astra_ns"))
        rows.append([agg, fmt_time(meas, 3), fmt_time(gf, 3), _pct(gf, meas),
                     fmt_time(astra, 3) if astra is not None else "-", _pct(astra, meas)])
    for line in table(rows, right={1, 2, 3, 4, 5}):
        click.echo(line)
    base = cmp.mean("replay_measured_transfers_ns")
    meas = cmp.mean("measured_ns")
    gf = cmp.mean("gpu_faithful_ns")
    click.echo(f"{cmp.label} residual (mean): {_signed(gf - meas)} = replay rules "
               f"{_signed(base - meas)} (the replay with the measured transfers) + network "
               f"{_signed(gf - base)} (collective transfers {fmt_time(cmp.transfer_modelled_ns, 3)} modelled, "
               f"{fmt_time(cmp.transfer_measured_ns, 3)} measured)")
    for note in cmp.notes:
        click.echo(f"note: {note}")


GPU_FAITHFUL_HELP = ("With --measured: also optimize the measured run's GPU-faithful step (its slowest rank, replayed "
                     "as the GPU ran it, each collective's transfer from the time model; exact, certified) and show "
                     "both optima under both models; the design (-o) then holds the GPU-faithful optimum.")


def echo_faithful(f, net, prices) -> None:
    """The GPU-faithful optimum, and both optima under both models."""
    r = f.result
    gap = f"{r.rel_gap:.2e}" if math.isfinite(r.rel_gap) else "unknown"
    click.echo(f"GPU-faithful optimum ({r.objective}): the measured run's slowest rank, replayed as the GPU ran it")
    click.echo(f"  {r.message}; relative duality gap {gap}; step {fmt_time(r.best.time_ns, 3)} (at least "
               f"{fmt_time(f.floor_ns, 3)} with every modelled transfer free)")
    names = "/".join(net.dim_names)
    rows = [["optimum of", f"GB/s per NPU ({names})", "GPU-faithful step", "time model's time"]
            + (["cost"] if prices else [])]
    for name, bw, gf, tm, cost in (("GPU-faithful", r.bw_gbps, r.best.time_ns, f.model_ns, r.best.cost_usd),
                                   ("time model", f.other.bw_gbps, f.other_faithful_ns, f.other.best.time_ns,
                                    f.other.best.cost_usd)):
        rows.append([name, " / ".join(f"{b:.4g}" for b in bw), fmt_time(gf, 3), fmt_time(tm, 3)]
                    + ([fmt_usd(cost)] if prices else []))
    for line in table(rows, right={2, 3, 4}):
        click.echo(line)
