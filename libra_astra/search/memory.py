"""Memory per NPU of a transformer parallelization, against the device's HBM.

Per NPU of the most loaded pipeline stage:

- parameters, as the generator shards them (``tracegen.transformer.layer_params``): per layer the
  dense part (attention, MLP or shared experts and router, TP-sharded, plus replicated norms and
  biases) and the expert part (E / ep experts, TP-sharded); the word and position embeddings
  ``V_t h + s h`` on the first stage, the output layer ``V_t h + 2 h`` on the last;
- weights, gradients and optimizer state per Rajbhandari et al. 2020 (ZeRO), for Psi parameters
  replicated over N_d ranks (dense: cp x ep x dp; experts: cp x dp), e / e_g bytes per weight /
  gradient, K bytes of optimizer state per parameter (Adam with fp32 master weights, momentum and
  variance: 12): stage 0 (e + e_g + K) Psi, stage 1 (e + e_g) Psi + K Psi / N_d, stage 2
  e Psi + (e_g + K) Psi / N_d, stage 3 (e + e_g + K) Psi / N_d (``zero_bytes``). The generator's
  ZeRO 3 gathers the layers' weights before each use but keeps the embedding and output layer
  whole, as ZeRO 2 does; the memory follows it (the gathered layer in flight is not counted);
- activations kept for the backward pass, per layer and micro-batch (``layer_activation_bytes``):
  Korthikanti et al. 2022, generalized to grouped-query attention, gated MLPs and MoE layers and
  to context parallelism (s_l = s / cp tokens per rank), scaled by bytes_per_element / 2 (the
  paper counts 2-byte activations); times the stage's L / pp layers and the micro-batches the
  schedule keeps in flight (``tracegen.schedule.in_flight``: M for gpipe, min(pp, M) for 1f1b,
  pp + (pp - 1) / v for interleaved).

The total must fit ``hbm_bytes`` (with a reserve kept free for workspace).
"""

from __future__ import annotations

from dataclasses import dataclass

from .upstream import Parallel, TransformerModel, embedding_params, h_kv, in_flight, layer_params


@dataclass(frozen=True)
class MemoryUse:
    params: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes


def zero_bytes(psi: float, n_d: int, stage: int, e: float = 2, e_g: float = 2,
               k: float = 12) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes per rank of Psi parameters under ZeRO ``stage``
    over ``n_d`` data-parallel ranks (Rajbhandari et al. 2020, section 5)."""
    return (psi * e / (n_d if stage >= 3 else 1), psi * e_g / (n_d if stage >= 2 else 1),
            psi * k / (n_d if stage >= 1 else 1))


def layer_activation_bytes(m: TransformerModel, moe: bool, tp: int, sp: bool, recompute: str, cp: int = 1) -> float:
    """Activation bytes one layer keeps for one micro-batch on one rank.

    In units of s_l b h (2-byte activations), after Korthikanti et al. 2022, section 4: the layer
    norms (4), the attention and MLP inputs (2 + 2) and two dropout masks (2) are replicated over
    TP (10); Q, K, V and the projection input (4 + 4 h_kv / h) and the MLP's inner activations
    (2 n f / h, n = 3 gated else 2; an MoE layer keeps, per routed copy k c, its input and inner
    activations 2 + 2 n f_e / h, plus the shared experts' 2 n f_e E_s / h) are TP-sharded, and the
    attention scores, softmax and dropout (5 a s / h) too. Without sequence parallelism: 10 +
    inner / tp; with it: (10 + inner) / tp. Selective recomputation drops the 5 a s / h; full
    recomputation keeps only the layer input, 2 (2 / tp with sequence parallelism). For the GPT
    layer (h_kv = h, f = 4h, n = 2) this is the paper's 34 and 10 + 24 / t."""
    sp = sp and tp > 1
    s_l, b, h = m.seq_length / cp, m.micro_batch, m.hidden_size
    unit = s_l * b * h * m.bytes_per_element / 2
    if recompute == "full":
        return unit * 2 / (tp if sp else 1)
    n = 3 if m.gated_mlp else 2
    inner = 4 + 4 * h_kv(m) / h
    if moe:
        inner += m.top_k * m.capacity_factor * (2 + 2 * n * m.f_expert / h) + 2 * n * m.f_expert * m.shared_experts / h
    else:
        inner += 2 * n * m.ffn_hidden_size / h
    if recompute == "none":
        inner += 5 * m.heads * m.seq_length / h
    return unit * ((10 + inner) / tp if sp else 10 + inner / tp)


def transformer_memory(m: TransformerModel, p: Parallel, optimizer_bytes_per_param: float = 12.0) -> MemoryUse:
    """Memory of the most loaded pipeline stage (see the module docstring); ``m.micro_batch`` is the
    micro-batch size."""
    tp, pp, v = p.tp, p.pp, p.virtual_stages
    per_chunk = m.layers // (pp * v)
    mbs = m.global_batch // (m.micro_batch * p.dp * p.ep)
    e, ge, k = m.bytes_per_element, m.grad_bytes_per_element, optimizer_bytes_per_param
    first, last = embedding_params(m, tp)
    n_dense, n_exp = p.cp * p.ep * p.dp, p.cp * p.dp
    best: MemoryUse | None = None
    for st in range(pp):
        layers = [(c * pp + st) * per_chunk + i for c in range(v) for i in range(per_chunk)]
        dense = expert = 0
        for g in layers:
            d, x = layer_params(m, g, tp, p.ep)
            dense, expert = dense + d, expert + x
        outer = (first if st == 0 else 0) + (last if st == pp - 1 else 0)
        w, g_, o = (a + b + c for a, b, c in zip(zero_bytes(dense, n_dense, p.zero, e, ge, k),
                                                   zero_bytes(expert, n_exp, p.zero, e, ge, k),
                                                   zero_bytes(outer, n_dense, min(p.zero, 2), e, ge, k)))
        act = sum(layer_activation_bytes(m, m.is_moe(g), tp, p.sequence_parallel, p.recompute, p.cp) for g in layers)
        act *= in_flight(p.schedule, pp, mbs, v)
        use = MemoryUse(dense + expert + outer, w, g_, o, act)
        if best is None or use.total_bytes > best.total_bytes:
            best = use
    assert best is not None
    return best
