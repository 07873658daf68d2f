"""Record small real Chakra trace sets from torch.distributed jobs on CPU (gloo).

Each job runs in spawned processes, one per rank. Every rank records, for the
same profiled steps, PyTorch's ExecutionTraceObserver output (host trace) and
a Kineto trace (device trace), as the Chakra collection guide describes. The
two are then linked by mlc-chakra's ``chakra_trace_link`` and converted by
``chakra_converter PyTorch``; the converter output is gzipped, unmodified, into
``OUT/<set>/<set>.<rank>.et.gz``. With ``--keep-kineto`` each rank's Kineto trace
is gzipped, unmodified, beside it as ``OUT/<set>/<set>.<rank>.json.gz`` (what
``libra-astra measure`` reads), and ``--steps N`` has Kineto record N steps, the
last of which the ExecutionTraceObserver records too.

Runs only in the optional recording environment (torch, full mlc-chakra,
PARAM et_replay); see tests/fixtures/real/README.md.

    python tools/record_traces/record.py --out tests/fixtures/real --raw /tmp/raw
    python tools/record_traces/record.py --job ddp --keep-kineto --steps 100 --suffix k \
        --out tests/fixtures/real/measured --raw /tmp/raw

A measurement needs many steps: on a CPU one step of these jobs varies 2-5x, so
3 steps know the mean step to +-10-37% and 100 steps to +-3%.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

# Profiled steps follow unrecorded warm-up steps so that DDP's bucket rebuild
# and gloo's lazy connection set-up stay out of the trace.
WARMUP_STEPS = 2


def _mlp(width: int, depth: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


# --- jobs: each returns a step function; the step is what gets profiled ---


def job_ddp(rank: int, world: int):
    """Data-parallel training of a small MLP; DDP all-reduces gradient buckets."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_mlp(64, 3, seed=0), bucket_cap_mb=0.02)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(100 + rank)
    x, y = torch.randn(16, 64), torch.randn(16, 64)

    def step():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    return step


def job_tpdp(rank: int, world: int, tp: int = 2):
    """TP x DP groups (tp ranks adjacent) doing the four collective kinds."""
    dp = world // tp
    tp_groups = [dist.new_group([d * tp + t for t in range(tp)]) for d in range(dp)]
    dp_groups = [dist.new_group([d * tp + t for d in range(dp)]) for t in range(tp)]
    tp_group = tp_groups[rank // tp]
    dp_group = dp_groups[rank % tp]
    torch.manual_seed(rank)
    w = torch.randn(64, 32)
    x = torch.randn(8, 64)

    def step():
        # tensor-parallel linear: partial sums all-reduced, shards gathered
        h = x @ w
        dist.all_reduce(h, group=tp_group)
        gathered = torch.empty(tp * h.numel(), dtype=h.dtype)
        dist.all_gather_into_tensor(gathered, h.reshape(-1), group=tp_group)
        # data-parallel gradient shard (ZeRO-like reduce-scatter)
        grad = torch.randn(dp * 512)
        shard = torch.empty(512)
        dist.reduce_scatter_tensor(shard, grad, group=dp_group)
        # expert-parallel style exchange over the whole world
        tokens = torch.randn(world * 128)
        out = torch.empty_like(tokens)
        dist.all_to_all_single(out, tokens)

    return step


def job_pipeline(rank: int, world: int):
    """Two pipeline stages (ranks [0, world/2) and [world/2, world)), data parallel inside each."""
    half = world // 2
    stage = rank // half
    groups = [dist.new_group(list(range(s * half, (s + 1) * half))) for s in range(2)]
    stage_group = groups[stage]
    peer = rank + half if stage == 0 else rank - half
    model = _mlp(64, 2, seed=stage)
    torch.manual_seed(100 + rank)
    x = torch.randn(8, 64)

    def step():
        model.zero_grad()
        if stage == 0:
            act = model(x)
            dist.send(act.detach(), dst=peer)
            grad = torch.empty_like(act)
            dist.recv(grad, src=peer)
            act.backward(grad)
        else:
            act_in = torch.empty(8, 64)
            dist.recv(act_in, src=peer)
            act_in.requires_grad_(True)
            model(act_in).pow(2).mean().backward()
            dist.send(act_in.grad, dst=peer)
        for p in model.parameters():
            dist.all_reduce(p.grad, group=stage_group)

    return step


JOBS = {"ddp": job_ddp, "tpdp": job_tpdp, "pipeline": job_pipeline}


def _worker(rank: int, world: int, job: str, raw: str, port: int, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        step = JOBS[job](rank, world)
        for _ in range(WARMUP_STEPS):
            step()
        dist.barrier()
        raw_dir = Path(raw)
        et = ExecutionTraceObserver()
        et.register_callback(str(raw_dir / f"host_et.{rank}.json"))
        kineto_path = raw_dir / f"kineto.{rank}.json"
        # As in Chakra's collection guide: Kineto warms up for one step, then
        # records the steps, the last of them with the ET observer on, so both
        # traces hold that step's operators (linked by their record-function ids).
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=steps),
            record_shapes=True,
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(kineto_path)),
        ) as prof:
            for i in range(1 + steps):
                if i == steps:
                    et.start()
                step()
                if i == steps:
                    et.stop()
                prof.step()
        et.unregister_callback()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run(cmd: list[str], cwd: Path) -> None:
    # the converter writes a debug.log into its working directory
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")


