"""The predicted-versus-measured table that ``predict --measured`` (and the others) print."""

from __future__ import annotations

import click

from .format import fmt_time, table


def _signed(ns: float) -> str:
    return ("-" if ns < 0 else "+") + fmt_time(abs(ns), 3)


def _pct(p: float | None, m: float) -> str:
    return "-" if p is None else f"{100 * (p - m) / m:+.1f}%"


def echo_comparison(cmp) -> None:
    """Per rank, then mean and max: measured, GPU-faithful, ASTRA-sim's semantics; the residual."""
    click.echo(f"measured ({cmp.source}) against predicted; GPU-faithful = {cmp.model}")
    rows = [["rank", "measured", "GPU-faithful", "error", "ASTRA-sim semantics", "error"]]
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
