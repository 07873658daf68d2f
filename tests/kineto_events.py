"""Small Kineto events for replay and measure tests: one GPU step whose compute kernel waits for an
all-reduce and whose host synchronizes at the end."""

from __future__ import annotations


def ev(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if cat == "kernel" else 1, "tid": tid, "ts": ts,
            "dur": dur, "args": args}


def step_events(arrive: int = 100, comm_dur: int = 50) -> list[dict]:
    """The step's events (us): the all-reduce from ``arrive`` for ``comm_dur``, the gemm after it."""
    nccl_end = arrive + comm_dur
    return [ev("ProfilerStep#1", "user_annotation", 0, nccl_end + 150),
            ev("nccl:all_reduce", "user_annotation", arrive - 5, 4, **{"Input Dims": [[1024]], "Input type": ["float"]}),
            ev("cudaLaunchKernel", "cuda_runtime", arrive - 4, 2, correlation=1),
            ev("ncclKernel_AllReduce", "kernel", arrive, comm_dur, tid=20, stream=20, correlation=1),
            ev("cudaLaunchKernel", "cuda_runtime", arrive + 2, 2, correlation=2),
            # recorded: it started when the all-reduce ended (a cross-stream wait)
            ev("gemm", "kernel", nccl_end, 100, tid=7, stream=7, correlation=2),
            ev("cudaDeviceSynchronize", "cuda_runtime", arrive + 6, nccl_end + 100 - arrive - 6, correlation=3),
            ev("aten::add", "cpu_op", nccl_end + 120, 10)]
