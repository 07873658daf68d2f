"""Benchmark of the co-design search on one core: candidates per second against plain optimize().

For each case (model spec, NPU count, dimensions, time model) it enumerates the space, runs the
branch and bound in this process (no Dask: one core) and reports

- candidates settled per second: evaluated exactly or pruned by a proven bound, over enumeration
  plus search time (dominated blocks and memory-pruned ones are not counted as settled);
- the same rate over search time only, and exact evaluations per second;
- the plain optimize() call on the best design's demand, timed in the same run, and the ratio
  of the two rates (how many candidates the search settles in the time of one optimize call).

    python tools/bench_search.py            # the default cases
    python tools/bench_search.py --quick    # two small cases
    python tools/bench_search.py --large    # and 4,096 NPUs
    python tools/bench_search.py --json /tmp/search.json   # rows for tools/readme_figures.py --search

Times are CPU time of this process (one core, no Dask), so other jobs on the machine change
them less than wall time; the ratio to the optimize() call of the same run is what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from libra_astra.model.cost import load_cost  # noqa: E402
from libra_astra.demand.workload import Workload  # noqa: E402
from libra_astra.optimize.optimizer import optimize  # noqa: E402
from libra_astra.optimize.problem import Constraints  # noqa: E402
from libra_astra.search.catalog import load_catalog  # noqa: E402
from libra_astra.search.engine import Settings, enumerate_space, run_search  # noqa: E402
from libra_astra.search.evaluate import Problem, candidate_spec, evaluate_chunk, programs_for  # noqa: E402
from libra_astra.search.spec_demand import demand_from_spec  # noqa: E402
from libra_astra.timing.model import TimeModel, simulator_model  # noqa: E402
from libra_astra.tracegen import load_spec  # noqa: E402


class _Done:
    def __init__(self, value):
        self.value = value


def _cold() -> None:
    """Start each case without what earlier cases left in the per-process caches (programs of a
    parallelization, placements of a shape), as a fresh search would."""
    from libra_astra.search import evaluate, space as sp
    evaluate._CACHE.clear()
    for f in (sp._takes, sp._distinct_layouts, sp._axis_sizes, sp.placement_infos):
        f.cache_clear()


def run_case(spec_path: str, npus: int, max_dims: int, model: TimeModel, total_bw: float, top: int = 5) -> dict:
    _cold()
    spec = load_spec(spec_path)
    prob = Problem(spec, load_catalog("network_configs/catalog.yml"), load_cost("network_configs/cost.yml"), "perf",
                   Constraints(total_bw_gbps=total_bw, total_bw_is_upper_bound=True), model)
    st = Settings(npus=npus, max_dims=max_dims, top=top)
    t0 = time.process_time()
    space = enumerate_space(prob, st, lambda fn, items: [fn(prob, i) for i in items])
    t_enum = time.process_time() - t0
    t0 = time.process_time()
    res = run_search(prob, space, st, lambda ch, thr: _Done(evaluate_chunk(prob, ch, thr)),
                     lambda futs: (futs, [f.value for f in futs]))
    t_search = time.process_time() - t0
    settled = res.counts.evaluated + sum(res.counts.pruned_bound.values())
    best = res.ranked()[0].candidate
    net = prob.catalog.network(best.shape, best.blocks, best.levels)
    cs = candidate_spec(spec, net, best.par, best.placement)
    demand = demand_from_spec(cs, net, programs=programs_for(spec, best.par), labels=False)
    reps, t1 = 0, time.process_time()
    while reps < 3 or time.process_time() - t1 < 1.0:
        optimize([Workload(demand)], net, prob.cost, constraints=prob.constraints, model=model, baselines=False)
        reps += 1
    t_opt = (time.process_time() - t1) / reps
    return {"spec": spec_path, "npus": npus, "max_dims": max_dims,
            "model": f"{model.kind}{'+overlap' if model.overlap else ''}", "space": res.counts.candidates_total,
            "candidates": len(space.candidates), "evaluated": res.counts.evaluated, "settled": settled,
            "enum_s": t_enum, "search_s": t_search, "optimize_ms": t_opt * 1e3,
            "rate_total": settled / (t_enum + t_search), "rate_search": settled / t_search,
            "evals_per_s": res.counts.evaluated / t_search, "optimize_per_s": 1.0 / t_opt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small cases")
    ap.add_argument("--large", action="store_true", help="add 4,096 NPUs (minutes)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON (tools/readme_figures.py --search)")
    args = ap.parse_args()
    gpt = "traces/gpt3_tp8_dp8/spec.yml"
    libra = TimeModel("libra")
    sim = simulator_model(1, 1e9, overlap=True)
    cases = [(gpt, 64, 2, libra), (gpt, 64, 4, libra)] if args.quick else [
        (gpt, 64, 2, libra), (gpt, 64, 3, libra), (gpt, 64, 4, libra),
        (gpt, 256, 2, libra), (gpt, 256, 3, libra), (gpt, 1024, 3, libra),
        (gpt, 64, 4, sim), (gpt, 256, 3, sim)] + ([(gpt, 4096, 3, libra)] if args.large else [])
    print(f"{'N':>5} {'dims':>4} {'model':<18} {'space':>10} {'cands':>7} {'evals':>6} {'enum s':>7} {'search s':>8} "
          f"{'cand/s':>8} {'cand/s (search)':>15} {'evals/s':>8} {'optimize':>10} {'ratio':>7}")
    rows = []
    for spec, n, dims, model in cases:
        r = run_case(spec, n, dims, model, 800.0)
        r["ratio"] = r["rate_total"] / r["optimize_per_s"]
        rows.append(r)
        print(f"{r['npus']:>5} {r['max_dims']:>4} {r['model']:<18} {r['space']:>10,} {r['candidates']:>7,} "
              f"{r['evaluated']:>6} {r['enum_s']:>7.2f} {r['search_s']:>8.2f} {r['rate_total']:>8.0f} "
              f"{r['rate_search']:>15.0f} {r['evals_per_s']:>8.1f} {r['optimize_ms']:>8.2f}ms "
              f"{r['ratio']:>6.1f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": os.getloadavg(), "cases": rows}, f, indent=1)


if __name__ == "__main__":
    main()
