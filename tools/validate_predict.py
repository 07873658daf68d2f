#!/usr/bin/env python3
"""`libra-astra predict` against the real ASTRA-sim binary, rank by rank, on the same inputs.

Sets (``--only``, repeatable; default all):

- ``samples``: the shipped trace sets (traces/*/) with their groups file, on their network
  (network_configs/*.yml written as ASTRA-sim's analytical YAML);
- ``emitted``: the same sets emitted by ``libra-astra emit`` (a design at fixed bandwidths), the run
  directory's own inputs;
- ``real``: tests/fixtures/real/* after ``doctor --fix`` (ASTRA-sim cannot read them as
  recorded), on tests/fixtures/real/ring*.yml;
- ``examples``: ASTRA-sim's own example workloads, networks and system files, unmodified
  (``--examples`` or $ASTRA_SIM_EXAMPLES: an ASTRA-sim checkout).

Each input runs with its own system.json and with variants of it: every implementation of
ring/direct/halvingDoubling/doubleBinaryTree with the other settings drawn (seeded) from active
chunks {1, 2}, splits {1, 4}, endpoint-delay {1, 10}, local-mem-bw {50, 1600} and
localBWAware/baseline. A case agrees when every rank's finish time and exposed communication
equal the simulator's (the error is the largest relative difference over ranks), or when predict
refuses it and ASTRA-sim does not finish it either.

Usage: ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware python tools/validate_predict.py
       [--only SET] [--variants 2] [--seed 3] [--jobs 2] [--out DIR] [--record FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from astra_examples import EXAMPLES_ENV, find_examples  # noqa: E402
from libra_astra.astra import emit  # noqa: E402
from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.astra.predict_inputs import SimInputs, predict_inputs  # noqa: E402
from libra_astra.astra.run import resolve_binary  # noqa: E402
from libra_astra.doctor import fix  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.model.network import load_network  # noqa: E402
from libra_astra.optimize.design import Design, WorkloadRef  # noqa: E402

SAMPLES = [("gpt3_tp8_dp8", "traces/gpt3_tp8_dp8/gpt3", "network_configs/sample_8x8.yml"),
           ("dlrm_16", "traces/dlrm_16/dlrm", "network_configs/sample_4x4.yml"),
           ("resnet50_dp16", "traces/resnet50_dp16/resnet50", "network_configs/sample_4x4.yml"),
           ("gpt_tp2_pp2_dp4", "traces/gpt_tp2_pp2_dp4/gpt", "network_configs/sample_4x4.yml")]
REAL = [("param_dlrm8", "ring2x4.yml"), ("ddp4", "ring2x2.yml"), ("tpdp4", "ring2x2.yml"),
        ("tpdp8", "ring2x4.yml"), ("pipeline4", "ring2x2.yml")]
BW_GIBPS = [200.0, 50.0, 25.0, 12.5]       # ASTRA-sim YAML values per dimension
BASE_SYSTEM = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
               "preferred-dataset-splits": 4, "collective-optimization": "localBWAware", "local-mem-bw": 1600}


def base_system(dims: int) -> dict:
    """ASTRA-sim's example system file's settings (Ring_4chunks.json) on ``dims`` dimensions."""
    return {**BASE_SYSTEM, **{k: ["ring"] * dims for k in KEYS}}
IMPLS = ["ring", "direct", "halvingDoubling", "doubleBinaryTree"]
KEYS = ["all-reduce-implementation", "reduce-scatter-implementation", "all-gather-implementation",
        "all-to-all-implementation"]
MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}
RECORD_REAL = ("param_dlrm8", "pipeline4")     # the real sets --record keeps (the gloo ones have no collective)


class Case(NamedTuple):
    set: str
    workload: str          # label
    variant: str
    prefix: str
    network: str           # ASTRA-sim network YAML
    system: dict
    groups: str | None
    dims: int


def astra_yaml(net_path: Path, out: Path) -> Path:
    """Our network file as ASTRA-sim's analytical YAML, with BW_GIBPS."""
    net = load_network(net_path)
    out.write_text(f"topology: [ {', '.join(d.topology for d in net.dims)} ]\n"
                   f"npus_count: [ {', '.join(str(d.npus) for d in net.dims)} ]\n"
                   f"bandwidth: [ {', '.join(str(b) for b in BW_GIBPS[:net.num_dims])} ]\n"
                   f"latency: [ {', '.join(str(float(d.latency_ns)) for d in net.dims)} ]\n")
    return out


