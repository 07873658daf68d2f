"""Megatron-style transformer training step: tensor (tp), context (cp), expert (ep), pipeline (pp)
and data (dp) parallelism, with ZeRO, activation recomputation and pipeline schedules.

Symbols: b micro-batch, s sequence length, s_l = s / cp (the local sequence), h hidden size, a
heads, a_kv K/V heads (grouped-query attention; h_kv = a_kv h / a), f FFN hidden size, n = 3 for a
gated (SwiGLU) MLP else 2 (weight matrices), V vocabulary, V_t = ceil(V / tp), e / e_g bytes per
element / gradient element, T = b s_l tokens, E experts, k top_k, c capacity factor, f_e expert
hidden size, E_s shared experts. Formulas: docs/tracegen.md; the builders below follow them.

Forward FLOPs per rank (model FLOPs; backward = 2 x forward; time = FLOPs / (tflops * 1e12)):

- attention: (4 T h^2 + 4 T h h_kv + 4 T s h) / tp  (Q, K, V, output projections; QK^T, AV)
- dense MLP: 2 n T h f / tp
- MoE block: router 2 T h E / tp, experts 2 n T k c h f_e / tp, shared experts 2 n T h f_e E_s / tp
- output layer (last stage): 2 T h V_t

Recomputation: selective adds the attention core 4 T s h / tp to each attention backward; full
runs each layer's forward again (its collectives too) right before its backward.

Schedules (``schedule.py``): gpipe, 1f1b, interleaved (chunk c of stage s holds the
(c pp + s)-th slice of L / (pp v) layers; the last stage's chunk c sends to the first stage's
chunk c + 1). The next iteration's first compute waits for the last collective of the step.
"""

from __future__ import annotations

import math

from .program import Plan, ProgramBuilder
from .schedule import stage_order
from .sharding import AG, AR, RS, GradReducer, gather
from .spec import TraceSpec, TransformerModel

A2A = "ALL_TO_ALL"


