"""Memory per NPU of a transformer parallelization, against the device's HBM.

Per NPU of pipeline stage s (the largest stage counts):

- parameters P_s: the stage's layers, each ``(4h^2 + 2hf + 3h + f) / tp + 6h`` (as the generator
  shards them), plus the word and position embeddings ``V_t h + s h`` on the first stage and the
  output layer ``V_t h + 2h`` on the last (V_t = ceil(V / tp));
- weights ``P_s x bytes_per_element``, gradients ``P_s x grad_bytes_per_element``, optimizer state
  ``P_s x optimizer_bytes_per_param`` (Adam with fp32 master weights, momentum and variance: 12 B);
  data parallelism replicates all three (no ZeRO sharding);
- activations kept for the backward pass, per layer and micro-batch (Korthikanti et al. 2022, for
  2-byte activations, scaled by bytes_per_element / 2): ``s b h (10 + 24/tp + 5 a s / (h tp))``
  without sequence parallelism, ``s b h (34 + 5 a s / h) / tp`` with it (a = heads); the
  generator's schedule runs all M forwards before the backwards, so a stage holds all M
  micro-batches of its L / pp layers.

The total must fit ``hbm_bytes`` (with ``reserve_fraction`` kept free for workspace).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .upstream import TransformerModel


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


def _layer_params(h: int, f: int, tp: int) -> int:
    return math.ceil((4 * h * h + 2 * h * f + 3 * h + f) / tp) + 6 * h


def transformer_memory(m: TransformerModel, tp: int, pp: int, dp: int, sp: bool, micro_batch: int,
                       optimizer_bytes_per_param: float = 12.0) -> MemoryUse:
    """Memory of the most loaded pipeline stage (see the module docstring)."""
    h, f, s, a = m.hidden_size, m.ffn_hidden_size, m.seq_length, m.heads
    vt = math.ceil(m.vocab_size / tp)
    per_stage = m.layers // pp
    layer = _layer_params(h, f, tp) * per_stage
    first = vt * h + s * h
    last = vt * h + 2 * h
    params = layer + (first + last if pp == 1 else max(first, last))
    mbs = m.global_batch // (micro_batch * dp)
    b = micro_batch
    if sp and tp > 1:
        per_layer = s * b * h * (34 + 5 * a * s / h) / tp
    else:
        per_layer = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    act = per_layer * (m.bytes_per_element / 2) * per_stage * mbs
    return MemoryUse(params, params * m.bytes_per_element, params * m.grad_bytes_per_element,
                     params * optimizer_bytes_per_param, act)
