"""Convert PARAM's recorded 8-GPU NCCL DLRM run with mlc-chakra 1.0.0's own tools.

PARAM (facebookresearch/param) ships a real 2023 recording of DLRM on 8 GPUs:
``et_replay/tests/inputs/dlrm_pytorch_et.tar.gz`` (PyTorch ET, schema 1.0.1)
and ``dlrm_kineto.tar.gz`` (Kineto). mlc-chakra 1.0.0 cannot take them as
they are; this script rewrites copies of the *inputs* (never the installed
tools) so ``chakra_trace_link`` and ``chakra_converter PyTorch`` run
unchanged, then gzips the converter output unmodified into
``OUT/param_dlrm8/param_dlrm8.<rank>.et.gz``.

The three input rewrites (details in tests/fixtures/real/README.md):

1. ET schema 1.0.1 -> the 1.0.2-chakra.0.0.4 layout: same values, moved
   (``parent`` -> ``ctrl_deps``; ``inputs``/``input_shapes``/``input_types``
   -> ``inputs: {values, shapes, types}``, same for outputs; ``rf_id``,
   ``fw_parent``, ``seq_id``, ``scope``, ``tid``, ``fw_tid``, ``op_schema``
   -> ``attrs``). The converter refuses 1.0.1 outright.
2. Kineto CPU ops get the ``Record function id`` the linker matches on. This
   2023 trace predates that field; each Kineto thread's operators (in start
   order) are aligned by name with the ET thread's operators (in id order)
   and take the matched ET node's ``rf_id``.
3. NCCL kernels ``ncclKernel_*`` are renamed ``ncclDevKernel_*`` (the NCCL
   2.19+ name). The linker only attaches process groups to, and the converter
   only maps SendRecv (all-to-all) for, ``ncclDevKernel*`` names.

    python tools/record_traces/convert_param_dlrm.py --param /work/param --out tests/fixtures/real
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

SET_NAME = "param_dlrm8"
ATTR_TYPES = {
    "rf_id": "uint64",
    "fw_parent": "uint64",
    "seq_id": "int64",
    "scope": "uint64",
    "tid": "uint64",
    "fw_tid": "uint64",
    "op_schema": "string",
}


def et_to_1_0_2(et: dict) -> dict:
    if et["schema"] != "1.0.1":
        sys.exit(f"expected PyTorch ET schema 1.0.1, found {et['schema']}")
    nodes = []
    for n in et["nodes"]:
        nodes.append({
            "id": n["id"],
            "name": n["name"],
            "ctrl_deps": n["parent"],
            "inputs": {"values": n["inputs"], "shapes": n["input_shapes"], "types": n["input_types"]},
            "outputs": {"values": n["outputs"], "shapes": n["output_shapes"], "types": n["output_types"]},
            "attrs": [{"name": k, "type": t, "value": n[k]} for k, t in ATTR_TYPES.items() if k in n],
        })
    return {**et, "schema": "1.0.2-chakra.0.0.4", "nodes": nodes}


def add_record_function_ids(kineto: dict, et: dict) -> tuple[int, int]:
    """Give Kineto CPU ops the rf_id of the ET node they align with; return (matched, total)."""
    cpu_ops = [e for e in kineto["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")]
    et_by_tid: dict[int, list[dict]] = defaultdict(list)
    for n in sorted(et["nodes"], key=lambda n: n["id"]):
        if "rf_id" in n:
            et_by_tid[n["tid"]].append(n)
    k_by_tid: dict[int, list[dict]] = defaultdict(list)
    for e in sorted(cpu_ops, key=lambda e: (e["ts"], -e.get("dur", 0))):
        k_by_tid[e["tid"]].append(e)
    matched = 0
    used_et_tids: set[int] = set()
    for ops in k_by_tid.values():
        names = [e["name"] for e in ops]
        # the ET thread whose operator sequence this Kineto thread matches best
        best = None
        for tid, nodes in et_by_tid.items():
            if tid in used_et_tids:
                continue
            sm = difflib.SequenceMatcher(None, names, [n["name"] for n in nodes], autojunk=False)
            size = sum(b.size for b in sm.get_matching_blocks())
            if best is None or size > best[0]:
                best = (size, tid, sm, nodes)
        if best is None or best[0] == 0:
            continue
        _, tid, sm, nodes = best
        used_et_tids.add(tid)
        for b in sm.get_matching_blocks():
            for i in range(b.size):
                ops[b.a + i].setdefault("args", {})["Record function id"] = nodes[b.b + i]["rf_id"]
                matched += 1
    return matched, len(cpu_ops)


def rename_nccl_kernels(kineto: dict) -> int:
    renamed = 0
    for e in kineto["traceEvents"]:
        name = e.get("name", "")
        if e.get("cat") == "kernel" and name.startswith("ncclKernel_"):
            e["name"] = "ncclDevKernel_" + name[len("ncclKernel_"):]
            renamed += 1
    return renamed


def _run(cmd: list[str], cwd: Path) -> None:
    # the converter writes a debug.log into its working directory
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")



def link_and_convert(raw: Path, rank: int, et: dict, kineto: dict, set_name: str) -> Path:
    """Write the rewritten host ET and Kineto trace of one rank into ``raw``, link them with
    chakra_trace_link and convert the result with chakra_converter; the converted file."""
    host = raw / f"host_et.{rank}.json"
    device = raw / f"kineto.{rank}.json"
    host.write_text(json.dumps(et_to_1_0_2(et)))
    device.write_text(json.dumps(kineto))
    linked = raw / f"linked.{rank}.json"
    converted = raw / f"{set_name}.{rank}.et"
    _run(["chakra_trace_link", "--rank", str(rank), "--chakra-host-trace", str(host),
          "--chakra-device-trace", str(device), "--output-file", str(linked)], cwd=raw)
    _run(["chakra_converter", "PyTorch", "--input", str(linked), "--output", str(converted)], cwd=raw)
    return converted

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--param", type=Path, required=True, help="PARAM source checkout (holds et_replay/tests/inputs)")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/real"), help="fixture root")
    ap.add_argument("--raw", type=Path, default=Path("/tmp/record_traces"), help="where extracted and rewritten JSON go")
    args = ap.parse_args()
    inputs = args.param / "et_replay" / "tests" / "inputs"
    raw = (args.raw / SET_NAME).resolve()
    if raw.exists():
        shutil.rmtree(raw)
    raw.mkdir(parents=True)
    for tar in ("dlrm_pytorch_et.tar.gz", "dlrm_kineto.tar.gz"):
        with tarfile.open(inputs / tar) as t:
            t.extractall(raw, filter="data")
    kineto_files = {int(re.match(r"worker(\d+)_", p.name).group(1)): p for p in (raw / "dlrm_kineto").glob("worker*.json")}
    out = (args.out / SET_NAME).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for r in sorted(kineto_files):
        et = json.loads((raw / "dlrm_pytorch_et" / f"dlrm_eg_{r}.json").read_text())
        kineto = json.loads(kineto_files[r].read_text())
        matched, total = add_record_function_ids(kineto, et)
        renamed = rename_nccl_kernels(kineto)
        print(f"rank {r}: rf_id given to {matched}/{total} Kineto CPU ops, {renamed} NCCL kernels renamed")
        converted = link_and_convert(raw, r, et, kineto, SET_NAME)
        with open(converted, "rb") as src, gzip.GzipFile(out / f"{SET_NAME}.{r}.et.gz", "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)


if __name__ == "__main__":
    main()
