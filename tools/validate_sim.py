#!/usr/bin/env python3
"""Predicted versus simulated time: the shipped samples through the closed loop, and single
collectives over 2 to 4 dimensions, and the real PyTorch traces of tests/fixtures/real through the
closed loop, and ASTRA-sim's own example workloads (its repository's
examples/workload/microbenchmarks, with --examples or ASTRA_SIM_EXAMPLES) through the closed loop,
against a real ASTRA-sim binary; and ``predict`` over tools/predict_grid.py's covering grid of
system settings (``--only predict-grid``, ``--grid-size``).

Usage: ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware python tools/validate_sim.py [--out DIR]
       [--only samples|real|collectives|astra-examples|jobs|predict-grid] [--grid-size pairs] [--examples ASTRA_SIM_CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from libra_astra.astra import emit, simulate
from libra_astra.astra.run import resolve_binary
from libra_astra.errors import LibraError
from libra_astra.demand.workload import load_workloads
from libra_astra.model.cost import load_cost
from libra_astra.demand.types import demand_to_dict, make_collective, single_class
from libra_astra.optimize.design import Design, WorkloadRef
from libra_astra.loop import run_loop
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.optimizer import Constraints
from libra_astra.timing.model import TimeModel, collective_time_ns
from libra_astra.tracegen import generate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from astra_examples import EXAMPLES_ENV, example_networks, find_examples  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [
    ("gpt3_tp8_dp8", "traces/gpt3_tp8_dp8/gpt3", "network_configs/sample_8x8.yml"),
    ("dlrm_16", "traces/dlrm_16/dlrm", "network_configs/sample_4x4.yml"),
    ("resnet50_dp16", "traces/resnet50_dp16/resnet50", "network_configs/sample_4x4.yml"),
    ("gpt_tp2_pp2_dp4", "traces/gpt_tp2_pp2_dp4/gpt", "network_configs/sample_4x4.yml"),
]
# Unmodified PyTorch -> Chakra converter output (tests/fixtures/real); the gloo sets with their
# collectives typed from the c10d:: CPU ops (--type-cpu-collectives).
REAL = [
    ("param_dlrm8", "tests/fixtures/real/param_dlrm8/param_dlrm8", "tests/fixtures/real/ring2x4.yml", False),
    ("ddp4", "tests/fixtures/real/ddp4/ddp4", "tests/fixtures/real/ring2x2.yml", True),
    ("tpdp4", "tests/fixtures/real/tpdp4/tpdp4", "tests/fixtures/real/ring2x2.yml", True),
    ("tpdp8", "tests/fixtures/real/tpdp8/tpdp8", "tests/fixtures/real/ring2x4.yml", True),
    ("pipeline4", "tests/fixtures/real/pipeline4/pipeline4", "tests/fixtures/real/ring2x2.yml", True),
]
COLLECTIVES = [
    ([("Ring", 4, 500), ("Switch", 4, 700)], "ALL_REDUCE", (4, 4)),
    ([("Ring", 4, 200), ("FullyConnected", 2, 300), ("Switch", 4, 900)], "ALL_REDUCE", (4, 2, 4)),
    ([("Ring", 4, 200), ("FullyConnected", 2, 300), ("Switch", 4, 900)], "REDUCE_SCATTER", (4, 2, 4)),
    ([("Ring", 2, 100), ("Ring", 4, 400), ("FullyConnected", 2, 300), ("Switch", 2, 900)], "ALL_GATHER", (2, 4, 2, 2)),
    ([("Ring", 2, 100), ("Ring", 4, 400), ("FullyConnected", 2, 300), ("Switch", 2, 900)], "ALL_REDUCE", (2, 4, 2, 2)),
    ([("Ring", 4, 200), ("Switch", 4, 700), ("Ring", 2, 300)], "ALL_TO_ALL", (4, 4, 2)),
]

# Generated traces of each training-job feature (docs/tracegen.md), small enough to simulate in seconds.
_JOB_MODEL = {"type": "transformer", "layers": 4, "hidden_size": 1024, "heads": 16, "seq_length": 1024,
              "vocab_size": 32000, "micro_batch": 1, "global_batch": 16, "bytes_per_element": 2}
_MOE = {"experts": 8, "top_k": 2, "capacity_factor": 1.25, "shared_experts": 1, "expert_hidden_size": 1024,
        "gated_mlp": True, "kv_heads": 4, "first_dense_layers": 1}
JOBS = [
    ("1f1b", {"tp": 2, "pp": 4, "dp": 2, "schedule": "1f1b"}, {"tp": [0], "pp": [1], "dp": [2]}, [2, 4, 2], {}),
    ("interleaved", {"tp": 2, "pp": 2, "dp": 4, "schedule": "interleaved", "virtual_stages": 2},
     {"tp": [0], "pp": [1], "dp": [2]}, [2, 2, 4], {}),
    ("zero1", {"tp": 2, "dp": 8, "zero": 1}, {"tp": [0], "dp": [1]}, [2, 8], {}),
    ("zero2-1f1b", {"tp": 2, "pp": 2, "dp": 4, "zero": 2, "schedule": "1f1b"}, {"tp": [0], "pp": [1], "dp": [2]},
     [2, 2, 4], {}),
    ("zero3", {"tp": 2, "dp": 8, "zero": 3}, {"tp": [0], "dp": [1]}, [2, 8], {}),
    ("recompute-full", {"tp": 4, "pp": 2, "dp": 2, "recompute": "full", "sequence_parallel": True},
     {"tp": [0], "pp": [1], "dp": [1]}, [4, 4], {}),
    ("selective-gqa", {"tp": 4, "dp": 4, "recompute": "selective"}, {"tp": [0], "dp": [1]}, [4, 4], {"kv_heads": 4}),
    ("cp", {"tp": 2, "cp": 4, "dp": 2, "sequence_parallel": True}, {"tp": [0], "cp": [1], "dp": [2]}, [2, 4, 2],
     {"kv_heads": 4}),
    ("moe-ep", {"tp": 2, "ep": 4, "dp": 2, "sequence_parallel": True}, {"tp": [0], "ep": [1], "dp": [2]}, [2, 4, 2],
     _MOE),
    ("moe-all", {"tp": 2, "cp": 2, "ep": 2, "pp": 2, "sequence_parallel": True, "zero": 1,
                 "schedule": "interleaved", "virtual_stages": 2, "recompute": "selective"},
     {"tp": [0], "cp": [1], "ep": [2], "pp": [2]}, [2, 2, 4], _MOE),
]


def _job_rows(base: Path, cost, total_bw: float, binary: str, errors: list[float]) -> None:
    """Generate each feature's traces and run the closed loop on a Ring x Switch x FullyConnected network."""
    for name, par, place, shape, model in JOBS:
        spec = {"name": name, "model": {**_JOB_MODEL, **model}, "parallel": par, "placement": place,
                "network": {"npus_per_dim": shape}, "compute": {"tflops": 200}}
        generate(spec, base / f"job-{name}" / "traces" / name, overwrite=True)
        net = network_from_dict({"name": "n", "dimensions": [
            {"name": f"d{j}", "topology": ("Ring", "Switch", "FullyConnected")[j % 3], "npus": n,
             "latency_ns": 500.0 * (j + 1), "cost_class": ("InterPackage", "InterNode", "InterPod")[j % 3]}
            for j, n in enumerate(shape)]})
        _loop_rows(name, 15, base / f"job-{name}" / "traces" / name, net, cost, base / f"job-{name}" / "loop",
                   total_bw, binary, errors, column=" 1")