def _gzip(src_path: Path, dst_path: Path) -> None:
    with open(src_path, "rb") as src, gzip.GzipFile(dst_path, "wb", compresslevel=9, mtime=0) as dst:
        shutil.copyfileobj(src, dst)


def record(job: str, world: int, out_root: Path, raw_root: Path, port: int, steps: int = 1,
           keep_kineto: bool = False, suffix: str = "") -> None:
    name = f"{job}{world}{suffix}"
    raw = (raw_root / name).resolve()
    if raw.exists():
        shutil.rmtree(raw)
    raw.mkdir(parents=True)
    mp.start_processes(_worker, args=(world, job, str(raw), port, steps), nprocs=world, start_method="spawn")
    out = (out_root / name).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        linked = raw / f"linked.{r}.json"
        converted = raw / f"{name}.{r}.et"
        # absolute paths: chakra_trace_link joins a relative device-trace path twice
        _run(["chakra_trace_link", "--rank", str(r),
              "--chakra-host-trace", str(raw / f"host_et.{r}.json"),
              "--chakra-device-trace", str(raw / f"kineto.{r}.json"),
              "--output-file", str(linked)], cwd=raw)
        _run(["chakra_converter", "PyTorch", "--input", str(linked), "--output", str(converted)], cwd=raw)
        with open(converted, "rb") as src, gzip.GzipFile(out / f"{name}.{r}.et.gz", "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        if keep_kineto:
            _gzip(raw / f"kineto.{r}.json", out / f"{name}.{r}.json.gz")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/real"), help="fixture root")
    ap.add_argument("--raw", type=Path, default=Path("/tmp/record_traces"), help="where raw ET/Kineto/linked JSON go")
    ap.add_argument("--job", choices=sorted(JOBS), action="append", help="job(s) to record (default: all)")
    ap.add_argument("--world", type=int, default=4, help="ranks per job (even)")
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--steps", type=int, default=1, help="steps Kineto records (the ET records the last)")
    ap.add_argument("--keep-kineto", action="store_true",
                    help="also write each rank's Kineto trace, gzipped, as SET.RANK.json.gz beside the ET")
    ap.add_argument("--suffix", default="", help="appended to the set name (JOBWORLD), e.g. k -> ddp4k")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    for i, job in enumerate(args.job or list(JOBS)):
        record(job, args.world, args.out, args.raw, args.port + i, args.steps, args.keep_kineto, args.suffix)


if __name__ == "__main__":
    main()
