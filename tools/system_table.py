"""One system.json setting changed at a time, on a shipped sample: the design libra_astra
optimizes for that system.json (``optimize --system``), emitted, simulated by ASTRA-sim, and the
optimizer's predicted time against the simulator's. Settings the optimizer does not follow are
shown with ``libra-astra predict``'s time for the design optimized without them.

    python tools/system_table.py --astra-sim $ASTRA_SIM_BIN [--out DIR] [--markdown FILE]

Prints one row per setting; ``--markdown`` also writes the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = {"scheduling-policy": "LIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1, "collective-optimization": "localBWAware", "local-mem-bw": 1e9,
        "all-reduce-implementation": ["ring", "ring"], "all-gather-implementation": ["ring", "ring"],
        "reduce-scatter-implementation": ["ring", "ring"], "all-to-all-implementation": ["ring", "ring"]}
IMPL = ("all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
        "all-to-all-implementation")


def _impl(names: list[str], only: str | None = None) -> dict:
    return {k: list(names) for k in IMPL if only is None or k == only}


VARIANTS = [
    ("none (as emitted)", {}),
    ("`direct` on dimension 0", _impl(["direct", "ring"])),
    ("`doubleBinaryTree` all-reduce on dimension 0", _impl(["doubleBinaryTree", "ring"], "all-reduce-implementation")),
    ("`oneRing` on both dimensions", _impl(["oneRing", "oneRing"])),
    ("`collective-optimization: baseline`", {"collective-optimization": "baseline"}),
    ("splits 4, `active-chunks-per-dimension: 2`", {"preferred-dataset-splits": 4, "active-chunks-per-dimension": 2}),
    ("the knobs of ASTRA-sim's HGX-H100-validated example", {"preferred-dataset-splits": 4,
                                                             "active-chunks-per-dimension": 2, "endpoint-delay": 10,
                                                             "local-mem-bw": 3350}),
    ("`halvingDoubling` on dimension 0", _impl(["halvingDoubling", "ring"])),
    ("`halvingDoubling` all-reduce and `direct` all-to-all on dimension 0",
     {**_impl(["halvingDoubling", "ring"], "all-reduce-implementation"),
      **_impl(["direct", "ring"], "all-to-all-implementation")}),
]


def _cli(*args: object, ok: bool = True) -> subprocess.CompletedProcess:
    cli = [sys.executable, "-c", "import sys; from libra_astra.cli import main; sys.argv[0] = 'libra-astra'; main()"]
    r = subprocess.run([*cli, *map(str, args)], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise SystemExit(f"libra-astra {' '.join(map(str, args))} failed: {r.stderr.strip()}")
    return r


def _json(r: subprocess.CompletedProcess) -> dict:
    return json.loads(r.stdout[r.stdout.index("{"):])


def run(binary: str, out: Path, prefix: Path, network: Path, total_bw: float) -> list[dict]:
    rows = []
    for i, (label, change) in enumerate(VARIANTS):
        work = out / f"v{i}"
        work.mkdir(parents=True, exist_ok=True)
        system = work / "system.json"
        system.write_text(json.dumps({**BASE, **change}, indent=1))
        design = work / "design.json"
        r = _cli("optimize", prefix, "-n", network, "--total-bw", total_bw, "--system", system, "-o", design,
                 "--force", ok=False)
        row = {"setting": label}
        if r.returncode == 0:
            _cli("emit", design, "--out", work / "run", "--force")
            sim = _json(_cli("simulate", work / "run", "--astra-sim", binary, "--json", "--force"))
            row.update(how="optimize --system", simulated_ns=sim["simulated_time_ns"],
                       predicted_ns=sim["predicted_time_ns"], error=sim["prediction_error"])
        else:
            row["refused"] = r.stderr.strip().splitlines()[-1].removeprefix("Error: ")
            _cli("optimize", prefix, "-n", network, "--total-bw", total_bw, "-o", design, "--force")
            _cli("emit", design, "--out", work / "run", "--force")
            (work / "run/system.json").write_text(system.read_text())
            sim = _cli("simulate", work / "run", "--astra-sim", binary, "--json", "--force", ok=False)
            pred = _cli("predict", work / "run", "--json", ok=False)
            if sim.returncode == 0 and pred.returncode == 0:
                s, p = _json(sim)["simulated_time_ns"], _json(pred)["time_ns"]
                row.update(how="predict", simulated_ns=s, predicted_ns=p, error=p / s - 1)
            else:
                row.update(how="predict", simulated=(sim.stderr.strip().splitlines() or ["?"])[-1],
                           predicted=(pred.stderr.strip().splitlines() or ["?"])[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| setting changed in system.json | simulated | predicted | error | by |", "|---|---|---|---|---|"]
    for r in rows:
        if "simulated_ns" in r:
            lines.append(f"| {r['setting']} | {r['simulated_ns'] / 1e6:.4f} ms | {r['predicted_ns'] / 1e6:.4f} ms | "
                         f"{r['error']:+.3%} | {r['how']} |")
        else:
            sim = "ASTRA-sim fails" if "Error" in r.get("simulated", "") else r.get("simulated", "")
            pred = "refused, one line" if "Error" in r.get("predicted", "") else r.get("predicted", "")
            lines.append(f"| {r['setting']} | {sim} | {pred} | | {r['how']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra-sim", required=True, help="AstraSim_Analytical_Congestion_Unaware binary")
    ap.add_argument("--out", type=Path, default=None, help="work directory [default: a temporary one]")
    ap.add_argument("--prefix", type=Path, default=ROOT / "traces/dlrm_16/dlrm")
    ap.add_argument("--network", type=Path, default=ROOT / "network_configs/sample_4x4.yml")
    ap.add_argument("--total-bw", type=float, default=200.0)
    ap.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(a.astra_sim, a.out or Path(tmp), a.prefix, a.network, a.total_bw)
    table = markdown(rows)
    print(table)
    for r in rows:
        if "refused" in r:
            print(f"{r['setting']}: optimize refused: {r['refused']}")
    if a.markdown:
        a.markdown.write_text(table)


if __name__ == "__main__":
    main()
