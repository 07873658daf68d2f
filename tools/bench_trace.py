#!/usr/bin/env python3
"""Benchmark: Chakra ET -> demand extraction against a bare protolib parse of the same files.

Measures, in one run, per trace set (CPU time of this process, best of two interleaved runs):
  1. throughput (nodes/s) of ``demand_from_traces`` and of a bare ``protolib.decodeMessage`` loop
     (a fresh ``Node`` per message) over the same files; prints the ratio (target >= 0.9);
  2. peak memory (VmHWM) of each side in a fresh process, next to the interpreter with the same
     imports (target < 1 GiB for the extraction).

Sets: a ~1M-node mixed set whose rank files all differ (so nothing is skipped as a duplicate),
and the 4,096-rank GPT-3 175B set of traces/large/gpt3_175b_4096.yml (TP 16 x PP 8 x DP 32),
generated with --gpt-layers layers (8: 1.06 M nodes) or taken whole from --gpt-prefix (96
layers: 9.8 M nodes, the 10 M-node memory check).

Inputs are generated into a temporary directory (or --workdir, kept). Example:

    python tools/bench_trace.py                 # both sets
    python tools/bench_trace.py --nodes 200000 --skip-4096
    python tools/gen_traces.py traces/large/gpt3_175b_4096.yml --out /tmp/gpt/gpt3
    python tools/bench_trace.py --skip-mixed --gpt-prefix /tmp/gpt/gpt3 --json /tmp/trace.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils import protolib

from libra_astra.traces import chakra_io as cio
from libra_astra.model.network import Dimension, Network, dump_network


def bare_parse(paths: list[Path]) -> int:
    """The baseline: protolib's own framing and the schema's parse, nothing else.

    Each message gets a fresh ``Node``, as a reader that keeps or hands out nodes must: upb
    allocates a message's fields in an arena that only grows, so reusing one ``Node`` across
    millions of parses would hold every parse's memory and make the baseline both slower and
    its memory figure meaningless."""
    count = 0
    node_cls = pb.Node
    for p in paths:
        f = protolib.openFileRd(str(p))
        protolib.decodeMessage(f, pb.GlobalMetadata())
        while True:
            node = node_cls()
            if not protolib.decodeMessage(f, node):
                break
            count += 1
        f.close()
    return count


# ---------------------------------------------------------------- ~1M-node set (own writer)


def _attrs(*attrs: pb.AttributeProto) -> bytes:
    return cio.serialize_attrs(attrs)


def write_mixed_set(directory: Path, ranks_x: int, ranks_y: int, nodes_per_rank: int) -> tuple[Path, Network, Path]:
    """Ring x Switch network; per rank a chain of compute, tensor-parallel all-reduces on named groups
    (one per row), all-rank all-gathers over dim 1 (involved_dim), and sends/receives to the next row.
    Node ids are offset per rank, so no two files are byte-identical."""
    net = Network("bench", (Dimension("tp", "Ring", ranks_x, 500.0), Dimension("pp", "Switch", ranks_y, 1000.0)))
    n = ranks_x * ranks_y
    F = lambda name, kind, v: cio.make_attr(name, kind, v)  # noqa: E731
    cpu = F("is_cpu_op", "bool_val", False)
    comp_attr = _attrs(cpu, F("num_ops", "int64_val", 2 * 10**12), F("tensor_size", "uint64_val", 3 * 10**9))
    ag_attr = _attrs(cpu, F("comm_type", "int64_val", 2), F("comm_size", "int64_val", 1 << 22),
                     F("involved_dim", "bool_list", [False, True]))
    groups = {str(y + 1): [x + ranks_x * y for x in range(ranks_x)] for y in range(ranks_y)}
    prefix = directory / "mixed"
    for r in range(n):
        y = r // ranks_x
        ar_attr = _attrs(cpu, F("comm_type", "int64_val", 0), F("comm_size", "int64_val", 1 << 24),
                         F("pg_name", "string_val", str(y + 1)))
        nxt, prv = (r + ranks_x) % n, (r - ranks_x) % n
        send_attr = _attrs(cpu, F("comm_src", "int32_val", r), F("comm_dst", "int32_val", nxt),
                           F("comm_tag", "int32_val", 1), F("comm_size", "int64_val", 1 << 20))
        recv_attr = _attrs(cpu, F("comm_src", "int32_val", prv), F("comm_dst", "int32_val", r),
                           F("comm_tag", "int32_val", 1), F("comm_size", "int64_val", 1 << 20))
        base = r * 10**7
        parts = [cio.encode_metadata()]
        for i in range(nodes_per_rank):
            nid = base + i + 1
            k = i % 8
            if k in (0, 2, 4, 6):
                head, tail = pb.Node(id=nid, name="gemm", type=pb.COMP_NODE, duration_micros=100 + k), comp_attr
            elif k in (1, 5):
                head, tail = pb.Node(id=nid, name="tp_allreduce", type=pb.COMM_COLL_NODE), ar_attr
            elif k == 3:
                head, tail = pb.Node(id=nid, name="allgather", type=pb.COMM_COLL_NODE), ag_attr
            elif y % 2 == 0:
                head, tail = pb.Node(id=nid, name="send", type=pb.COMM_SEND_NODE), send_attr
            else:
                head, tail = pb.Node(id=nid, name="recv", type=pb.COMM_RECV_NODE), recv_attr
            if i:
                head.data_deps.append(nid - 1)
            parts.append(cio.frame(head.SerializeToString() + tail))
        Path(f"{prefix}.{r}.et").write_bytes(b"".join(parts))
    gpath = directory / "mixed.groups.json"
    gpath.write_text(json.dumps(groups))
    return prefix, net, gpath


def fix_pairs(n_x: int, n_y: int) -> None:
    """Rows alternate send/recv; with an odd row count the last row would have no partner."""
    if n_y % 2:
        raise SystemExit("--rows must be even (rows pair up as sender/receiver)")


# ---------------------------------------------------------------- measurements


def timed(fn, *a, **kw):
    """CPU time of this process: on a shared machine wall time measures the neighbours."""
    t = time.process_time()
    out = fn(*a, **kw)
    return time.process_time() - t, out


def peak_rss_mib(code: str) -> float:
    """Peak RSS of a fresh interpreter running ``code`` (which ends by printing it, in kB)."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(res.stdout.strip().splitlines()[-1]) / 1024.0


