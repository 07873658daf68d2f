"""``generate`` command: spec YAML -> per-rank Chakra ET files (outside the tracegen package, whose import loads numpy)."""

from __future__ import annotations

import json

import click

from ..errors import LibraError


@click.command("generate")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_prefix", required=True, metavar="PREFIX",
              help="Output prefix: writes PREFIX.0.et ... PREFIX.{N-1}.et and PREFIX.groups.json.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def generate_command(spec: str, out_prefix: str, force: bool, as_json: bool) -> None:
    """Generate synthetic per-rank Chakra ET traces from a model SPEC (YAML).

    \b
    Example:
      libra-astra generate traces/gpt3_tp8_dp8/spec.yml --out gen/gpt3 --force
    """
    from .progress import Progress
    from ..tracegen.generate import generate

    try:
        with Progress(f"generate {out_prefix}") as p:
            res = generate(spec, out_prefix, overwrite=force, on_progress=p)
    except LibraError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps({"prefix": str(res.prefix), "ranks": res.num_ranks, "bytes": res.total_bytes,
                               "node_counts": dict(sorted(res.node_counts.items())),
                               "groups": str(res.groups_path) if res.groups_path is not None else None}, indent=1))
        return
    counts = ", ".join(f"{k} {v}" for k, v in sorted(res.node_counts.items()))
    click.echo(f"wrote {res.prefix}.{{0..{res.num_ranks - 1}}}.et ({res.num_ranks} ranks, "
               f"{res.total_bytes / 1e6:.2f} MB; nodes: {counts})")
    if res.groups_path is not None:
        click.echo(f"communicator groups: {res.groups_path}")
