"""Megatron-style transformer training step: tensor (tp), pipeline (pp) and data (dp) parallelism.

Symbols: b micro-batch, s sequence length, h hidden size, f FFN hidden size (default 4h), V vocabulary,
e bytes per element, e_g bytes per gradient element, L layers, M = global_batch / (b * dp)
micro-batches per step, V_t = ceil(V / tp) (vocabulary-parallel shard).

Compute (model FLOPs, per TP shard; backward = 2 x forward; time = FLOPs / (tflops * 1e12)):

- attention block forward: (8 b s h^2 + 4 b s^2 h) / tp   (QKV and output projections, QK^T, AV)
- MLP block forward:       4 b s h f / tp                  (two GEMMs; f = 4h gives 16 b s h^2)
- output layer forward:    2 b s h V_t                     (logits, last stage only)

With f = 4h a layer is 24 b s h^2 + 4 b s^2 h, the usual figure. Embedding lookups, layer norms,
softmax and the loss are not counted.

Communication per micro-batch (act = b s h e bytes):

- TP (group: the tp axis), without sequence parallelism: forward one ALL_REDUCE of act after the
  attention block and one after the MLP block; backward one ALL_REDUCE of act after each block's
  backward (gradient of the block input). The vocabulary-parallel embedding adds a forward
  ALL_REDUCE of act on the first stage, the vocabulary-parallel output layer a backward
  ALL_REDUCE of act on the last stage.
- TP with sequence parallelism: each ALL_REDUCE becomes a REDUCE_SCATTER (comm_size act) and the
  block input gets an ALL_GATHER (comm_size act / tp, the shard): forward AG, attention, RS, AG,
  MLP, RS; backward AG, MLP backward, RS, AG, attention backward, RS. Embedding: forward RS;
  output layer: forward AG, backward RS.
- PP: between consecutive stages a COMM_SEND/COMM_RECV of act (act / tp with sequence
  parallelism) per micro-batch forward, and of the same size backward.
- DP (group: the dp axis): ALL_REDUCE of the weight gradients in the last micro-batch's backward,
  one per layer as soon as its backward is done (or merged into buckets of at least
  ``grad_bucket_mb``), each of size params_per_rank * e_g:

  - a layer: (4 h^2 + 2 h f + 3 h + f) / tp + 6 h   (sharded weights and biases, replicated norms
    and row-parallel biases); 12 h^2 / tp + ... for f = 4h
  - first stage, embeddings: V_t h + s h (word embedding shard, learned positions)
  - last stage, output layer: V_t h + 2 h (untied output weights, final norm)

Schedule: GPipe-like, all M forwards then all M backwards (same micro-batch order); stages hold
L / pp consecutive layers. Embedding weights are untied, so there is no embedding all-reduce
between the first and last stage; the vocabulary-parallel loss's small all-reduces (b s values)
are left out. The next iteration's first compute waits for the last gradient all-reduce.
"""

from __future__ import annotations

import math

from .program import GradBuckets, Plan, ProgramBuilder
from .spec import TraceSpec, TransformerModel

AR, AG, RS = "ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER"


def layer_params_per_rank(h: int, f: int, tp: int) -> int:
    return math.ceil((4 * h * h + 2 * h * f + 3 * h + f) / tp) + 6 * h


def block_flops(m: TransformerModel, tp: int) -> tuple[float, float, float]:
    """Forward FLOPs per TP shard of (attention block, MLP block, output layer)."""
    b, s, h, f = m.micro_batch, m.seq_length, m.hidden_size, m.ffn_hidden_size
    attn = (8 * b * s * h * h + 4 * b * s * s * h) / tp
    mlp = 4 * b * s * h * f / tp
    logits = 2 * b * s * h * math.ceil(m.vocab_size / tp)
    return attn, mlp, logits