TOOLS = str(Path(__file__).resolve().parent)
PRELUDE = ("import sys\n"
           f"sys.path.insert(0, {TOOLS!r})\n"
           "from pathlib import Path\n"
           "from libra_astra.model.network import load_network\n"
           "from libra_astra.demand.from_traces import demand_from_traces\n"
           "from bench_trace import bare_parse, rank_paths\n")
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the (large) parent process
RSS = ("print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n")


def rank_paths(prefix: Path, n: int) -> list[Path]:
    return [Path(f"{prefix}.{r}.et") for r in range(n)]


def bench_set(label: str, prefix: Path, net: Network, groups: Path | None, n_ranks: int,
              net_path: Path) -> dict:
    """Throughput of both sides (best of two, interleaved) and the peak memory of each in a
    fresh process; returns the figures (also printed)."""
    from libra_astra.demand.from_traces import demand_from_traces

    paths = rank_paths(prefix, n_ranks)
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    # warm the page cache and imports so both sides read from memory; best of two runs each,
    # interleaved, so a busy moment on a shared machine does not decide the ratio
    bare_parse(paths[:1])
    t_bare, t_dem = float("inf"), float("inf")
    for _ in range(2):
        t, nodes = timed(bare_parse, paths)
        t_bare = min(t_bare, t)
        t, (demand, summary) = timed(demand_from_traces, prefix, net, comm_groups=groups)
        t_dem = min(t_dem, t)
    assert summary.nodes_total == nodes, (summary.nodes_total, nodes)
    del demand
    base = peak_rss_mib(PRELUDE + "import numpy, chakra.schema.protobuf.et_def_pb2\n" + RSS)
    bare_mib = peak_rss_mib(PRELUDE + f"bare_parse(rank_paths(Path({str(prefix)!r}), {n_ranks}))\n" + RSS)
    dem_mib = peak_rss_mib(PRELUDE + f"demand_from_traces({str(prefix)!r}, load_network({str(net_path)!r}), "
                           f"comm_groups={str(groups) if groups else None!r})\n" + RSS)
    out = {"label": label, "ranks": n_ranks, "nodes": nodes, "size_mb": size_mb,
           "bare_s": t_bare, "demand_s": t_dem, "ratio": t_bare / t_dem,
           "bare_knodes_s": nodes / t_bare / 1e3, "demand_knodes_s": nodes / t_dem / 1e3,
           "imports_mib": base, "bare_peak_mib": bare_mib, "demand_peak_mib": dem_mib}
    print(f"\n{label}: {n_ranks:,} ranks, {nodes:,} nodes, {size_mb:.1f} MB of ET (CPU time)")
    print(f"  bare protolib parse   {t_bare:8.3f} s   {out['bare_knodes_s']:8.0f} k nodes/s   "
          f"peak {bare_mib:.0f} MiB")
    print(f"  demand extraction     {t_dem:8.3f} s   {out['demand_knodes_s']:8.0f} k nodes/s   "
          f"peak {dem_mib:.0f} MiB   ratio {out['ratio']:.2f} (target >= 0.9)")
    print(f"  {summary.files_decoded:,} distinct files decoded, {summary.programs:,} distinct programs; "
          f"interpreter + imports alone {base:.0f} MiB (peak target < 1024 MiB)")
    return out


