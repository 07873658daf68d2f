"""DLRM training step: embeddings sharded over all NPUs (all-to-all), data-parallel MLPs.

Symbols: N NPUs, b samples per NPU (global batch N b), T tables, d embedding dimension, P lookups
per table per sample (pooling factor), e bytes per element, e_g bytes per gradient element.

- Embedding lookups are split evenly over all NPUs (table-wise or row-wise sharding gives the same
  volume): each NPU gathers and pools N b T P / N = b T P rows of d elements. Memory-bound: time =
  b T P d e / mem_bw forward, twice that backward (read and scatter-add).
- ALL_TO_ALL forward of the pooled embeddings, comm_size = b T d e per NPU (an NPU keeps 1/N of it);
  backward ALL_TO_ALL of their gradients, comm_size = b T d e_g.
- MLPs (bottom: dense_features -> ... -> d; top: d + T(T+1)/2 -> ... ): a layer in -> out costs
  2 b in out FLOPs forward, twice that backward; its gradient is in out + out parameters,
  ALL_REDUCE over all NPUs (one per layer, or buckets of ``grad_bucket_mb``).
- Dot interaction of the T + 1 feature vectors: b (T+1)^2 d FLOPs forward, twice backward.

Order per iteration (compute chain): lookup, bottom MLP forward (overlapping the forward
all-to-all), interaction, top MLP forward and backward, interaction backward, bottom MLP backward
(overlapping the backward all-to-all), embedding update (after the backward all-to-all).
Collective chain: forward all-to-all, backward all-to-all, then the MLP gradient all-reduces in
backward order (top MLP last layer first, bottom MLP first layer last).
"""

from __future__ import annotations

from .program import GradBuckets, Plan, ProgramBuilder
from .spec import DlrmModel, TraceSpec


def mlp_dims(m: DlrmModel) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(in, out) of every bottom and top MLP layer."""
    t = m.num_tables
    bottom = list(zip((m.dense_features,) + m.bottom_mlp[:-1], m.bottom_mlp))
    top_in = m.embedding_dim + t * (t + 1) // 2
    top = list(zip((top_in,) + m.top_mlp[:-1], m.top_mlp))
    return bottom, top


def dlrm_plan(spec: TraceSpec) -> Plan:
    m: DlrmModel = spec.model  # type: ignore[assignment]
    b, t, d, e, ge = m.batch_per_npu, m.num_tables, m.embedding_dim, m.bytes_per_element, m.grad_bytes_per_element
    bottom, top = mlp_dims(m)
    lookup_bytes = b * t * m.pooling_factor * d * e
    lookup_s = lookup_bytes / (spec.mem_bw_gbps * 1e9)
    inter = b * (t + 1) ** 2 * d
    bld = ProgramBuilder(spec.tflops)
    all_npus = spec.layout.num_ranks > 1

    def layer(prefix: str, i: int, fin: int, fout: int, backward: bool, after=()) -> int:
        k = 2 if backward else 1
        w = (fin * fout + fout) * e
        return bld.comp(f"{prefix}{i}.{'bwd' if backward else 'fwd'}", k * 2 * b * fin * fout,
                        w + b * (fin + fout) * e, after=after)

    for it in range(spec.iterations):
        bld.prefix = f"it{it}." if spec.iterations > 1 else ""
        bld.gate = bld.last_coll
        look = bld.timed_comp("emb.fwd.lookup", lookup_s, b * t * m.pooling_factor * d, lookup_bytes)
        a2a = bld.coll("emb.fwd.a2a", "ALL_TO_ALL", b * t * d * e, "dp", after=[look]) if all_npus else look
        for i, (fi, fo) in enumerate(bottom):
            layer("bot", i, fi, fo, False)
        x = bld.comp("interact.fwd", inter, b * (t + 1) * d * e, after=[a2a])
        for i, (fi, fo) in enumerate(top):
            x = layer("top", i, fi, fo, False)
        top_ready = []
        for i in reversed(range(len(top))):
            top_ready.append((i, layer("top", i, *top[i], True)))
        x = bld.comp("interact.bwd", 2 * inter, b * (t + 1) * d * e)
        a2a = bld.coll("emb.bwd.a2a", "ALL_TO_ALL", b * t * d * ge, "dp", after=[x]) if all_npus else x
        grads = GradBuckets(bld, "dp", spec.parallel.grad_bucket_bytes, enabled=all_npus)
        for i, c in top_ready:
            fi, fo = top[i]
            grads.add(f"top{i}", (fi * fo + fo) * ge, c)
        for i in reversed(range(len(bottom))):
            fi, fo = bottom[i]
            c = layer("bot", i, fi, fo, True)
            grads.add(f"bot{i}", (fi * fo + fo) * ge, c)
        grads.flush()
        bld.timed_comp("emb.bwd.update", 2 * lookup_s, b * t * m.pooling_factor * d, 2 * lookup_bytes, after=[a2a])
    return Plan({0: tuple(bld.ops)}, (0,) * spec.layout.num_ranks)
