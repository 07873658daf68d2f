"""``predict`` command: ASTRA-sim's answer for its own inputs, without running it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click

from .app import Command
from .format import fmt_ms, fmt_ranges, table
from .measured import cpu_groups_option, load_cpu_groups, measured_option
from .progress import Progress


def _bandwidths(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        return tuple(float(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected GB/s per dimension separated by commas, got {value!r}") from None


@click.command("predict", cls=Command)
@click.argument("source", required=False, metavar="[PREFIX | RUN_DIR]")
@click.option("--workload-configuration", "workload", metavar="PREFIX",
              help="The ET files ASTRA-sim would read: PREFIX.RANK.et (or give PREFIX as the argument).")
@click.option("--network-configuration", "network", type=click.Path(exists=True, dir_okay=False),
              help="ASTRA-sim's analytical network YAML (bandwidth in GiB/s, as it reads it), or a libra_astra "
                   "network file with --bandwidth.")
@click.option("--system-configuration", "system", type=click.Path(exists=True, dir_okay=False),
              help="ASTRA-sim's system.json.")
@click.option("--comm-group-configuration", "comm_groups", type=click.Path(exists=True, dir_okay=False),
              help="ASTRA-sim's communicator-group JSON, if the simulator gets one.")
@click.option("--num-queues-per-dim", "queues", default=1, show_default=True, type=click.IntRange(min=1),
              help="The simulator's --num-queues-per-dim.")
@click.option("--bandwidth", "bandwidth", callback=_bandwidths, metavar="GBPS,...",
              help="GB/s per dimension, for a libra_astra network file (it has no bandwidths).")
@click.option("--astra-format", is_flag=True,
              help="Print only ASTRA-sim's line per rank: 'sys[R] finished, T cycles, exposed communication E "
                   "cycles.'")
@measured_option
@cpu_groups_option
@click.option("--json", "as_json", is_flag=True, help="Print the prediction as JSON (every rank and class).")
@click.option("--backend", type=click.Choice(["unaware", "aware"]), default="unaware", show_default=True,
              help="The analytical binary to predict: AstraSim_Analytical_Congestion_Unaware, or "
                   "..._Congestion_Aware (one-dimensional networks; messages share links).")
def predict_command(source: str | None, workload: str | None, network: str | None, system: str | None,
                    comm_groups: str | None, queues: int, bandwidth: tuple[float, ...] | None, astra_format: bool,
                    measured: tuple[str, ...], cpu_groups: str | None, as_json: bool, backend: str) -> None:
    """Predict what ASTRA-sim (518bd51, analytical congestion-unaware, or congestion-aware with
    --backend aware) prints for these inputs, without running it: every rank's finish time and
    exposed communication (1 cycle = 1 ns).

    Give the simulator's own inputs (a trace PREFIX, network, system.json and groups), or a
    RUN_DIR made by `libra-astra emit`, whose manifest names them. Settings this model cannot
    time, and collectives ASTRA-sim never finishes, are refused with the file and key.

    \b
    Examples (runs/gpt3 from the emit command's example):
      libra-astra predict runs/gpt3
      libra-astra predict runs/gpt3 --astra-format
      libra-astra predict runs/gpt3/workload/gpt3 --network-configuration runs/gpt3/network.yml \\
          --system-configuration runs/gpt3/system.json --json

    \b
    Against a measured run (the network and system.json from `libra-astra calibrate -o cal`):
      libra-astra predict tests/fixtures/real/param_dlrm8/param_dlrm8 --network-configuration cal/astra-network.yml \\
          --system-configuration cal/system.json --measured tests/fixtures/real/param_dlrm8/param_dlrm8
    """
    from ..astra.predict_inputs import SimInputs, inputs_from_run_dir, predict_inputs, prediction_to_dict, skew_notes
    from ..errors import LibraError

    if source is not None and workload is not None:
        raise LibraError(f"give the workload once: {source!r} and --workload-configuration {workload!r}")
    run_dir = source if source is not None and Path(source).is_dir() else None
    if run_dir is not None:
        if any(v is not None for v in (network, system, comm_groups, bandwidth)) or queues != 1:
            raise LibraError(f"{run_dir}: a run directory names its own inputs; give the files instead of the "
                             "directory to predict other ones")
        inputs = replace(inputs_from_run_dir(run_dir), backend=backend)
    else:
        prefix = workload or source
        if prefix is None or network is None or system is None:
            raise LibraError("give a RUN_DIR, or the workload PREFIX with --network-configuration and "
                             "--system-configuration")
        inputs = SimInputs(prefix, network, system, comm_groups, queues, bandwidth, backend=backend)
    with Progress(f"predict {inputs.workload}") as p:
        res = predict_inputs(inputs, on_progress=p)
    pred = res.prediction
    cmp = None
    if measured:
        from ..measure.compare import compare
        from ..measure.kineto import read_profiles
        from ..measure.measurement import measure_profiles

        profiles, notes = read_profiles(measured)
        m = measure_profiles(profiles, notes, res.network, measured[0], load_cpu_groups(cpu_groups))
        cmp = compare(m, profiles, res.network, res.system.links, res.system.settings,
                      [r.finished_ns for r in pred.ranks])
        from ..measure.compare import host_thread_ns, untyped_gloo_note

        threads = host_thread_ns(inputs.workload, slow.rank) if (slow := pred.slowest) else {}
        if m.host_only and (note := untyped_gloo_note(inputs.workload)) is not None:
            cmp = replace(cmp, notes=cmp.notes + (note,))
    if as_json:
        out = prediction_to_dict(res)
        if cmp is not None:
            from ..measure.compare import comparison_to_dict

            out["measured"] = comparison_to_dict(cmp)
            out["measured"]["astra_slowest_rank_host_threads_ns"] = {str(t): v for t, v in threads.items()}
        click.echo(json.dumps(out, indent=1))
        return
    if astra_format:
        for line in pred.astra_lines():
            click.echo(line)
        return
    slow = pred.slowest
    fast = min(pred.ranks, key=lambda r: (r.finished_ns, r.rank))
    shape = " x ".join(f"{link.topology}({link.npus})" for link in res.system.links)
    click.echo(f"ASTRA-sim 518bd51 (analytical, congestion-{backend}), predicted: {inputs.workload}, "
               f"{len(pred.ranks)} NPUs, network {shape}")
    click.echo(f"finish time: {pred.time_ns:,} cycles = {fmt_ms(pred.time_ns)} (rank {slow.rank}; mean "
               f"{fmt_ms(pred.mean_ns)}; fastest rank {fast.rank} {fmt_ms(fast.finished_ns)})")
    click.echo(f"exposed communication of rank {slow.rank}: {slow.exposed_comm_ns:,} cycles "
               f"(its finish time minus its {slow.compute_ns:,} ns of GPU compute)")
    rows = [["class", "ranks", "finished (ns)", "compute (ns)", "exposed comm (ns)"]]
    for ci, rc in enumerate(res.demand.rank_classes):
        f, c = pred.class_finish_ns[ci], pred.class_compute_ns[ci]
        star = " *" if ci in pred.uneven_classes else ""
        rows.append([str(ci), fmt_ranges(rc.ranks), f"{f:,}{star}", f"{c:,}", f"{f - c:,}"])
    for line in table(rows, right={2, 3, 4}):
        click.echo(line)
    if pred.uneven_classes:
        click.echo("* its slowest rank: the ranks of this class finish at different times (their places in double "
                   "binary trees); --astra-format or --json give every rank")
    for note in (*res.notes, *skew_notes(pred)):
        click.echo(f"note: {note}")
    if cmp is not None:
        from .measured import echo_comparison

        echo_comparison(cmp)
        if len(threads) > 1:
            parts = " + ".join(f"thread {t} {fmt_ms(v)}" for t, v in sorted(threads.items()))
            click.echo(f"ASTRA-sim runs the host threads' CPU operators one at a time on one CPU: rank {slow.rank}'s "
                       f"{parts} = {fmt_ms(sum(threads.values()))} (its finish {fmt_ms(slow.finished_ns)}); the run "
                       "had a thread each")
