"""The demand built from a spec equals the demand read back from the traces generated for it."""

from dataclasses import replace

import pytest

from libra_astra.model.network import Dimension, Network
from libra_astra.search.spec_demand import demand_from_spec, prepare
from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.traces.files import default_groups_path
from libra_astra.tracegen import generate, load_spec, spec_from_dict


@pytest.mark.parametrize("folder,prefix", [("gpt3_tp8_dp8", "gpt3"), ("gpt_tp2_pp2_dp4", "gpt"),
                                           ("dlrm_16", "dlrm"), ("resnet50_dp16", "resnet50")])
def test_samples_equal_their_traces(folder, prefix):
    spec = load_spec(f"traces/{folder}/spec.yml")
    p = f"traces/{folder}/{prefix}"
    want, _ = demand_from_traces(p, spec.net, comm_groups=default_groups_path(p))
    got = demand_from_spec(spec, name=want.name)
    assert got == want


def _gpt(parallel, placement, shape):
    return {"name": "t", "model": {"type": "transformer", "layers": 4, "hidden_size": 256, "heads": 8,
                                   "seq_length": 64, "vocab_size": 1000, "micro_batch": 1, "global_batch": 8,
                                   "bytes_per_element": 2},
            "parallel": parallel, "placement": placement, "network": {"npus_per_dim": shape},
            "compute": {"tflops": 100}}


CASES = [
    # pp over two dimensions, tp sharing dim 0 with pp, sequence parallel
    ({"tp": 2, "pp": 4, "dp": 2, "sequence_parallel": True}, {"tp": [0], "pp": [0, 1], "dp": [2]}, [4, 2, 2]),
    # dp innermost inside dim 0 (strided tp group), pp outermost
    ({"tp": 2, "pp": 2, "dp": 4}, {"dp": [0], "tp": [0], "pp": [1]}, [8, 2]),
    # everything on one dimension
    ({"tp": 2, "pp": 2, "dp": 2}, {"tp": [0], "pp": [0], "dp": [0]}, [8]),
    # pp first (innermost), two iterations
    ({"tp": 2, "pp": 2, "dp": 2, "sequence_parallel": True}, {"pp": [0], "tp": [1], "dp": [1]}, [2, 4]),
]


@pytest.mark.parametrize("topologies", [None, ("Switch", "FullyConnected", "Ring")])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_generated_equal_traces(tmp_path, case, topologies):
    par, place, shape = CASES[case]
    raw = _gpt(par, place, shape)
    if case == 3:
        raw["iterations"] = 2
    spec = spec_from_dict(raw, "t.yml")
    net = spec.net
    if topologies:
        net = Network("n", tuple(Dimension(f"d{i}", topologies[i % 3], n, 10.0 * (i + 1), "c")
                                 for i, n in enumerate(shape)))
    res = generate(raw, tmp_path / "t")
    want, _ = demand_from_traces(tmp_path / "t", net, comm_groups=res.groups_path)
    got = demand_from_spec(spec, net, name=want.name)
    assert got == want
    # a spec's own network names no dimension (dim0, dim1, ...); a named network's names travel along
    assert got.dim_names == (tuple(f"d{i}" for i in range(len(shape))) if topologies else ())
    # programs prepared for one placement serve another placement of the same degrees
    other = demand_from_spec(spec, net, programs=prepare(spec), labels=False)
    assert [rc.dag for rc in other.rank_classes] == [rc.dag for rc in want.rank_classes]
    assert [[replace(c, group="") for c in rc.collectives] for rc in want.rank_classes] == \
        [list(rc.collectives) for rc in other.rank_classes]


MOE = {"experts": 4, "top_k": 2, "capacity_factor": 1.25, "shared_experts": 1, "expert_hidden_size": 128,
       "moe_layer_freq": 2, "first_dense_layers": 1, "gated_mlp": True, "kv_heads": 2}