def h_kv(m: TransformerModel) -> int:
    return m.kv * (m.hidden_size // m.heads)


def _mats(m: TransformerModel) -> int:
    return 3 if m.gated_mlp else 2


def attn_params(m: TransformerModel) -> int:
    """Attention weights and biases of one layer, unsharded: Q and output h^2 each, K and V h h_kv
    each, Q/K/V biases h + 2 h_kv."""
    h, hk = m.hidden_size, h_kv(m)
    return 2 * h * h + 2 * h * hk + h + 2 * hk


def mlp_params(m: TransformerModel, f: int) -> int:
    """An MLP of hidden size f, unsharded: (n - 1) h f in, f h out, (n - 1) f input biases."""
    n_in = _mats(m) - 1
    return n_in * m.hidden_size * f + f * m.hidden_size + n_in * f


def attn_bytes(m: TransformerModel, tp: int) -> int:
    """Attention weight bytes a rank reads (tensor_size; biases left out)."""
    h = m.hidden_size
    return ((2 * h * h + 2 * h * h_kv(m)) // tp) * m.bytes_per_element


def mlp_bytes(m: TransformerModel, f: int, tp: int) -> int:
    return (_mats(m) * m.hidden_size * f // tp) * m.bytes_per_element


def layer_params_per_rank(h: int, f: int, tp: int) -> int:
    """A GPT layer (a_kv = a, two-matrix MLP): (4 h^2 + 2 h f + 3 h + f) / tp + 6 h."""
    return math.ceil((4 * h * h + 2 * h * f + 3 * h + f) / tp) + 6 * h


def layer_params(m: TransformerModel, layer: int, tp: int, ep: int) -> tuple[int, int]:
    """(dense, expert) parameters of a layer per rank. Dense: the TP-sharded attention and MLP (or
    shared experts), the replicated norms and row-parallel biases 6h, an MoE layer's router h E.
    Expert: E / ep experts, each TP-sharded."""
    h = m.hidden_size
    if not m.is_moe(layer):
        return math.ceil((attn_params(m) + mlp_params(m, m.ffn_hidden_size)) / tp) + 6 * h, 0
    shared = mlp_params(m, m.f_expert * m.shared_experts) if m.shared_experts else 0
    dense = math.ceil((attn_params(m) + shared) / tp) + 6 * h + h * m.experts
    return dense, (m.experts // ep) * math.ceil(mlp_params(m, m.f_expert) / tp)


def embedding_params(m: TransformerModel, tp: int) -> tuple[int, int]:
    """(first stage: word embedding shard and learned positions, last stage: output layer and norm)."""
    vt = math.ceil(m.vocab_size / tp)
    return vt * m.hidden_size + m.seq_length * m.hidden_size, vt * m.hidden_size + 2 * m.hidden_size


def block_flops(m: TransformerModel, tp: int, cp: int = 1) -> tuple[float, float, float]:
    """Forward FLOPs per rank of (attention block, dense MLP block, output layer)."""
    b, s, h, f = m.micro_batch, m.seq_length, m.hidden_size, m.ffn_hidden_size
    t = b * s / cp
    attn = (4 * t * h * h + 4 * t * h * h_kv(m) + 4 * t * s * h) / tp
    mlp = 2 * _mats(m) * t * h * f / tp
    logits = 2 * t * h * math.ceil(m.vocab_size / tp)
    return attn, mlp, logits


def moe_flops(m: TransformerModel, tp: int, cp: int = 1) -> tuple[float, float, float]:
    """Forward FLOPs per rank of an MoE block: (router, routed experts, shared experts)."""
    t = m.micro_batch * m.seq_length / cp
    h, n = m.hidden_size, _mats(m)
    return (2 * t * h * m.experts / tp, 2 * n * t * m.top_k * m.capacity_factor * h * m.f_expert / tp,
            2 * n * t * h * m.f_expert * m.shared_experts / tp)


def attention_core_flops(m: TransformerModel, tp: int, cp: int = 1) -> float:
    """QK^T and AV of one layer's forward per rank: what selective recomputation runs again."""
    return 4 * m.micro_batch * m.seq_length / cp * m.seq_length * m.hidden_size / tp


def model_flops_per_step(m: TransformerModel, recompute: str = "none") -> float:
    """FLOPs of one training step over the whole global batch (every rank together): 3 x forward
    (4 x for the layers with full recomputation, + the attention core with selective)."""
    passes = 4 if recompute == "full" else 3
    layers = 0.0
    for g in range(m.layers):
        a, mlp, _ = block_flops(m, 1)
        if m.is_moe(g):
            mlp = sum(moe_flops(m, 1))
        layers += passes * (a + mlp) + (attention_core_flops(m, 1) if recompute == "selective" else 0.0)
    _, _, logits = block_flops(m, 1)
    return (layers + 3 * logits) * (m.global_batch // m.micro_batch)


class _Stage:
    """Builds one pipeline stage's program (see the module docstring and docs/tracegen.md)."""

    def __init__(self, spec: TraceSpec, stage: int):
        m: TransformerModel = spec.model  # type: ignore[assignment]
        p = spec.parallel
        self.spec, self.m, self.p, self.stage = spec, m, p, stage
        self.sp = p.sequence_parallel and p.tp > 1
        e = m.bytes_per_element
        self.act = m.micro_batch * (m.seq_length // p.cp) * m.hidden_size * e
        self.shard = self.act // p.tp
        self.p2p = self.shard if self.sp else self.act
        self.kv_shard = 2 * m.micro_batch * (m.seq_length // p.cp) * h_kv(m) * e // p.tp
        tokens = m.micro_batch * (m.seq_length // p.cp) // (p.tp if self.sp else 1)
        self.dispatch = int(round(tokens * m.top_k * m.capacity_factor * m.hidden_size * e))
        self.mbs = m.global_batch // (m.micro_batch * p.dp * p.ep)
        self.v = p.virtual_stages
        self.per_chunk = m.layers // (p.pp * self.v)
        self.dense_axes = tuple((a, d) for a, d in (("cp", p.cp), ("ep", p.ep), ("dp", p.dp)) if d > 1)
        self.expert_axes = tuple((a, d) for a, d in (("cp", p.cp), ("dp", p.dp)) if d > 1)
        self.b = ProgramBuilder(spec.tflops)

    def layers(self, chunk: int) -> list[int]:
        base = (chunk * self.p.pp + self.stage) * self.per_chunk
        return list(range(base, base + self.per_chunk))

    # --- collectives -------------------------------------------------------------------------
    def tp(self, name: str, kind: str, after, size: int | None = None):
        if self.p.tp == 1:
            return after
        size = size if size is not None else (self.shard if kind == AG else self.act)
        return self.b.coll(name, kind, size, "tp", after=[after])

    def tp_out(self, name: str, after):
        """A block's output: all-reduce, or reduce-scatter with sequence parallelism."""
        return self.tp(f"{name}_{'rs' if self.sp else 'ar'}", RS if self.sp else AR, after)

    def on(self, axis: str, name: str, kind: str, size: int, after):
        if getattr(self.p, axis) == 1:
            return after
        return self.b.coll(name, kind, size, axis, after=[after])

    def zero3_gather(self, name: str, g: int):
        """ZeRO 3: the layer's weights gathered before a use; returns what the compute waits for."""
        if self.p.zero != 3:
            return None
        dense, expert = layer_params(self.m, g, self.p.tp, self.p.ep)
        e = self.m.bytes_per_element
        last = gather(self.b, f"{name}.param_ag", dense * e, self.dense_axes)
        return gather(self.b, f"{name}.expert_ag", expert * e, self.expert_axes) or last

    # --- one layer ---------------------------------------------------------------------------
    def layer_fwd(self, pre: str, g: int, x, w):
        b, m = self.b, self.m
        f_attn, f_mlp, _ = block_flops(m, self.p.tp, self.p.cp)
        if self.sp:
            x = self.tp(f"{pre}.attn_ag", AG, x)
        x = self.on("cp", f"{pre}.kv_ag", AG, self.kv_shard, x)
        x = b.comp(f"{pre}.attn", f_attn, attn_bytes(m, self.p.tp) + 2 * self.act, after=[x, w])
        x = self.tp_out(f"{pre}.attn", x)
        if not m.is_moe(g):
            if self.sp:
                x = self.tp(f"{pre}.mlp_ag", AG, x)
            x = b.comp(f"{pre}.mlp", f_mlp, mlp_bytes(m, m.ffn_hidden_size, self.p.tp) + 2 * self.act, after=[x])
            return self.tp_out(f"{pre}.mlp", x)
        return self.moe(pre, x, 1)

    def moe(self, pre: str, x, mult: int, w=None):
        """An MoE block forward (mult 1) or backward (mult 2; the same collectives mirrored); its
        first compute also waits for ``w`` (ZeRO 3's weight gather)."""
        b, m, tp = self.b, self.m, self.p.tp
        router, experts, shared = moe_flops(m, tp, self.p.cp)
        w_exp = (m.experts // self.p.ep) * mlp_bytes(m, m.f_expert, tp)
        if mult == 2 and m.shared_experts:
            x, w = self.shared(pre, x, shared, mult, w), None
        if mult == 1:
            x = b.comp(f"{pre}.router", router, 2 * self.act, after=[x])
        x = self.on("ep", f"{pre}.{'dispatch' if mult == 1 else 'combine'}_a2a", A2A, self.dispatch, x)
        x = self.tp(f"{pre}.moe_ag", AG, x, self.dispatch)
        x = b.comp(f"{pre}.experts", mult * experts, w_exp + 2 * self.dispatch * tp, after=[x, w])
        x = self.tp(f"{pre}.moe_rs", RS, x, self.dispatch * tp)
        x = self.on("ep", f"{pre}.{'combine' if mult == 1 else 'dispatch'}_a2a", A2A, self.dispatch, x)
        if mult == 2:
            return b.comp(f"{pre}.router", 2 * router, 2 * self.act, after=[x])
        return self.shared(pre, x, shared, mult) if m.shared_experts else x

    def shared(self, pre: str, x, flops: float, mult: int, w=None):
        if self.sp:
            x = self.tp(f"{pre}.shared_ag", AG, x)
        f = self.m.f_expert * self.m.shared_experts
        x = self.b.comp(f"{pre}.shared", mult * flops, mlp_bytes(self.m, f, self.p.tp) + 2 * self.act, after=[x, w])
        return self.tp(f"{pre}.shared_rs" if self.sp else f"{pre}.shared_ar", RS if self.sp else AR, x)

    def layer_bwd(self, pre: str, g: int, x, grads: GradReducer, reduce: bool, fwd_pre: str):
        b, m, p = self.b, self.m, self.p
        f_attn, f_mlp, _ = block_flops(m, p.tp, p.cp)
        w = self.zero3_gather(pre, g)
        if p.recompute == "full":
            x = self.layer_fwd(f"{fwd_pre}.rec", g, x, w)
            w = None
        if not m.is_moe(g):
            if self.sp:
                x = self.tp(f"{pre}.mlp_ag", AG, x)
            x = b.comp(f"{pre}.mlp", 2 * f_mlp, mlp_bytes(m, m.ffn_hidden_size, p.tp) + 2 * self.act, after=[x, w])
            x = self.tp_out(f"{pre}.mlp", x)
            expert_ready = None
        else:
            x = self.moe(pre, x, 2, w)
            expert_ready = b.last_comp
        if self.sp:
            x = self.tp(f"{pre}.attn_ag", AG, x)
        x = self.on("cp", f"{pre}.kv_ag", AG, self.kv_shard, x)
        core = attention_core_flops(m, p.tp, p.cp) if p.recompute == "selective" else 0.0
        c = b.comp(f"{pre}.attn", 2 * f_attn + core, attn_bytes(m, p.tp) + 2 * self.act, after=[x])
        x = self.on("cp", f"{pre}.dkv_rs", RS, self.kv_shard * p.cp, c)
        x = self.tp_out(f"{pre}.attn", x)
        if reduce:
            dense, expert = layer_params(m, g, p.tp, p.ep)
            ge = m.grad_bytes_per_element
            grads.add(f"L{g}", dense * ge, c, self.dense_axes)
            grads.add(f"L{g}.experts", expert * ge, expert_ready, self.expert_axes)
        return x

    # --- the stage ---------------------------------------------------------------------------
    def build(self) -> ProgramBuilder:
        spec, m, p, b = self.spec, self.m, self.p, self.b
        v, pp, st = self.v, p.pp, self.stage
        _, _, f_logits = block_flops(m, p.tp, p.cp)
        vt = math.ceil(m.vocab_size / p.tp)
        e, ge = m.bytes_per_element, m.grad_bytes_per_element
        emb, out = embedding_params(m, p.tp)
        order = stage_order(p.schedule, pp, st, self.mbs, v)
        for it in range(spec.iterations):
            b.prefix = f"it{it}." if spec.iterations > 1 else ""
            b.gate = b.last_coll
            grads = GradReducer(b, p.zero, p.grad_bucket_bytes, e / ge)
            for kind, c, mb in order:
                first, last = st == 0 and c == 0, st == pp - 1 and c == v - 1
                cl = f".c{c}" if v > 1 else ""
                tag = ((it * self.mbs + mb) * v + c) * 2
                reduce = p.zero >= 2 or mb == self.mbs - 1
                if kind == "F":
                    if first:
                        x = self.tp(f"mb{mb}.emb.fwd.tp_{'rs' if self.sp else 'ar'}", RS if self.sp else AR, None)
                    else:
                        x = b.recv(f"mb{mb}{cl}.fwd.recv_act", self.p2p, "pp", -1,
                                   tag - (2 if st == 0 else 0))
                    for g in self.layers(c):
                        x = self.layer_fwd(f"mb{mb}.L{g}.fwd", g, x, self.zero3_gather(f"mb{mb}.L{g}.fwd", g))
                    if last:
                        if self.sp:
                            x = self.tp(f"mb{mb}.out.fwd.ag", AG, x)
                        b.comp(f"mb{mb}.out.fwd", f_logits, vt * m.hidden_size * e + self.act, after=[x])
                    else:
                        b.send(f"mb{mb}{cl}.fwd.send_act", self.p2p, "pp", +1, tag, after=[x])
                    continue
                if last:
                    cc = b.comp(f"mb{mb}.out.bwd", 2 * f_logits, vt * m.hidden_size * e + self.act)
                    x = self.tp(f"mb{mb}.out.bwd.tp_{'rs' if self.sp else 'ar'}", RS if self.sp else AR, cc)
                    if reduce:
                        grads.add("out", out * ge, cc, self.dense_axes, after_step=True)
                else:
                    x = b.recv(f"mb{mb}{cl}.bwd.recv_grad", self.p2p, "pp", +1, tag + 1)
                for g in reversed(self.layers(c)):
                    x = self.layer_bwd(f"mb{mb}.L{g}.bwd", g, x, grads, reduce, f"mb{mb}.L{g}.fwd")
                if first:
                    if reduce:
                        grads.add("emb", emb * ge, x, self.dense_axes, after_step=True)
                else:
                    b.send(f"mb{mb}{cl}.bwd.send_grad", self.p2p, "pp", -1,
                           tag + 1 - (2 if st == 0 else 0), after=[x])
                if p.zero >= 2 or mb == self.mbs - 1:
                    grads.flush()
            grads.flush()
            grads.gather_weights()
        return b


def stage_compute_ns(spec: TraceSpec, stage: int) -> float:
    """Sum of the compute durations of ``stage``'s program, without building it: the same ops, the
    same rounding (a stage's compute forms one chain, so this is a lower bound on its time)."""
    fwd, bwd = stage_pass_ns(spec, stage)
    mbs = spec.model.global_batch // (spec.model.micro_batch * spec.parallel.dp * spec.parallel.ep)
    return (fwd + bwd) * mbs * spec.iterations


def stage_pass_ns(spec: TraceSpec, stage: int) -> tuple[float, float]:
    """Compute of ``stage`` for one micro-batch: (forwards, backwards with their recomputation), ns."""
    from .program import micros
    m, p = spec.model, spec.parallel
    rate = spec.tflops * 1e12
    f_attn, f_mlp, f_logits = block_flops(m, p.tp, p.cp)
    router, experts, shared = moe_flops(m, p.tp, p.cp)
    core = attention_core_flops(m, p.tp, p.cp) if p.recompute == "selective" else 0.0

    def t(*flops: float) -> int:
        return sum(micros(f / rate) for f in flops)

    fwd_dense, fwd_moe = t(f_attn, f_mlp), t(f_attn, router, experts) + (t(shared) if m.shared_experts else 0)
    bwd_dense = t(2 * f_mlp, 2 * f_attn + core)
    bwd_moe = t(2 * experts, 2 * router, 2 * f_attn + core) + (t(2 * shared) if m.shared_experts else 0)
    per = m.layers // (p.pp * p.virtual_stages)
    fwd = bwd = 0
    for c in range(p.virtual_stages):
        for g in range((c * p.pp + stage) * per, (c * p.pp + stage + 1) * per):
            moe = m.is_moe(g)
            fwd += fwd_moe if moe else fwd_dense
            bwd += (bwd_moe if moe else bwd_dense) + ((fwd_moe if moe else fwd_dense) if p.recompute == "full" else 0)
    if stage == p.pp - 1:
        fwd, bwd = fwd + t(f_logits), bwd + t(2 * f_logits)
    return fwd * 1000.0, bwd * 1000.0


def _stage_layers(spec: TraceSpec, stage: int) -> list[int]:
    p = spec.parallel
    per = spec.model.layers // (p.pp * p.virtual_stages)
    return [g for c in range(p.virtual_stages) for g in range((c * p.pp + stage) * per, (c * p.pp + stage + 1) * per)]


def _dispatch_bytes(m: TransformerModel, p) -> int:
    tokens = m.micro_batch * (m.seq_length // p.cp) // (p.tp if p.sequence_parallel and p.tp > 1 else 1)
    return int(round(tokens * m.top_k * m.capacity_factor * m.hidden_size * m.bytes_per_element))


def path_bytes(spec: TraceSpec, stage: int) -> float:
    """Bytes per NPU (summed over dimensions, as a hierarchical collective moves them) of the
    collectives of ``stage`` for one micro-batch that lie on its compute chain (the next compute
    waits for each): the TP collectives at the attention blocks' outputs (all-reduce, or sequence
    parallelism's reduce-scatter and all-gather: 2 act (tp - 1) / tp), the MoE all-to-alls
    (d (ep - 1) / ep each), in every forward, backward and full recomputation's second forward;
    and with tp > 1 ZeRO 3's weight gathers (issued right after the previous layer's last TP
    collective, waited for by the layer's compute)."""
    m, p = spec.model, spec.parallel
    passes = 3 if p.recompute == "full" else 2
    act = m.micro_batch * (m.seq_length // p.cp) * m.hidden_size * m.bytes_per_element
    out = 0.0
    d = _dispatch_bytes(m, p)
    n_d, n_e = p.cp * p.ep * p.dp, p.cp * p.dp
    for g in _stage_layers(spec, stage):
        if p.tp > 1:
            out += passes * 2.0 * act * (p.tp - 1) / p.tp
            if p.zero == 3:
                dense, expert = layer_params(m, g, p.tp, p.ep)
                out += 2 * (dense * (1 - 1 / n_d) + expert * (1 - 1 / n_e)) * m.bytes_per_element
        if m.is_moe(g) and p.ep > 1:
            out += 2 * passes * d * (p.ep - 1) / p.ep
    return out


def chain_bytes(spec: TraceSpec, stage: int) -> tuple[float, float]:
    """Bytes per NPU (summed over dimensions) of some of ``stage``'s collectives, all on its one
    chain of collectives: (per micro-batch: the attention blocks' TP collectives, the MoE
    all-to-alls, ZeRO 2's reduce-scatters and ZeRO 3's gathers; per step: the other gradient
    reductions and weight gathers). A hierarchical collective over replicas N moves m (1 - 1/N)
    (all-gather of m, reduce-scatter of m) or 2 m (1 - 1/N) (all-reduce) per NPU."""
    m, p = spec.model, spec.parallel
    passes = 3 if p.recompute == "full" else 2
    act = m.micro_batch * (m.seq_length // p.cp) * m.hidden_size * m.bytes_per_element
    layers = _stage_layers(spec, stage)
    per_mb = len(layers) * passes * 2.0 * act * (p.tp - 1) / p.tp
    d = _dispatch_bytes(m, p)
    n_d, n_e = p.cp * p.ep * p.dp, p.cp * p.dp
    frac_d, frac_e = 1 - 1 / n_d, 1 - 1 / n_e
    e, ge = m.bytes_per_element, m.grad_bytes_per_element
    dense = expert = 0
    for g in layers:
        a, x = layer_params(m, g, p.tp, p.ep)
        dense, expert = dense + a, expert + x
        if m.is_moe(g) and p.ep > 1:
            per_mb += 2 * passes * d * (p.ep - 1) / p.ep
    outer = sum(w for w, on in zip(embedding_params(m, p.tp), (stage == 0, stage == p.pp - 1)) if on)
    grads = (dense + outer) * frac_d + expert * frac_e
    if p.zero == 0:
        per_step = 2 * grads * ge
    elif p.zero == 1:
        per_step = grads * (ge + e)
    else:
        per_mb += grads * ge if p.zero == 2 else (dense * frac_d + expert * frac_e) * (ge + 2 * e)
        per_step = grads * e if p.zero == 2 else outer * frac_d * e
    return per_mb, per_step


def _stage_key(spec: TraceSpec, stage: int) -> tuple:
    """What a stage's program depends on besides op names: its layers' kinds, its place, its order."""
    p, m = spec.parallel, spec.model
    per = m.layers // (p.pp * p.virtual_stages)
    kinds = tuple(m.is_moe((c * p.pp + stage) * per + i) for c in range(p.virtual_stages) for i in range(per))
    mbs = m.global_batch // (m.micro_batch * p.dp * p.ep)
    return kinds, stage == 0, stage == p.pp - 1, tuple(stage_order(p.schedule, p.pp, stage, mbs, p.virtual_stages))


def transformer_plan(spec: TraceSpec, *, names: bool = True) -> Plan:
    """One program per pipeline stage; every rank runs its stage's program.

    ``names=False``: stages whose programs differ only in op names (the layer numbers: same layer
    kinds, neither first nor last, same pass order) share one program object, so analyses that
    ignore names (the search's demand and bounds) build one program per distinct stage.
    """
    pp = spec.parallel.pp
    programs: dict = {}
    built: dict = {}
    for st in range(pp):
        key = _stage_key(spec, st) if not names else st
        if key not in built:
            built[key] = tuple(_Stage(spec, st).build().ops)
        programs[st] = built[key]
    stage_of = spec.layout.axis_index.get("pp", (0,) * spec.layout.num_ranks)
    return Plan(programs, tuple(stage_of))
