"""Pictures of results, as SVG or PNG (by the output's extension). Needs the ``plot`` extra (matplotlib).

One figure per kind of file, built from the file's content (or the same dictionary a command
writes), so ``libra-astra plot FILE`` and ``--plot FILE`` on a command draw the same thing:

design / optimize result   bandwidth per dimension of the optimum and the baselines; time of each
                           split as compute plus exposed communication per dimension
demand                     bytes per NPU per dimension, stacked by collective type
frontier (pareto)          time versus cost, and the bandwidth per dimension along the frontier
loop                       predicted and simulated time of every run, per iteration

Every drawn bar or line carries an SVG id ``series:<figure part>:<series>[:<item>]`` (matplotlib
writes an artist's gid as the id of its group) so a reader, or a test, can find it. matplotlib is imported only
when a figure is made, and only through its object API (no pyplot, no global backend).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import LibraError
from .files import check_writable, write_text_atomic

FORMATS = (".svg", ".png")
COMPUTE_COLOR = "#9e9e9e"
# Colour-blind-safe (Okabe-Ito) for dimensions, designs and collective types.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


def _figure(width_in: float, height_in: float):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise LibraError("pictures need matplotlib: pip install 'libra_astra[plot]' (or pip install matplotlib)") \
            from None
    return Figure(figsize=(width_in, height_in), layout="constrained")


def _plain(*axes) -> None:
    # Times of designs differ in the 4th digit: plain tick labels, not an offset like '+1.0494e1'.
    for ax in axes:
        ax.ticklabel_format(axis="both", style="plain", useOffset=False)


def check_output(path: str | Path, overwrite: bool) -> Path:
    """The picture's path, refused early when its format is unknown or it exists (without overwrite)."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise LibraError(f"{p}: picture format {p.suffix or '(none)'!r} is not supported; name the file .svg or .png")
    return check_writable(p, overwrite)


def _save(fig, path: str | Path, overwrite: bool) -> Path:
    p = check_output(path, overwrite)
    import matplotlib

    buf = io.BytesIO()
    # Text stays text in the SVG (searchable, and the series' labels can be read back).
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format=p.suffix.lower()[1:], dpi=150,
                    metadata={"Date": None} if p.suffix.lower() == ".svg" else None)
    return write_text_atomic(p, buf.getvalue(), overwrite)


def _ms(ns: float) -> float:
    return ns / 1e6


def _dim_labels(dims: Sequence[str]) -> list[str]:
    return [str(d) for d in dims]


# ------------------------------------------------------------------ design / optimize result


def _energy_panel(ax, energy: Mapping[str, Any]) -> None:
    """Where the watts go: the optimum's energy per step by part (kJ), its average and peak power."""
    parts = [(name, j) for name, j in energy["parts_j"].items() if j > 0]
    ys = list(range(len(parts)))[::-1]
    bars = ax.barh(ys, [j / 1e3 for _, j in parts], color=[PALETTE[i % len(PALETTE)] for i in range(len(parts))],
                   height=0.6)
    for b, (name, _) in zip(bars, parts):
        b.set_gid(f"series:energy:{name}")
    total = energy["energy_j"] or 1.0
    for y, (_, j) in zip(ys, parts):
        ax.text(j / 1e3, y, f" {j / total:.1%}", va="center", fontsize=7)
    ax.set_yticks(ys, [name for name, _ in parts], fontsize=7)
    ax.set_xlabel("kJ per step")
    ax.set_title(f"Where the energy goes: {total / 1e3:,.4g} kJ per step\naverage {energy['average_power_w'] / 1e3:,.4g} kW, "
                 f"peak {energy['peak_cluster_power_w'] / 1e3:,.4g} kW", fontsize=9)
    ax.margins(x=0.18)


