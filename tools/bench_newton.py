#!/usr/bin/env python3
"""Benchmark: Newton steps, certification and time of the solver on the scale families.

Families (``synthetic.random_demand`` on a 3- or 8-dimension network, perf under a total-bandwidth
equality and per-dimension bounds):

  random       LIBRA's model: rows are traffic only, so collectives of one participation pattern
               merge into one term (few terms whatever the count)
  unmergeable  pipelined model, 1 split, with latency: every collective keeps its own term
  pipelined    pipelined model, 4 splits, with latency: several rows per collective

Sizes 100, 1k, 10k and 100k collectives. For each problem it prints the model build time
(``build_problem`` on a demand whose rows were never built; the best of --repeat builds, each on a
new copy of the demand), the solve time and the ratio of the two, Newton steps, whether the
result is certified and its relative gap. ``--old-build`` also
times, in the same run, the build that was replaced: rows one collective at a time and merging in
a dict (tests/reference_build.py), and prints old / new. With ``--baseline REV``, the same figures
for the solver at git revision REV, run in the same process on the same built problem, as ratios.
Times are CPU seconds of this process (BLAS held to one thread); the load average is printed at
the start and the end, since the 2-core machine is shared. ``--json FILE`` writes the figures for
tools/readme_figures.py. Prints figures; asserts nothing.

    python tools/bench_newton.py --sizes 100,1000,10000
    python tools/bench_newton.py --old-build --json /tmp/newton.json
    python tools/bench_newton.py --baseline 45459e5
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before numpy loads its BLAS

import argparse
import gc
import json
import subprocess
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

from libra_astra.demand import synthetic

from libra_astra.optimize import solver
from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.problem import Constraints, Workload, build_problem
from libra_astra.timing.model import TimeModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
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


def old_build_s(dem, net, model) -> float:
    """CPU seconds of the replaced build's rows and merging (the part the vectorized build does)."""
    import reference_build
    t = time.process_time()
    for rc in dem.rank_classes:
        reference_build.merge_terms(((c, c.count) for c in rc.collectives), net, model, {})
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000,100000", help="comma-separated collective counts")
    ap.add_argument("--dims", default="3,8", help="comma-separated network dimension counts")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families")
    ap.add_argument("--baseline", default=None, help="git revision of solver.py to compare with")
    ap.add_argument("--repeat", type=int, default=3, help="builds of each problem, each of a new copy of its "
                    "demand; the fastest counts (default 3)")
    ap.add_argument("--old-build", action="store_true", help="also time the replaced per-collective build")
    ap.add_argument("--json", help="also write the figures to this JSON file (tools/readme_figures.py)")
    args = ap.parse_args()
    cost = load_cost(ROOT / "network_configs" / "cost.yml")
    base = solver_at(args.baseline) if args.baseline else None
    if args.baseline and base is None:
        print(f"(solver at {args.baseline} not available from git: baseline columns left empty)")
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} (1 min), {load_start[1]:.2f} (5 min); {os.cpu_count()} cores")
    head = (f"{'family':<12}{'D':>2}{'colls':>8}{'terms':>8}{'rows':>8} | {'build s':>8}{'solve ms':>10}"
            f"{'b/s':>6}{'steps':>6}{'cert':>5}{'gap':>9}")
    if args.old_build:
        head += f" | {'old build s':>11}{'old/new':>8}"
    if base is not None:
        head += f" | {'base steps':>10}{'cert':>5}{'base/ours time':>15}"
    print(head)
    print("-" * len(head))
    records = []
    for fam in args.families.split(","):
        model = FAMILIES[fam]
        for D in (int(x) for x in args.dims.split(",")):
            net = network(D)
            total = 100.0 * D
            cons = Constraints(total)
            for n in (int(x) for x in args.sizes.split(",")):
                dem = synthetic.random_demand(net, n, seed=1)
                build = float("inf")
                for _ in range(args.repeat):
                    # a new class object each time: its rows are built afresh, not taken from the memo
                    fresh = replace(dem, rank_classes=tuple(replace(rc) for rc in dem.rank_classes))
                    gc.collect()
                    t = time.process_time()
                    b = build_problem([Workload(fresh)], net, cost, cons, "perf", model)
                    build = min(build, time.process_time() - t)
                p = b.problem
                t = time.process_time()
                r = solver.solve(p, b.guesses)
                sec = time.process_time() - t
                rec = {"family": fam, "dims": D, "collectives": n, "terms": int(p.w.shape[0]),
                       "rows": int(p.owner.shape[0]), "build_s": build, "solve_s": sec,
                       "newton_steps": r.newton_steps, "certified": bool(r.success), "rel_gap": r.gap / abs(r.fun)}
                line = (f"{fam:<12}{D:>2}{n:>8}{rec['terms']:>8}{rec['rows']:>8} | {build:>8.3f}{sec * 1e3:>10.1f}"
                        f"{build / sec:>6.2f}{r.newton_steps:>6}{'yes' if r.success else 'NO':>5}{rec['rel_gap']:>9.1e}")
                if args.old_build:
                    rec["old_build_s"] = old_build_s(dem, net, model)
                    line += f" | {rec['old_build_s']:>11.3f}{rec['old_build_s'] / build:>8.1f}"
                if base is not None:
                    t = time.process_time()
                    rb = base.solve(convert(p, base), b.guesses)
                    bsec = time.process_time() - t
                    line += f" | {rb.newton_steps:>10}{'yes' if rb.success else 'NO':>5}{bsec / sec:>15.2f}"
                records.append(rec)
                print(line, flush=True)
    load_end = os.getloadavg()
    print()
    print("build s: CPU seconds of build_problem; solve ms: CPU ms of solver.solve; b/s: build / solve; steps:")
    print("Newton systems solved; cert: certified to the default relative gap 1e-9; gap: certified (objective -")
    print("dual bound) / objective; old build s: CPU seconds of the replaced per-collective rows and merging.")
    print(f"load average at end: {load_end[0]:.2f} (1 min), {load_end[1]:.2f} (5 min)")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": "newton", "cores": os.cpu_count(), "load_start": load_start[:2],
                                               "load_end": load_end[:2], "problems": records}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
