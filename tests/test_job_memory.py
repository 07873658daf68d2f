"""Memory per NPU and FLOPs per step of today's training jobs, against the published formulas."""

import math
from dataclasses import replace

import pytest

from libra_astra.search.memory import layer_activation_bytes, transformer_memory, zero_bytes
from libra_astra.traces import chakra_io as cio
from libra_astra.tracegen import generate, load_spec, spec_from_dict
from libra_astra.tracegen.schedule import in_flight, stage_order
from libra_astra.tracegen.spec import Parallel
from libra_astra.tracegen.transformer import model_flops_per_step

GPT3 = load_spec("traces/large/gpt3_175b_4096.yml").model


def test_zero_reproduces_the_papers_7_5b_example():
    """Rajbhandari et al. 2020, Figure 1: 7.5 B parameters, N_d = 64, K = 12: 120 GB, 31.4 GB,
    16.6 GB and 1.9 GB per device for DP, P_os, P_os+g and P_os+g+p."""
    psi = 7.5e9
    want = {0: 120e9, 1: 31.4e9, 2: 16.6e9, 3: 1.9e9}
    for stage, gb in want.items():
        total = sum(zero_bytes(psi, 64, stage))
        assert total == pytest.approx(gb, abs=0.05e9)
    assert sum(zero_bytes(psi, 64, 1)) == 4 * psi + 12 * psi / 64
    assert sum(zero_bytes(psi, 64, 2)) == 2 * psi + 14 * psi / 64
    assert sum(zero_bytes(psi, 64, 3)) == 16 * psi / 64


@pytest.mark.parametrize("t", [1, 2, 8])
def test_activations_reproduce_korthikanti_table_2(t):
    """Korthikanti et al. 2022, Table 2 (per layer, 2-byte activations)."""
    m = GPT3
    s, b, h, a = m.seq_length, m.micro_batch, m.hidden_size, m.heads
    sbh = s * b * h
    assert layer_activation_bytes(m, False, t, False, "none") == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert layer_activation_bytes(m, False, t, True, "none") == pytest.approx(
        sbh * (34 + 5 * a * s / h) / t if t > 1 else sbh * (34 + 5 * a * s / h))
    assert layer_activation_bytes(m, False, t, False, "selective") == pytest.approx(sbh * (10 + 24 / t))
    assert layer_activation_bytes(m, False, t, True, "selective") == pytest.approx(sbh * 34 / t if t > 1 else 34 * sbh)
    assert layer_activation_bytes(m, False, t, False, "full") == 2 * sbh
    if t == 1:   # no parallelism: sbh (34 + 5 a s / h)
        assert layer_activation_bytes(m, False, 1, False, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))


def test_activations_shrink_with_gqa_and_context_parallelism():
    m = replace(GPT3, kv_heads=8)
    full = layer_activation_bytes(GPT3, False, 8, True, "none")
    gqa = layer_activation_bytes(m, False, 8, True, "none")
    # K and V kept at h_kv = h / 12: 4 h_kv / h instead of 4
    assert full - gqa == pytest.approx(GPT3.seq_length * GPT3.hidden_size * (4 - 4 / 12) / 8)
    # cp splits the tokens, and the scores' s_l x s too
    assert layer_activation_bytes(GPT3, False, 8, True, "none", cp=4) == pytest.approx(full / 4)


@pytest.mark.parametrize("schedule,v,factor", [("gpipe", 1, 16 / 8), ("1f1b", 1, 1.0), ("interleaved", 2, 1 + 7 / 16)])
def test_in_flight_micro_batches_per_schedule(schedule, v, factor):
    """The first stage keeps M micro-batches of L / p layers (gpipe), p of them (1F1B: L layers' worth),
    L (1 + (p - 1) / (p v)) with interleaving (Korthikanti et al. 2022, section 4.2.3)."""
    p = Parallel(tp=16, pp=8, dp=32, sequence_parallel=True, schedule=schedule, virtual_stages=v)
    mu = transformer_memory(GPT3, p)
    per_layer = layer_activation_bytes(GPT3, False, 16, True, "none")
    assert mu.activations_bytes == pytest.approx(per_layer * GPT3.layers * factor)
    # and the schedule's own warm-up holds that many chunks before the first backward
    order = stage_order(schedule, 8, 0, 16, v)
    first_b = next(i for i, x in enumerate(order) if x[0] == "B")
    assert first_b / v == pytest.approx(in_flight(schedule, 8, 16, v))


def test_zero_stages_shard_the_model_state():
    base = Parallel(tp=16, pp=8, dp=32, sequence_parallel=True)
    m0 = transformer_memory(GPT3, base)
    m3 = transformer_memory(GPT3, replace(base, zero=3))
    m1 = transformer_memory(GPT3, replace(base, zero=1))
    assert m1.weights_bytes == m0.weights_bytes and m1.optimizer_bytes < m0.optimizer_bytes / 31
    assert m3.weights_bytes < m0.weights_bytes / 10 and m3.activations_bytes == m0.activations_bytes


def test_model_flops_per_step_reproduce_narayanan():
    """Narayanan et al. 2021, eq. (3): 72 B s l h^2 (1 + s / 6h + V / 12lh) model FLOPs, and
    96 B s l h^2 (1 + s / 6h + V / 16lh) with full recomputation."""
    m = GPT3
    B, s, l, h, V = m.global_batch, m.seq_length, m.layers, m.hidden_size, m.vocab_size
    assert model_flops_per_step(m) == pytest.approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)),
                                                    rel=1e-12)
    assert model_flops_per_step(m, "full") == pytest.approx(
        96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)), rel=1e-12)
    assert model_flops_per_step(m, "selective") - model_flops_per_step(m) == pytest.approx(4 * B * s * s * h * l)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("moe", [False, True])
def test_generated_compute_sums_to_the_model_flops(tmp_path, recompute, moe):
    model = {"type": "transformer", "layers": 4, "hidden_size": 256, "heads": 8, "seq_length": 64,
             "vocab_size": 1024, "micro_batch": 1, "global_batch": 8, "bytes_per_element": 2, "kv_heads": 4,
             "gated_mlp": True}
    if moe:
        model.update(experts=4, top_k=2, capacity_factor=1.0, shared_experts=1, expert_hidden_size=128,
                     first_dense_layers=1)
    par = {"tp": 2, "pp": 2, "cp": 2, "dp": 1 if moe else 2, "sequence_parallel": True, "recompute": recompute,
           "schedule": "1f1b"}
    place = {"tp": [0], "cp": [1], "pp": [2]}
    if moe:
        par["ep"] = 2
        place["ep"] = [3]
    else:
        place["dp"] = [3]
    raw = {"model": model, "parallel": par, "placement": place, "network": {"npus_per_dim": [2, 2, 2, 2]},
           "compute": {"tflops": 100}}
    res = generate(raw, tmp_path / "t")
    total = 0
    for r in range(res.num_ranks):
        total += sum(cio.node_attrs(n)["num_ops"] for n in cio.read_et(res.et_path(r))[1] if n.type == 4)
    spec = spec_from_dict(raw)
    assert total == model_flops_per_step(spec.model, recompute)
    assert math.isfinite(transformer_memory(spec.model, spec.parallel).total_bytes)
