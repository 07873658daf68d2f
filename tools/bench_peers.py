#!/usr/bin/env python3
"""Benchmark: optimize end to end against CVXPY with Clarabel and ECOS on the same problems.

Problems: the families of tools/bench_newton.py (random, unmergeable, pipelined; 3 and 8
dimensions; 100 to 100k collectives), objective perf under a total-bandwidth equality and
per-dimension bounds (bw_min_gbps, bw_max_gbps in the network).

End to end means from the demand to the bandwidths: ours is ``optimize`` (model build, solve,
certificate; no baselines). A peer gets the same model rows, built by our vectorized row builder
(``timing.model.class_rows``, on a copy of the class so nothing is cached; one term per collective,
as a modelling layer would write it), builds the CVXPY problem in epigraph form (u >= 1/B,
t_k >= A_k u + g_k, z >= compute + sum count_k t_k) and solves it. Printed per problem: CPU seconds
of each, the ratio peer / ours (> 1: we are faster), the relative difference of the peer's time at
its bandwidths (re-evaluated by the time model) to our optimum (> 0: ours is better), and our
certified relative gap. Each side is timed --repeat times (default 3; at least 10 times up to 1k
collectives, once from 100k up) and its best counts: single runs of a few ms swing by tens of
percent with the neighbours' load. The sides take turns run by run (ours, then each peer), so a
drift of the machine's speed hits both alike. Each turn gets a freshly generated demand, so
nothing cached by an earlier run is reused.
Times are CPU seconds of this process (BLAS held to one thread, the peers
single-threaded); the load average is printed at the start and the end, since the 2-core machine
is shared. ``--json FILE`` writes the figures for tools/readme_figures.py.

Needs the optional benchmark dependencies (never needed to run libra_astra)::

    pip install -e ".[bench]"        # or: pip install -r tools/requirements-bench.txt
    python tools/bench_peers.py --sizes 100,1000,10000
    python tools/bench_peers.py --peers CLARABEL --sizes 100,1000,10000,100000 --json /tmp/peers.json

BLAS is held to one thread. Prints figures; asserts nothing.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before numpy loads its BLAS

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from dataclasses import replace

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_newton import FAMILIES, network  # noqa: E402

from libra_astra.demand import synthetic  # noqa: E402
from libra_astra.model.cost import load_cost  # noqa: E402
from libra_astra.model.network import network_from_dict  # noqa: E402
from libra_astra.optimize.optimizer import Constraints, Workload, evaluate, optimize  # noqa: E402
from libra_astra.timing.model import class_rows  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("CLARABEL", "ECOS")


def bounded(net, total: float):
    """The network with per-dimension bounds: at least 5% and at most 60% of the total each."""
    d = net.to_dict()
    for dim in d["dimensions"]:
        dim["bw_min_gbps"] = 0.05 * total / net.num_dims
        dim["bw_max_gbps"] = 0.6 * total
    return network_from_dict(d)


def peer_solve(cp, solver: str, dem, net, model, total: float):
    """Build the rows and the CVXPY problem from the demand, solve; (bandwidths, status)."""
    D = net.num_dims
    (rc,) = dem.rank_classes              # one class in these families
    comp = rc.compute_time_ns
    A, g, starts = class_rows(replace(rc), net, model)     # a copy: rows not cached from our run
    counts = [c.count for c in rc.collectives]
    K = len(counts)
    owner = np.repeat(np.arange(K), np.diff(np.r_[starts, A.shape[0]]))
    # Same units as ours would use: GB/s scaled by the mean, ns by the equal-split time.
    b0 = total / D
    t0 = max(float(comp + np.asarray(counts) @ np.maximum.reduceat(A @ np.full(D, 1 / b0) + g,
                                                                   np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]))),
             1.0)
    S = sp.csr_matrix((np.ones(owner.shape[0]), (np.arange(owner.shape[0]), owner)), shape=(owner.shape[0], K))
    B = cp.Variable(D)
    u = cp.Variable(D)
    t = cp.Variable(K)
    lo = np.array([d.bw_min_gbps for d in net.dims]) / b0
    hi = np.array([d.bw_max_gbps for d in net.dims]) / b0
    cons = [u >= cp.inv_pos(B), (A / (b0 * t0)) @ u + g / t0 <= S @ t, cp.sum(B) == total / b0, B >= lo, B <= hi]
    prob = cp.Problem(cp.Minimize(comp / t0 + np.asarray(counts) @ t), cons)
    prob.solve(solver=solver)
    return (None if B.value is None else B.value * b0), prob.status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="comma-separated collective counts (100000 works, slowly)")
    ap.add_argument("--dims", default="3,8")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each side below 100k collectives (at least 10 up to 1k); the best counts "
                         "(default 3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated demands (default 1, as in docs/benchmarks.md)")
    ap.add_argument("--json", help="also write the figures to this JSON file (tools/readme_figures.py)")
    args = ap.parse_args()
    try:
        import cvxpy as cp
    except ImportError:
        sys.exit("needs the benchmark extra: pip install -e '.[bench]' (cvxpy, clarabel, ecos)")
    peers = args.peers.split(",")
    cost = load_cost(ROOT / "network_configs" / "cost.yml")
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} (1 min), {load_start[1]:.2f} (5 min); {os.cpu_count()} cores")
    head = f"{'family':<12}{'D':>2}{'colls':>8} | {'ours s':>8}{'gap':>9}"
    for name in peers:
        head += f" | {name[:8] + ' s':>10}{'ratio':>7}{'+obj':>9}"
    print(head)
    print("-" * len(head))
    ratios: dict = {name: {} for name in peers}
    records = []
    for fam in args.families.split(","):
        model = FAMILIES[fam]
        for D in (int(x) for x in args.dims.split(",")):
            total = 100.0 * D
            net = bounded(network(D), total)
            for n in (int(x) for x in args.sizes.split(",")):
                # a few ms swing by tens of percent with the neighbours' load: the smallest run more
                runs = 1 if n >= 100_000 else max(args.repeat, 10) if n <= 1000 else args.repeat
                # The sides take turns, run by run: the machine's speed drifts (by up to 2x over a
                # day), and a block of our runs then a block of theirs would time them at different
                # speeds.
                ours = float("inf")
                theirs = dict.fromkeys(peers, float("inf"))
                answer: dict = {}
                for _ in range(runs):
                    dem = synthetic.random_demand(net, n, seed=args.seed)     # fresh: no cache of a previous run
                    w = [Workload(dem)]
                    t = time.process_time()
                    r = optimize(w, net, cost, constraints=Constraints(total), model=model, baselines=False)
                    ours = min(ours, time.process_time() - t)
                    for name in peers:
                        if name in answer and answer[name][0] is None:
                            continue                    # it failed once: no more turns
                        t = time.process_time()
                        try:
                            answer[name] = peer_solve(cp, name, dem, net, model, total)
                        except cp.error.SolverError as e:
                            answer[name] = (None, f"error: {e}")
                        theirs[name] = min(theirs[name], time.process_time() - t)
                rec = {"family": fam, "dims": D, "collectives": n, "ours_s": ours, "rel_gap": r.rel_gap,
                       "certified": bool(r.success), "newton_steps": r.newton_steps, "peers": {}}
                line = f"{fam:<12}{D:>2}{n:>8} | {ours:>8.3f}{r.rel_gap:>9.1e}"
                for name in peers:
                    bw, status = answer[name]
                    if bw is None:
                        rec["peers"][name] = {"s": theirs[name], "status": status}
                        line += f" | {theirs[name]:>10.3f}{'':>7}{status[:9]:>9}"
                        continue
                    bw = np.clip(bw, [d.bw_min_gbps for d in net.dims], None)
                    val = evaluate(w, net, cost, bw, model=model).time_ns
                    ratio = theirs[name] / ours
                    ratios[name].setdefault(fam, []).append(ratio)
                    rec["peers"][name] = {"s": theirs[name], "ratio": ratio, "status": status,
                                          "objective_excess": (val - r.fun) / r.fun}
                    line += f" | {theirs[name]:>10.3f}{ratio:>7.2f}{(val - r.fun) / r.fun:>9.1e}"
                records.append(rec)
                print(line, flush=True)
    load_end = os.getloadavg()
    print()
    print("ours s / peer s: CPU seconds end to end; ratio: peer / ours (> 1: ours faster); +obj: (peer's time at")
    print("its bandwidths - our optimum) / our optimum; gap: our certified relative duality gap.")
    for name in peers:
        for fam, rs in ratios[name].items():
            print(f"{name:<9} {fam:<12} ratio peer/ours: median {statistics.median(rs):.2f}, min {min(rs):.2f}")
    print(f"load average at end: {load_end[0]:.2f} (1 min), {load_end[1]:.2f} (5 min)")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "peers", "cores": os.cpu_count(), "repeat": args.repeat,
                                               "turns": True, "seed": args.seed,
                                               "load_start": load_start[:2],
                                               "load_end": load_end[:2], "problems": records}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
