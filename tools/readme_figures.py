#!/usr/bin/env python3
"""Regenerate the README's trace-reading, overlap and search tables from the benchmarks, so the
figures printed there are always ones a benchmark measured.

Either give the JSON files the benchmarks wrote (``--json`` of tools/bench_trace.py,
tools/bench_overlap.py and tools/bench_search.py), or let this script run them (slow: it generates
the trace sets):

    python tools/bench_trace.py --json /tmp/trace.json
    python tools/bench_trace.py --skip-mixed --gpt-prefix /tmp/gpt/gpt3 --json /tmp/trace96.json
    python tools/bench_overlap.py /tmp/gpt.demand.json --json /tmp/overlap.json
    python tools/bench_search.py --json /tmp/search.json
    python tools/readme_figures.py --trace /tmp/trace.json /tmp/trace96.json --overlap /tmp/overlap.json \
        --search /tmp/search.json

    python tools/readme_figures.py --run      # runs bench_trace.py (mixed set, 8-layer GPT-3) itself

The tables sit between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` in README.md;
everything else in the file is left as it is. ``--check`` only reports whether they differ.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def trace_table(sets: list[dict]) -> str:
    rows = ["| trace set | bare protobuf parse | demand extraction | ratio | peak memory (bare / demand) |",
            "|---|---|---|---|---|"]
    for s in sets:
        rows.append(f"| {s['label']}: {s['ranks']:,} ranks, {s['nodes'] / 1e6:.2f} M nodes, {s['size_mb']:.1f} MB "
                    f"| {s['bare_knodes_s']:,.0f} k nodes/s | {s['demand_knodes_s']:,.0f} k nodes/s "
                    f"| {s['ratio']:.2f} | {s['bare_peak_mib']:.0f} / {s['demand_peak_mib']:.0f} MiB |")
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


def replace_block(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- figures:{name} -->", f"<!-- /figures:{name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"README.md: no {begin} ... {end} block; add the two markers where the table goes")
    return text[:i + len(begin)] + "\n" + body + "\n" + text[j:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", nargs="*", default=[], help="JSON files of tools/bench_trace.py --json")
    ap.add_argument("--overlap", nargs="*", default=[], help="JSON files of tools/bench_overlap.py --json")
    ap.add_argument("--search", nargs="*", default=[], help="JSON files of tools/bench_search.py --json")
    ap.add_argument("--run", action="store_true", help="run tools/bench_trace.py now (default sets)")
    ap.add_argument("--check", action="store_true", help="only say whether README.md would change (exit 1 if so)")
    args = ap.parse_args()
    trace_files = [Path(p) for p in args.trace]
    tmp = None
    if args.run:
        tmp = tempfile.TemporaryDirectory(prefix="readme_figures.")
        out = Path(tmp.name) / "trace.json"
        subprocess.run([sys.executable, str(ROOT / "tools/bench_trace.py"), "--json", str(out)], check=True)
        trace_files.append(out)
    if not trace_files and not args.overlap and not args.search:
        raise SystemExit("nothing to do: give --trace/--overlap/--search JSON files or --run")
    text = README.read_text()
    new = text
    if trace_files:
        sets = [s for p in trace_files for s in json.loads(p.read_text())["sets"]]
        new = replace_block(new, "trace", trace_table(sets))
    if args.overlap:
        new = replace_block(new, "overlap", overlap_table([json.loads(Path(p).read_text()) for p in args.overlap]))
    if args.search:
        new = replace_block(new, "search", search_table([json.loads(Path(p).read_text()) for p in args.search]))
    if args.check:
        print("README.md figures are " + ("up to date" if new == text else "out of date"))
        sys.exit(0 if new == text else 1)
    if new != text:
        tmp_path = README.with_suffix(".md.tmp")
        tmp_path.write_text(new)
        tmp_path.replace(README)   # atomic: a reader sees the old or the new file, never half of one
    print("README.md: " + ("tables rewritten" if new != text else "already up to date"))


if __name__ == "__main__":
    main()
