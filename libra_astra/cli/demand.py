"""``libra-astra demand``: Chakra ET traces -> per-dimension demand JSON, with a readable summary."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from ..errors import LibraError
from .app import Command
from .common import check_plot, draw, plot_option
from .format import fmt_bytes, fmt_ranges, fmt_time, table
from .numbers import FiniteFloat
from .progress import Progress

if TYPE_CHECKING:  # the library is imported by the command that runs
    from ..demand.from_traces import TraceSummary
    from ..model.network import Network


def format_summary(s: TraceSummary, net: Network) -> str:
    """The human-readable report printed by ``libra-astra demand``."""
    from ..demand.groups import ALL_RANKS

    lines = [
        f"Trace set {s.prefix}: {s.num_ranks:,} ranks, {s.nodes_total:,} nodes "
        f"({s.files_decoded:,} distinct files decoded, {s.programs:,} distinct programs)",
        "Nodes: " + ", ".join(f"{k} {v:,}" for k, v in s.node_counts.items()),
        "",
        "Bytes sent per NPU per dimension (mean over ranks):",
    ]
    head = ["collective"] + [f"{d.name} ({d.topology} {d.npus})" for d in net.dims]
    rows = [head]
    total = [0.0] * net.num_dims
    for kind, vals in s.bytes_by_type.items():
        rows.append([kind] + [fmt_bytes(v) for v in vals])
        total = [a + b for a, b in zip(total, vals)]
    if len(s.bytes_by_type) > 1:
        rows.append(["total"] + [fmt_bytes(v) for v in total])
    if len(rows) == 1:
        rows.append(["(no communication)"] + [""] * net.num_dims)
    lines += table(rows, right=set(range(1, net.num_dims + 1)))

    lines += ["", "Communicator groups:"]
    # groups of the same shape (e.g. all tensor-parallel groups) share one row
    merged: dict[tuple, list] = {}
    for g in s.groups:
        k = (g.key == ALL_RANKS, g.source, g.size, g.participants, g.algorithm, g.ring_dims, g.involved_dim)
        merged.setdefault(k, []).append(g)
    rows = [["group", "source", "size", "participants", "algorithm", "collectives"]]
    for gs in merged.values():
        g = gs[0]
        if g.key == ALL_RANKS:
            name = "all ranks" + ("" if g.involved_dim is None else
                                  " involved_dim [" + ",".join("1" if b else "0" for b in g.involved_dim) + "]")
        elif len(gs) == 1:
            name = g.key
        else:
            ids = [x.key for x in gs]
            name = (f"{ids[0]}..{ids[-1]} ({len(gs)} groups)" if len(gs) > 3 else ",".join(ids))
        algo = g.algorithm if g.algorithm != "flat_ring" else f"flat ring on dims {list(g.ring_dims)}"
        rows.append([name, g.source, str(g.size), str(list(g.participants)), algo,
                     f"{sum(x.collectives for x in gs):,}"])
    lines += table(rows, right={2, 5}) if len(rows) > 1 else ["  (none)"]

    lo, hi = s.compute_time_ns
    lines += ["", f"Compute per rank: {fmt_time(hi, 3)}" + ("" if lo == hi else f" (slowest; fastest {fmt_time(lo, 3)})")]
    clo, chi = s.cpu_time_ns
    if chi > 0:
        lines += [f"CPU ops per rank: {fmt_time(chi, 3)}" + ("" if clo == chi else f" (most; least {fmt_time(clo, 3)})")]
    if s.missing_deps:
        lines += [f"Dependencies on nodes not in the file: {s.missing_deps:,} (treated as done; see the notes)"]
    lines += [f"Rank classes (ranks with identical demand, computed once): {len(s.rank_classes)}"]
    rows = [["ranks", "count", "compute", "collectives"] + [f"bytes {d.name}" for d in net.dims]]
    shown = s.rank_classes[:12]
    for c in shown:
        rows.append([fmt_ranges(c.ranks), f"{c.num_ranks:,}", fmt_time(c.compute_time_ns, 3), f"{c.num_collectives:,}"]
                    + [fmt_bytes(t) for t in c.traffic_bytes])
    lines += table(rows, right=set(range(1, 4 + net.num_dims)))
    if len(s.rank_classes) > len(shown):
        lines.append(f"  ... {len(s.rank_classes) - len(shown)} more classes")
    lines += ["", "Nodes without demand: " + (", ".join(f"{k} {v:,}" for k, v in s.skipped.items()) or "none")]
    if s.notes:
        lines += ["Notes:"] + [f"  - {n}" for n in s.notes]
    return "\n".join(lines)


@click.command("demand", cls=Command, short_help="Chakra ET traces -> bytes per NPU per dimension (the demand file).")
@click.argument("prefix")
@click.option("--network", "-n", "network_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Network YAML (dimensions, topology, NPUs); its NPU count must match the trace set.")
@click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False),
              help='ASTRA-sim communicator-group JSON {"1": [0, 1, ...], ...}; overrides METADATA process groups '
                   "[default: PREFIX.groups.json when it exists].")
@click.option("--peak-tflops", type=FiniteFloat(), help="Time COMP nodes with the roofline model: peak compute, TFLOPS.")
@click.option("--mem-bw-gbps", type=FiniteFloat(), help="Roofline memory bandwidth, GB/s (give with --peak-tflops).")
@click.option("--type-cpu-collectives", is_flag=True,
              help="Count the gloo collectives, sends and receives that PyTorch's Chakra converter leaves as "
                   "CPU ops (c10d::*, gloo:*) as communication.")
@click.option("--cpu-collective-groups", type=click.Path(exists=True, dir_okay=False),
              help="The process group of each typed gloo collective the trace leaves open: a YAML/JSON list of "
                   "{op, [nth], [size_bytes], ranks | group | desc} entries (README: typed gloo collectives); "
                   "implies --type-cpu-collectives.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the demand JSON here.")
@click.option("--force", is_flag=True, help="Overwrite the --output file if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table.")
@plot_option("the bytes per NPU per dimension by collective type")
def demand_command(prefix: str, network_path: str, comm_groups: str | None, peak_tflops: float | None,
                   mem_bw_gbps: float | None, type_cpu_collectives: bool, cpu_collective_groups: str | None,
                   output: str | None, force: bool,
                   as_json: bool, plot_out: str | None) -> None:
    """Read Chakra ET traces PREFIX.0.et .. PREFIX.N-1.et (plain or gzipped) and compute the
    communication demand per network dimension.

    Prints the bytes each NPU sends per dimension by collective type, the communicator groups
    and how they map onto the dimensions, the compute time, the rank classes and the nodes that
    carry no demand; with -o, writes the demand JSON that `libra-astra optimize --demand` reads.

    \b
    Example:
      libra-astra demand traces/gpt3_tp8_dp8/gpt3 --network network_configs/sample_8x8.yml \\
          -o gpt3.demand.json --force
    """
    from ..demand.from_traces import demand_from_traces, summary_to_dict
    from ..demand.types import demand_to_dict
    from ..files import check_writable, write_json_atomic
    from ..model.network import load_network
    from ..traces.files import default_groups_path

    if (peak_tflops is None) != (mem_bw_gbps is None):
        raise LibraError("give --peak-tflops and --mem-bw-gbps together (roofline timing), or neither")
    out = check_writable(output, force) if output else None
    check_plot(plot_out, force)
    net = load_network(network_path)
    with Progress(f"reading {prefix}") as p:
        demand, summary = demand_from_traces(prefix, net, comm_groups=comm_groups or default_groups_path(prefix),
                                             peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps, on_progress=p,
                                             type_cpu_collectives=type_cpu_collectives,
                                             cpu_collective_groups=cpu_collective_groups)
    if out is not None:
        write_json_atomic(out, demand_to_dict(demand), overwrite=force)
    if as_json:
        data = summary_to_dict(summary)
        if out is not None:
            data["output"] = str(out)
        click.echo(json.dumps(data, indent=1))
    else:
        click.echo(format_summary(summary, net))
        if out is not None:
            click.echo(f"\nwrote {out}")
        else:
            click.echo("\n(use -o FILE to write the demand JSON)")
    draw("demand", demand, plot_out, force, echo=not as_json,
         dims=[f"{d.name} ({d.topology} {d.npus})" for d in net.dims])