def plot_result(result: Mapping[str, Any], path: str | Path, *, title: str = "", subtitle: str = "",
                overwrite: bool = False) -> Path:
    """Bandwidth per dimension (optimum vs baselines) and the time breakdown, from an optimize
    result (``optimize --json``, or a design file's ``result``)."""
    dims = _dim_labels(result.get("dimensions") or [])
    designs = [("optimum", result["optimum"])] + list((result.get("baselines") or {}).items())
    energy = result.get("energy")
    fig = _figure(16 if energy else 11, 4.6)
    if energy:
        ax_bw, ax_t, ax_e = fig.subplots(1, 3, width_ratios=[1, 1.25, 1.1])
        _energy_panel(ax_e, energy)
    else:
        ax_bw, ax_t = fig.subplots(1, 2, width_ratios=[1, 1.25])

    n = len(designs)
    width = 0.8 / n
    for i, (name, ev) in enumerate(designs):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(dims))]
        bars = ax_bw.bar(xs, ev["bandwidth_gbps"], width, label=name, color=PALETTE[i % len(PALETTE)],
                         edgecolor="white", linewidth=0.5)
        for j, b in enumerate(bars):
            b.set_gid(f"series:bandwidth:{name}:{dims[j]}")
        ax_bw.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax_bw.set_xticks(range(len(dims)), dims)
    ax_bw.set_ylabel("GB/s per NPU")
    ax_bw.set_title("Bandwidth per dimension")
    ax_bw.legend(frameon=False, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=n)
    ax_bw.margins(y=0.12)

    breakdown = result.get("breakdown") or {}
    names = [name for name, _ in designs]
    ys = list(range(len(names)))[::-1]
    if breakdown:
        left = [0.0] * len(names)
        comp = [_ms(breakdown[nm]["compute_ns"]) for nm in names]
        bars = ax_t.barh(ys, comp, color=COMPUTE_COLOR, label="compute", height=0.6)
        for b, nm in zip(bars, names):
            b.set_gid(f"series:time:compute:{nm}")
        left = comp
        for d, dim in enumerate(dims):
            vals = [_ms(breakdown[nm]["exposed_communication_ns"][d]) for nm in names]
            bars = ax_t.barh(ys, vals, left=left, color=PALETTE[(d + 3) % len(PALETTE)], height=0.6,
                             label=f"communication {dim}")
            for b, nm in zip(bars, names):
                b.set_gid(f"series:time:{dim}:{nm}")
            left = [a + b for a, b in zip(left, vals)]
        for y, total in zip(ys, left):
            ratio = "" if total == left[0] else f" ({total / left[0] - 1:+.2%})"
            ax_t.text(total, y, f" {total:.4f} ms{ratio}", va="center", fontsize=8)
        hi = max(left)
        # Compute usually dominates; start the axis near it so the communication is visible.
        lo = max(0.0, min(comp) - 0.4 * (hi - min(comp))) if min(comp) > 0.5 * hi else 0.0
        ax_t.set_xlim(lo, hi + 0.35 * (hi - lo))
        ax_t.set_xlabel(f"time, ms (axis starts at {lo:.4g} ms)" if lo > 0 else "time, ms")
        ax_t.legend(frameon=False, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                    ncol=min(4, len(dims) + 1))
    else:
        vals = [_ms(ev["time_ns"]) for _, ev in designs]
        bars = ax_t.barh(ys, vals, color=PALETTE[0], height=0.6)
        ax_t.set_xlabel("time, ms")
    ax_t.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax_t.set_yticks(ys, names)
    ax_t.set_title("Time: compute + exposed communication per dimension")
    _titles(fig, title, subtitle)
    return _save(fig, path, overwrite)


def _titles(fig, title: str, subtitle: str) -> None:
    if title or subtitle:
        width = fig.get_figwidth() * 14          # characters of 9 pt text per inch, roughly
        fig.suptitle("\n".join(([title] if title else []) + _wrap(subtitle, int(width))), fontsize=9)


def _wrap(text: str, width: int) -> list[str]:
    """The settings line broken at its ' | ' separators into lines of at most ``width`` characters."""
    lines: list[str] = []
    for part in text.split(" | ") if text else []:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " | " + part
        else:
            lines.append(part)
    return lines


# ------------------------------------------------------------------ demand


