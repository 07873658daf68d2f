#!/usr/bin/env python3
"""Benchmark: `libra-astra predict` against the ASTRA-sim binary on the same inputs.

Per generated GPT-3 175B set (the LIBRA paper's layout, TP 16 on a package ring, PP on a
fully-connected node, DP on a switch, ``--layers`` layers) of 64 to 4,096 ranks: the set is
emitted as a run directory (a design at fixed bandwidths), then the binary and ``predict RUN_DIR``
each run as a child process under /usr/bin/time -v: their CPU time (user + system) and peak
memory (maximum resident set) side by side, the ratios binary / predict, and predict's error
against the simulated time. Sizes the binary would not finish in --max-binary-s (estimated from
the emitted node count: about 107 s and 1.5 KB per million nodes) are predicted only. The
project's bytecode is compiled once before the runs (into its __pycache__ directories, as pip
does on install), so predict is timed as an installed package runs, not compiling its sources.
Beside them, the floor: the CPU of a child that only starts the command (interpreter and imports)
and reads every rank file with the SHA-256 digest of the completion check; the binary's CPU over
the floor is the ceiling on the ratio that any reader of these files could reach on this machine.

``--prefix P --groups G --network N`` adds an existing set (such as the 96-layer 4,096-rank set
of traces/large/gpt3_175b_4096.yml), predicted from its own files with --bandwidth; the binary's
figures for it are the estimate.

    python tools/bench_predict.py                               # 64, 256, 1024, 4096 ranks, 8 layers
    python tools/bench_predict.py --sizes 64 256 --layers 4
    python tools/bench_predict.py --sizes 4096 --no-binary --workdir /tmp/bp   # predict alone, set kept
    python tools/bench_predict.py --sizes --prefix /tmp/gpt/gpt3 --groups /tmp/gpt/gpt3.groups.json \\
        --network network_configs/paper_3d.yml
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libra_astra.astra import emit, load_manifest  # noqa: E402
from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.astra.run import resolve_binary  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.model.network import network_from_dict  # noqa: E402
from libra_astra.optimize.design import Design, WorkloadRef  # noqa: E402
from libra_astra.tracegen.generate import generate  # noqa: E402

# (ranks, tp, pp, dp): the package ring stays 16 wide, as in the paper's network
SIZES = {64: (16, 2, 2), 256: (16, 4, 4), 1024: (16, 8, 8), 4096: (16, 8, 32)}
BW_GBPS = (200.0, 100.0, 50.0)
SEC_PER_MNODE, BYTES_PER_NODE = 107.0, 1500.0      # the binary, measured (docs/astra-sim.md)
PY = [sys.executable, "-c", "import sys; from libra_astra.cli import main; sys.argv[0] = 'libra-astra'; main()"]
# What predict cannot avoid, in a child of its own: the interpreter, the command's imports, and
# reading every rank file with the completion check's SHA-256 digest. Its CPU bounds the ratio
# any reader could reach on this machine.
FLOOR = [sys.executable, "-c", "import hashlib, sys; from libra_astra.cli import main; "
         "from libra_astra.cli.app import one_blas_thread; one_blas_thread(); import numpy; "
         "import libra_astra.astra.predict_inputs; from libra_astra.traces.files import read_file_bytes; "
         "[hashlib.sha256(read_file_bytes(p)).digest() for p in sys.argv[1:]]"]


def spec(ranks: int, layers: int) -> dict:
    tp, pp, dp = SIZES[ranks]
    return {"name": f"gpt3_{ranks}", "model": {
        "type": "transformer", "layers": layers, "hidden_size": 12288, "heads": 96, "seq_length": 2048,
        "vocab_size": 51200, "micro_batch": 1, "global_batch": 2 * dp * pp, "bytes_per_element": 2},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "sequence_parallel": True},
        "placement": {"tp": [0], "pp": [1], "dp": [2]}, "network": {"npus_per_dim": [tp, pp, dp]},
        "compute": {"tflops": 250}}


def network(ranks: int):
    tp, pp, dp = SIZES[ranks]
    return network_from_dict({"name": f"paper-{ranks}", "dimensions": [
        {"name": "package", "topology": "Ring", "npus": tp, "latency_ns": 100},
        {"name": "node", "topology": "FullyConnected", "npus": pp, "latency_ns": 500},
        {"name": "pod", "topology": "Switch", "npus": dp, "latency_ns": 1000}]})


def child_env() -> dict[str, str]:
    """The children's environment: the project on the path, and bytecode read from (and written
    to) the usual __pycache__ directories even where PYTHONDONTWRITEBYTECODE is set, as an
    installed package has it: no timed run pays for compiling the project's sources."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(ROOT)}


