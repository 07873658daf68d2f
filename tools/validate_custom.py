"""predict against ASTRA-sim on custom collectives (system.json ``*-implementation-custom``).

Cases: ASTRA-sim's own example (examples/system/custom_collectives: its MSCCL ring all-reduce
program for 8 NPUs, on its 8npus_1MB all-reduce microbenchmark, with a copy of its system file
that adds the keys predict needs), and programs and workloads written here (a ring like the
example's, a direct one whose sends all leave at once), on Ring, Switch, FullyConnected and
two-dimensional networks, with one or two all-reduces, and as an all-gather before a native
all-reduce.

    python tools/validate_custom.py                # binary vs predict, every case (needs $ASTRA_SIM_BIN)
    python tools/validate_custom.py --record FILE  # also write the binary's finish lines of the written cases

Needs $ASTRA_SIM_BIN; the example case also $ASTRA_SIM_EXAMPLES (an ASTRA-sim checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libra_astra.astra.predict_inputs import SimInputs, predict_inputs  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.traces import chakra_io as cio  # noqa: E402

EXAMPLE_PROGRAM = "examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce"
EXAMPLE_WORKLOAD = "examples/workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce"
EXAMPLE_NETWORK = "examples/network/analytical/Ring_8npus.yml"
# the example system file lacks these; ASTRA-sim's custom path does not read them, predict needs them
EXAMPLE_SYSTEM = {"scheduling-policy": "FIFO", "collective-optimization": "baseline", "endpoint-delay": 10,
                  "preferred-dataset-splits": 1, "local-mem-bw": 50,
                  "all-reduce-implementation-custom": [EXAMPLE_PROGRAM]}


def _net(topo, npus, bw, lat) -> str:
    return f"topology: {topo}\nnpus_count: {npus}\nbandwidth: {bw}\nlatency: {lat}\n"


RING8 = _net("[ Ring ]", "[ 8 ]", "[ 50.0 ]", "[ 500.0 ]")
# (name, program, workload, network YAML, system keys besides the custom one)
CASES = [
    ("ring program, Ring 8", "ring", "one", RING8, {}),
    ("ring program, Ring 8 at 12.5 GiB/s, 20 ns", "ring", "one", _net("[ Ring ]", "[ 8 ]", "[ 12.5 ]", "[ 20.0 ]"), {}),
    ("ring program, Switch 8", "ring", "one", _net("[ Switch ]", "[ 8 ]", "[ 50.0 ]", "[ 500.0 ]"), {}),
    ("ring program, FullyConnected 8", "ring", "one", _net("[ FullyConnected ]", "[ 8 ]", "[ 25.0 ]", "[ 100.0 ]"), {}),
    ("ring program, Switch x Ring 2x4", "ring", "one",
     _net("[ Switch, Ring ]", "[ 2, 4 ]", "[ 100.0, 30.0 ]", "[ 200.0, 900.0 ]"), {}),
    ("ring program, 2 all-reduces with compute, Switch 8", "ring", "two",
     _net("[ Switch ]", "[ 8 ]", "[ 50.0 ]", "[ 500.0 ]"), {}),
    ("ring program, 2 all-reduces back to back, endpoint-delay 0", "ring", "back", RING8, {"endpoint-delay": 0}),
    ("direct program, Ring 8", "direct", "one", RING8, {}),
    ("direct program, 2 all-reduces, Ring x Ring 4x2", "direct", "two",
     _net("[ Ring, Ring ]", "[ 4, 2 ]", "[ 50.0, 25.0 ]", "[ 500.0, 700.0 ]"), {}),
    # the program as the all-gather, then a native hierarchical ring all-reduce
    ("direct program as all-gather, native all-reduce after it, Switch x Ring 2x4", "direct", "mixed",
     _net("[ Switch, Ring ]", "[ 2, 4 ]", "[ 100.0, 30.0 ]", "[ 200.0, 900.0 ]"),
     {"custom": "all-gather", "all-reduce-implementation": ["ring", "ring"], "collective-optimization": "localBWAware"}),
]
WORKLOADS = {"one": [("ar", 1 << 20)], "two": [("comp", 5), ("ar", 1 << 20), ("comp", 3), ("ar", 4096)],
             "back": [("ar", 1 << 20), ("ar", 1 << 20)], "mixed": [("comp", 2), ("ag", 65536), ("ar", 1 << 20)]}


def write_program(prefix: Path, kind: str, npus: int = 8, size: int = 131072, reduce_us: int = 7) -> str:
    """A custom all-reduce program per rank: ``ring`` (as the example's: n - 1 steps of send,
    receive, reduce, then n - 1 of send, receive) or ``direct`` (every send at once, every
    receive, one reduction)."""
    for r in range(npus):
        nxt, prv = (r + 1) % npus, (r - 1) % npus
        nodes: list = []
        if kind == "ring":
            last: list[int] = []
            for step in range(2 * (npus - 1)):
                k = len(nodes)
                nodes.append(cio.send_node(k, f"send{step}", size, r, nxt, 0, data_deps=last))
                nodes.append(cio.recv_node(k + 1, f"recv{step}", size, prv, r, 0, data_deps=[k]))
                last = [k + 1]
                if step < npus - 1:
                    nodes.append(cio.comp_node(k + 2, f"reduce{step}", reduce_us, data_deps=last))
                    last = [k + 2]
        else:
            for o in range(1, npus):
                nodes.append(cio.send_node(len(nodes), f"send{o}", size, r, (r + o) % npus, 0))
            recvs = []
            for o in range(1, npus):
                recvs.append(len(nodes))
                nodes.append(cio.recv_node(len(nodes), f"recv{o}", size, (r - o) % npus, r, 0))
            nodes.append(cio.comp_node(len(nodes), "reduce", reduce_us, data_deps=recvs))
        cio.write_et(f"{prefix}.{r}.et", nodes, overwrite=True)
    return str(prefix)


def write_workload(prefix: Path, items, npus: int = 8) -> str:
    """A chain per rank of all-reduces (``("ar", bytes)``), all-gathers (``("ag", bytes)``) and GPU
    compute (``("comp", us)``)."""
    kinds = {"ar": "ALL_REDUCE", "ag": "ALL_GATHER"}
    for r in range(npus):
        nodes = [cio.coll_node(i, f"{k}{i}", kinds[k], v, data_deps=[i - 1] if i else []) if k in kinds
                 else cio.comp_node(i, f"comp{i}", v, data_deps=[i - 1] if i else [])
                 for i, (k, v) in enumerate(items)]
        cio.write_et(f"{prefix}.{r}.et", nodes, overwrite=True)
    return str(prefix)


def write_case(where: Path, case) -> tuple[str, str, str]:
    """(workload prefix, network file, system file) of a written case, under ``where``."""
    name, prog, wl, net, keys = case
    where.mkdir(parents=True, exist_ok=True)
    program = write_program(where / f"prog_{prog}", prog)
    workload = write_workload(where / f"wl_{wl}", WORKLOADS[wl])
    (where / "net.yml").write_text(net)
    keys = dict(keys)
    kind = keys.pop("custom", "all-reduce")
    system = {**{k: v for k, v in EXAMPLE_SYSTEM.items() if not k.endswith("-custom")}, **keys,
              f"{kind}-implementation-custom": [program]}
    (where / "system.json").write_text(json.dumps(system))
    return workload, str(where / "net.yml"), str(where / "system.json")


def run_binary(binary: str, workload: str, network: str, system: str, cwd: str) -> dict[int, tuple[int, int]]:
    """Every rank's (finished, exposed communication) cycles, as the binary prints them."""
    memory = Path(system).resolve().with_name("memory.json")
    memory.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    out = subprocess.run([binary, f"--workload-configuration={workload}", f"--system-configuration={system}",
                          f"--network-configuration={network}", f"--remote-memory-configuration={memory}"],
                         cwd=cwd, capture_output=True, text=True, timeout=300)
    return {int(r): (int(t), int(e)) for r, t, e in
            re.findall(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles", out.stdout)}


def predicted(workload: str, network: str, system: str, cwd: str) -> dict[int, tuple[int, int]]:
    here = os.getcwd()
    os.chdir(cwd)       # ASTRA-sim opens the program's files from its working directory
    try:
        p = predict_inputs(SimInputs(workload, network, system))
    finally:
        os.chdir(here)
    return {r.rank: (r.finished_ns, r.exposed_comm_ns) for r in p.prediction.ranks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="FILE", help="write the binary's finish lines of the written cases")
    a = ap.parse_args()
    binary = os.environ.get("ASTRA_SIM_BIN")
    if not binary:
        print("set ASTRA_SIM_BIN to ASTRA-sim's AstraSim_Analytical_Congestion_Unaware")
        return 2
    recorded = []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ex = os.environ.get("ASTRA_SIM_EXAMPLES")
        if ex:
            sysfile = Path(tmp) / "custom_collective.json"
            sysfile.write_text(json.dumps(EXAMPLE_SYSTEM))
            args = (EXAMPLE_WORKLOAD, EXAMPLE_NETWORK, str(sysfile))
            rows.append(("ASTRA-sim example (its system file plus the keys predict needs)",
                         run_binary(binary, *args, ex), predicted(*args, ex)))
        for i, case in enumerate(CASES):
            args = write_case(Path(tmp) / f"c{i}", case)
            sim = run_binary(binary, *args, tmp)
            rows.append((case[0], sim, predicted(*args, tmp)))
            recorded.append({"case": case[0], "finished": [[r, *v] for r, v in sorted(sim.items())]})
    worst = 0.0
    for name, sim, pred in rows:
        err = max(abs(pred[r][0] - sim[r][0]) / sim[r][0] for r in sim) if sim and set(sim) == set(pred) else float("inf")
        worst = max(worst, err)
        print(f"{name}: ASTRA-sim {sorted({v[0] for v in sim.values()})} ns, predict "
              f"{sorted({v[0] for v in pred.values()})} ns, {'equal on every rank' if err == 0 else f'error {err:.2%}'}")
    if a.record:
        Path(a.record).write_text(json.dumps({"recorded_with": "astra-sim 518bd51 AstraSim_Analytical_Congestion_Unaware",
                                              "written_by": "tools/validate_custom.py --record",
                                              "cases": recorded}, indent=1) + "\n")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LibraError as e:
        print(f"Error: {e}")
        sys.exit(1)
