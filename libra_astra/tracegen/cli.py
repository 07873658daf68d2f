"""``generate`` command: spec YAML -> per-rank Chakra ET files."""

from __future__ import annotations

import click

from ..errors import LibraError
from .generate import generate


@click.command("generate")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_prefix", required=True, metavar="PREFIX",
              help="Output prefix: writes PREFIX.0.et ... PREFIX.{N-1}.et and PREFIX.groups.json.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
def generate_command(spec: str, out_prefix: str, force: bool) -> None:
    """Generate synthetic per-rank Chakra ET traces from a model SPEC (YAML).

    \b
    Example:
      generate traces/gpt3_tp8_dp8/spec.yml --out traces/gpt3_tp8_dp8/gpt3
    """
    try:
        res = generate(spec, out_prefix, overwrite=force)
    except LibraError as e:
        raise click.ClickException(str(e)) from None
    counts = ", ".join(f"{k} {v}" for k, v in sorted(res.node_counts.items()))
    click.echo(f"wrote {res.prefix}.{{0..{res.num_ranks - 1}}}.et ({res.num_ranks} ranks, "
               f"{res.total_bytes / 1e6:.2f} MB; nodes: {counts})")
    if res.groups_path is not None:
        click.echo(f"communicator groups: {res.groups_path}")