def variants(base: dict, dims: int, rng: random.Random, per_impl: int) -> list[tuple[str, dict]]:
    """The system file itself, then ``per_impl`` drawn variants for each implementation."""
    out = [("own", base)]
    for impl in IMPLS:
        for j in range(per_impl):
            s = dict(base)
            s.update({k: [impl] * dims for k in KEYS})
            if impl == "halvingDoubling" and j:
                # ASTRA-sim has no halving-doubling all-to-all (it exits; predict refuses): the first
                # variant shows that, the others time the rest of the workload
                s["all-to-all-implementation"] = ["direct"] * dims
            s["active-chunks-per-dimension"] = rng.choice([1, 2])
            s["preferred-dataset-splits"] = rng.choice([1, 4])
            s["endpoint-delay"] = rng.choice([1, 10])
            s["local-mem-bw"] = rng.choice([50, 1600])
            s["collective-optimization"] = rng.choice(["localBWAware", "baseline"])
            label = (f"{impl} ac{s['active-chunks-per-dimension']} k{s['preferred-dataset-splits']} "
                     f"ed{s['endpoint-delay']} mem{s['local-mem-bw']} {s['collective-optimization'][:5]}")
            out.append((label, s))
    return out


def cases(sets: set[str], base: Path, examples: str | None, rng: random.Random, per_impl: int) -> list[Case]:
    out = []
    if "samples" in sets or "emitted" in sets:
        for name, prefix, network in SAMPLES:
            net = load_network(ROOT / network)
            yml = astra_yaml(ROOT / network, base / f"{name}.yml")
            groups = ROOT / f"{prefix}.groups.json"
            if "samples" in sets:
                out += [Case("samples", name, v, str(ROOT / prefix), str(yml), s,
                             str(groups) if groups.is_file() else None, net.num_dims)
                        for v, s in variants(base_system(net.num_dims), net.num_dims, rng, per_impl)]
            if "emitted" in sets:
                run = base / f"emitted-{name}"
                bw = tuple(b * 2**30 / 1e9 for b in BW_GIBPS[:net.num_dims])
                emit(Design(name, net, bw, workloads=(WorkloadRef(name, traces=str(ROOT / prefix),
                                                                  comm_groups=str(groups) if groups.is_file() else None),)),
                     run, splits=4, overwrite=True)
                own = json.loads((run / "system.json").read_text())
                n = len(own["all-reduce-implementation"])
                g = run / "comm_groups.json"
                out += [Case("emitted", name, v, str(run / "workload" / Path(prefix).name), str(run / "network.yml"),
                             s, str(g) if g.is_file() else None, n) for v, s in variants(own, n, rng, per_impl)]
    if "real" in sets:
        for name, network in REAL:
            fixed = base / "real" / name
            fixed.mkdir(parents=True, exist_ok=True)
            res = fix(ROOT / "tests/fixtures/real" / name / name, fixed / name,
                      network=ROOT / "tests/fixtures/real" / network, overwrite=True)
            yml = astra_yaml(ROOT / "tests/fixtures/real" / network, base / f"real-{network}")
            dims = load_network(ROOT / "tests/fixtures/real" / network).num_dims
            out += [Case("real", name, v, str(fixed / name), str(yml), s, res.groups_file, dims)
                    for v, s in variants(base_system(dims), dims, rng, per_impl)]
    if "examples" in sets and examples:
        root = Path(examples)
        root = root if (root / "network").is_dir() else root / "examples"
        systems = sorted((root / "system" / "native_collectives").glob("*.json"))
        for ex in find_examples(examples):
            nets = [p for p in sorted((root / "network" / "analytical").glob("*.yml"))
                    if f"npus_count: [ {ex.npus} ]" in p.read_text()]
            for net in nets:
                for sysfile in systems:
                    own = json.loads(sysfile.read_text())
                    for v, s in variants(own, 1, rng, per_impl if sysfile == systems[0] else 0):
                        out.append(Case("examples", f"{ex.label} {net.stem}", v if v != "own" else sysfile.stem,
                                        str(ex.prefix), str(net), s, None, 1))
    return out


def run_case(case: Case, binary: str, work: Path, timeout: float) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    system = work / "system.json"
    system.write_text(json.dumps(case.system, indent=1))
    memory = work / "memory.json"
    memory.write_text(json.dumps(MEMORY))
    args = [binary, f"--workload-configuration={case.prefix}", f"--system-configuration={system}",
            f"--network-configuration={case.network}", f"--remote-memory-configuration={memory}",
            f"--logging-folder={work / 'log'}"]
    if case.groups:
        args.append(f"--comm-group-configuration={case.groups}")
    sim: dict | str
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        ranks = {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in parse_output(proc.stdout).ranks}
        sim = ranks if proc.returncode == 0 and ranks else f"exit {proc.returncode}, {len(ranks)} ranks finished"
    except subprocess.TimeoutExpired:
        sim = f"no end after {timeout:g} s"
    try:
        p = predict_inputs(SimInputs(case.prefix, case.network, str(system), case.groups))
        pred: dict | str = {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in p.prediction.ranks}
    except LibraError as e:
        pred = f"refused: {e}"
    return {"case": case, "sim": sim, "pred": pred, "args": args}


