"""``calibrate`` command: the network fitted to a real run's measured collectives."""

from __future__ import annotations

import json

import click

from .app import Command
from .format import fmt_bytes, fmt_time, table
from .measured import cpu_groups_option, load_cpu_groups


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


@click.command("calibrate", cls=Command)
@click.argument("kineto", nargs=-1, required=True, metavar="KINETO...")
@click.option("-n", "--network", type=click.Path(exists=True, dir_okay=False), required=True,
              help="The network the job ran on (its latencies are replaced by the calibrated ones).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Write the calibrated network, ASTRA-sim's network and system.json, a check trace set and "
                   "calibration.json into this directory.")
@click.option("--force", is_flag=True, help="Replace an earlier calibration in --out.")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
@click.option("--fit", type=click.Choice(["robust", "total"]), default="robust", show_default=True,
              help="robust: Huber weights on relative residuals, the network's typical speed (a slow instance "
                   "does not move it); total: least squares on the times, so the calibrated collectives add up "
                   "to about what the run's did, slow instances included (a network whose speed varies, as "
                   "gloo on a loaded CPU).")
@cpu_groups_option
@click.option("--each", is_flag=True,
              help="List every collective's check (by default more than 40 are summed up by kind, size and "
                   "dimension; --json always lists each).")
def calibrate_command(kineto: tuple[str, ...], network: str, out_dir: str | None, force: bool,
                      as_json: bool, fit: str, cpu_groups: str | None, each: bool) -> None:
    """Calibrate the network from a real run's Kineto traces (as `measure` reads them).

    For each network dimension, from the collectives that cross only it (each one's transfer:
    its shortest instance across the ranks): an alpha-beta fit per collective kind (latency and
    effective bandwidth per NPU), and the latency per hop, bandwidth and ASTRA-sim
    implementation per kind with which ASTRA-sim's own times come closest to the measured ones.
    Both fits are robust (Huber weights on relative residuals) unless --fit total, and every
    collective is also predicted by a fit made without it (held out).

    \b
    Example (PARAM's 8-GPU DLRM run):
      libra-astra calibrate tests/fixtures/real/param_dlrm8/param_dlrm8 -n tests/fixtures/real/ring8.yml -o cal --force
    """
    from ..measure.calibrate import calibrate, calibration_to_dict
    from ..measure.calibrate_files import write_calibration
    from ..measure.measurement import measure
    from ..measure.summary import EACH_LIMIT, check_classes
    from ..model.network import load_network

    net = load_network(network)
    cal = calibrate(measure(kineto, net, load_cpu_groups(cpu_groups)), net, fit)
    content = write_calibration(cal, out_dir, force) if out_dir else calibration_to_dict(cal)
    if as_json:
        click.echo(json.dumps(content, indent=1))
        return
    click.echo(f"calibrated from {cal.source} on network {net.name!r} (transfer = shortest instance across ranks; "
               f"{fit} fit)")
    rows = [["dimension", "kind", "points", "latency", "bandwidth", "fit error median/max", "held out median"]]
    for k in cal.kinds:
        q = k.quality
        held = q.held_out_median_abs_error
        rows.append([k.dim, k.kind, str(q.points), fmt_time(k.alpha_ns, 1),
                     f"{k.bw_gbps:.3g} GB/s" if k.bw_gbps else "-",
                     f"{100 * q.median_abs_error:.1f}% / {100 * q.max_abs_error:.1f}%",
                     f"{100 * held:.1f}%" if held is not None else "-"])
    click.echo("alpha-beta per kind: t = latency + ring traffic per NPU / bandwidth")
    for line in table(rows, right={2, 3, 4, 5, 6}):
        click.echo(line)
    click.echo("for ASTRA-sim (network and system.json):")
    for d in cal.dims:
        impl = ", ".join(f"{k} {v}" for k, v in d.implementations)
        held = d.quality.held_out_median_abs_error
        click.echo(f"  {d.dim}: latency {d.latency_ns:.1f} ns per hop, bandwidth {d.bw_gbps:.4g} GB/s"
                   + (f"; {impl}" if impl else "")
                   + (f"; held out median error {100 * held:.1f}%" if held is not None else ""))
    if each or len(cal.checks) <= EACH_LIMIT:
        rows = [["#", "kind", "size", "dimension", "measured", "ASTRA-sim", "error"]]
        for r in cal.checks:
            rows.append([str(r.index), r.kind, fmt_bytes(r.size_bytes), r.dim, fmt_time(r.measured_ns, 1),
                         fmt_time(r.astra_ns, 1), _pct((r.astra_ns - r.measured_ns) / r.measured_ns)])
        right = {2, 4, 5, 6}
    else:
        classes = check_classes(cal.checks)
        click.echo(f"{len(cal.checks)} collectives in {len(classes)} kinds, measured against ASTRA-sim's time under "
                   "the calibration (--each lists every one):")
        rows = [["kind", "size", "dimension", "count", "measured median", "ASTRA-sim", "error", "measured sum",
                 "ASTRA-sim sum", "error"]]
        for k in classes:
            rows.append([k.kind, fmt_bytes(k.size_bytes), k.dim, str(k.count), fmt_time(k.measured_median_ns, 1),
                         fmt_time(k.astra_ns, 1), _pct((k.astra_ns - k.measured_median_ns) / k.measured_median_ns),
                         fmt_time(k.measured_sum_ns, 1), fmt_time(k.astra_sum_ns, 1),
                         _pct((k.astra_sum_ns - k.measured_sum_ns) / k.measured_sum_ns)])
        right = {1, 3, 4, 5, 6, 7, 8, 9}
    for line in table(rows, right=right):
        click.echo(line)
    for note in cal.notes:
        click.echo(f"note: {note}")
    if out_dir:
        chk = content.get("check_trace")
        click.echo(f"wrote {out_dir}/ (network.yml, astra-network.yml, system.json, memory.json, calibration.json, "
                   f"{chk['prefix'] + '.RANK.et' if chk else 'no check trace'})")
        if chk:
            click.echo(f"ASTRA-sim on {out_dir}/{chk['prefix']}: {fmt_time(max(chk['astra_finish_ns']), 1)} expected "
                       f"(measured transfers sum to {fmt_time(chk['measured_transfer_sum_ns'], 1)})")
