"""Seeded mutation fuzzer for Chakra ET input (run by test_fuzz_contract.py in a child process).

Mutates real rank files (byte flips, insertions, deletions, cuts, splices, varint and tag
edits) and feeds them to the trace reader and, for some cases, the whole demand pipeline.
Prints one JSON object: the number of cases, clean LibraErrors, acceptances, and any other
exception (type, where) with the seed that reproduces it.

    python tests/fuzz_et.py --seed 1 --cases 2000
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mutate(rng: random.Random, data: bytes, donors: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        if not b:
            break
        op = rng.random()
        p = rng.randrange(len(b))
        if op < 0.25:
            b[p] = rng.randrange(256)
        elif op < 0.35:
            b[p] ^= 1 << rng.randrange(8)
        elif op < 0.5:
            del b[p:p + rng.randint(1, 16)]
        elif op < 0.62:
            b[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op < 0.7:
            del b[rng.randrange(1, len(b) + 1):]
        elif op < 0.8:   # splice a piece of another trace
            d = rng.choice(donors)
            q = rng.randrange(len(d))
            b[p:p] = d[q:q + rng.randint(1, 64)]
        elif op < 0.9:   # long varints and boundary values
            b[p:p] = rng.choice([b"\xff" * 9 + b"\x01", b"\x80" * 10, b"\xff\xff\xff\xff\x0f", b"\x00", b"\x52",
                                 b"\x52\xff", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"])
        else:            # duplicate a region (repeated fields, repeated nodes)
            q = rng.randrange(len(b))
            b[p:p] = b[q:q + rng.randint(1, 128)]
    return bytes(b)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--pipeline-every", type=int, default=10)
    args = ap.parse_args()

    from libra_astra.errors import LibraError
    from libra_astra.model.network import load_network
    from libra_astra.traces.reader import TraceReader
    from libra_astra.demand.from_traces import demand_from_traces

    sets = {"dlrm_16/dlrm": "sample_4x4.yml", "gpt_tp2_pp2_dp4/gpt": "sample_4x4.yml",
            "resnet50_dp16/resnet50": "sample_4x4.yml"}
    donors = [Path(f"{ROOT / 'traces' / s}.{r}.et").read_bytes() for s in sets for r in (0, 1)]
    # recorded PyTorch traces (METADATA nodes, many attributes) as bases for the reader-only cases
    real = [gzip.decompress(p.read_bytes()) for p in sorted((ROOT / "tests" / "fixtures" / "real").glob("*/*.0.et.gz"))]
    rng = random.Random(args.seed)
    report = {"seed": args.seed, "cases": 0, "errors": 0, "accepted": 0, "crashes": []}
    work = Path(tempfile.mkdtemp(prefix="fuzz_et."))
    try:
        for case in range(args.cases):
            set_name = rng.choice(sorted(sets))
            rank = rng.randrange(16)
            src = Path(f"{ROOT / 'traces' / set_name}.{rank}.et")
            data = mutate(rng, src.read_bytes(), donors)
            report["cases"] += 1
            try:
                if case % args.pipeline_every == 0:
                    d = work / f"c{case}"
                    d.mkdir()
                    base = Path(set_name).name
                    for r in range(16):
                        shutil.copy(f"{ROOT / 'traces' / set_name}.{r}.et", d / f"{base}.{r}.et")
                    groups = Path(f"{ROOT / 'traces' / set_name}.groups.json")
                    (d / f"{base}.{rank}.et").write_bytes(data)
                    net = load_network(ROOT / "network_configs" / sets[set_name])
                    demand_from_traces(d / base, net, comm_groups=groups if groups.exists() else None)
                    shutil.rmtree(d)
                else:
                    if real and rng.random() < 0.4:
                        data = mutate(rng, rng.choice(real), donors)
                    TraceReader().parse(data, f"case{case}.et")
                report["accepted"] += 1
            except LibraError as e:
                if "\n" in str(e):
                    report["crashes"].append({"case": case, "type": "multi-line LibraError", "at": str(e)[:200]})
                report["errors"] += 1
            except Exception as e:   # the contract: nothing but LibraError
                tb = traceback.extract_tb(e.__traceback__)[-1]
                report["crashes"].append({"case": case, "type": type(e).__name__,
                                          "at": f"{Path(tb.filename).name}:{tb.lineno} {tb.name}"})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
