#!/usr/bin/env python3
"""`libra-astra predict` against ASTRA-sim's congestion-unaware binary over a covering grid of settings.

Two parts, each run through ``predict_inputs`` (what ``libra-astra predict`` calls) and through the
binary on the same files, every rank's finish time and exposed communication compared:

- ``grid``: small networks (1-4 dimensions of Ring/FullyConnected/Switch) whose ranks run a
  collective (all-reduce, reduce-scatter, all-gather, all-to-all) or a send/recv to a neighbour,
  written as Chakra ET with mlc-chakra's protobuf schema (libra_astra.traces.chakra_io). Every
  value of every factor below appears, and every pair of values of two factors (``--size
  pairs``) or every triple (``--size triples``): a greedy covering design, not the product.
- ``inputs``: the shipped samples (traces/), the emitted run directories of them, the real
  PyTorch fixtures (tests/fixtures/real after ``doctor --fix``) and ASTRA-sim's own example
  workloads, networks and system files (unmodified; $ASTRA_SIM_EXAMPLES), each with its own
  system.json and with the system variants of a pairwise cover of the system settings.

A case agrees when predict answers and ASTRA-sim finishes every rank, or when predict refuses it
(one line naming the file and the key) and ASTRA-sim does not finish it either (it exits, aborts
or no rank finishes). Prints every case, a summary table, and writes it as markdown (``--markdown``).

Usage: ASTRA_SIM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware python tools/predict_grid.py
       [--size smoke|pairs|triples] [--seed 1] [--jobs 2] [--markdown docs/benchmarks.md]
       [--record tests/fixtures/predict_grid_recorded.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.astra.predict_inputs import SimInputs, predict_inputs  # noqa: E402
from libra_astra.doctor import diagnose  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.traces import chakra_io as cio  # noqa: E402
import predict_grid_report as report  # noqa: E402

IMPLS = ["ring", "direct", "direct2", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect",
         "oneHalvingDoubling"]
KINDS = ["ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL", "SEND_RECV"]
KEYS = {"ALL_REDUCE": "all-reduce-implementation", "REDUCE_SCATTER": "reduce-scatter-implementation",
        "ALL_GATHER": "all-gather-implementation", "ALL_TO_ALL": "all-to-all-implementation"}
TOPOLOGIES = ["Ring", "FullyConnected", "Switch"]
SIZES = {"64KiB": 1 << 16, "1MiB": 1 << 20, "odd": (3 << 18) + 12345}
# The system settings: every value of each is in every design.
SETTINGS = {
    "implementation": IMPLS,
    "mix": ["uniform", "per-dimension", "per-kind"],
    "preferred-dataset-splits": [1, 2, 4, 16],
    "active-chunks-per-dimension": [1, 2, 4],
    "scheduling-policy": ["LIFO", "FIFO"],
    "collective-optimization": ["localBWAware", "baseline"],
    "endpoint-delay": [0, 1, 10, 100],
    "local-mem-bw": [50, 1600],
    "roofline-enabled": [0, 1],
    "num-queues-per-dim": [1, 2],
}
# The workload and network, for the grid part.
SHAPES = {"kind": KINDS, "dims": [1, 2, 3, 4], "topology": TOPOLOGIES, "size": list(SIZES),
          "chain": [1, 2], "lead": ["compute", "none"]}
MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}
BINARY_NAME = "astra-sim 518bd51 congestion-unaware"
STRENGTH = {"smoke": 2, "pairs": 2, "triples": 3}


def cover(factors: dict[str, list], strength: int, rng: random.Random, tries: int = 40) -> list[dict]:
    """Rows (factor -> value) in which every ``strength``-tuple of values of different factors
    appears at least once: each row is the best of ``tries`` random rows seeded with a tuple not
    yet covered (greedy, as AETG)."""
    names = list(factors)
    combos = list(itertools.combinations(range(len(names)), strength))
    todo = {(c, vals) for c in combos for vals in itertools.product(*(range(len(factors[names[i]])) for i in c))}
    rows = []
    while todo:
        pending = list(todo)
        best, best_new = None, -1
        for _ in range(tries):
            c, vals = rng.choice(pending)
            row = [rng.randrange(len(factors[n])) for n in names]
            for i, v in zip(c, vals):
                row[i] = v
            new = sum((cc, tuple(row[i] for i in cc)) in todo for cc in combos)
            if new > best_new:
                best, best_new = row, new
        todo -= {(cc, tuple(best[i] for i in cc)) for cc in combos}
        rows.append({n: factors[n][v] for n, v in zip(names, best)})
    return rows


def implementations(row: dict, dims: int, power2: bool, rng: random.Random) -> dict[str, list[str]]:
    """The four *-implementation lists of a row: one name everywhere, or others on the higher
    dimensions (per-dimension), or on the other kinds (per-kind)."""
    impl = row["implementation"]
    pool = [n for n in IMPLS if power2 or n not in ("halvingDoubling", "doubleBinaryTree", "oneHalvingDoubling")]
    out = {}
    for kind, key in KEYS.items():
        own = kind == row.get("kind", "ALL_REDUCE") or row["mix"] != "per-kind"
        first = impl if own else rng.choice(pool)
        rest = [rng.choice(["ring", "direct", "direct2"]) if row["mix"] == "per-dimension" else first
                for _ in range(dims - 1)]
        out[key] = [first, *rest]
    return out


def apply_settings(base: dict, row: dict, dims: int, power2: bool, rng: random.Random) -> dict:
    """``base`` (a system.json) with the row's settings."""
    s = dict(base)
    s.update(implementations(row, dims, power2, rng))
    for key in ("preferred-dataset-splits", "active-chunks-per-dimension", "scheduling-policy",
                "collective-optimization", "endpoint-delay", "local-mem-bw", "roofline-enabled"):
        s[key] = row[key]
    if row["roofline-enabled"]:
        s["peak-perf"] = rng.choice([50, 400, 1000])
    return s


