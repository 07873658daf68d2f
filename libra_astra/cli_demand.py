"""``libra-astra demand``: Chakra ET traces -> per-dimension demand JSON, with a readable summary."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Sequence

import click

from .cli_common import check_plot, draw, plot_option, progress
from .errors import LibraError

if TYPE_CHECKING:  # pragma: no cover
    from .network import Network
    from .trace_demand import TraceSummary


def _bytes(x: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3f} {unit}"
    return f"{x:.0f} B"


def _time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns:.0f} ns"


def _ranges(values: Sequence[int], limit: int = 6) -> str:
    """0,1,2,3,8 -> '0-3,8' (at most ``limit`` pieces)."""
    vals = sorted(values)
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        parts.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    if len(parts) > limit:
        parts = parts[:limit] + ["..."]
    return ",".join(parts)


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        cells = [r[c].rjust(widths[c]) if c in right and k else r[c].ljust(widths[c]) for c in range(len(r))]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def format_summary(s: TraceSummary, net: Network) -> str:
    """The human-readable report printed by ``libra-astra demand``."""
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
        rows.append([kind] + [_bytes(v) for v in vals])
        total = [a + b for a, b in zip(total, vals)]
    if len(s.bytes_by_type) > 1:
        rows.append(["total"] + [_bytes(v) for v in total])
    if len(rows) == 1:
        rows.append(["(no communication)"] + [""] * net.num_dims)
    lines += _table(rows, right=set(range(1, net.num_dims + 1)))

    lines += ["", "Communicator groups:"]
    # groups of the same shape (e.g. all tensor-parallel groups) share one row
    merged: dict[tuple, list] = {}
    for g in s.groups:
        k = (g.key == "", g.source, g.size, g.participants, g.algorithm, g.ring_dims, g.involved_dim)
        merged.setdefault(k, []).append(g)
    rows = [["group", "source", "size", "participants", "algorithm", "collectives"]]
    for gs in merged.values():
        g = gs[0]
        if g.key == "":
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
    lines += _table(rows, right={2, 5}) if len(rows) > 1 else ["  (none)"]

    lo, hi = s.compute_time_ns
    lines += ["", f"Compute per rank: {_time(hi)}" + ("" if lo == hi else f" (slowest; fastest {_time(lo)})")]
    lines += [f"Rank classes (ranks with identical demand, computed once): {len(s.rank_classes)}"]
    rows = [["ranks", "count", "compute", "collectives"] + [f"bytes {d.name}" for d in net.dims]]
    shown = s.rank_classes[:12]
    for c in shown:
        rows.append([_ranges(c.ranks), f"{c.num_ranks:,}", _time(c.compute_time_ns), f"{c.num_collectives:,}"]
                    + [_bytes(t) for t in c.traffic_bytes])
    lines += _table(rows, right=set(range(1, 4 + net.num_dims)))
    if len(s.rank_classes) > len(shown):
        lines.append(f"  ... {len(s.rank_classes) - len(shown)} more classes")
    lines += ["", "Nodes without demand: " + (", ".join(f"{k} {v:,}" for k, v in s.skipped.items()) or "none")]
    if s.notes:
        lines += ["Notes:"] + [f"  - {n}" for n in s.notes]
    return "\n".join(lines)


@click.command("demand")
@click.argument("prefix")
@click.option("--network", "-n", "network_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Network YAML (dimensions, topology, NPUs); its NPU count must match the trace set.")
@click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False),
              help='ASTRA-sim communicator-group JSON {"1": [0, 1, ...], ...}; overrides METADATA process groups '
                   "[default: PREFIX.groups.json when it exists].")
@click.option("--peak-tflops", type=float, help="Time COMP nodes with the roofline model: peak compute, TFLOPS.")
@click.option("--mem-bw-gbps", type=float, help="Roofline memory bandwidth, GB/s (give with --peak-tflops).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the demand JSON here.")
@click.option("--force", is_flag=True, help="Overwrite the --output file if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table.")
@plot_option("the bytes per NPU per dimension by collective type")
def demand_command(prefix: str, network_path: str, comm_groups: str | None, peak_tflops: float | None,
                   mem_bw_gbps: float | None, output: str | None, force: bool, as_json: bool,
                   plot_out: str | None) -> None:
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
    from .demand import demand_to_dict
    from .fileio import check_writable, write_json_atomic
    from .network import load_network
    from .trace_demand import default_groups_path, demand_from_traces, summary_to_dict

    try:
        if (peak_tflops is None) != (mem_bw_gbps is None):
            raise LibraError("give --peak-tflops and --mem-bw-gbps together (roofline timing), or neither")
        out = check_writable(output, force) if output else None
        check_plot(plot_out, force)
        net = load_network(network_path)
        with progress(f"reading {prefix}") as p:
            demand, summary = demand_from_traces(prefix, net, comm_groups=comm_groups or default_groups_path(prefix),
                                                 peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps, on_progress=p)
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
    except LibraError as e:
        raise click.ClickException(str(e)) from None
