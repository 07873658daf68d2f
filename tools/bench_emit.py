#!/usr/bin/env python3
"""Benchmark: emit (trace rewrite for ASTRA-sim) against a bare protobuf parse + serialize of the same nodes.

Measures, in one run, per trace set (CPU time of this process, best of --repeat interleaved runs):
  1. the baseline: protolib's framing and the schema's parse of every message into a fresh
     ``Node``, each serialized again and written to a file per rank (what any rewrite must at
     least read and write);
  2. ``emit`` of a design on those traces, given the demand as ``loop`` gives it (the demand is
     read beforehand, not timed): the rewritten rank files, configuration and manifest;
  3. the rewrite of the rank files alone (emit without its configuration files, manifest and
     prediction, which dominate on small sets);
  4. with --schema, the node-by-node schema path of the rewrite alone (what emit did before).
Prints nodes/s of each and the ratio emit / baseline (target >= 0.5).

Sets: a ~1 M-node mixed set whose rank files all differ (tools/bench_trace.py's), the 4,096-rank
GPT-3 175B set of traces/large/gpt3_175b_4096.yml with --gpt-layers layers (8: 1.06 M nodes) or
an existing one from --gpt-prefix (96 layers: 9.8 M nodes), and the real PyTorch traces of
tests/fixtures/real. Inputs are generated into a temporary directory (or --workdir, kept).

    python tools/bench_emit.py                        # mixed, GPT-3 8 layers, real traces
    python tools/bench_emit.py --skip-mixed --skip-real --gpt-prefix /tmp/gpt3_4096/gpt3 --repeat 1
    python tools/bench_emit.py --json /tmp/emit.json  # for tools/readme_figures.py --emit
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
from pathlib import Path

from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils import protolib

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trace import add_set_options, fix_pairs, timed, trace_sets, workspace  # noqa: E402

from libra_astra.astra.rewrite import rewrite_traces  # noqa: E402
from libra_astra.demand.from_traces import demand_from_traces  # noqa: E402
from libra_astra.model.network import Network, load_network  # noqa: E402
from libra_astra.optimize.design import Design, WorkloadRef  # noqa: E402
from libra_astra.traces.files import find_rank_files  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real"
REAL_SETS = {"param_dlrm8": "ring8", "ddp4": "ring4", "tpdp4": "ring2x2", "tpdp8": "ring2x4", "pipeline4": "ring4"}


def bare(paths: list[Path], out: Path) -> int:
    """The baseline: every message parsed into a fresh ``Node`` (a reused one lets upb's arena grow
    with every parse), serialized again and written, one file per rank."""
    count = 0
    node_cls = pb.Node
    for r, p in enumerate(paths):
        f = protolib.openFileRd(str(p))
        buf = io.BytesIO()
        meta = pb.GlobalMetadata()
        protolib.decodeMessage(f, meta)
        protolib.encodeMessage(buf, meta)
        while True:
            node = node_cls()
            if not protolib.decodeMessage(f, node):
                break
            protolib.encodeMessage(buf, node)
            count += 1
        f.close()
        (out / f"bare.{r}.et").write_bytes(buf.getvalue())
    return count


def bench_set(label: str, prefix: Path, net: Network, groups: Path | None, work: Path, repeat: int,
              schema: bool) -> dict:
    from libra_astra.astra.emit import emit

    n = net.npus_count
    found = find_rank_files(prefix)
    paths = [Path(found[r]) for r in range(n)]
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    demand, _ = demand_from_traces(prefix, net, comm_groups=groups)
    ref = WorkloadRef(prefix.name, traces=str(prefix), comm_groups=str(groups) if groups else None)
    design = Design("bench", net, tuple(100.0 for _ in net.dims), workloads=(ref,))
    t_bare = t_emit = t_rewrite = t_schema = float("inf")
    nodes = 0
    for k in range(repeat):
        # every run writes into a new directory: rewriting files in place makes the file system
        # flush the old contents, which would be charged to whichever side came second
        d = work / f"bare{k}"
        d.mkdir()
        t, nodes = timed(bare, paths, d)
        t_bare = min(t_bare, t)
        shutil.rmtree(d)
        t, res = timed(emit, design, work / f"emit{k}", demand=demand)
        t_emit = min(t_emit, t)
        written = res.stats.get("nodes_written", 0)
        shutil.rmtree(work / f"emit{k}")
        d = work / f"rewrite{k}"
        d.mkdir()
        t, _ = timed(_rewrite, design, prefix, d, demand, True)
        t_rewrite = min(t_rewrite, t)
        shutil.rmtree(d)
        if schema:
            d = work / f"schema{k}"
            d.mkdir()
            t, _ = timed(_rewrite, design, prefix, d, demand, False)
            t_schema = min(t_schema, t)
            shutil.rmtree(d)
    out = {"label": label, "ranks": n, "nodes": nodes, "nodes_written": written, "size_mb": size_mb,
           "bare_s": t_bare, "emit_s": t_emit, "ratio": t_bare / t_emit, "rewrite_s": t_rewrite,
           "bare_knodes_s": nodes / t_bare / 1e3, "emit_knodes_s": nodes / t_emit / 1e3}
    print(f"\n{label}: {n:,} ranks, {nodes:,} nodes, {size_mb:.1f} MB of ET (CPU time, best of {repeat})")
    print(f"  bare parse + serialize {t_bare:8.3f} s   {out['bare_knodes_s']:8.0f} k nodes/s")
    print(f"  emit                   {t_emit:8.3f} s   {out['emit_knodes_s']:8.0f} k nodes/s   "
          f"ratio {out['ratio']:.2f} (target >= 0.5)")
    print(f"  rewrite of the files   {t_rewrite:8.3f} s   {nodes / t_rewrite / 1e3:8.0f} k nodes/s   "
          f"ratio {t_bare / t_rewrite:.2f}")
    if schema:
        out["schema_s"] = t_schema
        out["schema_knodes_s"] = nodes / t_schema / 1e3
        print(f"  schema-path rewrite    {t_schema:8.3f} s   {out['schema_knodes_s']:8.0f} k nodes/s   "
              f"emit is {t_schema / t_emit:.1f}x faster")
    return out


def _rewrite(design: Design, prefix: Path, out: Path, demand, byte_level: bool):
    """The rewrite alone (on the bytes, or node by node with the schema) on emit's own plan of the workload."""
    import importlib

    emit_mod = importlib.import_module("libra_astra.astra.emit")   # the package re-exports emit() as emit
    w = emit_mod._load_workload(design, design.workloads[0], demand)
    return rewrite_traces(prefix, out / "w", w.lnet, w.groups, w.masks, byte_level=byte_level)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_set_options(ap)
    ap.add_argument("--skip-real", action="store_true", help="skip the real traces of tests/fixtures/real")
    ap.add_argument("--schema", action="store_true", help="also time the schema path of the rewrite (slow)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each side; the best counts (default 2)")
    ap.add_argument("--json", help="also write the figures to this JSON file (tools/readme_figures.py --emit)")
    args = ap.parse_args()
    fix_pairs(args.cols, args.rows)
    results = []
    with workspace(args, "bench_emit") as work:
        runs = work / "runs"
        runs.mkdir(exist_ok=True)
        for label, prefix, net, groups in trace_sets(args, work):
            results.append(bench_set(label, prefix, net, groups, runs, args.repeat, args.schema))
        if not args.skip_real:
            for name, network in REAL_SETS.items():
                results.append(bench_set(f"real PyTorch traces {name}", REAL / name / name,
                                         load_network(REAL / f"{network}.yml"), None, runs, args.repeat, args.schema))
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "emit", "sets": results}, indent=1) + "\n")

if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
