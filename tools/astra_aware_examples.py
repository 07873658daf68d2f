#!/usr/bin/env python3
"""ASTRA-sim's own examples, unmodified, on its congestion-aware binary against ``libra-astra
predict --backend aware``.

Every network of examples/network/analytical/*.yml (all one-dimensional: Ring_4/8/16npus and
HGX-H100-validated, a Switch of 8) with every system of examples/system/native_collectives/*.json
and every microbenchmark workload of examples/workload/microbenchmarks with that many NPUs is run
on the binary; each rank's finish time is compared with the prediction (libra_astra reads the
same files). Prints one line per run and the count exact to the ns, and the largest error.

Usage: ASTRA_SIM_AWARE_BIN=/path/to/AstraSim_Analytical_Congestion_Aware \\
       ASTRA_SIM_EXAMPLES=/path/to/astra-sim python tools/astra_aware_examples.py [--queues 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from astra_examples import EXAMPLES_ENV, find_examples  # noqa: E402
from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.astra.predict_inputs import SimInputs, predict_inputs  # noqa: E402
from libra_astra.files import load_yaml  # noqa: E402

AWARE_ENV = "ASTRA_SIM_AWARE_BIN"


def runs(root: Path) -> list[tuple[Path, Path, object]]:
    """(network, system, workload example) of every example that fits the network's NPU count."""
    base = root / "examples" if (root / "examples").is_dir() else root
    nets = sorted((base / "network" / "analytical").glob("*.yml"))
    systems = sorted((base / "system" / "native_collectives").glob("*.json"))
    loads = find_examples(root)
    out = []
    for net in nets:
        npus = load_yaml(net, "network")["npus_count"]
        if len(npus) != 1:
            continue
        out += [(net, s, w) for s in systems for w in loads if w.npus == npus[0]]
    return out


def simulate(binary: str, net: Path, system: Path, prefix: Path, queues: int) -> list[int]:
    with tempfile.TemporaryDirectory(prefix="astra_aware_") as tmp:
        (Path(tmp) / "memory.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
        (Path(tmp) / "log").mkdir()
        out = subprocess.run([binary, f"--workload-configuration={prefix}", f"--system-configuration={system}",
                              f"--remote-memory-configuration={tmp}/memory.json", f"--network-configuration={net}",
                              f"--logging-folder={tmp}/log", f"--num-queues-per-dim={queues}"],
                             capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr[-300:]}")
    return [r.finished_ns for r in parse_output(out.stdout).ranks]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get(AWARE_ENV))
    ap.add_argument("--examples", default=os.environ.get(EXAMPLES_ENV))
    ap.add_argument("--queues", type=int, default=1, help="--num-queues-per-dim of every run")
    args = ap.parse_args()
    if not args.binary or not args.examples:
        ap.error(f"give --binary and --examples, or set {AWARE_ENV} and {EXAMPLES_ENV}")
    exact, worst, todo = 0, 0.0, runs(Path(args.examples))
    for net, system, ex in todo:
        sim = simulate(args.binary, net, system, ex.prefix, args.queues)
        pred = predict_inputs(SimInputs(str(ex.prefix), str(net), str(system), queues_per_dim=args.queues,
                                        backend="aware")).prediction
        got = [r.finished_ns for r in pred.ranks]
        err = max(abs(p / s - 1) for p, s in zip(got, sim))
        exact += got == sim
        worst = max(worst, err)
        print(f"{net.name:26} {system.name:26} {ex.label:28} simulated {max(sim):>10,} predicted {max(got):>10,} "
              f"{'exact' if got == sim else f'max rank error {err:.2e}'}")
    print(f"\n{len(todo)} example runs, {exact} exact to the ns on every rank; largest rank error {worst:.2e}")
    return 0 if exact == len(todo) else 1


if __name__ == "__main__":
    sys.exit(main())
