"""``show`` and ``plot``: display a demand, design, frontier or loop file again, as text or a picture;
``show`` also displays a run directory (show_run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

KINDS = {"libra_astra.demand": "demand", "libra_astra.design": "design", "libra_astra.pareto": "frontier",
         "libra_astra.loop": "loop"}


def _x(v, why: str = "time 0") -> str:
    """A speedup or gain; None when the times (or costs) were 0 (ratio() in model/numbers.py)."""
    return f"n/a ({why})" if not isinstance(v, (int, float)) else f"x{v:.4f}"


def _t(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.4f} {unit}"
    return f"{ns:.1f} ns"


def _usd(usd: float) -> str:
    return f"${usd:,.0f}" if usd >= 100 else f"${usd:,.2f}"


def _bytes(x: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3f} {unit}"
    return f"{x:.0f} B"


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  " + "  ".join(r[c].rjust(widths[c]) if c in right and k else r[c].ljust(widths[c])
                             for c in range(len(r))).rstrip() for k, r in enumerate(rows)]


def load_any(path: str) -> tuple[str, Any]:
    """(kind, content) of a libra_astra JSON file; a demand comes back as a Demand."""
    from ..errors import LibraError
    from ..files import read_json

    data = read_json(path, "libra_astra")
    kind = KINDS.get(data.get("format")) if isinstance(data, dict) else None
    if kind is None:
        found = data.get("format") if isinstance(data, dict) else None
        raise LibraError(f"{path}: not a demand, design, frontier or loop file (\"format\" is {found!r}); "
                         "give a file written by libra-astra demand, optimize, pareto or loop")
    if kind == "demand":
        from ..demand.types import demand_from_dict

        return kind, demand_from_dict(data, path)
    if kind == "design":
        from ..optimize.design import design_from_dict

        design_from_dict(data, path)            # validates; the dictionary carries the result
    return kind, data


def _header(data: dict) -> list[str]:
    from ..timing.settings import header

    tm = data.get("time_model_settings") or data.get("time_model")
    if isinstance(tm, dict):
        return [header(data.get("objective", "perf"), tm)]
    if isinstance(tm, str):
        return [f"objective {data.get('objective', 'perf')} | model {tm} (settings not recorded in this file)"]
    return []


def demand_labels(d) -> list[str]:
    """A demand's dimensions as ``name (npus)``: the names its file records, else dim0, dim1, ..."""
    return [f"{name} ({n})" for name, n in zip(d.dim_labels, d.npus_per_dim)]


def format_demand(d, dims: list[str] | None = None) -> str:
    from ..optimize.report import traffic_by_type

    dims = dims or demand_labels(d)
    lines = [f"demand {d.name!r}: network shape {' x '.join(map(str, d.npus_per_dim))} "
             f"({sum(rc.num_ranks for rc in d.rank_classes):,} ranks), {len(d.rank_classes)} rank class(es)", "",
             "Bytes sent per NPU per dimension (mean over ranks):"]
    by_type = traffic_by_type(d)
    rows = [["collective"] + dims] + [[k] + [_bytes(x) for x in v] for k, v in by_type.items()]
    if len(by_type) > 1:
        rows.append(["total"] + [_bytes(sum(v[i] for v in by_type.values())) for i in range(len(dims))])
    if len(rows) == 1:
        rows.append(["(no communication)"] + [""] * len(dims))
    lines += _table(rows, set(range(1, len(dims) + 1)))
    lines += ["", "Rank classes:"]
    rows = [["class", "ranks", "compute", "collectives", "dependency graph"]]
    for i, rc in enumerate(d.rank_classes):
        rows.append([str(i), f"{rc.num_ranks:,}", _t(rc.compute_time_ns), f"{len(rc.collectives):,}",
                     "yes" if rc.dag is not None else "no"])
    lines += _table(rows, {1, 2, 3})
    if d.notes:
        lines += ["", "Notes:"] + [f"  - {n}" for n in d.notes]
    return "\n".join(lines)


def format_design(data: dict) -> str:
    r = data.get("result") or {}
    net = data["network"]
    dims = net.get("dimensions", [])
    bw = data["bandwidth_gbps"]
    total = sum(bw) or 1.0
    lines = _header(data)
    lines.append(f"design {data.get('name')!r} for network {net.get('name', '?')} "
                 f"({len(dims)} dimensions), {len(data.get('workloads', []))} workload(s)")
    rows = [["dimension", "topology", "npus", "GB/s per NPU", "share"]]
    for d, b in zip(dims, bw):
        rows.append([str(d.get("name")), str(d.get("topology")), str(d.get("npus")), f"{b:.4f}", f"{b / total:.1%}"])
    rows.append(["total", "", "", f"{sum(bw):.4f}", ""])
    lines += _table(rows, {2, 3, 4})
    opt = r.get("optimum") or {}
    if opt:
        lines.append(f"time      {_t(opt['time_ns'])} = compute {_t(opt['compute_ns'])} + communication "
                     f"{_t(opt['communication_ns'])}")
    lines.append(f"cost      {_usd(data.get('cost_usd', 0.0))}")
    ws = r.get("workloads") or []
    if len(ws) > 1:
        for w in ws:
            lines.append(f"  {w['name']:<18} weight {w['weight']:g}: {_t(w['time_ns'])} = compute "
                         f"{_t(w['compute_ns'])} + communication {_t(w['communication_ns'])}")
    for name, e in (r.get("baselines") or {}).items():
        lines.append(f"vs {name:<20} time {_t(e['time_ns']):>12}  speedup {_x(e.get('speedup_of_optimum'))}  "
                     f"perf/cost gain {_x(e.get('perf_per_cost_gain_of_optimum'), 'cost 0')}")
    if r.get("message"):
        gap = r.get("relative_gap")
        lines.append(f"solver    {r['message']}; relative duality gap "
                     f"{'unknown' if gap is None else format(gap, '.2e')}")
    if r.get("energy"):
        lines += format_energy(r["energy"])
    if r.get("tco"):
        lines += format_tco(r["tco"])
    for w in data.get("workloads", []):
        src = w.get("traces") or w.get("demand") or "?"
        lines.append(f"workload  {w.get('name')} (weight {w.get('weight', 1):g}): {src}")
    return "\n".join(lines)