def compile_sources(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "libra_astra")], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def timed(cmd: list[str], cwd: Path | None = None, timeout: float | None = None,
          env: dict[str, str] | None = None) -> tuple[str, float, float]:
    """(stdout, CPU seconds, peak RSS in MB) of one child under /usr/bin/time -v."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env or {**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {proc.stderr[-800:]}")
    field = {k: float(v) for k, v in re.findall(r"^\s*(User time \(seconds\)|System time \(seconds\)|"
                                                  r"Maximum resident set size \(kbytes\)): ([\d.]+)$",
                                                  proc.stderr, re.M)}
    return (proc.stdout, field["User time (seconds)"] + field["System time (seconds)"],
            field["Maximum resident set size (kbytes)"] / 1024)


def node_count(run: Path) -> int:
    stats = load_manifest(run).workload_stats
    return int(stats.get("nodes_written", 0))


def floor_cpu(files: list[str], env: dict[str, str]) -> float:
    return timed([*FLOOR, *files], env=env)[1]


def row(label: str, ranks: int, nodes: int, sim: tuple | None, pred: tuple, floor_s: float, err: str) -> None:
    (pt, pcpu, prss) = pred
    if sim is None:
        scpu, srss = nodes / 1e6 * SEC_PER_MNODE, nodes * BYTES_PER_NODE / 2**20
        star = "~"
    else:
        _, scpu, srss = sim
        star = " "
    print(f"{label:<24} {ranks:>5} {nodes:>10,} {star}{scpu:>9.1f} {pcpu:>9.1f} {star}{scpu / pcpu:>7.1f}x "
          f"{floor_s:>7.2f} {star}{scpu / floor_s:>7.1f}x {star}{srss:>9.0f} {prss:>9.0f} {star}{srss / prss:>6.1f}x  {err}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=sorted(SIZES), choices=sorted(SIZES))
    ap.add_argument("--layers", type=int, default=8, help="transformer layers (a multiple of 8) [8]")
    ap.add_argument("--max-binary-s", type=float, default=900.0, help="skip the binary beyond this estimate [900]")
    ap.add_argument("--workdir", help="keep the sets and runs here (default: a temporary directory)")
    ap.add_argument("--prefix", help="an existing trace set to predict (with --groups and --network)")
    ap.add_argument("--groups")
    ap.add_argument("--network", help="its network (libra_astra's format; --bandwidth 200,100,50 is used)")
    ap.add_argument("--no-binary", action="store_true",
                    help="time predict only (the binary's figures are the estimate); no ASTRA_SIM_BIN needed")
    args = ap.parse_args()
    binary = None
    if not args.no_binary:
        try:
            binary = resolve_binary()       # $ASTRA_SIM_BIN, checked as simulate checks it
        except LibraError as e:
            print(e, file=sys.stderr)
            return 2
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_predict_"))
    work.mkdir(parents=True, exist_ok=True)
    env = child_env()
    compile_sources(env)
    print(f"{'set':<24} {'ranks':>5} {'ET nodes':>10} {'CPU s: sim':>10} {'predict':>9} {'ratio':>9} "
          f"{'floor':>7} {'ceiling':>8} {'RSS MB: sim':>11} {'predict':>9} {'ratio':>8}  predicted vs simulated")
    for ranks in args.sizes:
        prefix = work / f"gpt3_{ranks}" / "gpt3"
        if not prefix.with_suffix(".0.et").exists():
            generate(spec(ranks, args.layers), prefix, overwrite=True)
        net = network(ranks)
        run = work / f"run_{ranks}"
        groups = Path(f"{prefix}.groups.json")
        emit(Design(f"gpt3-{ranks}", net, BW_GBPS, workloads=(WorkloadRef("gpt3", traces=str(prefix),
                    comm_groups=str(groups) if groups.is_file() else None),)), run, overwrite=True)
        nodes = node_count(run)
        out, pcpu, prss = timed([*PY, "predict", str(run), "--json"], env=env)
        pred = json.loads(out)
        sim, err = None, "binary not run (estimate)"
        if binary is not None and nodes / 1e6 * SEC_PER_MNODE <= args.max_binary_s:
            m = load_manifest(run)
            sim = timed([binary, *m.simulator.args, f"--logging-folder={run / 'log'}"], cwd=run)
            ranks_out = {r.rank: r.finished_ns for r in parse_output(sim[0]).ranks}
            worst = max(abs(p["finished_ns"] - ranks_out[p["rank"]]) / ranks_out[p["rank"]] for p in pred["ranks"])
            err = f"{pred['time_ns']:,} vs {max(ranks_out.values()):,} ns; largest rank error {worst:.4%}"
        files = [str(p) for p in sorted((run / "workload").glob("*.et"))]
        row(f"gpt3 {args.layers}L", ranks, nodes, sim, (pred["time_ns"], pcpu, prss), floor_cpu(files, env), err)
    if args.prefix:
        out, pcpu, prss = timed([*PY, "predict", args.prefix, "--network-configuration", args.network,
                                 "--bandwidth", ",".join(map(str, BW_GBPS)), "--system-configuration",
                                 str(_system(work)), *(["--comm-group-configuration", args.groups] if args.groups else []),
                                 "--json"], env=env)
        pred = json.loads(out)
        nodes = pred["et_nodes"]
        files = [str(p) for p in Path(args.prefix).parent.glob(Path(args.prefix).name + ".*.et*")]
        row(Path(args.prefix).name + " (given)", len(pred["ranks"]), nodes, None, (pred["time_ns"], pcpu, prss),
            floor_cpu(files, env), "binary not run (estimate)")
    print("~: the binary's figure estimated from the node count (about 107 s and 1.5 KB per million nodes)")
    print("floor: CPU s of starting the command and reading every rank file with its SHA-256 check, nothing "
          "decoded; ceiling: the binary's CPU / floor, the most any reader of these files could reach")
    return 0


def _system(work: Path) -> Path:
    p = work / "system.json"
    ring = ["ring"] * 3
    p.write_text(json.dumps({"scheduling-policy": "LIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1,
                             "preferred-dataset-splits": 1, "collective-optimization": "localBWAware",
                             "local-mem-bw": 1e9, "all-reduce-implementation": ring, "all-gather-implementation": ring,
                             "reduce-scatter-implementation": ring, "all-to-all-implementation": ring}))
    return p


if __name__ == "__main__":
    sys.exit(main())