def gpt_set(work: Path, layers: int, prefix: Path | None) -> tuple[Path, Network, Path]:
    """The 4,096-rank GPT-3 175B set (TP 16 x PP 8 x DP 32) with ``layers`` layers: generated
    into ``work``, or an existing one at ``prefix`` (from tools/gen_traces.py)."""
    import yaml

    from libra_astra.tracegen import generate

    spec_path = Path(__file__).resolve().parent.parent / "traces" / "large" / "gpt3_175b_4096.yml"
    spec = yaml.safe_load(spec_path.read_text())
    dims = spec["network"]["npus_per_dim"]
    net = Network("gpt4096", tuple(Dimension(f"d{i}", "Ring" if i == 0 else "Switch", n, 500.0)
                                   for i, n in enumerate(dims)))
    if prefix is not None:
        return prefix, net, Path(f"{prefix}.groups.json")
    spec["model"]["layers"] = layers
    spec["name"] = f"gpt3_{layers}l_4096"
    t_gen, gen = timed(generate, spec, work / "gpt" / "gpt3", True)
    print(f"\ngenerated the 4,096-rank GPT-3 set ({layers} layers) in {t_gen:.1f} s")
    return work / "gpt" / "gpt3", net, gen.groups_path


def add_set_options(ap: argparse.ArgumentParser) -> None:
    """The options naming the mixed and GPT-3 sets (tools/bench_emit.py takes them too)."""
    ap.add_argument("--nodes", type=int, default=1 << 20, help="nodes in the mixed set (default 1,048,576)")
    ap.add_argument("--cols", type=int, default=4, help="ranks along dim 0 of the mixed set")
    ap.add_argument("--rows", type=int, default=4, help="ranks along dim 1 of the mixed set (even)")
    ap.add_argument("--gpt-layers", type=int, help="transformer layers of the 4,096-rank set (default 8; with "
                    "--gpt-prefix, the layers of that set, for its label: default 96)")
    ap.add_argument("--gpt-prefix", help="use this existing 4,096-rank GPT-3 set (tools/gen_traces.py "
                    "traces/large/gpt3_175b_4096.yml, 9.8 M nodes) instead of generating one")
    ap.add_argument("--skip-mixed", action="store_true", help="skip the mixed set")
    ap.add_argument("--skip-4096", action="store_true", help="skip the 4,096-rank set")
    ap.add_argument("--workdir", help="generate here and keep the inputs (default: a temporary directory)")


@contextmanager
def workspace(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """--workdir (kept), or a temporary directory removed afterwards."""
    if args.workdir:
        work = Path(args.workdir)
        work.mkdir(parents=True, exist_ok=True)
        yield work
    else:
        with tempfile.TemporaryDirectory(prefix=f"{name}.") as tmp:
            yield Path(tmp)


def trace_sets(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, Path, Network, Path | None]]:
    """(label, prefix, network, groups file) of each set the options name, generated or found."""
    if not args.skip_mixed:
        n_ranks = args.cols * args.rows
        per_rank = max(8, args.nodes // n_ranks)
        t_gen, (prefix, net, groups) = timed(write_mixed_set, work, args.cols, args.rows, per_rank)
        print(f"generated the mixed set ({n_ranks} ranks x {per_rank:,} nodes) in {t_gen:.1f} s")
        yield "mixed set, every file distinct", prefix, net, groups
    if not args.skip_4096:
        layers = args.gpt_layers or (96 if args.gpt_prefix else 8)
        prefix, net, groups = gpt_set(work, layers, Path(args.gpt_prefix) if args.gpt_prefix else None)
        yield f"GPT-3 175B, {layers} layers", prefix, net, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_set_options(ap)
    ap.add_argument("--json", help="also write the figures to this JSON file (tools/readme_figures.py)")
    args = ap.parse_args()
    fix_pairs(args.cols, args.rows)
    results = []
    with workspace(args, "bench_trace") as work:
        for label, prefix, net, groups in trace_sets(args, work):
            net_path = work / f"{prefix.name}.net.yml"
            net_path.write_text(dump_network(net))
            results.append(bench_set(label, prefix, net, groups, net.npus_count, net_path))
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "trace", "sets": results}, indent=1) + "\n")

if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