JOBS = {
    "1f1b": ({"tp": 2, "pp": 4, "dp": 2, "schedule": "1f1b"}, {"tp": [0], "pp": [1], "dp": [2]}, [2, 4, 2], {}),
    "interleaved": ({"tp": 2, "pp": 2, "dp": 2, "schedule": "interleaved", "virtual_stages": 2},
                    {"pp": [0], "tp": [1], "dp": [1]}, [2, 4], {}),
    "zero1_buckets": ({"tp": 2, "dp": 4, "zero": 1, "grad_bucket_mb": 0.3}, {"tp": [0], "dp": [1]}, [2, 4], {}),
    "zero2_1f1b": ({"tp": 2, "pp": 2, "dp": 2, "zero": 2, "schedule": "1f1b"},
                   {"tp": [0], "pp": [1], "dp": [2]}, [2, 2, 2], {}),
    "zero3": ({"tp": 2, "dp": 4, "zero": 3}, {"dp": [0], "tp": [1]}, [4, 2], {}),
    "recompute_full": ({"tp": 2, "pp": 2, "dp": 2, "recompute": "full", "sequence_parallel": True},
                       {"tp": [0], "pp": [1], "dp": [1]}, [2, 4], {}),
    "recompute_selective_gqa": ({"tp": 2, "dp": 2, "recompute": "selective"}, {"tp": [0], "dp": [1]}, [2, 2],
                                {"kv_heads": 2}),
    "cp": ({"tp": 2, "cp": 2, "dp": 2, "sequence_parallel": True}, {"tp": [0], "cp": [1], "dp": [2]}, [2, 2, 2],
           {"kv_heads": 4}),
    "moe_ep": ({"tp": 2, "ep": 2, "dp": 2, "sequence_parallel": True}, {"tp": [0], "ep": [1], "dp": [1]}, [2, 4],
               MOE),
    "moe_ep_tp1_zero3": ({"ep": 4, "dp": 2, "zero": 3}, {"ep": [0], "dp": [1]}, [4, 2], dict(MOE, experts=8)),
    "everything": ({"tp": 2, "cp": 2, "ep": 2, "pp": 2, "dp": 1, "sequence_parallel": True, "zero": 1,
                    "schedule": "interleaved", "virtual_stages": 2, "recompute": "full"},
                   {"tp": [0], "cp": [0], "ep": [1], "pp": [2]}, [4, 2, 2], dict(MOE, experts=4)),
}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_training_job_features_equal_their_traces(tmp_path, job):
    """Every schedule, ZeRO stage, recomputation, MoE with EP, CP and GQA: the spec's demand is the
    demand of the traces generated for it (and the traces are well formed)."""
    par, place, shape, model = JOBS[job]
    raw = _gpt(par, place, shape)
    raw["model"].update(model)
    if job == "interleaved":
        raw["model"]["global_batch"] = 8
    spec = spec_from_dict(raw, "t.yml")
    net = Network("n", tuple(Dimension(f"d{i}", ("Ring", "Switch", "FullyConnected")[i % 3], n, 10.0 * (i + 1), "c")
                             for i, n in enumerate(shape)))
    res = generate(raw, tmp_path / "t")
    want, _ = demand_from_traces(tmp_path / "t", net, comm_groups=res.groups_path)
    got = demand_from_spec(spec, net, name=want.name)
    assert got == want
    other = demand_from_spec(spec, net, programs=prepare(spec), labels=False)
    assert [rc.dag for rc in other.rank_classes] == [rc.dag for rc in want.rank_classes]


@pytest.mark.parametrize("job", sorted(JOBS))
def test_stage_compute_closed_form_equals_the_programs(job):
    """The search's cheap bound per parallelization: each stage's compute sum without building it."""
    from libra_astra.tracegen.generate import build_plan
    from libra_astra.tracegen.transformer import stage_compute_ns
    par, place, shape, model = JOBS[job]
    raw = _gpt(par, place, shape)
    raw["model"].update(model)
    if job == "interleaved":
        raw["model"]["global_batch"] = 8
    raw["compute"]["tflops"] = 0.01    # durations of a few microseconds: the rounding matters
    spec = spec_from_dict(raw, "t.yml")
    plan = build_plan(spec)
    for st, ops in plan.programs.items():
        assert stage_compute_ns(spec, st) == sum(op.duration_micros for op in ops if op.kind == "comp") * 1000.0


@pytest.mark.parametrize("job", sorted(JOBS))
def test_pipeline_compute_is_a_path_of_the_programs(job):
    """The lazy search's bound is the length of a compute-only path: at most the longest one."""
    from libra_astra.search.bounds import longest_paths
    from libra_astra.search.candidates import pipeline_compute_ns
    from libra_astra.tracegen.generate import build_plan
    par, place, shape, model = JOBS[job]
    raw = _gpt(par, place, shape)
    raw["model"].update(model)
    raw["model"]["global_batch"] = 8 if job == "interleaved" else 16
    raw["compute"]["tflops"] = 0.01
    spec = spec_from_dict(raw, "t.yml")
    plan = build_plan(spec, names=False)
    longest = longest_paths(plan.programs, lambda k, s, a: 0.0, None)[0].compute_ns
    got = pipeline_compute_ns(spec)
    assert got <= longest
    # with a total bandwidth: at most the longest path weighting each collective by bytes / W
    from libra_astra.search.engine import _collective_bytes
    deg = {a.name: a.degree for a in spec.layout.axes}
    cb = lambda k, size, a: _collective_bytes(k, size, deg.get(a, 1))  # noqa: E731
    w = 50.0
    bpath = longest_paths(plan.programs, cb, w)[1]
    longest_w = bpath.compute_ns + sum(n * cb(*k) for k, n in bpath.colls) / w
    with_comm = pipeline_compute_ns(spec, w)
    assert with_comm <= longest_w * (1 + 1e-12)
    assert with_comm >= got
    # the collectives chain_bytes counts are some of each stage's chain (any rank of the stage)
    from libra_astra.search.bounds import collective_chains
    from libra_astra.tracegen.transformer import chain_bytes
    mbs = spec.model.global_batch // (spec.model.micro_batch * spec.parallel.dp * spec.parallel.ep)
    for st, ops in build_plan(spec).programs.items():
        chain = collective_chains({0: ops})[0]
        per_mb, per_step = chain_bytes(spec, st)
        assert per_mb * mbs + per_step <= sum(n * cb(*k) for k, n in chain.colls) * (1 + 1e-12) + 1e-6
    if spec.parallel.pp > 1 and spec.parallel.schedule != "interleaved":
        from libra_astra.tracegen.transformer import stage_compute_ns
        assert got > max(stage_compute_ns(spec, s) for s in range(spec.parallel.pp))   # the bubble counts
