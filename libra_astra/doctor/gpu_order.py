"""``doctor --fix --gpu-order``: the dependencies a GPU keeps, written into a rank file as control
dependencies, so that ASTRA-sim runs the set as the GPU ran it.

A converted PyTorch trace makes every GPU node depend on the CPU operator that launched it and
nothing on a GPU node, so ASTRA-sim overlaps all GPU work with everything. The GPU-faithful
semantics (docs/time-models.md, "Measured runs and the GPU-faithful model") add, in node id order (the launch order):

1. **stream order**: a GPU node waits for the previous GPU node of its CUDA stream (``stream``);
2. **a collective waits for the compute before it**: a collective's stream first waits for the
   stream that launched it (PyTorch's NCCL process group does so), so a communication node
   waits for the GPU compute node launched last before it on another stream;
3. **compute waits for a collective**: the first GPU compute node launched on another stream after a
   collective waits for it (the next layer uses its result; for an asynchronous collective whose
   wait comes later this is early, and the profile's recorded waits say better);
4. **the CPU blocks where it synchronizes**: a CPU operator that copies a GPU value to the host
   (an ``aten::_local_scalar_dense`` or ``aten::item`` that launched a GPU node, the device-to-host
   copy) or synchronizes (``*synchronize*``) waits for the GPU node launched last before it. A
   value copy that launched nothing read a CPU tensor and waited for nothing (Megatron's TP8 step:
   44 of its 45 ``aten::item`` per rank; made to wait, they chained every host to every all-reduce).

Only dependencies are added; nodes, durations and attributes are kept.
"""

from __future__ import annotations

from collections import Counter

from ..traces.schema import COMM_NODE_TYPES, pb
from .attrs import first_attrs, int_attr, is_cpu_op

_VALUE_COPIES = ("aten::_local_scalar_dense", "aten::item")


def _stream(n) -> int | None:
    a = first_attrs(n).get("stream")
    return int_attr(a) if a is not None else None


def _is_sync(n, launched: set[int]) -> bool:
    """Whether CPU operator ``n`` waits for the GPU: a synchronization, or a value copy that
    launched a GPU node (``launched``: the ids GPU nodes depend on)."""
    if n.name in _VALUE_COPIES:
        return n.id in launched
    return "synchronize" in n.name.lower()


def _is_gpu(n) -> bool:
    if n.type in COMM_NODE_TYPES:
        return True
    return n.type == pb.COMP_NODE and is_cpu_op(first_attrs(n).get("is_cpu_op")) is False


def add_gpu_order(nodes: list, counts: Counter) -> None:
    """Add the GPU-faithful control dependencies to ``nodes`` (one rank's, changed in place)."""
    last_on_stream: dict[int | None, object] = {}
    last_compute = None          # (node, stream) of the GPU compute node launched last
    last_gpu = None
    pending_colls: list = []     # collectives no compute node has waited for yet
    launched = {d for n in nodes if _is_gpu(n) for d in (*n.data_deps, *n.ctrl_deps)}
    for n in sorted(nodes, key=lambda x: x.id):
        comm = n.type in COMM_NODE_TYPES
        if not _is_gpu(n):
            if last_gpu is not None and _is_sync(n, launched):
                _dep(n, last_gpu, counts, "CPU operators that synchronize wait for the GPU node launched before them")
            continue
        s = _stream(n)
        prev = last_on_stream.get(s)
        if prev is not None:
            _dep(n, prev, counts, "GPU nodes wait for the previous node of their stream")
        if comm:
            if last_compute is not None and last_compute[1] != s:
                _dep(n, last_compute[0], counts, "collectives wait for the GPU compute launched before them")
            pending_colls.append((n, s))
        else:
            for c, cs in pending_colls:
                if cs != s:
                    _dep(n, c, counts, "GPU compute waits for the collectives launched before it on other streams")
            pending_colls = [(c, cs) for c, cs in pending_colls if cs == s]
            last_compute = (n, s)
        last_on_stream[s] = n
        last_gpu = n


def _dep(n, on, counts: Counter, what: str) -> None:
    if on.id != n.id and on.id not in n.ctrl_deps and on.id not in n.data_deps:
        n.ctrl_deps.append(on.id)
        counts[what] += 1
