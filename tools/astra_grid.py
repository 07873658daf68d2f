#!/usr/bin/env python3
"""ASTRA-sim against libra_astra.timing.astra_collective over a grid of system.json settings.

Each case is a small network (1-3 dimensions of Ring/FullyConnected/Switch, 2-8 NPUs each) on
which every rank runs one collective, or a chain of two or three, written as Chakra ET with
libra_astra's own writer. The full grid (every implementation x AR/RS/AG/A2A x 1-3 dimensions x
topologies x splits {1,2,4} x active chunks {1,2} x LIFO/FIFO x localBWAware/baseline x
endpoint-delay {1,10} x local-mem-bw {50,1600}, plus --num-queues-per-dim {1,2}, mixed
per-dimension implementations, dimensions left out by involved_dim and chains) has about 10^6
points; this tool draws ``--samples`` of them, each factor independently and uniformly (seeded;
halving-doubling and trees get power-of-two dimensions, and a halving-doubling all-to-all, which
ASTRA-sim refuses, is redrawn), and prints, for every value of every factor, the number of cases
and the largest relative error over ranks of the prediction. Cases the model refuses are run too,
to show that ASTRA-sim does not complete them either.

With ``--backend aware`` the cases are one-dimensional (the congestion-aware backend's limit:
Ring/FullyConnected/Switch of 2-16 NPUs) and the model is libra_astra.timing.astra_aware; give
that backend's binary (``AstraSim_Analytical_Congestion_Aware``) with --binary or ASTRA_SIM_AWARE_BIN.

Usage: ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware python tools/astra_grid.py
       [--samples 300] [--seed 1] [--jobs 2] [--record tests/fixtures/astra_recorded_settings.json]
       [--record-count 40] [--backend unaware|aware]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.timing.astra_aware import aware_rank_finish_ns  # noqa: E402
from libra_astra.timing.astra_collective import Coll, Link, astra_bw_gbps, rank_finish_ns  # noqa: E402
from libra_astra.timing.astra_settings import IMPLEMENTATION_KEYS, settings_from_json  # noqa: E402
from libra_astra.traces import chakra_io as cio  # noqa: E402

IMPLS = ["ring", "direct", "direct2", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect",
         "oneHalvingDoubling"]
KINDS = ["ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL"]
TOPOLOGIES = ["Ring", "FullyConnected", "Switch"]
BINARY_NAMES = {"unaware": "astra-sim 518bd51 congestion-unaware", "aware": "astra-sim 518bd51 congestion-aware"}
AWARE_ENV = "ASTRA_SIM_AWARE_BIN"


def sample_case(rng: random.Random, backend: str = "unaware") -> dict:
    """One grid point (factors drawn independently), with the inputs written as ASTRA-sim reads them."""
    dims = 1 if backend == "aware" else rng.choice([1, 2, 3])
    impl = rng.choice(IMPLS)
    kind = rng.choice(KINDS)
    if impl.endswith("alvingDoubling") and kind == "ALL_TO_ALL":
        kind = rng.choice(KINDS[:3])          # ASTRA-sim exits: no halving-doubling all-to-all
    power2 = impl.endswith("alvingDoubling") or impl == "doubleBinaryTree"
    sizes = [2, 4, 8, 16] if backend == "aware" else [2, 4, 8]
    npus = [rng.choice(sizes if power2 or dims == 3 else sizes + [3, 6]) for _ in range(dims)]
    while dims == 3 and npus[0] * npus[1] * npus[2] > 64:
        npus = [rng.choice([2, 4]) for _ in range(dims)]
    mixed = dims > 1 and rng.random() < 0.25 and not impl.startswith("one")
    names = [rng.choice([impl, "ring", "direct"]) if mixed and d else impl for d in range(dims)]
    if any(n in ("halvingDoubling", "doubleBinaryTree") for n in names) and not power2:
        names = [impl] * dims
    system = {
        "scheduling-policy": rng.choice(["LIFO", "FIFO"]),
        "collective-optimization": rng.choice(["localBWAware", "baseline"]),
        "preferred-dataset-splits": rng.choice([1, 2, 4]),
        "active-chunks-per-dimension": rng.choice([1, 2]),
        "endpoint-delay": rng.choice([1, 10]),
        "local-mem-bw": rng.choice([50, 1600]),
        "roofline-enabled": 0, "peak-perf": 1000,
    }
    for key in IMPLEMENTATION_KEYS.values():
        system[key] = list(names)
    if kind == "ALL_TO_ALL":
        system["all-to-all-implementation"] = [n if "alving" not in n else "ring" for n in names]
    network = {"topology": [rng.choice(TOPOLOGIES) for _ in range(dims)], "npus_count": npus,
               "bandwidth": [rng.choice([25.0, 50.0, 100.0, 12.5 * rng.randint(1, 30)]) for _ in range(dims)],
               "latency": [rng.choice([0.0, 100.0, 500.0, 700.0]) for _ in range(dims)]}
    queues = rng.choice([1, 1, 2])
    count = 1 if rng.random() < 0.75 else rng.choice([2, 3])
    colls = []
    for i in range(count):
        k = kind if i == 0 else rng.choice(KINDS[:3] if power2 else KINDS)
        size = rng.choice([1 << 16, 1 << 20, 3 << 18, rng.randint(1 << 12, 1 << 21)])
        involved = [True] * dims
        if dims > 1 and rng.random() < 0.2:
            involved[rng.randrange(dims)] = False
        colls.append([k, size, involved])
    return {"network": network, "system": system, "collectives": colls, "queues_per_dim": queues, "backend": backend,
            "factors": {"implementation": impl, "kind": kind, "dims": dims, "mixed": mixed, "queues": queues,
                        "topologies": "/".join(sorted(set(network["topology"]))), "chain": count,
                        **{k: system[k] for k in ("preferred-dataset-splits", "active-chunks-per-dimension",
                                                  "scheduling-policy", "collective-optimization",
                                                  "endpoint-delay", "local-mem-bw")}}}


def predict(case: dict) -> tuple[int, ...]:
    """The module's finish time of every rank."""
    net = case["network"]
    links = [Link(t, n, astra_bw_gbps(b), lat) for t, n, b, lat in
             zip(net["topology"], net["npus_count"], net["bandwidth"], net["latency"])]
    colls = [Coll(k, s, tuple(inv)) for k, s, inv in case["collectives"]]
    timer = aware_rank_finish_ns if case.get("backend") == "aware" else rank_finish_ns
    return timer(colls, links, settings_from_json(case["system"], queues_per_dim=case["queues_per_dim"]))