def format_energy(e: dict) -> list[str]:
    """The energy lines of a result (optimize, show): step energy, where it goes, power."""
    lines = [f"energy    {e['energy_j']:,.6g} J per step ({e['power_model']}); average power {e['average_power_w'] / 1e3:,.6g} kW; "
             f"peak power {e['peak_cluster_power_w'] / 1e3:,.6g} kW cluster, {e['peak_fabric_power_w'] / 1e3:,.6g} kW fabric"]
    per = [f"{e[k]:,.6g} J per {what}" for k, what in (("j_per_sample", "sample"), ("j_per_token", "token")) if e.get(k)]
    if per:
        lines.append("          " + ", ".join(per))
    total = e["energy_j"] or 1.0
    lines.append(f"  {'where the energy goes':<36} {'J per step':>14} {'share':>7}")
    for name, j in e["parts_j"].items():
        if j:
            lines.append(f"  {name:<36} {j:>14,.6g} {j / total:>6.1%}")
    for name, j in (e.get("baselines_energy_j") or {}).items():
        lines.append(f"vs {name:<20} energy {j:,.6g} J per step  ({j / e['energy_j'] if e['energy_j'] else 0:.4f}x the optimum's)")
    return lines


def format_tco(t: dict) -> list[str]:
    """The TCO lines of a result: the run's total cost and its parts (USD)."""
    lines = [f"TCO       ${t['tco_usd']:,.2f} for {t['run_steps']:,.6g} steps ({t['run_s'] / 3600:,.6g} h, "
             f"{t['run_energy_kwh']:,.6g} kWh at ${t['usd_per_kwh']:g}/kWh; capital over {t['lifetime_years']:g} years)"]
    lines += [f"  {name:<36} ${usd:>14,.2f}" for name, usd in t["parts_usd"].items() if usd]
    for name, usd in (t.get("baselines_tco_usd") or {}).items():
        lines.append(f"vs {name:<20} TCO ${usd:,.2f}  ({usd / t['tco_usd'] if t['tco_usd'] else 0:.4f}x the optimum's)")
    return lines


FRONTIER_COLUMNS = {   # versus -> (budget key, its header, value key, its header)
    "cost": ("budget_usd", "budget USD", "cost_usd", "cost USD"),
    "energy": ("budget_j", "budget J/step", "energy_j", "energy J/step"),
    "tco": ("budget_usd", "budget USD/run", "tco_usd", "TCO USD/run"),
}


def format_frontier(data: dict) -> str:
    dims = data.get("dimensions") or []
    bkey, bhead, vkey, vhead = FRONTIER_COLUMNS[data.get("versus", "cost")]
    lines = _header(data)
    lines.append(f"{bhead:>16} {vhead:>16} {'time':>14}  bandwidth GB/s per dimension ({', '.join(dims)})")
    for p in data.get("points") or []:
        lines.append(f"{p[bkey]:>16,.0f} {p[vkey]:>16,.0f} {_t(p['time_ns']):>14}  "
                     + ", ".join(f"{b:.3f}" for b in p["bandwidth_gbps"]))
    return "\n".join(lines)


def format_loop(data: dict) -> str:
    dims = data.get("dimensions") or []
    lines = _header(data)
    lines.append(f"{'iter':>4} {'design':<20} {'predicted':>14} {'simulated':>14} {'error':>9}  bandwidth GB/s "
                 f"({', '.join(dims)})")
    for r in data.get("rows") or []:
        lines.append(f"{r['iteration']:>4} {r['name']:<20} {_t(r['predicted_ns']):>14} {_t(r['simulated_ns']):>14} "
                     f"{r['relative_error']:>+9.3%}  " + ", ".join(f"{b:.3f}" for b in r["bandwidth_gbps"]))
        ws = r.get("workloads") or []
        if len(ws) > 1:
            for w in ws:
                err = w["predicted_ns"] / w["simulated_ns"] - 1 if w["simulated_ns"] else float("nan")
                lines.append(f"{'':>4}   {w['name'] + ' (weight ' + format(w['weight'], 'g') + ')':<18} "
                             f"{_t(w['predicted_ns']):>14} {_t(w['simulated_ns']):>14} {err:>+9.3%}")
    for name, sp in (data.get("simulated_speedup_of_best_over") or {}).items():
        lines.append(f"simulated speedup of the best design over {name}: {_x(sp)}")
    best = data.get("best")
    if best:
        lines.append(f"best: iteration {best['iteration']} ({_t(best['simulated_ns'])} simulated); "
                     f"{data.get('stop_reason', '')}")
    return "\n".join(lines)


