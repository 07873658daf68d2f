"""ASTRA-sim's own example workloads (its repository's microbenchmarks: all-reduce, all-gather,
reduce-scatter and all-to-all on 4, 8 and 16 NPUs), read, optimized, emitted and simulated by the
real binary: input libra_astra did not write. Needs $ASTRA_SIM_BIN and $ASTRA_SIM_EXAMPLES (an
ASTRA-sim checkout); skipped without them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libra_astra.demand.workload import load_workloads
from libra_astra.loop import run_loop
from libra_astra.model.cost import load_cost
from libra_astra.optimize.optimizer import Constraints

from tool_module import tool_module

ROOT = Path(__file__).resolve().parents[1]
astra_examples = tool_module("astra_examples")

BIN = os.environ.get("ASTRA_SIM_BIN", "")
EXAMPLES = os.environ.get(astra_examples.EXAMPLES_ENV, "")
pytestmark = [
    pytest.mark.astra,
    pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)),
                       reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these"),
    pytest.mark.skipif(not EXAMPLES,
                       reason=f"set {astra_examples.EXAMPLES_ENV} to an ASTRA-sim checkout to run its example workloads"),
]


def _examples():
    return astra_examples.find_examples(EXAMPLES) if EXAMPLES else []


def test_every_microbenchmark_kind_and_size_is_found():
    found = {(e.label.split("/")[0], e.npus) for e in _examples()}
    assert found >= {(k, n) for k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") for n in (4, 8, 16)}


@pytest.mark.parametrize("label", ["all_reduce/8npus_1MB", "all_gather/8npus_1MB", "reduce_scatter/8npus_1MB",
                                   "all_to_all/8npus_1MB", "all_reduce/16npus_1MB", "all_gather/16npus_1MB",
                                   "reduce_scatter/16npus_1MB", "all_to_all/16npus_1MB"])
def test_example_workload_loop_predicts_the_simulator(tmp_path, label):
    ex = {e.label: e for e in _examples()}[label]
    cost = load_cost(ROOT / "network_configs" / "cost.yml")
    for net in astra_examples.example_networks(ex.npus):
        workloads = load_workloads((str(ex.prefix),), (), (), net, None)
        res = run_loop(workloads, net, cost, out_dir=tmp_path / net.name, binary=BIN,
                       constraints=Constraints(total_bw_gbps=100.0))
        rows = {r.name: r for r in res.rows}
        assert set(rows) == {"optimized", "EqualBW", "TrafficProportional"}
        for r in res.rows:
            assert abs(r.error) < 1e-3, (net.name, r.name, r.predicted_ns, r.simulated_ns)
        # The simulator agrees that the optimum is no worse than either baseline.
        best_baseline = min(rows["EqualBW"].simulated_ns, rows["TrafficProportional"].simulated_ns)
        assert rows["optimized"].simulated_ns <= best_baseline * (1 + 1e-3)
