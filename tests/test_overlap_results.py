"""optimize with the dependency-aware time gives, to the last bit, the results recorded in
tests/fixtures/overlap_results.json: design, times, cost, objective, dual bound, gap, Newton steps,
dependency paths and both baselines, on real traces (with and without typed CPU collectives; the
fixed order, the fixed order with its slot check, and the event-driven replay all take part), a
shipped pipeline sample, both time models and two totals.

The replay and the path generation get rewritten for speed; the recorded numbers are what they gave
before (the code before the fixed-order pass was compiled). Only an intended change of results
rewrites the file: ``python tests/test_overlap_results.py --write``.

The numbers were recorded with the compiled Newton system. Its numpy fallback (no C compiler, or
``LIBRA_ASTRA_NUMPY_NEWTON=1``) takes the same Newton steps but rounds differently, so without the
kernel the floats are compared to 1e-9 relative (the gap, itself ~1e-11, to 1e-12 absolute).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.model.cost import load_cost
from libra_astra.model.network import load_network
from libra_astra.optimize import solver
from libra_astra.optimize.optimizer import Constraints, Evaluation, OptimizeResult, Workload, optimize
from libra_astra.timing.model import TimeModel

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests/fixtures/real"
RECORDED = ROOT / "tests/fixtures/overlap_results.json"

# name -> (trace prefix, network file, typed CPU collectives)
SETS = {
    "pipeline4": (REAL / "pipeline4/pipeline4", REAL / "ring4.yml", False),
    "pipeline4-typed": (REAL / "pipeline4/pipeline4", REAL / "ring2x2.yml", True),
    "tpdp8-typed": (REAL / "tpdp8/tpdp8", REAL / "ring2x4.yml", True),          # replays with events
    "param_dlrm8": (REAL / "param_dlrm8/param_dlrm8", REAL / "ring8.yml", False),  # slot order checked
    "ddp4-typed": (REAL / "ddp4/ddp4", REAL / "ring2x2.yml", True),
    "gpt_tp2_pp2_dp4": (ROOT / "traces/gpt_tp2_pp2_dp4/gpt", ROOT / "network_configs/sample_4x4.yml", False),
}
MODELS = {"pipelined": TimeModel("pipelined", splits=4, overlap=True), "libra": TimeModel("libra", overlap=True)}
CASES = [(s, m, total, "perf") for s in SETS for m in MODELS for total in (100.0, 300.0)] + \
        [(s, "pipelined", 100.0, "perf-per-cost") for s in SETS]


@lru_cache(maxsize=None)
def _inputs(name: str):
    prefix, network, typed = SETS[name]
    net = load_network(network)
    groups = Path(str(prefix) + ".groups.json")
    demand, _ = demand_from_traces(str(prefix), net, comm_groups=str(groups) if groups.exists() else None,
                                   type_cpu_collectives=typed)
    return demand, net


def _hex(x: float) -> str:
    return float(x).hex()


def _evaluation(e: Evaluation) -> dict:
    return {"bw_gbps": [_hex(b) for b in e.bw_gbps], "time_ns": _hex(e.time_ns), "compute_ns": _hex(e.compute_ns),
            "communication_ns": _hex(e.communication_ns), "cost_usd": _hex(e.cost_usd), "feasible": e.feasible}


def _numbers(r: OptimizeResult) -> dict:
    """Every number of the result but the solve's wall time, floats as exact hex."""
    return {"best": _evaluation(r.best), "fun": _hex(r.fun), "dual_bound": _hex(r.dual_bound),
            "rel_gap": _hex(r.rel_gap), "success": r.success, "status": r.status, "message": r.message,
            "newton_steps": r.newton_steps, "num_collectives": r.num_collectives, "num_terms": r.num_terms,
            "baselines": {k: _evaluation(v) for k, v in sorted(r.baselines.items())}}


def _result(name: str, model: str, total: float, objective: str) -> dict:
    demand, net = _inputs(name)
    fresh = replace(demand)     # a new demand object: its joint graph and replays are built anew
    r = optimize([Workload(fresh)], net, load_cost(ROOT / "network_configs/cost.yml"), objective=objective,
                 constraints=Constraints(total_bw_gbps=total), model=MODELS[model])
    return _numbers(r)


def _key(name: str, model: str, total: float, objective: str) -> str:
    return f"{name} {model} {total:g} {objective}"


def _close(got, want, key: str = "") -> bool:
    """``got == want``, floats (exact hex) within round-off of the numpy Newton system."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_close(got[k], want[k], k) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(_close(g, w, key) for g, w in zip(got, want))
    if isinstance(want, str) and want.lstrip("-").startswith("0x") and isinstance(got, str):
        g, w = float.fromhex(got), float.fromhex(want)
        return abs(g - w) <= (1e-12 if key == "rel_gap" else 1e-9 * abs(w))
    return got == want


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORDED.read_text())


def test_every_case_is_recorded(recorded):
    assert sorted(recorded) == sorted(_key(*c) for c in CASES)


@pytest.mark.parametrize("name,model,total,objective", CASES, ids=[_key(*c).replace(" ", "-") for c in CASES])
def test_overlap_optimize_gives_the_recorded_numbers(recorded, name, model, total, objective):
    got = _result(name, model, total, objective)
    want = recorded[_key(name, model, total, objective)]
    if solver._kernel is not None:
        assert got == want
    else:
        assert _close(got, want), (got, want)
    assert "dependency paths" in got["message"]


def test_the_round_off_comparison_still_tells_results_apart(recorded):
    want = recorded[_key(*CASES[0])]
    assert _close(want, want)
    moved = json.loads(json.dumps(want))
    moved["best"]["time_ns"] = _hex(float.fromhex(want["best"]["time_ns"]) * (1 + 1e-7))
    assert not _close(moved, want)
    steps = dict(want, newton_steps=want["newton_steps"] + 1)
    assert not _close(steps, want)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_overlap_results.py --write   (records the current results)")
    RECORDED.write_text(json.dumps({_key(*c): _result(*c) for c in CASES}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORDED} ({len(CASES)} cases)")
