"""``--measured KINETO``: the predicted-versus-measured table that predict, optimize and loop print."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import click

from .format import fmt_time, table

MEASURED_HELP = ("The run's Kineto traces (a PREFIX of PREFIX.RANK.json[.gz], a directory or a file; repeatable): "
                 "print each rank's measured step beside the GPU-faithful prediction and the command's own.")


def measured_option(f: Callable) -> Callable:
    return click.option("--measured", "measured", multiple=True, metavar="KINETO", help=MEASURED_HELP)(f)


def design_comparison(measured: Sequence[str], net, bw_gbps: Sequence[float], splits: int, local_mem_bw_gbps: float,
                      system: Mapping[str, Any] | None, other_ns: Sequence[float] | None):
    """The measured run against a design, with the system settings emit would give the simulator."""
    from ..measure.compare import compare_design
    from ..timing.astra_settings import SystemSettings, settings_from_json

    if system is not None:
        settings = settings_from_json(system.get("settings", system), str(system.get("path", "system.json")))
    else:
        settings = SystemSettings.uniform(net.num_dims, "ring", splits=splits, endpoint_delay_ns=1,
                                          local_mem_bw_gbps=local_mem_bw_gbps)
    return compare_design(measured, net, bw_gbps, settings, other_ns)


def _signed(ns: float) -> str:
    return ("-" if ns < 0 else "+") + fmt_time(abs(ns), 3)


def _pct(p: float | None, m: float) -> str:
    return "-" if p is None else f"{100 * (p - m) / m:+.1f}%"


def echo_comparison(cmp, other: str = "ASTRA-sim semantics") -> None:
    """Per rank, then mean and max: measured, GPU-faithful, ``other`` (the command's own); the residual."""
    click.echo(f"measured ({cmp.source}) against predicted; GPU-faithful = {cmp.model}")
    rows = [["rank", "measured", "GPU-faithful", "error", other, "error"]]
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
    click.echo(f"GPU-faithful residual (mean): {_signed(gf - meas)} = replay rules "
               f"{_signed(base - meas)} (the replay with the measured transfers) + network "
               f"{_signed(gf - base)} (collective transfers {fmt_time(cmp.transfer_modelled_ns, 3)} modelled, "
               f"{fmt_time(cmp.transfer_measured_ns, 3)} measured)")
    for note in cmp.notes:
        click.echo(f"note: {note}")
