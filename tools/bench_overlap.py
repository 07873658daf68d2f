#!/usr/bin/env python3
"""Benchmark: ``optimize`` with the dependency-aware time (overlap) against the no-overlap optimize
of the same demand, in one run (CPU time of this process, best of --repeat runs each).

The overlap optimize seeds its critical paths with the no-overlap optimum, replays the joint graph
of all rank classes once per evaluation and adds paths until the optimum's are in the problem,
then evaluates the baselines; its cost is printed as a ratio to the no-overlap optimize (target
<= 3 on the 4,096-rank GPT-3 175B set). Each run loads the demand afresh, as a command does, so
building the joint graph is counted. The replay's pass and walk run compiled where the install built
timing/_fixed_pass.pyx (LIBRA_ASTRA_PYTHON_PASS=1 times the Python loops); the output says which.

    python tools/gen_traces.py traces/large/gpt3_175b_4096.yml --out /tmp/gpt/gpt3
    libra-astra demand /tmp/gpt/gpt3 -n network_configs/paper_3d.yml -o /tmp/gpt.demand.json
    python tools/bench_overlap.py /tmp/gpt.demand.json --network network_configs/paper_3d.yml
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

from libra_astra.demand.types import load_demand
from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network
from libra_astra.optimize.optimizer import Constraints, Workload, optimize
from libra_astra.timing import fixed_order
from libra_astra.timing.model import TimeModel

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("demand", help="demand JSON (libra-astra demand -o)")
    ap.add_argument("--network", default=str(ROOT / "network_configs/paper_3d.yml"))
    ap.add_argument("--cost", default=str(ROOT / "network_configs/cost.yml"))
    ap.add_argument("--total-bw", type=float, default=300.0)
    ap.add_argument("--splits", type=int, default=4, help="chunks per collective of the pipelined model")
    ap.add_argument("--repeat", type=int, default=10, help="runs of each side, interleaved; the fastest counts "
                    "(default 10: single runs of tens of ms swing by tens of percent on a shared machine)")
    ap.add_argument("--json", help="also write the figures to this JSON file (tools/readme_figures.py)")
    args = ap.parse_args()
    net, cost = load_network(args.network), load_cost(args.cost)
    cons = Constraints(total_bw_gbps=args.total_bw)
    best = {False: float("inf"), True: float("inf")}
    results = {}
    for _ in range(args.repeat):
        for overlap in (False, True):  # interleaved, so a busy moment does not decide the ratio
            w = [Workload(load_demand(args.demand))]
            model = TimeModel("pipelined", splits=args.splits, overlap=overlap)
            gc.collect()       # the previous run's garbage is not this run's to collect
            t = time.process_time()
            results[overlap] = optimize(w, net, cost, constraints=cons, model=model)
            best[overlap] = min(best[overlap], time.process_time() - t)
    d = load_demand(args.demand)
    nodes = sum(len(rc.dag.nodes) for rc in d.rank_classes if rc.dag is not None)
    colls = sum(len(rc.collectives) for rc in d.rank_classes)
    # (a tree from before the compiled pass has only the Python loop)
    replay_pass = "compiled" if getattr(fixed_order, "_kernel", None) is not None else "Python"
    print(f"{Path(args.demand).name}: {len(d.rank_classes)} rank classes, {nodes:,} DAG nodes, {colls:,} collectives "
          f"(replay pass: {replay_pass})")
    for overlap in (False, True):
        r = results[overlap]
        print(f"  optimize {'--overlap   ' if overlap else '--no-overlap'}  {best[overlap]:7.3f} s CPU   "
              f"time {r.fun / 1e9:.4f} s   gap {r.rel_gap:.1e}   {r.message}")
    ratio = best[True] / best[False]
    print(f"  overlap / no-overlap: {ratio:.2f} (target <= 3)")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "overlap", "demand": Path(args.demand).name,
                                               "classes": len(d.rank_classes), "nodes": nodes,
                                               "no_overlap_s": best[False], "overlap_s": best[True],
                                               "ratio": ratio, "replay_pass": replay_pass}, indent=1) + "\n")


if __name__ == "__main__":
    main()
