"""LIBRA-style per-layer demands (no traces needed): GPT-3-like, ResNet-50-like and random mixes.

These mirror the per-layer workload tables LIBRA optimizes (forward, input-gradient and
weight-gradient phases per layer), for benchmarks, tests and quick studies. Compute times use
model FLOPs / sustained FLOP rate; message sizes use bytes per element.
"""

from __future__ import annotations

import numpy as np

from .types import Demand, make_collective, single_class
from ..model.network import Network

# ResNet-50 parameter counts of its 54 weight layers (conv and fc, biases folded in), in order.
_RESNET50_PARAMS = (
    [9408]
    + [4096, 36864, 16384, 16384] + [16384, 36864, 16384] * 2
    + [32768, 147456, 65536, 131072] + [65536, 147456, 65536] * 3
    + [131072, 589824, 262144, 524288] + [262144, 589824, 262144] * 5
    + [524288, 2359296, 1048576, 2097152] + [1048576, 2359296, 1048576] * 2
    + [2049000]
)


def _split_dims(net: Network, tp_dims: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = net.npus_per_dim
    tp = tuple(n[d] if d < tp_dims else 1 for d in range(net.num_dims))
    dp = tuple(1 if d < tp_dims else n[d] for d in range(net.num_dims))
    return tp, dp


def gpt3_demand(net: Network, layers: int = 18, hidden: int = 12288, seq: int = 2048, micro_batch: int = 1,
                bytes_per_elem: int = 2, tflops: float = 300.0, tp_dims: int = 1) -> Demand:
    """GPT-3-like transformer: tensor parallel over the first ``tp_dims`` dims, data parallel over the rest."""
    tp, dp = _split_dims(net, tp_dims)
    tp_size = int(np.prod(tp))
    act = micro_batch * seq * hidden * bytes_per_elem
    weights = 12 * hidden * hidden * bytes_per_elem / tp_size
    flops = (24 * micro_batch * seq * hidden ** 2 + 4 * micro_batch * seq ** 2 * hidden) / tp_size
    t_fwd = flops / (tflops * 1e3)        # ns: flops / (TFLOPS * 1e12) * 1e9
    colls = []
    for i in range(layers):
        colls.append(make_collective("ALL_REDUCE", act, tp, count=2, name=f"L{i}.fwd.tp", phase="fwd", group="tp", net=net))
        colls.append(make_collective("ALL_REDUCE", act, tp, count=2, name=f"L{i}.ig.tp", phase="ig", group="tp", net=net))
        colls.append(make_collective("ALL_REDUCE", weights, dp, name=f"L{i}.wg.dp", phase="wg", group="dp", net=net))
    return single_class(f"gpt3-{layers}l", net.npus_per_dim, layers * 3 * t_fwd, colls, net.dim_names)


def resnet50_demand(net: Network, batch_per_npu: int = 32, bytes_per_elem: int = 2, tflops: float = 100.0) -> Demand:
    """ResNet-50-like data-parallel CNN: one weight-gradient all-reduce per layer over all NPUs."""
    all_dims = net.npus_per_dim
    colls = [make_collective("ALL_REDUCE", p * bytes_per_elem, all_dims, name=f"L{i}.wg", phase="wg", group="dp", net=net)
             for i, p in enumerate(_RESNET50_PARAMS)]
    # ~4.1 GFLOPs forward per image; backward twice that.
    t = 3 * 4.1e9 * batch_per_npu / (tflops * 1e3)
    return single_class("resnet50-54l", net.npus_per_dim, t, colls, net.dim_names)


def random_demand(net: Network, n: int, seed: int = 0) -> Demand:
    """n collectives of random type, size (1 KiB..1 GiB) and participation, for scale tests."""
    rng = np.random.default_rng(seed)
    kinds = ("ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALL_TO_ALL")
    colls = []
    for i in range(n):
        parts = tuple(int(rng.choice([1, p])) if rng.random() < 0.5 else p for p in net.npus_per_dim)
        if all(p == 1 for p in parts):
            parts = net.npus_per_dim
        size = float(2 ** rng.uniform(10, 30))
        colls.append(make_collective(kinds[i % 4], size, parts, count=int(rng.integers(1, 4)), net=net))
    return single_class(f"random-{n}", net.npus_per_dim, float(rng.uniform(1e6, 1e9)), colls, net.dim_names)
