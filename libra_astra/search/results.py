"""Search results: ranked table (CSV, JSON), the time-versus-cost Pareto front, and plots.

Files in the output directory (written atomically; an existing directory is refused unless
``overwrite``):

- ``ranked.csv``: every evaluated design, best objective first (rank, shape, blocks,
  parallelization: TP, PP, DP, CP, EP, SP, micro-batches, schedule, virtual stages, ZeRO stage,
  recomputation; placement, GB/s per dimension, cost, predicted time, certificate, bound);
- ``search.json``: settings, counts (evaluated, pruned by which rule or bound, infeasible), the
  top designs, the Pareto front and, with ``--simulate``, predicted versus simulated times;
- with ``--algorithms auto``, three more fields per design: the implementations chosen per kind
  and dimension, the same design's objective with ring everywhere and the gain (ring / chosen);
- ``pareto.csv``: designs no other evaluated design beats in both time and cost;
- ``pareto.png`` / ``pareto.svg`` and ``ranked.png``: plots, when matplotlib is installed.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Sequence

from .evaluate import Outcome
from .upstream import KINDS, write_json_atomic, write_text_atomic

FORMAT = "libra_astra.search"
VERSION = 1
CSV_FIELDS = ("rank", "objective", "objective_value", "time_ns", "cost_usd", "shape", "blocks", "levels",
              "tp", "pp", "dp", "cp", "ep", "sp", "micro_batch", "micro_batches", "schedule", "virtual_stages",
              "zero", "recompute", "placement", "bandwidth_gbps",
              "compute_ns", "dual_bound", "rel_gap", "lower_bound", "bound", "solver", "eval_s",
              "simulated_ns", "sim_error")
# --algorithms auto only (the ring search's files keep the fields above)
AUTO_FIELDS = ("implementations", "ring_objective_value", "gain_over_ring")
SHORT = {"ring": "r", "direct": "d", "halvingDoubling": "hd"}
KIND_SHORT = {"ALL_REDUCE": "AR", "ALL_GATHER": "AG", "REDUCE_SCATTER": "RS", "ALL_TO_ALL": "A2A"}


def implementations_text(o: Outcome, short: bool = False) -> str:
    """The chosen lists per kind (``KIND=impl/impl``; ``short``: only kinds not ring everywhere,
    ``AR:d/r``, or ``ring``)."""
    if not short:
        return "; ".join(f"{k}={'/'.join(v)}" for k, v in zip(KINDS, o.implementations))
    parts = [f"{KIND_SHORT[k]}:{'/'.join(SHORT.get(n, n) for n in v)}" for k, v in zip(KINDS, o.implementations)
             if any(n != "ring" for n in v)]
    return " ".join(parts) or "ring"


def gain_over_ring(o: Outcome) -> float:
    return o.ring_value / o.objective_value if o.objective_value > 0 else math.nan


def outcome_row(rank: int, o: Outcome, objective: str, level_names: Sequence[str],
                sim: dict | None = None) -> dict[str, Any]:
    c = o.candidate
    return {"rank": rank, "objective": objective, "objective_value": o.objective_value, "time_ns": o.time_ns,
            "cost_usd": o.cost_usd, "shape": "x".join(map(str, c.shape)), "blocks": "x".join(c.blocks),
            "levels": "x".join(level_names[i] for i in c.levels), "tp": c.par.tp, "pp": c.par.pp, "dp": c.par.dp,
            "cp": c.par.cp, "ep": c.par.ep, "sp": c.par.sp, "micro_batch": c.par.micro_batch,
            "micro_batches": c.par.micro_batches, "schedule": c.par.schedule, "virtual_stages": c.par.virtual_stages,
            "zero": c.par.zero, "recompute": c.par.recompute,
            "placement": c.placement_text, "bandwidth_gbps": " ".join(f"{b:.6g}" for b in o.bw_gbps),
            "compute_ns": o.compute_ns, "dual_bound": o.dual_bound, "rel_gap": o.rel_gap,
            "lower_bound": c.bound, "bound": c.bound_name, "solver": o.solver, "eval_s": round(o.eval_s, 6),
            "simulated_ns": (sim or {}).get("simulated_ns", ""), "sim_error": (sim or {}).get("error", ""),
            **({"implementations": implementations_text(o),
                "ring_objective_value": o.ring_value if math.isfinite(o.ring_value) else "infeasible",
                "gain_over_ring": gain_over_ring(o) if math.isfinite(o.ring_value) else ""}
               if o.implementations else {})}


def pareto_front(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Evaluated designs not beaten in both time and cost by another one (sorted by cost)."""
    ok = sorted((o for o in outcomes if o.status == "ok"), key=lambda o: (o.cost_usd, o.time_ns))
    front, best_t = [], math.inf
    for o in ok:
        if o.time_ns < best_t * (1 - 1e-12):
            front.append(o)
            best_t = o.time_ns
    return front


