#!/usr/bin/env python3
"""A LIBRA-style study: optimal bandwidth on the paper's 3D and 4D networks for GPT-3-like and
ResNet-50-like per-layer demands, both objectives, against EqualBW with the same total.

Usage: python tools/libra_study.py [--total-bw 500]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network
from libra_astra.optimize.optimizer import Constraints, Workload, optimize
from libra_astra.demand.synthetic import gpt3_demand, resnet50_demand

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total-bw", type=float, default=500.0, help="GB/s per NPU over all dimensions")
    args = ap.parse_args()
    cost = load_cost(ROOT / "network_configs/cost.yml")
    print("| network | workload | objective | GB/s per dimension | speedup over EqualBW | perf/cost gain |")
    print("|---|---|---|---|---|---|")
    for netf in ("paper_3d", "paper_4d"):
        net = load_network(ROOT / f"network_configs/{netf}.yml")
        for name, d in (("GPT-3, 18 layers", gpt3_demand(net)), ("ResNet-50", resnet50_demand(net))):
            for obj in ("perf", "perf-per-cost"):
                r = optimize([Workload(d)], net, cost, objective=obj, constraints=Constraints(args.total_bw))
                e = r.baselines["EqualBW"]
                bw = ", ".join(f"{b:.1f}" for b in r.bw_gbps)
                print(f"| {netf} | {name} | {obj} | {bw} | x{e.time_ns / r.best.time_ns:.2f} | "
                      f"x{e.time_cost_ns_usd / r.best.time_cost_ns_usd:.2f} |")


if __name__ == "__main__":
    main()