def plot_any(kind: str, content: Any, out: str, overwrite: bool = False, dims: list[str] | None = None) -> Path:
    """Draw a file's content (the figure of its kind, plot.py) into ``out`` (.svg or .png)."""
    from .. import plot
    from ..timing.settings import header

    if kind == "demand":
        from ..optimize.report import traffic_by_type

        dims = dims or demand_labels(content)
        return plot.plot_traffic(traffic_by_type(content), dims, out, title=f"demand {content.name!r}",
                                 overwrite=overwrite)
    sub = _header(content)
    subtitle = sub[0] if sub else ""
    if kind == "design":
        result = dict(content.get("result") or {})
        result.setdefault("dimensions", [d.get("name") for d in content["network"].get("dimensions", [])])
        return plot.plot_result(result, out, title=f"design {content.get('name')!r}", subtitle=subtitle,
                                overwrite=overwrite)
    if kind == "result":
        tm = content.get("time_model")
        return plot.plot_result(content, out, subtitle=header(content.get("objective", "perf"), tm) if tm else "",
                                overwrite=overwrite)
    if kind == "frontier":
        return plot.plot_frontier(content, out, subtitle=subtitle, overwrite=overwrite)
    return plot.plot_loop(content, out, subtitle=subtitle, overwrite=overwrite)


def show_run(run_dir: str, as_json: bool, plot_out: str | None) -> None:
    """``show DIR``: a directory made by emit (and perhaps simulate), as text or JSON."""
    from ..astra.record import read_run
    from ..errors import LibraError
    from .show_run import format_run

    if plot_out:
        raise LibraError(f"{run_dir}: --plot draws a demand, design, frontier or loop file, not a run directory; "
                         "drop --plot")
    rec = read_run(run_dir)
    click.echo(json.dumps({"kind": "run", **rec.to_dict()}, indent=1) if as_json else format_run(rec))


@click.command("show")
@click.argument("file", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the file's content as JSON (validated).")
@click.option("--plot", "plot_out", type=click.Path(dir_okay=False), metavar="FILE.svg|FILE.png",
              help="Also draw it (as `libra-astra plot`).")
@click.option("--force", is_flag=True, help="Overwrite an existing --plot file.")
def show_command(file: str, as_json: bool, plot_out: str | None, force: bool) -> None:
    """Display a demand, design, frontier (pareto -o) or loop (loop.json) file again, or a run
    directory (emit --out): its network, system settings, workload and command, the predicted
    time and, once simulate ran there, the simulated time and the error between them.

    \b
    Examples (files from the demand, optimize, emit and loop commands' examples):
      libra-astra show gpt3.demand.json
      libra-astra show design.json --plot design.svg --force
      libra-astra show runs/gpt3
      libra-astra show runs/gpt3-loop/loop.json --json
    """
    if Path(file).is_dir():
        show_run(file, as_json, plot_out)
        return
    kind, content = load_any(file)
    if plot_out:
        from ..plot import check_output

        check_output(plot_out, force)
    if as_json:
        from ..demand.types import demand_to_dict

        data = demand_to_dict(content) if kind == "demand" else content
        click.echo(json.dumps({"kind": kind, **data}, indent=1))
    elif kind == "demand":
        click.echo(format_demand(content))
    elif kind == "design":
        click.echo(format_design(content))
    elif kind == "frontier":
        click.echo(format_frontier(content))
    else:
        click.echo(format_loop(content))
    if plot_out:
        plot_any(kind, content, plot_out, force)
        if not as_json:
            click.echo(f"wrote {plot_out}")


@click.command("plot")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="FILE.svg|FILE.png",
              help="Picture to write; the extension chooses SVG or PNG.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def plot_command(file: str, output: str, force: bool) -> None:
    """Draw a demand, design, frontier or loop file as SVG or PNG (needs the `plot` extra).

    \b
    demand    bytes per NPU per dimension by collective type
    design    bandwidth per dimension (optimum vs baselines); compute + exposed communication per dimension
    frontier  time versus cost, and the bandwidth per dimension along it
    loop      predicted and simulated time of every run, per iteration

    \b
    Examples (files from the optimize, pareto and loop commands' examples):
      libra-astra plot design.json -o design.svg --force
      libra-astra plot frontier.json -o frontier.png --force
      libra-astra plot runs/gpt3-loop/loop.json -o loop.png --force
    """
    from ..plot import check_output

    check_output(output, force)
    kind, content = load_any(file)
    plot_any(kind, content, output, force)
    click.echo(f"wrote {output} ({kind})")