def label(row: dict) -> str:
    return (f"{row['implementation']}/{row['mix'][:5]} k{row['preferred-dataset-splits']} "
            f"ac{row['active-chunks-per-dimension']} {row['scheduling-policy']} {row['collective-optimization'][:5]} "
            f"ed{row['endpoint-delay']} mem{row['local-mem-bw']} roof{row['roofline-enabled']} "
            f"q{row['num-queues-per-dim']}")


def grid_case(row: dict, index: int, seed: int, base: Path) -> dict:
    """A network, system.json and one ET per rank for a grid row, written under ``base``."""
    rng = random.Random(f"{seed}-{index}")
    dims, impl = row["dims"], row["implementation"]
    power2 = impl in ("halvingDoubling", "doubleBinaryTree", "oneHalvingDoubling")
    choices = [2, 4, 8] if power2 else [2, 3, 4, 6, 8]
    npus = [rng.choice(choices) for _ in range(dims)]
    while _prod(npus) > 64:
        npus = [rng.choice([2, 4] if power2 else [2, 3, 4]) for _ in range(dims)]
    t0 = TOPOLOGIES.index(row["topology"])
    network = {"topology": [TOPOLOGIES[(t0 + d) % 3] for d in range(dims)], "npus_count": npus,
               "bandwidth": [rng.choice([25.0, 50.0, 100.0, 12.5 * rng.randint(1, 30)]) for _ in range(dims)],
               "latency": [rng.choice([0.0, 100.0, 500.0, 700.0]) for _ in range(dims)]}
    system = apply_settings({}, row, dims, power2, rng)
    d = base / f"grid{index}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "network.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in network.items()))
    (d / "system.json").write_text(json.dumps(system, indent=1))
    size, kind, n = SIZES[row["size"]], row["kind"], _prod(npus)
    axis = rng.randrange(dims)
    stride = _prod(npus[:axis])
    # the same compute on every rank: ranks reaching a collective apart are timed from the last one
    micros, ops, tensor = rng.choice([3, 40]), rng.choice([1 << 30, 3 << 33]), rng.choice([1 << 20, 1 << 27])
    for r in range(n):
        nodes, last = [], []
        if row["lead"] == "compute":
            nodes.append(cio.comp_node(0, "gemm", micros, num_ops=ops, tensor_size=tensor))
            last = [0]
        if kind == "SEND_RECV":
            coord = (r // stride) % npus[axis]
            peer = lambda step: r + (((coord + step) % npus[axis]) - coord) * stride  # noqa: E731
            nodes.append(cio.send_node(1, "send", size, r, peer(1), 7, ctrl_deps=last))
            nodes.append(cio.recv_node(2, "recv", size, peer(-1), r, 7, ctrl_deps=last))
            last = [1, 2]
        else:
            nodes.append(cio.coll_node(1, "coll", kind, size, ctrl_deps=last))
            last = [1]
        if row["chain"] == 2:
            nodes.append(cio.coll_node(3, "coll2", "ALL_GATHER" if kind == "ALL_REDUCE" else "ALL_REDUCE",
                                       size // 4, ctrl_deps=last))
        cio.write_et(d / f"w.{r}.et", nodes, overwrite=True)
    shape = "x".join(f"{t[0]}{k}" for t, k in zip(network["topology"], npus))
    return {"set": "grid", "workload": f"{kind} {row['size']} {shape} c{row['chain']} {row['lead']}",
            "variant": label(row), "prefix": str(d / "w"), "network": str(d / "network.yml"),
            "system": str(d / "system.json"), "groups": None, "queues": row["num-queues-per-dim"],
            "factors": {**row}}


def input_cases(sets: set[str], base: Path, examples: str | None, rows: list[dict], seed: int) -> list[dict]:
    """The shipped, emitted, real and example inputs, each with its own system.json and the rows."""
    import validate_predict as vp
    base.mkdir(parents=True, exist_ok=True)
    out = []
    for i, c in enumerate(vp.cases(sets, base, examples, random.Random(seed), 0)):
        rng = random.Random(f"{seed}-in-{i}")
        variants = [(c.variant, c.system, None)]
        if c.set != "examples" or c.variant == "Ring_4chunks":    # the rows once per example input
            variants += [(label(r), apply_settings(c.system, r, c.dims, True, rng), r) for r in rows]
        for j, (v, s, r) in enumerate(variants):
            p = base / "systems" / f"{i}-{j}.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(s, indent=1))
            out.append({"set": c.set, "workload": c.workload, "variant": v, "prefix": c.prefix, "network": c.network,
                        "system": str(p), "groups": c.groups, "queues": r["num-queues-per-dim"] if r else 1,
                        "factors": {**(r or {}), "system": "own" if r is None else "row"}})
    return out


def run_case(case: dict, binary: str, work: Path, timeout: float) -> dict:
    """The binary's and predict's every rank (finish, exposed), or the reason each gave none."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "memory.json").write_text(json.dumps(MEMORY))
    args = [binary, f"--workload-configuration={case['prefix']}", f"--system-configuration={case['system']}",
            f"--network-configuration={case['network']}", f"--remote-memory-configuration={work / 'memory.json'}",
            f"--logging-folder={work / 'log'}", f"--num-queues-per-dim={case['queues']}"]
    if case["groups"]:
        args.append(f"--comm-group-configuration={case['groups']}")
    out = {"lines": []}
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=work)
        ranks = {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in parse_output(proc.stdout).ranks}
        npus = _npus(case)
        if proc.returncode == 0 and len(ranks) == npus:
            out["sim"] = ranks
            out["lines"] = [ln for ln in proc.stdout.splitlines() if "finished," in ln]
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            out["sim"] = f"exit {proc.returncode}, {len(ranks)} of {npus} ranks finished: {tail[0][:80]}"
    except subprocess.TimeoutExpired:
        out["sim"] = f"no end after {timeout:g} s"
    try:
        p = predict_inputs(SimInputs(case["prefix"], case["network"], case["system"], case["groups"], case["queues"]))
        out["pred"] = {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in p.prediction.ranks}
    except LibraError as e:
        out["pred"] = f"{e}"
    try:        # doctor --system: does it say ASTRA-sim fails (a finding of severity "fails")?
        diag = diagnose(case["prefix"], network=case["network"], groups=case["groups"], system=case["system"])
        codes = sorted({f.code for f in diag.findings if f.severity == "fails"})
        out["doctor"] = ("fails: " + ", ".join(codes)) if codes else "runs"
    except LibraError as e:
        out["doctor"] = f"refuses: {e}"
    return out


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _npus(case: dict) -> int:
    from libra_astra.files import load_yaml
    data = load_yaml(case["network"], "network")
    if "npus_count" in data:
        return _prod(data["npus_count"])
    return _prod(d["npus"] for d in data["dimensions"])


def run_grid(size: str, seed: int, jobs: int, binary: str, examples: str | None, base: Path,
             sets: set[str] | None = None, timeout: float = 120.0) -> list[dict]:
    """Every case of the design of ``size``, run through predict and the binary: the case, both
    answers, the verdict and the error."""
    sets = set(sets or ("grid", "samples", "emitted", "real", "examples"))
    grid_rows = cover({**SETTINGS, **SHAPES}, STRENGTH[size], random.Random(seed))
    set_rows = cover(SETTINGS, 2, random.Random(seed + 1)) if size != "smoke" else []
    if size == "smoke":
        grid_rows = grid_rows[:12]
    cases = [grid_case(r, i, seed, base / "grid") for i, r in enumerate(grid_rows)] if "grid" in sets else []
    cases += input_cases(sets - {"grid"}, base / "inputs", examples, set_rows, seed)
    with ThreadPoolExecutor(jobs) as pool:
        outs = list(pool.map(lambda ic: run_case(ic[1], binary, base / "runs" / str(ic[0]), timeout),
                             enumerate(cases)))
    results = []
    for case, o in zip(cases, outs):
        v, err = report.verdict(o)
        results.append({"case": case, **o, "verdict": v, "error": err})
    return results


def tables(results: list[dict]) -> list:
    return report.tables(results, list(SETTINGS) + list(SHAPES))


def print_tables(results: list[dict], echo=print) -> None:
    report.print_tables(results, list(SETTINGS) + list(SHAPES), echo)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=tuple(STRENGTH), default="triples",
                    help="smoke: 12 grid cases and the inputs with their own system.json; pairs: every pair of "
                         "values; triples: every triple of grid values [triples]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", action="append", choices=("grid", "samples", "emitted", "real", "examples"))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per simulator run [120]")
    ap.add_argument("--examples", default=os.environ.get("ASTRA_SIM_EXAMPLES"))
    ap.add_argument("--binary", default=os.environ.get("ASTRA_SIM_BIN"))
    ap.add_argument("--markdown", type=Path, help="write the tables here")
    ap.add_argument("--record", type=Path, help="write up to --record-count small grid cases with the binary's "
                                                "finished lines here (tests/fixtures/predict_grid_recorded.json)")
    ap.add_argument("--record-count", type=int, default=24)
    ap.add_argument("--out", help="keep the runs here (default: a temporary directory)")
    args = ap.parse_args()
    if not args.binary:
        ap.error("give --binary or set ASTRA_SIM_BIN")
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="libra_grid_"))
    results = run_grid(args.size, args.seed, args.jobs, args.binary, args.examples, base, set(args.only or ()),
                       args.timeout)
    report.print_results(results)
    print_tables(results)
    command = f"tools/predict_grid.py --size {args.size} --seed {args.seed}" + "".join(
        f" --only {o}" for o in args.only or ())
    if args.markdown:
        report.write_markdown(args.markdown, report.markdown(tables(results), command))
        print(f"\nwrote {args.markdown}")
    if args.record:
        record(args.record, results, args.record_count, command)
    print(f"runs kept in {base}")
    return 0 if report.wrong_count(results) == 0 else 1


def record(path: Path, results: list[dict], count: int, command: str) -> None:
    """Small grid cases (every file inline) with the binary's finished lines, first those that add
    a factor value or a way of failing not yet kept; refused ones keep the binary's failure."""
    small = [r for r in results if r["case"]["set"] == "grid" and _npus(r["case"]) <= 16
             and r["verdict"] in ("exact", "refused")]
    keep, seen = [], set()
    for r in small:
        new = {(k, str(v)) for k, v in r["case"]["factors"].items()}
        new.add(("sim", report.short_sim(r["sim"]) if isinstance(r["sim"], str) else "finished"))
        if new - seen and len(keep) < count:
            keep.append(r)
            seen |= new
    keep += [r for r in small if r not in keep][:count - len(keep)]
    out = []
    for r in keep:
        c = r["case"]
        d = Path(c["prefix"]).parent
        out.append({"workload": c["workload"], "variant": c["variant"], "queues": c["queues"],
                    "network": Path(c["network"]).read_text(), "system": json.loads(Path(c["system"]).read_text()),
                    "et": {p.name: p.read_bytes().hex() for p in sorted(d.glob("w.*.et"))},
                    "finished": r["lines"], "astra_failed": r["sim"] if isinstance(r["sim"], str) else None})
    path.write_text(json.dumps({"recorded_with": BINARY_NAME, "command": command, "cases": out}, indent=1) + "\n")
    print(f"recorded {len(out)} cases in {path}")


if __name__ == "__main__":
    sys.exit(main())
