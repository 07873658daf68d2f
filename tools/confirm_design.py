#!/usr/bin/env python3
"""Simulate one ranked design of a search (search.json) in ASTRA-sim, optionally with the model cut
to fewer layers.

ASTRA-sim holds every ET node in memory (about 1.5 KB a node), so the full trace of a large design
can outgrow the machine: the 96-layer GPT-3 175B winner on 4,096 NPUs has 19.25 M nodes and needs
about 31 GB. Cutting the layers keeps the design (network, blocks, bandwidths, parallelization,
placement, micro-batches) and every kind of traffic, and shrinks the trace in proportion; the check
is then the time model's prediction for that trace against the simulator's time for it.

Usage:
    ASTRA_SIM_BIN=... python tools/confirm_design.py search4096/search.json --cost network_configs/cost.yml \
        --layers 24 -o /tmp/confirm24
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from libra_astra.errors import LibraError
from libra_astra.search.catalog import load_catalog
from libra_astra.search.confirm import confirm
from libra_astra.search.evaluate import Candidate, Problem
from libra_astra.search.space import Parallelization
from libra_astra.search.upstream import Constraints, load_cost, load_spec, load_yaml
from libra_astra.timing.settings import model_from_settings


def _placement(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if text.strip() in ("", "-"):
        return ()
    out = []
    for item in text.split():
        axis, dims = item.split(":")
        out.append((axis, tuple(int(d) for d in dims.split("+"))))
    return tuple(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("search_json", help="search.json written by libra-astra search")
    ap.add_argument("--cost", required=True, help="the cost file the search used")
    ap.add_argument("--rank", type=int, default=1, help="which ranked design [default: 1]")
    ap.add_argument("--layers", type=int, help="cut the transformer to this many layers (a multiple of the design's PP and of the spec's)")
    ap.add_argument("--astra-sim", dest="binary", help="ASTRA-sim binary [default: $ASTRA_SIM_BIN]")
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds for the simulation")
    ap.add_argument("-o", "--out", required=True, help="new directory for the traces and the run")
    ap.add_argument("--force", action="store_true", help="replace an earlier run in --out")
    args = ap.parse_args()
    try:
        data = json.loads(Path(args.search_json).read_text())
        rows = data["top"]
        if not 1 <= args.rank <= len(rows):
            raise LibraError(f"{args.search_json}: --rank {args.rank} is not one of the {len(rows)} ranked designs")
        row = rows[args.rank - 1]
        raw = load_yaml(data["spec"], "trace spec")
        full_layers = raw["model"].get("layers")
        if args.layers is not None:
            if raw["model"].get("type") != "transformer":
                raise LibraError("--layers applies to transformer specs only")
            pps = sorted({int(row["pp"]) * int(row.get("virtual_stages", 1)),
                          int((raw.get("parallel") or {}).get("pp", 1))})
            if args.layers < 1 or any(args.layers % pp for pp in pps):
                raise LibraError(f"--layers {args.layers}: give a positive multiple of the pipeline depths {pps} "
                                 "(the design's and the spec's)")
            raw["model"]["layers"] = args.layers
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=args.force)
        spec_path = out / "spec.yml"
        spec_path.write_text(yaml.safe_dump(raw, sort_keys=False))
        catalog = load_catalog(data["catalog"])
        level_index = {lv.name: i for i, lv in enumerate(catalog.levels)}
        tm = data["time_model"]
        c = data["constraints"]
        problem = Problem(load_spec(str(spec_path)), catalog, load_cost(args.cost), data["objective"],
                          Constraints(c["total_bw_gbps"], c["total_bw_is_upper_bound"], c["budget_usd"],
                                      c["time_target_ns"]),
                          model_from_settings(tm, args.search_json))
        cand = Candidate(tuple(int(x) for x in row["shape"].split("x")), tuple(row["blocks"].split("x")),
                         tuple(level_index[n] for n in row["levels"].split("x")),
                         Parallelization(int(row["tp"]), int(row["pp"]), int(row["dp"]), bool(row["sp"]),
                                         int(row["micro_batch"]), int(row["micro_batches"]), int(row.get("cp", 1)),
                                         int(row.get("ep", 1)), row.get("schedule", "gpipe"),
                                         int(row.get("virtual_stages", 1)), int(row.get("zero", 0)),
                                         row.get("recompute", "none")),
                         _placement(row["placement"]))
        bw = tuple(float(x) for x in row["bandwidth_gbps"].split())
        res = confirm(problem, cand, bw, float(row["time_ns"]), str(out), str(spec_path), args.binary,
                      tm["local_mem_bw_gbps"], args.timeout, overwrite=args.force)
    except LibraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    pred, sim = res["emit_predicted_ns"], res["simulated_ns"]
    layers = f"{args.layers} of {full_layers} layers" if args.layers else "all layers"
    print(f"design {args.rank}: {row['shape']} {row['blocks']} {cand.par.label} {row['placement']}, {layers}")
    print(f"predicted {pred / 1e6:,.4f} ms, simulated {sim / 1e6:,.4f} ms, error {pred / sim - 1:+.4%} "
          f"(generate {res['generate_s']:.0f} s, emit {res['emit_s']:.0f} s, simulate {res['simulate_s']:.0f} s)")
    print(f"search's prediction for the whole model: {float(row['time_ns']) / 1e6:,.4f} ms; run in {res['run_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
