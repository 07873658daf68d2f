"""``measure`` command: what a real run's Kineto profiles measured."""

from __future__ import annotations

import json

import click

from .app import Command
from .common import check_plot, plot_option
from .format import fmt_bytes, fmt_time, table
from .measured import cpu_groups_option, load_cpu_groups


@click.command("measure", cls=Command)
@click.argument("kineto", nargs=-1, required=True, metavar="KINETO...")
@click.option("-n", "--network", type=click.Path(exists=True, dir_okay=False),
              help="The network the job ran on: names the dimensions each collective crosses.")
@click.option("--json", "as_json", is_flag=True, help="Print the measurement as JSON.")
@cpu_groups_option
@plot_option("each rank's step with every collective's wait and transfer")
@click.option("--force", is_flag=True, help="Overwrite the --plot file.")
@click.option("--each", is_flag=True,
              help="List every collective instance (by default more than 40 are summed up by kind, size, group "
                   "and dimension; --json always lists each).")
def measure_command(kineto: tuple[str, ...], network: str | None, as_json: bool, cpu_groups: str | None,
                    plot_out: str | None, force: bool, each: bool) -> None:
    """Measure a real run from its ranks' Kineto traces (torch.profiler's JSON, plain or gzipped).

    KINETO is a PREFIX (files PREFIX.RANK.json[.gz]), a directory of them, or the files; the
    linked traces chakra_trace_link writes are read too (collectives and calibration as from
    Kineto; --measured's replay needs the Kineto traces themselves). Prints
    the step of every rank (its ProfilerStep) with what filled it (GPU compute, exposed
    communication, CPU-bound, idle), start to end across the ranks, and each collective with
    its size, group and dimension: the shortest instance across the ranks is its transfer, the
    rest of each rank's instance is waiting for the slowest rank. Assumptions made on partial
    or odd profiles are printed as notes. On a CPU (gloo) run the collectives are the gloo
    operators; where the trace leaves a collective's process group open, --cpu-collective-groups
    gives it.

    \b
    Example (PARAM's 8-GPU DLRM run):
      libra-astra measure tests/fixtures/real/param_dlrm8/param_dlrm8 -n tests/fixtures/real/ring8.yml

    \b
    Example (a 4-rank TP x DP gloo run on CPU):
      libra-astra measure tests/fixtures/real/measured/tpdp4k/tpdp4k -n tests/fixtures/real/ring2x2.yml \\
          --cpu-collective-groups tests/fixtures/real/measured/tpdp4k/tpdp4k.groups.yml
    """
    from ..measure.measurement import measure, measurement_to_dict, step_noise_note
    from ..measure.summary import EACH_LIMIT, collective_classes
    from ..model.network import load_network

    check_plot(plot_out, force)
    m = measure(kineto, load_network(network) if network else None, load_cpu_groups(cpu_groups))
    content = measurement_to_dict(m)
    if plot_out:
        from ..plot import plot_timeline

        plot_timeline(content, plot_out, overwrite=force)
    if as_json:
        click.echo(json.dumps(content, indent=1))
        return
    slow = max(m.ranks, key=lambda r: r.step_ns)
    click.echo(f"measured (Kineto): {m.source}, {len(m.ranks)} of {m.world_size} ranks, "
               f"{m.ranks[0].steps} step(s) each"
               + ("; CPU only: collectives are the gloo operators, CPU-bound counted before communication"
                  if m.host_only else ""))
    click.echo(f"step: mean {fmt_time(m.mean_step_ns)}, max {fmt_time(m.max_step_ns)} (rank {slow.rank}); "
               f"start to end across ranks {fmt_time(m.span_ns)}")
    first = min(r.start_ns for r in m.ranks)
    several = m.step_noise is not None
    rows = [["rank", "step", *(["shortest", "longest"] if several else []), "GPU compute", "exposed comm",
             "CPU-bound", "idle", "starts after first"]]
    for r in m.ranks:
        spread = [fmt_time(min(r.step_durations_ns), 3), fmt_time(max(r.step_durations_ns), 3)] if several else []
        rows.append([str(r.rank), fmt_time(r.step_ns, 3), *spread, fmt_time(r.gpu_compute_ns, 3),
                     fmt_time(r.exposed_comm_ns, 3), fmt_time(r.cpu_bound_ns, 3), fmt_time(r.idle_ns, 3),
                     fmt_time(r.start_ns - first, 3)])
    for line in table(rows, right=set(range(1, len(rows[0])))):
        click.echo(line)
    noise = step_noise_note(m)
    click.echo(f"note: {noise}" if noise else
               "note: one profiled step per rank: how much the step varies is not measured (profile several "
               "steps: torch.profiler's schedule with active=N)")
    def group_label(group: tuple[int, ...], name: str) -> str:
        return name or ("world" if len(group) == m.world_size else ",".join(map(str, group)))

    if each or len(m.collectives) <= EACH_LIMIT:
        click.echo("collectives (transfer: the shortest instance across the ranks; wait: the rest, per rank):")
        rows = [["#", "kind", "size", "group", "dimension", "transfer", "on rank", "wait mean", "wait max"]]
        for c, d in zip(m.collectives, m.dims):
            rows.append([str(c.index), c.kind, fmt_bytes(c.size_bytes), group_label(c.group, c.group_name), d or "-",
                         fmt_time(c.transfer_ns, 1), str(c.transfer_rank), fmt_time(c.wait_mean_ns, 1),
                         fmt_time(c.wait_max_ns, 1)])
        right = {2, 5, 6, 7, 8}
    else:
        classes = collective_classes(m.collectives, m.dims)
        click.echo(f"collectives: {len(m.collectives)} in {len(classes)} kinds (transfer: the shortest instance "
                   "across the ranks; wait: the rest, per rank; --each lists every one):")
        rows = [["kind", "size", "group", "dimension", "count", "transfer min", "median", "max", "sum",
                 "wait mean", "wait max"]]
        for k in classes:
            rows.append([k.kind, fmt_bytes(k.size_bytes), group_label(k.group, k.group_name), k.dim or "-",
                         str(k.count), fmt_time(k.transfer_min_ns, 1), fmt_time(k.transfer_median_ns, 1),
                         fmt_time(k.transfer_max_ns, 1), fmt_time(k.transfer_sum_ns, 1), fmt_time(k.wait_mean_ns, 1),
                         fmt_time(k.wait_max_ns, 1)])
        right = {1, 4, 5, 6, 7, 8, 9, 10}
    for line in table(rows, right=right):
        click.echo(line)
    for note in m.assumptions:
        click.echo(f"note: {note}")
    if plot_out:
        click.echo(f"wrote {plot_out}")
