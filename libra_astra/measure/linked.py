"""Reading the linked traces ``chakra_trace_link`` writes, into the same RankProfile as a Kineto trace.

A linked trace is a PyTorch host execution trace (``nodes``) whose operators carry their Kineto
times (``ts``, ``inclusive_dur``, microseconds), with every GPU operator added as a node of its own
(``cat`` kernel, gpu_memcpy or gpu_memset, its ``stream``, ``ctrl_deps`` naming the host operator
that launched it). The linker keeps no CUDA runtime call: each device op's launch is taken as its
launching operator's start (an assumption ``measure`` states), and the synchronizing calls are
gone, so the GPU-faithful replay refuses such a profile (:func:`require_runtime`).
"""

from __future__ import annotations

from typing import Any

from ..errors import LibraError
from .profile import (DEVICE_CATS, STEP_NAME, DeviceOp, HostOp, RankProfile, RuntimeCall, Step, event_span,
                      int_or_none)

LINKED_NOTE = ("linked trace(s) (chakra_trace_link): no CUDA runtime call is kept, so each device op's launch is "
               "its operator's start and the synchronizations are not seen")


def is_linked(data: Any) -> bool:
    """A linked (or plain host) execution trace: ``nodes``, no ``traceEvents``."""
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "traceEvents" not in data


def _attr(node: dict, name: str) -> Any:
    attrs = node.get("attrs")
    for a in attrs if isinstance(attrs, list) else ():
        if isinstance(a, dict) and a.get("name") == name:
            return a.get("value")
    return node.get(name)


def _host_args(node: dict) -> dict:
    # The same facts a Kineto operator's args give: its first input's shape and element type.
    inputs = node.get("inputs") if isinstance(node.get("inputs"), dict) else {}
    shapes, types = inputs.get("shapes"), inputs.get("types")
    if not isinstance(shapes, list) or not isinstance(types, list):
        return {}
    inner = [t[len("Tensor("):-1] if isinstance(t, str) and t.startswith("Tensor(") and t.endswith(")") else t
             for t in types]
    return {"Input Dims": shapes, "Input type": inner}


def parse_linked(data: dict, source: str, rank: int | None) -> RankProfile:
    """A linked trace -> RankProfile (module docstring)."""
    timed = []
    for node in data["nodes"]:
        if not isinstance(node, dict):
            continue
        event = {"name": node.get("name"), "ts": node.get("ts"), "dur": node.get("inclusive_dur", 0)}
        span = event_span(event, source) if "ts" in node else None
        if span is not None:
            timed.append((node, span))
    if not timed:
        raise LibraError(f"{source}: the execution trace holds no timed operator (no 'ts'); give the trace "
                         "chakra_trace_link wrote (host trace linked with Kineto), or the Kineto trace itself")
    by_id = {n.get("id"): (n, s) for n, s in timed if not isinstance(n.get("id"), (dict, list))}
    host, runtime, device, steps = [], [], [], []
    for node, (start, end) in timed:
        name = str(node.get("name", ""))
        tid = int_or_none(_attr(node, "tid"))
        tid = tid if tid is not None else 0
        cat = node.get("cat") if isinstance(node.get("cat"), str) else None
        if cat in DEVICE_CATS:
            parent = by_id.get(node.get("ctrl_deps")) if not isinstance(node.get("ctrl_deps"), (dict, list)) else None
            if parent is None:
                continue       # an orphan GPU op: no operator launched it in this trace
            ptid = int_or_none(_attr(parent[0], "tid"))
            corr = len(runtime)
            runtime.append(RuntimeCall("cudaLaunchKernel", ptid if ptid is not None else 0, parent[1][0],
                                       parent[1][0], corr))
            stream = int_or_none(node.get("stream"))
            device.append(DeviceOp(name, DEVICE_CATS[cat], stream if stream is not None else tid, start, end, corr, {}))
            continue
        m = STEP_NAME.match(name)
        if m:
            steps.append(Step(int(m.group(1)), tid, start, end))
        else:
            host.append(HostOp(name, tid, start, end, _host_args(node), name.startswith("## ")))
    first = min(s for _, (s, _) in timed)
    last = max(e for _, (_, e) in timed)
    host.sort(key=lambda o: (o.start_ns, -o.end_ns))
    device.sort(key=lambda o: (o.start_ns, o.end_ns))
    steps.sort(key=lambda s: s.start_ns)
    return RankProfile(rank if rank is not None else 0, source, None, None, tuple(steps), tuple(host),
                       tuple(runtime), tuple(device), first, last, (), linked=True)


def require_runtime(profiles, what: str) -> None:
    """Refuse ``what`` on linked traces: it needs the runtime calls they leave out."""
    for p in profiles:
        if p.linked:
            raise LibraError(f"{p.source}: a linked trace keeps no CUDA runtime call (launches, synchronizations), "
                             f"which {what} needs; give the run's Kineto traces (torch.profiler's JSON) instead")