def plot_traffic(by_type: Mapping[str, Sequence[float]], dims: Sequence[str], path: str | Path, *,
                 title: str = "", overwrite: bool = False) -> Path:
    """Bytes per NPU per dimension, stacked by collective type (report.traffic_by_type)."""
    fig = _figure(7, 4.2)
    ax = fig.subplots()
    dims = _dim_labels(dims)
    bottom = [0.0] * len(dims)
    scale, unit = _byte_unit(max([sum(v[d] for v in by_type.values()) for d in range(len(dims))] or [0]))
    for i, (kind, vals) in enumerate(by_type.items()):
        v = [x / scale for x in vals]
        bars = ax.bar(range(len(dims)), v, 0.6, bottom=bottom, label=kind, color=PALETTE[i % len(PALETTE)])
        for b, dim in zip(bars, dims):
            b.set_gid(f"series:traffic:{kind}:{dim}")
        bottom = [a + b for a, b in zip(bottom, v)]
    for x, total in enumerate(bottom):
        ax.text(x, total, f"{total:.4g} {unit}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(dims)), dims)
    ax.set_ylabel(f"{unit} sent per NPU")
    ax.set_title("Traffic per dimension by collective type")
    ax.margins(y=0.1)
    if by_type:
        ax.legend(frameon=False, fontsize=8)
    _titles(fig, title, "")
    return _save(fig, path, overwrite)


def _byte_unit(x: float) -> tuple[float, str]:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if x >= scale:
            return scale, unit
    return 1.0, "B"


# ------------------------------------------------------------------ frontier


def plot_frontier(data: Mapping[str, Any], path: str | Path, *, subtitle: str = "", overwrite: bool = False) -> Path:
    """Time versus cost (energy, TCO) along the frontier, and each dimension's bandwidth there (a pareto file)."""
    key, scale, xlabel, what = {"cost": ("cost_usd", 1e6, "network cost, million USD", "cost"),
                                "energy": ("energy_j", 1e3, "energy per step, kJ", "energy"),
                                "tco": ("tco_usd", 1e3, "TCO of the run, thousand USD", "TCO")}[data.get("versus", "cost")]
    pts = sorted(data.get("points") or [], key=lambda p: p[key])
    dims = _dim_labels(data.get("dimensions") or [])
    fig = _figure(11, 4.4)
    ax, ax_bw = fig.subplots(1, 2)
    cost = [p[key] / scale for p in pts]
    (line,) = ax.plot(cost, [_ms(p["time_ns"]) for p in pts], "o-", color=PALETTE[0], label="fastest design")
    line.set_gid("series:frontier")
    if cost and max(cost) >= 10 * min(cost):
        from matplotlib.ticker import FuncFormatter

        # Budgets are spaced geometrically: a log axis, labelled 0.1, 0.2, 0.5, 1, ...
        major = FuncFormatter(lambda v, _: f"{v:g}")
        minor = FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else "")
        for a in (ax, ax_bw):
            a.set_xscale("log")
            a.xaxis.set_major_formatter(major)
            a.xaxis.set_minor_formatter(minor)
    else:
        _plain(ax_bw)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time, ms")
    ax.set_title(f"Time-versus-{what} frontier")
    ax.grid(alpha=0.3)
    for d, dim in enumerate(dims):
        (ln,) = ax_bw.plot(cost, [p["bandwidth_gbps"][d] for p in pts], "o-", color=PALETTE[(d + 3) % len(PALETTE)],
                           label=dim, markersize=4)
        ln.set_gid(f"series:frontier-bandwidth:{dim}")
    ax_bw.set_xlabel(xlabel)
    ax_bw.set_ylabel("GB/s per NPU")
    ax_bw.set_title("Bandwidth per dimension along the frontier")
    ax_bw.grid(alpha=0.3)
    if dims:
        ax_bw.legend(frameon=False, fontsize=8)
    _titles(fig, "", subtitle)
    return _save(fig, path, overwrite)


# ------------------------------------------------------------------ loop


