#!/usr/bin/env python3
"""Benchmark: Newton steps, certification and time of the solver on the scale families.

Families (``synthetic.random_demand`` on a 3- or 8-dimension network, perf under a total-bandwidth
equality and per-dimension bounds):

  random       LIBRA's model: rows are traffic only, so collectives of one participation pattern
               merge into one term (few terms whatever the count)
  unmergeable  pipelined model, 1 split, with latency: every collective keeps its own term
  pipelined    pipelined model, 4 splits, with latency: several rows per collective

Sizes 100, 1k, 10k and 100k collectives. For each problem it prints the model build time, the
solve time, Newton steps, whether the result is certified and its relative gap, and (with
``--baseline REV``) the same figures for the solver at git revision REV, run in the same process
on the same built problem, as ratios. BLAS is held to one thread. Prints figures; asserts nothing.

    python tools/bench_newton.py --sizes 100,1000,10000
    python tools/bench_newton.py --baseline 45459e5
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before numpy loads its BLAS

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

from libra_astra.demand import synthetic

from libra_astra.optimize import solver
from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.problem import Constraints, Workload, build_problem
from libra_astra.timing.model import TimeModel

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = {
    "random": TimeModel(),
    "unmergeable": TimeModel("pipelined", splits=1),
    "pipelined": TimeModel("pipelined", splits=4),
}


def network(dims: int):
    if dims == 3:
        return load_network(ROOT / "network_configs" / "paper_3d.yml")
    topo = ("Ring", "FullyConnected", "Switch")
    classes = ("InterPackage", "InterNode", "InterPod")
    npus = (4, 2, 4, 2, 2, 4, 2, 4)[:dims]
    return network_from_dict({"name": f"bench-{dims}d", "dimensions": [
        {"name": f"d{i}", "topology": topo[i % 3], "npus": n, "latency_ns": 100.0 * (i + 1),
         "cost_class": classes[min(i * 3 // dims, 2)]} for i, n in enumerate(npus)]})


def solver_at(rev: str):
    """The solver module at a git revision (before or after the package moved it), loaded as a
    module (None if git cannot show it)."""
    src = None
    for path in ("libra_astra/optimize/solver.py", "libra_astra/solver.py"):
        try:
            src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                                 capture_output=True, text=True, check=True).stdout
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    if src is None:
        return None
    name = f"solver_{rev}"
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    src = src.replace("from ..errors import", "from libra_astra.errors import")
    src = src.replace("from .errors import", "from libra_astra.errors import")
    exec(compile(src, name, "exec"), mod.__dict__)
    return mod


def convert(p, mod):
    """Our ConvexProblem as the other module's class (same fields)."""
    return mod.ConvexProblem(**{k: getattr(p, k) for k in p.__dataclass_fields__})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000,100000", help="comma-separated collective counts")
    ap.add_argument("--dims", default="3,8", help="comma-separated network dimension counts")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families")
    ap.add_argument("--baseline", default=None, help="git revision of solver.py to compare with")
    args = ap.parse_args()
    cost = load_cost(ROOT / "network_configs" / "cost.yml")
    base = solver_at(args.baseline) if args.baseline else None
    if args.baseline and base is None:
        print(f"(solver at {args.baseline} not available from git: baseline columns left empty)")
    head = (f"{'family':<12}{'D':>2}{'colls':>8}{'terms':>8}{'rows':>8} | {'build s':>8}{'solve ms':>10}{'steps':>6}"
            f"{'cert':>5}{'gap':>9}")
    if base is not None:
        head += f" | {'base steps':>10}{'cert':>5}{'base/ours time':>15}"
    print(head)
    print("-" * len(head))
    for fam in args.families.split(","):
        model = FAMILIES[fam]
        for D in (int(x) for x in args.dims.split(",")):
            net = network(D)
            total = 100.0 * D
            cons = Constraints(total)
            for n in (int(x) for x in args.sizes.split(",")):
                dem = synthetic.random_demand(net, n, seed=1)
                t = time.process_time()
                b = build_problem([Workload(dem)], net, cost, cons, "perf", model)
                build = time.process_time() - t
                p = b.problem
                t = time.process_time()
                r = solver.solve(p, b.guesses)
                sec = time.process_time() - t
                line = (f"{fam:<12}{D:>2}{n:>8}{p.w.shape[0]:>8}{p.owner.shape[0]:>8} | {build:>8.3f}{sec * 1e3:>10.1f}"
                        f"{r.newton_steps:>6}{'yes' if r.success else 'NO':>5}{r.gap / abs(r.fun):>9.1e}")
                if base is not None:
                    t = time.process_time()
                    rb = base.solve(convert(p, base), b.guesses)
                    bsec = time.process_time() - t
                    line += f" | {rb.newton_steps:>10}{'yes' if rb.success else 'NO':>5}{bsec / sec:>15.2f}"
                print(line, flush=True)
    print()
    print("build s: CPU seconds of build_problem; solve ms: CPU ms of solver.solve; steps: Newton systems solved;")
    print("cert: certified to the default relative gap 1e-9; gap: certified (objective - dual bound) / objective.")


if __name__ == "__main__":
    sys.exit(main())
