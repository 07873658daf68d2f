#!/usr/bin/env python3
"""Communicator-group collectives on ASTRA-sim's congestion-aware binary against ``libra-astra
predict --backend aware``.

Each case: a Switch or FullyConnected network of 4, 8 or 16 NPUs split into groups (two halves,
even and odd ranks, or pairs), written as ASTRA-sim's --comm-group-configuration; every rank runs
one collective on its group (ring, direct, direct2 or halvingDoubling; any kind; settings drawn as
in tools/astra_grid.py), then, in some cases, a 1 MiB all-reduce on every rank. The traces are
written with libra_astra's Chakra writer; the prediction reads them as `predict` does. Prints the
cases that differ and the count exact to the ns on every rank.

Usage: ASTRA_SIM_AWARE_BIN=/path/to/AstraSim_Analytical_Congestion_Aware python tools/astra_aware_groups.py
       [--samples 250] [--seed 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.astra.predict_inputs import SimInputs, predict_inputs  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.traces import chakra_io as cio  # noqa: E402

AWARE_ENV = "ASTRA_SIM_AWARE_BIN"
KINDS = ["ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL"]


def sample_case(rng: random.Random) -> dict:
    topology, n = rng.choice(["Switch", "FullyConnected"]), rng.choice([4, 8, 16])
    pattern = rng.choice(["halves", "strided", "pairs"])
    groups = {"halves": {1: list(range(n // 2)), 2: list(range(n // 2, n))},
              "strided": {1: list(range(0, n, 2)), 2: list(range(1, n, 2))},
              "pairs": {i + 1: [2 * i, 2 * i + 1] for i in range(n // 2)}}[pattern]
    impl = rng.choice(["ring", "direct", "direct2", "halvingDoubling"])
    kind = rng.choice(KINDS[:3] if impl == "halvingDoubling" else KINDS)
    system = {"scheduling-policy": "LIFO", "collective-optimization": rng.choice(["localBWAware", "baseline"]),
              "preferred-dataset-splits": rng.choice([1, 2, 4]), "active-chunks-per-dimension": rng.choice([1, 2]),
              "endpoint-delay": rng.choice([1, 10]), "local-mem-bw": rng.choice([50, 1600]),
              "roofline-enabled": 0, "peak-perf": 1000}
    for k in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all"):
        system[f"{k}-implementation"] = ["ring" if k == "all-to-all" and impl == "halvingDoubling" else impl]
    network = {"topology": [topology], "npus_count": [n], "bandwidth": [rng.choice([50.0, 100.0, 400.0])],
               "latency": [rng.choice([0.0, 100.0, 936.25])]}
    return {"network": network, "system": system, "groups": groups, "kind": kind,
            "size": rng.choice([1 << 16, 1 << 20, 3 << 18]), "then_all": rng.random() < 0.4,
            "queues_per_dim": rng.choice([1, 1, 2]), "factors": [topology, n, pattern, impl, kind]}


def write_inputs(case: dict, d: Path) -> None:
    (d / "network.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in case["network"].items()))
    (d / "system.json").write_text(json.dumps(case["system"]))
    (d / "memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    cio.write_comm_groups(d / "groups.json", case["groups"])
    for r in range(case["network"]["npus_count"][0]):
        gid = next(g for g, m in case["groups"].items() if r in m)
        nodes = [cio.coll_node(0, "group", case["kind"], case["size"], pg_name=str(gid))]
        if case["then_all"]:
            nodes.append(cio.coll_node(1, "all", "ALL_REDUCE", 1 << 20, ctrl_deps=[0]))
        cio.write_et(d / f"w.{r}.et", nodes)


def compare(case: dict, binary: str) -> tuple[list[int] | str, list[int] | str]:
    """(each rank's simulated finish time or why not, the predicted ones or the refusal)."""
    with tempfile.TemporaryDirectory(prefix="astra_groups_") as tmp:
        d = Path(tmp)
        write_inputs(case, d)
        (d / "log").mkdir()
        out = subprocess.run([binary, f"--workload-configuration={d}/w", f"--system-configuration={d}/system.json",
                              f"--remote-memory-configuration={d}/memory.json",
                              f"--network-configuration={d}/network.yml", f"--comm-group-configuration={d}/groups.json",
                              f"--logging-folder={d}/log", f"--num-queues-per-dim={case['queues_per_dim']}"],
                             capture_output=True, text=True, timeout=120)
        sim = [r.finished_ns for r in parse_output(out.stdout).ranks] if out.returncode == 0 else \
            f"exit {out.returncode}"
        case["stdout_finished"] = [ln for ln in out.stdout.splitlines() if "finished," in ln]
        try:
            pred = predict_inputs(SimInputs(f"{d}/w", f"{d}/network.yml", f"{d}/system.json", f"{d}/groups.json",
                                            case["queues_per_dim"], backend="aware")).prediction
            got: list[int] | str = [r.finished_ns for r in pred.ranks]
        except LibraError as e:
            got = f"refused: {e}"
    return sim, got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get(AWARE_ENV))
    ap.add_argument("--samples", type=int, default=250)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--record", type=Path, help="write the first --record-count exact cases and outputs here")
    ap.add_argument("--record-count", type=int, default=12)
    args = ap.parse_args()
    if not args.binary:
        ap.error(f"give --binary or set {AWARE_ENV}")
    rng = random.Random(args.seed)
    exact = compared = 0
    keep = []
    for case in (sample_case(rng) for _ in range(args.samples)):
        sim, pred = compare(case, args.binary)
        if isinstance(sim, list) and isinstance(pred, list):
            compared += 1
            exact += sim == pred
            if sim == pred:
                keep.append(case)
                continue
        print(f"differs: {case['factors']} splits {case['system']['preferred-dataset-splits']} active chunks "
              f"{case['system']['active-chunks-per-dimension']} queues {case['queues_per_dim']}: simulated "
              f"{str(sim)[:60]} predicted {str(pred)[:100]}")
    print(f"\n{args.samples} cases, {compared} both simulated and predicted, {exact} exact to the ns on every rank")
    if args.record:
        args.record.write_text(json.dumps({
            "recorded_with": "astra-sim 518bd51 congestion-aware", "command": f"tools/astra_aware_groups.py "
            f"--samples {args.samples} --seed {args.seed} --record-count {args.record_count}",
            "cases": keep[:args.record_count]}, indent=1) + "\n")
        print(f"recorded {min(len(keep), args.record_count)} cases in {args.record}")
    return 0 if exact == compared else 1


if __name__ == "__main__":
    sys.exit(main())
