#!/usr/bin/env python3
"""Regenerate the trace-reading, emit, overlap, search, model-build and peer tables of
docs/benchmarks.md from the benchmarks, so the figures printed there are always ones a benchmark
measured.

Either give the JSON files the benchmarks wrote (``--json`` of tools/bench_trace.py,
tools/bench_emit.py, tools/bench_overlap.py, tools/bench_search.py, tools/bench_newton.py and
tools/bench_peers.py), or let this script run bench_trace itself (slow: it generates the trace sets):


    python tools/bench_trace.py --json /tmp/trace.json
    python tools/bench_trace.py --skip-mixed --gpt-prefix /tmp/gpt/gpt3 --json /tmp/trace96.json
    python tools/bench_emit.py --json /tmp/emit.json
    python tools/bench_emit.py --skip-mixed --skip-real --gpt-prefix /tmp/gpt/gpt3 --repeat 1 --json /tmp/emit96.json
    python tools/bench_overlap.py /tmp/gpt.demand.json --json /tmp/overlap.json
    python tools/bench_search.py --json /tmp/search.json
    python tools/bench_newton.py --old-build --json /tmp/newton.json
    python tools/bench_peers.py --peers CLARABEL --sizes 100,1000,10000,100000 --json /tmp/peers.json
    python tools/readme_figures.py --trace /tmp/trace.json /tmp/trace96.json --emit /tmp/emit.json /tmp/emit96.json \
        --overlap /tmp/overlap.json --search /tmp/search.json --newton /tmp/newton.json --peers /tmp/peers.json


    python tools/readme_figures.py --run      # runs bench_trace.py (mixed set, 8-layer GPT-3) itself

The tables sit between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` in docs/benchmarks.md
(NAME: trace, emit, overlap, search, newton, peers); everything else in the file is left as it is.
``--check`` only reports whether they differ.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"     # the page whose figure blocks this script owns


def trace_table(sets: list[dict]) -> str:
    rows = ["| trace set | bare protobuf parse | demand extraction | ratio | peak memory (bare / demand) |",
            "|---|---|---|---|---|"]
    for s in sets:
        rows.append(f"| {s['label']}: {s['ranks']:,} ranks, {s['nodes'] / 1e6:.2f} M nodes, {s['size_mb']:.1f} MB "
                    f"| {s['bare_knodes_s']:,.0f} k nodes/s | {s['demand_knodes_s']:,.0f} k nodes/s "
                    f"| {s['ratio']:.2f} | {s['bare_peak_mib']:.0f} / {s['demand_peak_mib']:.0f} MiB |")
    return "\n".join(rows)


def emit_table(sets: list[dict]) -> str:
    rows = ["| trace set | bare protobuf parse + serialize | emit | ratio | emit CPU time | rank files alone |",
            "|---|---|---|---|---|---|"]
    # the large sets first: on the small real ones emit's fixed costs dominate
    for s in sorted(sets, key=lambda s: -s["nodes"]):
        nodes = f"{s['nodes'] / 1e6:.2f} M" if s["nodes"] >= 100_000 else f"{s['nodes']:,}"
        size = f"{s['size_mb']:.1f} MB" if s["size_mb"] >= 1 else f"{s['size_mb'] * 1e3:.0f} kB"
        rows.append(f"| {s['label']}: {s['ranks']:,} ranks, {nodes} nodes, {size} "
                    f"| {s['bare_knodes_s']:,.0f} k nodes/s | {s['emit_knodes_s']:,.0f} k nodes/s "
                    f"| {s['ratio']:.2f} | {_ms(s['emit_s'])} | {_ms(s['rewrite_s'])} |")
    return "\n".join(rows)


def overlap_table(runs: list[dict]) -> str:
    rows = ["| demand | rank classes, DAG nodes | optimize, no overlap | optimize --overlap | ratio |",
            "|---|---|---|---|---|"]
    for r in runs:
        rows.append(f"| {r['demand']} | {r['classes']}, {r['nodes']:,} | {r['no_overlap_s'] * 1e3:.0f} ms "
                    f"| {r['overlap_s'] * 1e3:.0f} ms | {r['ratio']:.2f} |")
    return "\n".join(rows)


_MODELS = {"libra": "libra", "pipelined+overlap": "pipelined, dependency-aware", "pipelined": "pipelined"}


def search_table(runs: list[dict]) -> str:
    rows = ["| N | dims | model | space | candidates | solved | enumeration | search | cand/s | optimize call | ratio |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in (c for run in runs for c in run["cases"]):
        rows.append(f"| {r['npus']:,} | 1-{r['max_dims']} | {_MODELS.get(r['model'], r['model'])} | {r['space']:,} "
                    f"| {r['candidates']:,} | {r['evaluated']} | {r['enum_s']:.2f} s | {r['search_s']:.2f} s "
                    f"| {r['rate_total']:,.0f} | {r['optimize_ms']:.1f} ms | x{r['ratio']:.0f} |")
    return "\n".join(rows)


def _load(runs: list[dict]) -> str:
    lo = min(min(r["load_start"][0], r["load_end"][0]) for r in runs)
    hi = max(max(r["load_start"][0], r["load_end"][0]) for r in runs)
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"


def newton_table(runs: list[dict]) -> str:
    """Model build and solve per family, dimensions and size (tools/bench_newton.py)."""
    rows = ["| family | dims | collectives | terms | build | old build | old / new | solve | build / solve "
            "| Newton steps | certified gap |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in (p for run in runs for p in run["problems"]):
        old = r.get("old_build_s")
        speedup = f"{old / r['build_s']:.0f}x" if old is not None else ""
        rows.append(f"| {r['family']} | {r['dims']} | {r['collectives']:,} | {r['terms']:,} | {_ms(r['build_s'])} "
                    f"| {_ms(old) if old is not None else ''} | {speedup} "
                    f"| {_ms(r['solve_s'])} | {r['build_s'] / r['solve_s']:.2f} | {r['newton_steps']} "
                    f"| {r['rel_gap']:.0e}{'' if r['certified'] else ' (not certified)'} |")
    rows.append("")
    rows.append(f"CPU time of one process, one BLAS thread; load average {_load(runs)} on {runs[0]['cores']} cores "
                "(shared machine).")
    return "\n".join(rows)


def peers_table(runs: list[dict]) -> str:
    """End-to-end time ratio peer / ours per family, dimensions and size (tools/bench_peers.py)."""
    probs = [p for run in runs for p in run["problems"]]
    peers = sorted({name for p in probs for name in p["peers"]})
    rows = ["| family | dims | collectives | ours | " + " | ".join(f"{n} | {n} / ours" for n in peers)
            + " | our certified gap |",
            "|---|---|---|---|" + "---|---|" * len(peers) + "---|"]
    for p in probs:
        cells = []
        for n in peers:
            q = p["peers"].get(n)
            if q is None:
                cells += ["", ""]
            elif "ratio" not in q:
                cells += [_ms(q["s"]), q["status"]]
            else:
                cells += [_ms(q["s"]), f"{q['ratio']:.1f}x"]
        rows.append(f"| {p['family']} | {p['dims']} | {p['collectives']:,} | {_ms(p['ours_s'])} | " + " | ".join(cells)
                    + f" | {p['rel_gap']:.0e} |")
    rows.append("")
    repeat = runs[0].get("repeat", 1)
    best = (f", best of {max(repeat, 10)} runs of each side up to 1k collectives and of {repeat} below 100k"
            if repeat > 1 else "")
    if repeat > 1 and runs[0].get("turns"):
        best += " (the sides taking turns run by run)"
    rows.append(f"CPU time of one process end to end{best}, one BLAS thread; load average {_load(runs)} on "
                f"{runs[0]['cores']} cores (shared machine).")
    return "\n".join(rows)


def _ms(seconds: float) -> str:
    if seconds < 0.01:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def replace_block(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- figures:{name} -->", f"<!-- /figures:{name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{PAGE.relative_to(ROOT)}: no {begin} ... {end} block; add the two markers where the table goes")
    return text[:i + len(begin)] + "\n" + body + "\n" + text[j:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", nargs="*", default=[], help="JSON files of tools/bench_trace.py --json")
    ap.add_argument("--emit", nargs="*", default=[], help="JSON files of tools/bench_emit.py --json")
    ap.add_argument("--overlap", nargs="*", default=[], help="JSON files of tools/bench_overlap.py --json")
    ap.add_argument("--search", nargs="*", default=[], help="JSON files of tools/bench_search.py --json")
    ap.add_argument("--newton", nargs="*", default=[], help="JSON files of tools/bench_newton.py --json")
    ap.add_argument("--peers", nargs="*", default=[], help="JSON files of tools/bench_peers.py --json")
    ap.add_argument("--run", action="store_true", help="run tools/bench_trace.py now (default sets)")
    ap.add_argument("--check", action="store_true", help="only say whether docs/benchmarks.md would change (exit 1 if so)")
    args = ap.parse_args()
    trace_files = [Path(p) for p in args.trace]
    tmp = None
    if args.run:
        tmp = tempfile.TemporaryDirectory(prefix="readme_figures.")
        out = Path(tmp.name) / "trace.json"
        subprocess.run([sys.executable, str(ROOT / "tools/bench_trace.py"), "--json", str(out)], check=True)
        trace_files.append(out)
    if not (trace_files or args.emit or args.overlap or args.search or args.newton or args.peers):
        raise SystemExit("nothing to do: give --trace/--emit/--overlap/--search/--newton/--peers JSON files or --run")
    text = PAGE.read_text()
    new = text
    if trace_files:
        sets = [s for p in trace_files for s in json.loads(p.read_text())["sets"]]
        new = replace_block(new, "trace", trace_table(sets))
    if args.emit:
        new = replace_block(new, "emit", emit_table([s for p in args.emit for s in json.loads(Path(p).read_text())["sets"]]))
    if args.overlap:
        new = replace_block(new, "overlap", overlap_table([json.loads(Path(p).read_text()) for p in args.overlap]))
    if args.search:
        new = replace_block(new, "search", search_table([json.loads(Path(p).read_text()) for p in args.search]))
    if args.newton:
        new = replace_block(new, "newton", newton_table([json.loads(Path(p).read_text()) for p in args.newton]))
    if args.peers:
        new = replace_block(new, "peers", peers_table([json.loads(Path(p).read_text()) for p in args.peers]))
    if args.check:
        print(f"{PAGE.relative_to(ROOT)} figures are " + ("up to date" if new == text else "out of date"))
        sys.exit(0 if new == text else 1)
    if new != text:
        tmp_path = PAGE.with_suffix(".md.tmp")
        tmp_path.write_text(new)
        tmp_path.replace(PAGE)   # atomic: a reader sees the old or the new file, never half of one
    print(f"{PAGE.relative_to(ROOT)}: " + ("tables rewritten" if new != text else "already up to date"))


if __name__ == "__main__":
    main()
