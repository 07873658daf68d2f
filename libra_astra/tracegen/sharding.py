"""Weight-gradient reduction and parameter gathers over the data-parallel replicas, per ZeRO stage.

A weight is replicated over a list of axes (the dense weights of a transformer over cp, ep and dp,
its experts over cp and dp); ``axes`` lists those with degree > 1, innermost first. Over one axis a
reduction is one collective; over several it runs hierarchically as separate collectives (the
bytes of one hierarchical all-reduce over their product): for m bytes and degrees d_1..d_k,

- ZeRO 0: REDUCE_SCATTER(m) over axis 1, REDUCE_SCATTER(m / d_1) over axis 2, ..., ALL_REDUCE of
  m / (d_1 ... d_{k-1}) over axis k, then ALL_GATHER back in reverse order (per-rank shards);
- ZeRO 1/2/3: the REDUCE_SCATTERs over every axis (each rank keeps its gradient shard); ZeRO 1 and
  2 then ALL_GATHER the updated weights (weight bytes, not gradient bytes) after the step, in
  reverse axis order; ZeRO 3 gathers the weights before each use instead (``gather``), except
  for weights added with ``after_step`` (a transformer's embedding and output layer), which it
  gathers after the step as ZeRO 2 does.

Shard sizes round up (ceil) at each level. Gradients of several layers merge into buckets of at
least ``bucket_bytes`` (0: each layer alone); layers with different axes never share a bucket.
"""

from __future__ import annotations

import math
from typing import Sequence

from .program import ProgramBuilder

AR, AG, RS = "ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER"


def shard_sizes(size: int, degrees: Sequence[int]) -> list[int]:
    """size, ceil(size / d_1), ceil(size / (d_1 d_2)), ... (one more entry than ``degrees``)."""
    out = [int(size)]
    for d in degrees:
        out.append(math.ceil(out[-1] / d))
    return out


def gather(b: ProgramBuilder, name: str, param_bytes: int, axes: Sequence[tuple[str, int]]) -> int | None:
    """ALL_GATHERs rebuilding ``param_bytes`` of weights sharded over ``axes`` (outermost gathered
    first); returns the last one (None without axes). Issued without a data dependency: the shards
    are ready, so the gather prefetches while compute runs (bounded by the collective chain)."""
    if param_bytes <= 0:
        return None
    sizes = shard_sizes(param_bytes, [d for _, d in axes])
    last = None
    for j in range(len(axes) - 1, -1, -1):
        last = b.coll(f"{name}_{axes[j][0]}", AG, sizes[j + 1], axes[j][0])
    return last


class GradReducer:
    """Buckets of gradients per axis list, reduced per the ZeRO stage (see the module docstring)."""

    def __init__(self, b: ProgramBuilder, zero: int, bucket_bytes: int, bytes_ratio: float = 1.0):
        self.b, self.zero, self.bucket_bytes = b, zero, bucket_bytes
        self.ratio = bytes_ratio          # weight bytes / gradient bytes, for ZeRO 1/2's weight gathers
        self.open: dict = {}              # axes -> [names, size, ready]
        self.done: list = []              # (label, grad bytes, axes) reduced so far, for the weight gathers

    def add(self, layer: str, grad_bytes: int, ready: int | None, axes: Sequence[tuple[str, int]],
            after_step: bool = False) -> None:
        axes = tuple(axes)
        if not axes or grad_bytes <= 0:
            return
        key = (axes, after_step or self.zero in (1, 2))
        got = self.open.setdefault(key, [[], 0, None])
        got[0].append(layer)
        got[1] += grad_bytes
        got[2] = ready
        if got[1] >= self.bucket_bytes:
            self._reduce(key)

    def flush(self) -> None:
        for key in list(self.open):
            self._reduce(key)

    def _reduce(self, key: tuple) -> None:
        axes, gathered = key
        names, size, ready = self.open.pop(key)
        label = names[0] if len(names) == 1 else f"{names[0]}-{names[-1]}"
        sizes = shard_sizes(size, [d for _, d in axes])
        k = len(axes)
        if self.zero == 0 and k == 1:
            self.b.coll(f"{label}.dp_ar", AR, size, axes[0][0], after=[ready])
            return
        last = k - 1 if self.zero == 0 else k
        after: list = [ready]
        for j in range(last):
            after = [self.b.coll(f"{label}.grad_rs_{axes[j][0]}", RS, sizes[j], axes[j][0], after=after)]
        if self.zero == 0:
            self.b.coll(f"{label}.grad_ar_{axes[-1][0]}", AR, sizes[k - 1], axes[-1][0], after=after)
            for j in range(k - 2, -1, -1):
                self.b.coll(f"{label}.grad_ag_{axes[j][0]}", AG, sizes[j + 1], axes[j][0])
        elif gathered:
            self.done.append((label, size, axes))

    def gather_weights(self) -> None:
        """After the step: ALL_GATHER the updated weight shards of the buckets that need it."""
        for label, size, axes in self.done:
            gather(self.b, f"{label}.param_ag", int(round(size * self.ratio)), axes)
        self.done = []