def to_csv(rows: Sequence[dict]) -> str:
    buf = io.StringIO()
    auto = any("implementations" in r for r in rows)
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS + AUTO_FIELDS if auto else CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def write_results(out_dir: str | Path, ranked: Sequence[Outcome], objective: str, level_names: Sequence[str],
                  summary: dict, sims: dict | None = None, top: int = 10, plots: bool = True,
                  overwrite: bool = False) -> dict[str, Any]:
    """Write the files above; returns {"files": [...], "plot_note": str | None}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sims = sims or {}
    rows = [outcome_row(i + 1, o, objective, level_names, sims.get(i)) for i, o in enumerate(ranked)]
    front = pareto_front(ranked)
    front_rows = [outcome_row(ranked.index(o) + 1, o, objective, level_names) for o in front]
    files = [write_text_atomic(out / "ranked.csv", to_csv(rows), overwrite),
             write_text_atomic(out / "pareto.csv", to_csv(front_rows), overwrite)]
    data = {"format": FORMAT, "version": VERSION, **summary, "top": rows[:top], "pareto": front_rows,
            "simulated": [dict(rows[i], **s) for i, s in sorted(sims.items())]}
    files.append(write_json_atomic(out / "search.json", data, overwrite))
    note = None
    if plots:
        got, note = plot(out, ranked, front, objective, top, overwrite)
        files += got
    return {"files": [str(f) for f in files], "plot_note": note}


def plot(out: Path, ranked: Sequence[Outcome], front: Sequence[Outcome], objective: str, top: int,
         overwrite: bool) -> tuple[list[Path], str | None]:
    """Time-versus-cost scatter with the front, and the top designs' times; skipped without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "plots skipped: matplotlib is not installed (pip install 'libra_astra[plot]')"
    if not ranked:
        return [], "plots skipped: no design was evaluated"
    files = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter([o.cost_usd / 1e6 for o in ranked], [o.time_ns / 1e6 for o in ranked], s=8, c="0.6",
               label=f"evaluated designs ({len(ranked)})")
    ax.plot([o.cost_usd / 1e6 for o in front], [o.time_ns / 1e6 for o in front], "o-", c="C3", ms=4,
            label=f"Pareto front ({len(front)})")
    b = ranked[0]
    ax.scatter([b.cost_usd / 1e6], [b.time_ns / 1e6], marker="*", s=120, c="C0", zorder=3,
               label=f"best ({objective})")
    ax.set_xlabel("network cost (M USD)")
    ax.set_ylabel("predicted step time (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "svg"):
        p = out / f"pareto.{ext}"
        if p.exists() and not overwrite:
            continue
        fig.savefig(p, dpi=120)
        files.append(p)
    plt.close(fig)
    k = ranked[:top]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(k) + 1.2))
    labels = [f"{'x'.join(map(str, o.candidate.shape))} {'x'.join(o.candidate.blocks)} {o.candidate.par.label}"
              for o in k]
    ax.barh(range(len(k))[::-1], [o.time_ns / 1e6 for o in k], color="C0")
    ax.set_yticks(range(len(k))[::-1], labels, fontsize=7)
    ax.set_xlabel("predicted step time (ms)")
    fig.tight_layout()
    p = out / "ranked.png"
    if not p.exists() or overwrite:
        fig.savefig(p, dpi=120)
        files.append(p)
    plt.close(fig)
    return files, None
