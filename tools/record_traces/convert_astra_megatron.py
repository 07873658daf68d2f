"""Convert a recorded 8-GPU NCCL Megatron run (TP 8) with mlc-chakra 1.0.0's own tools.

ASTRA-sim's repository (astra-sim/astra-sim, commit
``ab5d3e629c9d28257cf9d2b367474f0cbfdf450e`` on branch ``24S_HML_FP``) holds a
2024 recording of one Megatron training step on 8 A100 GPUs:
``my_test/inputs/workload/megatron-tp8/megatron_et_RANK.json`` (PyTorch ET,
schema 1.0.1) and ``megatron_kineto_RANK.json`` (Kineto, the same step). Give
the directory holding those 16 files; nothing here downloads them.

Like ``convert_param_dlrm.py`` this rewrites copies of the *inputs* (never the
installed tools) so ``chakra_trace_link`` and ``chakra_converter PyTorch`` run
unchanged, then gzips the converter output unmodified into
``OUT/astra_megatron8/astra_megatron8.RANK.et.gz`` and the original Kineto
trace, unmodified, into ``astra_megatron8.RANK.json.gz``. Two of the DLRM
rewrites apply (details in tests/fixtures/real/README.md): the schema 1.0.1
re-layout and the ``Record function id`` alignment. The NCCL kernels are
already named ``ncclDevKernel_*``.

    python tools/record_traces/convert_astra_megatron.py --inputs /path/to/megatron-tp8 --out tests/fixtures/real
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

from convert_param_dlrm import add_record_function_ids, link_and_convert

SET_NAME = "astra_megatron8"
RANKS = range(8)


def _gzip(src: Path, dst: Path) -> None:
    # mtime=0 and no file name in the header (gzip -n): the same input gives the same bytes
    with open(src, "rb") as f, open(dst, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as g:
        shutil.copyfileobj(f, g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=Path, required=True,
                    help="directory with megatron_et_RANK.json and megatron_kineto_RANK.json")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/real"), help="fixture root")
    ap.add_argument("--raw", type=Path, default=Path("/tmp/record_traces"), help="where rewritten and linked JSON go")
    args = ap.parse_args()
    raw = (args.raw / SET_NAME).resolve()
    if raw.exists():
        shutil.rmtree(raw)
    raw.mkdir(parents=True)
    out = (args.out / SET_NAME).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for r in RANKS:
        et_path = args.inputs / f"megatron_et_{r}.json"
        kineto_path = args.inputs / f"megatron_kineto_{r}.json"
        if not et_path.is_file() or not kineto_path.is_file():
            sys.exit(f"{args.inputs}: missing {et_path.name} or {kineto_path.name}")
        et = json.loads(et_path.read_text())
        kineto = json.loads(kineto_path.read_text())
        matched, total = add_record_function_ids(kineto, et)
        print(f"rank {r}: rf_id given to {matched}/{total} Kineto CPU ops")
        converted = link_and_convert(raw, r, et, kineto, SET_NAME)
        _gzip(converted, out / f"{SET_NAME}.{r}.et.gz")
        _gzip(kineto_path, out / f"{SET_NAME}.{r}.json.gz")


if __name__ == "__main__":
    main()