def compare(res: dict) -> tuple[str, float | None]:
    sim, pred = res["sim"], res["pred"]
    if isinstance(sim, str) and isinstance(pred, str):
        return "both refuse", None
    if isinstance(pred, str):
        return f"predict refuses, ASTRA-sim runs it: {pred}", None
    if isinstance(sim, str):
        return f"MISMATCH ASTRA-sim: {sim}; predict answered", None
    if set(sim) != set(pred):
        return f"MISMATCH ranks: simulated {len(sim)}, predicted {len(pred)}", None
    err = 0.0
    for r, (t, e) in sim.items():
        pt, pe = pred[r]
        err = max(err, abs(pt - t) / max(t, 1), abs(pe - e) / max(t, 1))
    return ("exact" if err == 0 else f"{err:+.4%}"), err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=("samples", "emitted", "real", "examples"))
    ap.add_argument("--variants", type=int, default=2, help="drawn variants per implementation [2]")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per simulator run [300]")
    ap.add_argument("--examples", default=os.environ.get(EXAMPLES_ENV))
    ap.add_argument("--out", help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--record", help="write the cases on this repository's traces (samples, two real sets) with the "
                    "simulator's finished lines here (tests/fixtures/astra_predict_recorded.json)")
    args = ap.parse_args()
    try:
        binary = resolve_binary()       # $ASTRA_SIM_BIN, checked as simulate checks it
    except LibraError as e:
        print(e, file=sys.stderr)
        return 2
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="libra_predict_"))
    base.mkdir(parents=True, exist_ok=True)
    sets = set(args.only or ("samples", "emitted", "real", "examples"))
    todo = cases(sets, base, args.examples, random.Random(args.seed), args.variants)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda ic: run_case(ic[1], binary, base / "runs" / str(ic[0]), args.timeout),
                                enumerate(todo)))
    print(f"{'set':<9} {'workload':<34} {'system':<40} {'ranks':>5} {'simulated ns':>14} {'predicted ns':>14}  result")
    worst: dict[str, list] = {}
    for res in results:
        c = res["case"]
        verdict, err = compare(res)
        sim = max(t for t, _ in res["sim"].values()) if isinstance(res["sim"], dict) else None
        pred = max(t for t, _ in res["pred"].values()) if isinstance(res["pred"], dict) else None
        n = len(res["sim"]) if isinstance(res["sim"], dict) else 0
        print(f"{c.set:<9} {c.workload[:34]:<34} {c.variant[:40]:<40} {n:>5} "
              f"{'-' if sim is None else f'{sim:,}':>14} {'-' if pred is None else f'{pred:,}':>14}  {verdict}")
        w = worst.setdefault(c.set, [0, 0, 0, 0, 0.0, 0])
        w[0] += 1
        w[1] += verdict == "exact"
        w[2] += verdict == "both refuse"
        w[3] += verdict.startswith("predict refuses")
        w[4] = max(w[4], err or 0.0)
        w[5] += verdict.startswith("MISMATCH")
    print()
    for s, (n, exact, refused, alone, err, bad) in worst.items():
        print(f"{s:<9} {n} runs: {exact} exact on every rank, {refused} refused by both, {alone} refused by predict "
              f"alone, {bad} mismatched; largest error {err:.4%}")
    if args.record:
        record(args.record, results)
    print(f"runs kept in {base}")
    return 0


def record(path: str, results: list[dict]) -> None:
    """Cases whose workload is in this repository (samples, the real sets' originals), with the
    simulator's finished lines, for tests/test_predict.py."""
    keep = []
    for res in results:
        c = res["case"]
        if (c.set not in ("samples", "real") or c.set == "real" and c.workload not in RECORD_REAL
                or not isinstance(res["sim"], dict)):
            continue
        prefix = (Path(c.prefix).relative_to(ROOT) if c.set == "samples" else
                  Path("tests/fixtures/real") / c.workload / c.workload)
        keep.append({"set": c.set, "variant": c.variant, "workload": str(prefix),
                     "network": Path(c.network).read_text(), "system": c.system,
                     "comm_groups": (str(Path(c.groups).relative_to(ROOT)) if c.groups and c.set == "samples"
                                     else None if not c.groups else Path(c.groups).read_text()),
                     "finished": sorted([r, t, e] for r, (t, e) in res["sim"].items())})
    Path(path).write_text(json.dumps({"recorded_with": "astra-sim 518bd51 congestion-unaware", "cases": keep},
                                     indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