def simulate(case: dict, binary: str) -> tuple[list[int], list[str]]:
    """Per-rank finish times and the ``finished`` lines of the binary's standard output."""
    net = case["network"]
    npus = 1
    for n in net["npus_count"]:
        npus *= n
    with tempfile.TemporaryDirectory(prefix="astra_grid_") as tmp:
        d = Path(tmp)
        (d / "network.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in net.items()))
        (d / "system.json").write_text(json.dumps(case["system"]))
        (d / "memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
        nodes = [cio.coll_node(i, f"c{i}", k, s, involved_dim=inv, ctrl_deps=[i - 1] if i else [])
                 for i, (k, s, inv) in enumerate(case["collectives"])]
        for r in range(npus):
            cio.write_et(d / f"w.{r}.et", nodes)
        (d / "log").mkdir()
        out = subprocess.run([binary, f"--workload-configuration={d}/w", f"--system-configuration={d}/system.json",
                              f"--remote-memory-configuration={d}/memory.json",
                              f"--network-configuration={d}/network.yml", f"--logging-folder={d}/log",
                              f"--num-queues-per-dim={case['queues_per_dim']}"],
                             capture_output=True, text=True, timeout=120)
    parsed = parse_output(out.stdout)
    if out.returncode != 0 or len(parsed.ranks) != npus:
        raise RuntimeError(f"exit {out.returncode}, {len(parsed.ranks)} of {npus} ranks finished: "
                           f"{out.stdout[-300:]}{out.stderr[-300:]}")
    lines = [ln for ln in out.stdout.splitlines() if "finished," in ln]
    return [r.finished_ns for r in parsed.ranks], lines


def pick_records(results: list[dict], count: int) -> list[dict]:
    """Up to ``count`` cases of at most 16 NPUs, first those that add a factor value (or an
    implementation and kind pair) not yet kept."""
    small = [r for r in results if len(r["finished_ns"]) <= 16]
    kept: list[dict] = []
    seen: set = set()
    for r in small:
        f = r["factors"]
        new = {(k, str(v)) for k, v in f.items()} | {("pair", f["implementation"], f["kind"])}
        new -= seen
        if new and len(kept) < count:
            kept.append(r)
            seen |= new
    kept += [r for r in small if r not in kept][:count - len(kept)]
    return kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="default: $ASTRA_SIM_BIN, with --backend aware $ASTRA_SIM_AWARE_BIN")
    ap.add_argument("--backend", choices=sorted(BINARY_NAMES), default="unaware")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--record", type=Path, help="write the first --record-count cases and outputs here")
    ap.add_argument("--record-count", type=int, default=40)
    args = ap.parse_args()
    args.binary = args.binary or os.environ.get(AWARE_ENV if args.backend == "aware" else "ASTRA_SIM_BIN")
    if not args.binary:
        ap.error(f"give --binary or set {AWARE_ENV if args.backend == 'aware' else 'ASTRA_SIM_BIN'}")
    rng = random.Random(args.seed)
    cases = [sample_case(rng, args.backend) for _ in range(args.samples)]

    def one(case: dict) -> dict:
        try:
            predicted = predict(case)
        except LibraError as e:
            try:                        # a refusal must be a run ASTRA-sim does not complete either
                simulate(case, args.binary)
                return {**case, "refused": str(e), "astra": "completed"}
            except (RuntimeError, subprocess.TimeoutExpired) as fail:
                return {**case, "refused": str(e), "astra": f"failed too ({str(fail)[:60]})"}
        try:
            finished, lines = simulate(case, args.binary)
        except (RuntimeError, subprocess.TimeoutExpired) as fail:     # a run the model times, the binary not
            return {**case, "refused": "(predicted)", "astra": f"crashed ({str(fail)[:80]!r} ...)"}
        err = max(abs(p / f - 1) for p, f in zip(predicted, finished))
        return {**case, "predicted_ns": max(predicted), "simulated_ns": max(finished), "error": err,
                "exact": list(predicted) == finished, "finished_ns": finished, "stdout_finished": lines}
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one, cases))
    worst: dict = defaultdict(lambda: [0, 0.0])
    exact = 0
    for r in results:
        if "refused" in r:
            print(f"refused: {r['refused']} -- ASTRA-sim {r['astra']}" if r["refused"] != "(predicted)" else
                  f"predicted but ASTRA-sim {r['astra']}: {json.dumps(r['factors'])} {json.dumps(r['network'])} "
                  f"{json.dumps(r['collectives'])}")
            continue
        err = r["error"]
        exact += r["exact"]
        for k, v in r["factors"].items():
            w = worst[(k, str(v))]
            w[0] += 1
            w[1] = max(w[1], err)
        if not r["exact"]:
            print(f"mismatch (largest rank error {err:.3e}): slowest rank predicted {r['predicted_ns']} simulated "
                  f"{r['simulated_ns']} "
                  f"{json.dumps(r['factors'])} {json.dumps(r['network'])} {json.dumps(r['collectives'])}")
    ran = [r for r in results if "refused" not in r]
    print(f"\n{len(ran)} cases simulated, {exact} exact to the ns on every rank, {len(results) - len(ran)} refused "
          "by the model")
    print(f"{'factor':28} {'value':34} {'cases':>5} {'max |error| over ranks':>22}")
    for (k, v), (n, e) in sorted(worst.items()):
        print(f"{k:28} {v:34} {n:5d} {e:22.3e}")
    if args.record:
        keep = [{k: r[k] for k in ("network", "system", "collectives", "queues_per_dim", "stdout_finished")}
                for r in pick_records(ran, args.record_count)]
        args.record.write_text(json.dumps({
            "recorded_with": BINARY_NAMES[args.backend], "command": f"tools/astra_grid.py --backend {args.backend} "
            f"--samples {args.samples} --seed {args.seed} --record-count {args.record_count}", "cases": keep},
            indent=1) + "\n")
        print(f"recorded {len(keep)} cases in {args.record}")
    return 0 if exact == len(ran) else 1


if __name__ == "__main__":
    sys.exit(main())