def plot_loop(data: Mapping[str, Any], path: str | Path, *, subtitle: str = "", overwrite: bool = False) -> Path:
    """Predicted and simulated time of every run of a loop file, grouped by iteration."""
    rows = data.get("rows") or []
    fig = _figure(max(6.0, 1.1 * len(rows) + 2), 4.6)
    ax = fig.subplots()
    labels = [f"{r['name']}\niter {r['iteration']}" for r in rows]
    xs = list(range(len(rows)))
    for i, (key, name) in enumerate((("predicted_ns", "predicted"), ("simulated_ns", "simulated"))):
        bars = ax.bar([x + (i - 0.5) * 0.38 for x in xs], [_ms(r[key]) for r in rows], 0.38, label=name,
                      color=PALETTE[i], edgecolor="white", linewidth=0.5)
        for b, r in zip(bars, rows):
            b.set_gid(f"series:{name}:{r['iteration']}:{r['name']}")
    for x, r in zip(xs, rows):
        ax.text(x, max(_ms(r["predicted_ns"]), _ms(r["simulated_ns"])), f"{100 * r['relative_error']:+.4f}%",
                ha="center", va="bottom", fontsize=8)
    top = max([max(_ms(r["predicted_ns"]), _ms(r["simulated_ns"])) for r in rows] or [1.0])
    low = min([min(_ms(r["predicted_ns"]), _ms(r["simulated_ns"])) for r in rows] or [0.0])
    if rows and low > 0.6 * top:
        # Runs differ by a few percent: show the differences, not the common bulk.
        ax.set_ylim(low * 0.97, top * 1.02)
        ax.set_ylabel(f"time, ms (axis starts at {low * 0.97:.4g} ms)")
    else:
        ax.set_ylabel("time, ms")
        ax.margins(y=0.1)
    for i in range(1, len(rows)):
        if rows[i]["iteration"] != rows[i - 1]["iteration"]:
            ax.axvline(i - 0.5, color="#cccccc", linewidth=0.8)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_title("Predicted vs simulated time per run (label: prediction error)")
    ax.legend(frameon=False, fontsize=8, loc="upper right")
    _titles(fig, "", subtitle)
    return _save(fig, path, overwrite)


# ------------------------------------------------------------------ measured timeline (measure)


def plot_timeline(measurement: Mapping[str, Any], path: str | Path, *, overwrite: bool = False) -> Path:
    """Each rank's measured step on a shared clock, with every collective's wait and transfer.

    ``measurement``: the dictionary ``measure --json`` prints (measurement_to_dict)."""
    ranks = measurement["ranks"]
    t0 = min(r["start_ns"] for r in ranks)
    fig = _figure(9, 0.45 * len(ranks) + 1.6)
    ax = fig.add_subplot()
    row = {r["rank"]: i for i, r in enumerate(ranks)}
    for r in ranks:
        bar = ax.broken_barh([(_ms(r["start_ns"] - t0), _ms(r["end_ns"] - r["start_ns"]))],
                             (row[r["rank"]] - 0.35, 0.7), color="#e0e0e0", label="step" if r is ranks[0] else None)
        bar.set_gid(f"series:timeline:step:{r['rank']}")
    for c in measurement["collectives"]:
        color = PALETTE[c["index"] % len(PALETTE)]
        for rank, start, dur in zip(c["ranks"], c["starts_ns"], c["durations_ns"]):
            wait = dur - c["transfer_ns"]
            x = _ms(start - t0)
            if wait > 0:
                w = ax.broken_barh([(x, _ms(wait))], (row[rank] - 0.3, 0.6), color=color, alpha=0.35)
                w.set_gid(f"series:timeline:wait:{c['index']}:{rank}")
            t = ax.broken_barh([(x + _ms(wait), _ms(c["transfer_ns"]))], (row[rank] - 0.3, 0.6), color=color)
            t.set_gid(f"series:timeline:transfer:{c['index']}:{rank}")
    ax.set_yticks(range(len(ranks)), [f"rank {r['rank']}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first rank's step start (ms)")
    ax.set_title(f"measured: {measurement.get('source', '')} (collectives: light = waiting, dark = transfer)",
                 fontsize=9)
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    return _save(fig, path, overwrite)
