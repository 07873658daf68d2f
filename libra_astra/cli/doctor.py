"""``doctor`` command: what ASTRA-sim would do with a trace set, and a copy it runs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from .app import Command
from .format import fmt_ranges
from .progress import Progress

if TYPE_CHECKING:
    from ..doctor import Diagnosis

# severities as in doctor/catalog.py (not imported here: the library loads inside the command)
FAILS, WRONG, NOTE = "fails", "wrong", "note"
_LABEL = {FAILS: "FAILS", WRONG: "WRONG", NOTE: "note"}


def _grouped(d: "Diagnosis", notes: bool = True) -> list[tuple[list[int | None], object]]:
    """Findings that read the same on several ranks, listed once with their ranks."""
    groups: dict[tuple, list] = {}
    for f in d.findings:
        if f.severity == NOTE and not notes:
            continue
        key = (f.code, f.problem, f.effect, f.node_ids)
        groups.setdefault(key, [[], f])[0].append(f.rank)
    return list(groups.values())


def _lines(d: "Diagnosis", notes: bool = True) -> list[str]:
    from ..doctor import SYSTEM_CODES

    out = []
    for ranks, f in _grouped(d, notes):
        where = "set" if ranks == [None] else (f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fmt_ranges(ranks)}")
        out.append(f"{_LABEL[f.severity]} {f.code} ({where}): {f.problem}")
        out.append(f"  ASTRA-sim: {f.effect}")
        if f.severity != NOTE:
            how = (" (in the system file: --fix never edits it)" if f.code in SYSTEM_CODES else
                   " (--fix does it)" if f.fixable else " (--fix cannot)")
            out.append(f"  fix: {f.fix}{how}")
    return out


def _summary(d: "Diagnosis") -> str:
    n = {s: sum(f.severity == s for f in d.findings) for s in (FAILS, WRONG, NOTE)}
    verdict = ("ASTRA-sim would fail on it" if d.fails else
               "ASTRA-sim runs it, but simulates something else" if n[WRONG] else "ASTRA-sim runs it")
    against = f" (with {d.system})" if d.system else ""
    return (f"{d.prefix}{against}: {d.num_ranks} ranks, {d.num_nodes} nodes; {n[FAILS]} failing, {n[WRONG]} "
            f"wrong-result, {n[NOTE]} note findings: {verdict}")


@click.command("doctor", cls=Command)
@click.argument("prefix")
@click.option("--network", "-n", "network_path", type=click.Path(exists=True, dir_okay=False),
              help="Network the set will run on (libra_astra network YAML or ASTRA-sim network.yml): enables the "
                   "rank-count and involved_dim checks.")
@click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False),
              help="The --comm-group-configuration file ASTRA-sim will get [default: PREFIX.groups.json when it exists].")
@click.option("--splits", default=None, type=click.IntRange(min=1),
              help="preferred-dataset-splits of the system config: sizes should be multiples of it "
                   "[default: --system's, else 1].")
@click.option("--system", "system_path", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="The ASTRA-sim system.json the set will run with (read, never modified): checks its traps "
                   "against the set's collectives and the network.")
@click.option("--fix", "do_fix", is_flag=True, help="Write a fixed copy at --out (the input is never modified).")
@click.option("--out", "out_prefix", default=None, metavar="NEWPREFIX",
              help="Prefix of the fixed copy: NEWPREFIX.RANK.et (plain) and NEWPREFIX.groups.json if groups are used.")
@click.option("--gpu-order", is_flag=True,
              help="With --fix: also write the GPU-faithful dependencies (stream order, collectives after the compute "
                   "before them, compute after collectives, CPU syncs after the GPU) as control dependencies.")
@click.option("--force", is_flag=True, help="Replace an existing fixed copy at --out.")
@click.option("--strict", is_flag=True, help="Exit 1 also when ASTRA-sim would run the set but simulate something "
              "else (WRONG findings).")
@click.option("--json", "as_json", is_flag=True, help="Print the findings (and the fix) as JSON.")
@click.pass_context
def doctor_command(ctx: click.Context, prefix: str, network_path: str | None, comm_groups: str | None,
                   splits: int | None, system_path: str | None, do_fix: bool, out_prefix: str | None,
                   gpu_order: bool, force: bool, strict: bool, as_json: bool) -> None:
    """Check the trace set PREFIX.RANK.et[.gz] against every way ASTRA-sim is known to crash or
    silently misbehave, with the nodes, what the simulator would do and the fix.

    Exit code 1 when ASTRA-sim would fail on the set (abort, non-zero exit, or a rank that never
    finishes; with --strict also when it would simulate something else); with --fix, the same
    for the copy. --fix repairs the traces only: the --system file is never rewritten.

    \b
    Examples:
      libra-astra doctor tests/fixtures/real/tpdp4/tpdp4
      libra-astra doctor traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml --splits 4 --json
      libra-astra doctor tests/fixtures/real/tpdp4/tpdp4 --fix --out /tmp/tpdp4 --force
      libra-astra doctor traces/dlrm_16/dlrm -n network_configs/sample_4x4.yml --system tests/fixtures/system/direct_4x4.json
    """
    from ..doctor import diagnose, fix

    if do_fix and not out_prefix:
        raise click.UsageError("--fix needs --out NEWPREFIX (the input is never modified)")
    if out_prefix and not do_fix:
        raise click.UsageError("--out is the prefix of the fixed copy; give it with --fix")
    if gpu_order and not do_fix:
        raise click.UsageError("--gpu-order writes dependencies into the fixed copy; give it with --fix --out NEWPREFIX")
    with Progress(f"checking {prefix}") as p:
        d = diagnose(prefix, network=network_path, groups=comm_groups, splits=splits, system=system_path,
                     on_progress=p)
    res = None
    if do_fix:
        with Progress(f"fixing into {out_prefix}") as p:
            res = fix(prefix, out_prefix, network=network_path, groups=comm_groups, splits=splits,
                      system=system_path, overwrite=force, on_progress=p, gpu_order=gpu_order)
    if as_json:
        out = d.to_dict()
        if res is not None:
            out["fix"] = res.to_dict()
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo(_summary(d))
        for line in _lines(d):
            click.echo(line)
        if res is not None:
            click.echo(f"wrote {res.out_prefix}.0.et .. {res.out_prefix}.{len(res.files) - 1}.et"
                       + (f" and {res.groups_file} (give it as --comm-group-configuration)" if res.groups_file else ""))
            for what, n in res.actions:
                click.echo(f"  fixed: {what}: {n}")
            left = [f for f in res.after.findings if f.severity != NOTE]
            if left:
                click.echo("not fixed (the copy still has):")
                for line in _lines(res.after, notes=False):
                    click.echo("  " + line)
            else:
                click.echo("the copy has no failing or wrong-result finding")
    last = res.after if res is not None else d
    if last.fails or (strict and any(f.severity == WRONG for f in last.findings)):
        ctx.exit(1)