def _stage(spec: TraceSpec, stage: int) -> ProgramBuilder:
    m: TransformerModel = spec.model  # type: ignore[assignment]
    p = spec.parallel
    tp, pp, dp = p.tp, p.pp, p.dp
    sp = p.sequence_parallel and tp > 1
    b, s, h, f, e, ge = (m.micro_batch, m.seq_length, m.hidden_size, m.ffn_hidden_size, m.bytes_per_element,
                         m.grad_bytes_per_element)
    act = b * s * h * e
    shard = act // tp
    p2p = shard if sp else act
    mbs = m.global_batch // (b * dp)
    per_stage = m.layers // pp
    layers = [stage * per_stage + i for i in range(per_stage)]
    f_attn, f_mlp, f_logits = block_flops(m, tp)
    vt = math.ceil(m.vocab_size / tp)
    w_attn = (4 * h * h // tp) * e
    w_mlp = (2 * h * f // tp) * e
    layer_grad = layer_params_per_rank(h, f, tp) * ge
    first, last = stage == 0, stage == pp - 1

    bld = ProgramBuilder(spec.tflops)

    def tp_coll(name: str, kind: str, after: int | None) -> int | None:
        if tp == 1:
            return after
        return bld.coll(name, kind, shard if kind == AG else act, "tp", after=[after])

    for it in range(spec.iterations):
        bld.prefix = f"it{it}." if spec.iterations > 1 else ""
        bld.gate = bld.last_coll
        for mb in range(mbs):
            tag = (it * mbs + mb) * 2
            x: int | None = None
            if not first:
                x = bld.recv(f"mb{mb}.fwd.recv_act", p2p, "pp", -1, tag)
            else:
                x = tp_coll(f"mb{mb}.emb.fwd.tp_{'rs' if sp else 'ar'}", RS if sp else AR, None)
            for g in layers:
                pre = f"mb{mb}.L{g}.fwd"
                if sp:
                    x = tp_coll(f"{pre}.attn_ag", AG, x)
                x = bld.comp(f"{pre}.attn", f_attn, w_attn + 2 * act, after=[x])
                x = tp_coll(f"{pre}.attn_{'rs' if sp else 'ar'}", RS if sp else AR, x)
                if sp:
                    x = tp_coll(f"{pre}.mlp_ag", AG, x)
                x = bld.comp(f"{pre}.mlp", f_mlp, w_mlp + 2 * act, after=[x])
                x = tp_coll(f"{pre}.mlp_{'rs' if sp else 'ar'}", RS if sp else AR, x)
            if last:
                if sp:
                    x = tp_coll(f"mb{mb}.out.fwd.ag", AG, x)
                bld.comp(f"mb{mb}.out.fwd", f_logits, vt * h * e + act, after=[x])
            else:
                bld.send(f"mb{mb}.fwd.send_act", p2p, "pp", +1, tag, after=[x])

        grads = GradBuckets(bld, "dp", p.grad_bucket_bytes, enabled=dp > 1)
        for mb in range(mbs):
            tag = (it * mbs + mb) * 2 + 1
            final = mb == mbs - 1
            if last:
                c = bld.comp(f"mb{mb}.out.bwd", 2 * f_logits, vt * h * e + act)
                x = tp_coll(f"mb{mb}.out.bwd.tp_{'rs' if sp else 'ar'}", RS if sp else AR, c)
                if final:
                    grads.add("out", (vt * h + 2 * h) * ge, c)
            else:
                x = bld.recv(f"mb{mb}.bwd.recv_grad", p2p, "pp", +1, tag)
            for g in reversed(layers):
                pre = f"mb{mb}.L{g}.bwd"
                if sp:
                    x = tp_coll(f"{pre}.mlp_ag", AG, x)
                x = bld.comp(f"{pre}.mlp", 2 * f_mlp, w_mlp + 2 * act, after=[x])
                x = tp_coll(f"{pre}.mlp_{'rs' if sp else 'ar'}", RS if sp else AR, x)
                if sp:
                    x = tp_coll(f"{pre}.attn_ag", AG, x)
                c = bld.comp(f"{pre}.attn", 2 * f_attn, w_attn + 2 * act, after=[x])
                x = tp_coll(f"{pre}.attn_{'rs' if sp else 'ar'}", RS if sp else AR, c)
                if final:
                    grads.add(f"L{g}", layer_grad, c)
            if first:
                if final:
                    grads.add("emb", (vt * h + s * h) * ge, x)
            else:
                bld.send(f"mb{mb}.bwd.send_grad", p2p, "pp", -1, tag, after=[x])
        grads.flush()
    return bld


def transformer_plan(spec: TraceSpec, *, names: bool = True) -> Plan:
    """One program per pipeline stage; every rank runs its stage's program.

    ``names=False``: the stages between the first and the last share stage 1's program object.
    Their programs differ only in op names (the layer numbers), so analyses that ignore names
    (the search's demand and bounds) get the same result while building 3 programs instead of pp.
    """
    pp = spec.parallel.pp
    if names or pp <= 3:
        programs = {st: tuple(_stage(spec, st).ops) for st in range(pp)}
    else:
        middle = tuple(_stage(spec, 1).ops)
        programs = {0: tuple(_stage(spec, 0).ops), **{st: middle for st in range(1, pp - 1)},
                    pp - 1: tuple(_stage(spec, pp - 1).ops)}
    stage_of = spec.layout.axis_index.get("pp", (0,) * spec.layout.num_ranks)
    return Plan(programs, tuple(stage_of))
