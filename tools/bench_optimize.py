#!/usr/bin/env python3
"""Benchmark: the bandwidth optimizer's exact solver against two baselines measured in the same run.

Problems: the shipped paper_3d and paper_4d networks; demands ``synthetic.gpt3_demand`` (18
layers), ``synthetic.resnet50_demand`` (54 layers) and ``synthetic.random_demand(net, 10000)``;
objectives perf and perf-per-cost with a total-bandwidth equality; time models libra and pipelined
(4 splits, which does not merge collectives into few terms).

For each problem it prints the median wall time of ``solver.solve`` over repeated runs, its Newton
steps, the objective (ns or ns*USD), the certified relative duality gap, and ratios against:

  prev    the solver as first committed (a primal barrier method; libra_astra/solver.py at commit
          a286c21, read from git), on the same problem: its time / ours, and how far its
          objective is above ours;
  SLSQP   scipy's SLSQP on the same problem in epigraph form (smooth, analytic Jacobians),
          problems with <= 200 terms only: its time / ours, and how far its objective is above ours.

Targets (one core): under 5 ms per solve for the LIBRA-sized problems, under 2 s for 10,000
collectives. The BLAS library is held to one thread (as the targets are stated; OpenBLAS threads
on a busy machine made the 10,000-collective solves five times slower here), unless the
environment already says otherwise. This prints figures; it asserts nothing. Example:

    python tools/bench_optimize.py              # everything, 15 repeats of the small problems
    python tools/bench_optimize.py --repeat 5 --skip-prev
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before numpy loads its BLAS

import argparse
import math
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from libra_astra.optimize import solver
from libra_astra.demand import synthetic
from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network
from libra_astra.optimize.problem import Constraints, Workload, build_problem
from libra_astra.timing.model import TimeModel

ROOT = Path(__file__).resolve().parent.parent
PREV_COMMIT = "a286c21"


def previous_solver():
    """The first committed solver, loaded from git history as a module (None if unavailable)."""
    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{PREV_COMMIT}:libra_astra/solver.py"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    mod = types.ModuleType("solver_prev")
    sys.modules["solver_prev"] = mod          # dataclasses look their module up there
    exec(compile(src.replace("from .errors import", "from libra_astra.errors import"), "solver_prev", "exec"),
         mod.__dict__)
    return mod


def slsqp(p: solver.ConvexProblem, x0: np.ndarray) -> float:
    """SLSQP on min c.x over (x, t) with every constraint of the problem; returns c . x at the
    tight point of its answer (epigraph coordinates recomputed, so the value is attainable)."""
    n, K = p.n, p.w.shape[0]
    rec = p.recip

    def split(zz):
        return zz[:n], zz[n:]

    def rows(zz):
        x, t = split(zz)
        inv = np.where(rec, 1.0 / np.where(rec, x, 1.0), 0.0)
        return t[p.owner] - p.A @ inv - p.g

    def rows_jac(zz):
        x, _ = split(zz)
        jx = p.A / np.where(rec, x, 1.0) ** 2
        jt = np.zeros((p.owner.shape[0], K))
        jt[np.arange(p.owner.shape[0]), p.owner] = 1.0
        return np.hstack([jx, jt])

    Q = p.class_z.shape[0]
    cls_jac = np.zeros((Q, n + K))
    cls_jac[np.arange(Q), p.class_z] = 1.0
    cls_jac[p.term_class, n + np.arange(K)] -= p.w
    cons = [
        {"type": "ineq", "fun": rows, "jac": rows_jac},
        {"type": "ineq", "fun": lambda zz: cls_jac @ zz - p.class_e, "jac": lambda zz: cls_jac},
    ]
    if p.G.shape[0]:
        GK = np.hstack([p.G, np.zeros((p.G.shape[0], K))])
        cons.append({"type": "ineq", "fun": lambda zz: p.h - GK @ zz, "jac": lambda zz: -GK})
    if p.E.shape[0]:
        EK = np.hstack([p.E, np.zeros((p.E.shape[0], K))])
        cons.append({"type": "eq", "fun": lambda zz: EK @ zz - p.f, "jac": lambda zz: EK})
    t0 = solver.term_values(p, x0) * 1.01 + 1e-9
    xs = solver.tight_point(p, x0)
    z0 = np.concatenate([xs, t0])
    z0[p.class_z] = np.maximum(z0[p.class_z], (cls_jac @ z0 - p.class_e)[np.arange(Q)] + z0[p.class_z] + 1e-9)
    cK = np.concatenate([p.c, np.zeros(K)])
    bounds = [(1e-9, None) if r else (None, None) for r in rec] + [(None, None)] * K
    res = minimize(lambda zz: cK @ zz, z0, jac=lambda zz: cK, method="SLSQP", bounds=bounds, constraints=cons,
                   options={"ftol": 1e-12, "maxiter": 1000})
    x = np.where(rec, np.maximum(res.x[:n], 1e-12), res.x[:n])
    return float(p.c @ solver.tight_point(p, x))


def timed(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="runs per small problem (10k problems: 3, baselines 1)")
    ap.add_argument("--skip-prev", action="store_true", help="do not time the previous solver")
    ap.add_argument("--skip-10k", action="store_true", help="leave out the 10,000-collective problems")
    args = ap.parse_args()
    cost = load_cost(ROOT / "network_configs" / "cost.yml")
    prev = None if args.skip_prev else previous_solver()
    if not args.skip_prev and prev is None:
        print(f"(previous solver at {PREV_COMMIT} not available from git: 'prev' columns left empty)")
    models = {"libra": TimeModel(), "pipe4": TimeModel("pipelined", splits=4)}
    head = (f"{'network':<9}{'demand':<9}{'objective':<14}{'model':<6}{'rows':>6}{'terms':>6} | {'ms':>8}{'steps':>6}"
            f"{'objective':>15}{'gap':>9} | {'prev x':>8}{'prev +obj':>10} | {'SLSQP x':>8}{'SLSQP +obj':>11}")
    print(head)
    print("-" * len(head))
    small_ms, big_ms = [], []
    for net_name in ("paper_3d", "paper_4d"):
        net = load_network(ROOT / "network_configs" / f"{net_name}.yml")
        demands = [("gpt3", synthetic.gpt3_demand(net)), ("resnet50", synthetic.resnet50_demand(net))]
        if not args.skip_10k:
            demands.append(("rand10k", synthetic.random_demand(net, 10000)))
        for dname, dem in demands:
            for objective in ("perf", "perf-per-cost"):
                for mname, model in models.items():
                    b = build_problem([Workload(dem)], net, cost, Constraints(300.0), objective, model)
                    p = b.problem
                    K = p.w.shape[0]
                    big = K > 200
                    rep = 3 if big else args.repeat
                    sec, r = timed(lambda: solver.solve(p, b.guesses), rep)
                    unit = b.t0 if objective == "perf" else b.t0 * b.c0
                    (big_ms if big else small_ms).append(sec * 1e3)
                    rel = r.gap / abs(r.fun) if r.fun else math.inf
                    line = (f"{net_name:<9}{dname:<9}{objective:<14}{mname:<6}{p.owner.shape[0]:>6}{K:>6} | "
                            f"{sec * 1e3:>8.2f}{r.newton_steps:>6}{r.fun * unit:>15.6e}{rel:>9.1e} | ")
                    if prev is not None:
                        psec, pr = timed(lambda: prev.solve(p, b.guesses), 1 if big else max(3, rep // 3))
                        flag = "" if pr.success else "!"
                        line += f"{psec / sec:>7.1f}{flag:1}{(pr.fun - r.fun) / abs(r.fun):>10.1e} | "
                    else:
                        line += f"{'':>8}{'':>10} | "
                    if not big:
                        # SLSQP gets the terms rescaled to unit weight, as our solver does internally.
                        pu = solver._unit_weights(p)
                        x0 = solver._starting_point(pu, b.guesses)
                        ssec, sval = timed(lambda: slsqp(pu, x0), 3)
                        line += f"{ssec / sec:>8.1f}{(sval - r.fun) / abs(r.fun):>11.1e}"
                    print(line, flush=True)
    print()
    print("ms: median solve time; gap: certified (objective - dual bound) / objective; 'x': baseline time / ours;")
    print("'+obj': (baseline objective - ours) / ours; '!': the previous solver did not certify its result.")
    if small_ms:
        print(f"LIBRA-sized problems: median {statistics.median(small_ms):.2f} ms, worst {max(small_ms):.2f} ms "
              f"(target < 5 ms)")
    if big_ms:
        print(f"10,000-collective problems: median {statistics.median(big_ms):.0f} ms, worst {max(big_ms):.0f} ms "
              f"(target < 2000 ms)")


if __name__ == "__main__":
    sys.exit(main())