def _loop_rows(label: str, width: int, prefix: Path, net, cost, out_dir: Path, total_bw: float, binary: str,
               errors: list[float], splits: int = 1, typed: bool = False, column: str = "") -> None:
    """The closed loop on one trace set: every design's predicted and simulated time, printed."""
    workloads = load_workloads((str(prefix),), (), (), net, None, type_cpu_collectives=typed)
    res = run_loop(workloads, net, cost, out_dir=out_dir, constraints=Constraints(total_bw_gbps=total_bw),
                   binary=binary, splits=splits, overwrite=True)
    for r in res.rows:
        errors.append(abs(r.error))
        print(f"{label:<{width}} {column} {r.name:<20} {r.predicted_ns:>14,.0f} {r.simulated_ns:>14,.0f} "
              f"{r.error:>+8.3%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="Keep the runs here (default: a temporary directory).")
    ap.add_argument("--total-bw", type=float, default=400.0, help="GB/s per NPU for the sample loops.")
    ap.add_argument("--only", choices=("samples", "real", "collectives", "astra-examples", "jobs", "predict-grid"),
                    action="append",
                    help="Run only these parts (repeatable; default: all).")
    ap.add_argument("--real-total-bw", type=float, default=100.0, help="GB/s per NPU for the real-trace loops.")
    ap.add_argument("--examples", default=os.environ.get(EXAMPLES_ENV),
                    help=f"An ASTRA-sim checkout (or its examples/ folder) whose microbenchmark workloads to run "
                         f"[default: ${EXAMPLES_ENV}; skipped when neither is given].")
    ap.add_argument("--grid-size", choices=("smoke", "pairs", "triples"), default="pairs",
                    help="The covering design of tools/predict_grid.py for the predict-grid part [pairs].")
    args = ap.parse_args()
    try:
        binary = resolve_binary()       # $ASTRA_SIM_BIN, checked as simulate checks it
    except LibraError as e:
        print(e, file=sys.stderr)
        return 2
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="libra_validate_"))
    base.mkdir(parents=True, exist_ok=True)
    cost = load_cost(ROOT / "network_configs/cost.yml")
    errors = []
    print(f"{'sample':<15} {'k':>2} {'design':<20} {'predicted ns':>14} {'simulated ns':>14} {'error':>8}")
    parts = set(args.only or ("samples", "real", "collectives", "astra-examples", "jobs", "predict-grid"))
    for name, prefix, network in (SAMPLES if "samples" in parts else []):
        net = load_network(ROOT / network)
        for k in (1, 4):
            _loop_rows(name, 15, ROOT / prefix, net, cost, base / f"{name}-k{k}", args.total_bw, binary, errors,
                       splits=k, column=f"{k:>2}")
    print()
    print(f"{'real trace set':<15} {'k':>2} {'design':<20} {'predicted ns':>14} {'simulated ns':>14} {'error':>8}")
    for name, prefix, network, typed in (REAL if "real" in parts else []):
        net = load_network(ROOT / network)
        for k in (1, 4):
            _loop_rows(name, 15, ROOT / prefix, net, cost, base / f"real-{name}-k{k}", args.real_total_bw, binary,
                       errors, splits=k, typed=typed, column=f"{k:>2}")
    print()
    print(f"{'collective':<15} {'dims':<42} {'k':>2} {'predicted ns':>14} {'simulated ns':>14} {'error':>8}")
    for i, (dims, kind, shape) in enumerate(COLLECTIVES if "collectives" in parts else []):
        net = network_from_dict({"name": "n", "dimensions": [
            {"name": f"d{j}", "topology": t, "npus": n, "latency_ns": lat} for j, (t, n, lat) in enumerate(dims)]})
        bw = tuple([150.0, 60.0, 90.0, 25.0][: net.num_dims])
        c = make_collective(kind, 2**26, shape, net=net)
        for k in (1, 4, 16):
            run = base / f"coll{i}-k{k}"
            p = base / f"coll{i}.json"
            p.write_text(json.dumps(demand_to_dict(single_class("one", net.npus_per_dim, 0.0, [c], net.dim_names))))
            emit(Design("d", net, bw, workloads=(WorkloadRef("w", demand=str(p)),)), run, splits=k, overwrite=True)
            sim = simulate(run, binary, overwrite=True).simulated_time_ns
            pred = collective_time_ns(c, bw, net, TimeModel("pipelined", splits=k, local_mem_bw_gbps=1e9))
            errors.append(abs(pred / sim - 1))
            shape = " x ".join(f"{t}{n}" for t, n, _ in dims)
            print(f"{kind:<15} {shape:<42} {k:>2} {pred:>14,.0f} {sim:>14,.0f} {pred / sim - 1:>+8.3%}")
    if "astra-examples" in parts:
        print()
        if not args.examples:
            print(f"ASTRA-sim's example workloads: skipped (give --examples or set {EXAMPLES_ENV})")
        else:
            print(f"{'ASTRA-sim example':<28} {'network':<22} {'design':<20} {'predicted ns':>14} "
                  f"{'simulated ns':>14} {'error':>8}")
            for ex in find_examples(args.examples):
                for net in example_networks(ex.npus):
                    _loop_rows(ex.label, 28, ex.prefix, net, cost, base / f"astra-{ex.label}-{net.name}",
                               args.real_total_bw, binary, errors, column=f"{net.name:<22}")
    if "jobs" in parts:
        print()
        print(f"{'training job':<15} {'k':>2} {'design':<20} {'predicted ns':>14} {'simulated ns':>14} {'error':>8}")
        _job_rows(base, cost, args.total_bw, binary, errors)
    wrong = 0
    if "predict-grid" in parts:
        import predict_grid
        print(f"\n`libra-astra predict` against the binary: tools/predict_grid.py --size {args.grid_size}")
        results = predict_grid.run_grid(args.grid_size, 1, 2, binary, args.examples, base / "predict-grid")
        predict_grid.print_tables(results)
        wrong = predict_grid.report.wrong_count(results)
    if errors:
        print(f"\nlargest |error|: {max(errors):.3%} over {len(errors)} runs (target 2%)")
    print(f"runs kept in {base}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
