"""Lower-bound paths: the fast pass equals a plain topological pass over the whole stage graph."""

from collections import Counter

import pytest

from libra_astra.search import bounds as bnd
from libra_astra.search.bounds import PathSummary
from libra_astra.search.engine import _collective_bytes
from libra_astra.tracegen import build_plan, load_spec, spec_from_dict
from libra_astra.tracegen.program import COLL, COMP, RECV, SEND, Op


# The implementation the search used before it took the stage programs apart once per program
# object; kept here as the reference: every node of every stage, one topological sort.
def _stage_graph(programs: dict) -> tuple[list, list, list]:
    """Nodes (stage, op) of all pipeline stages with edges: program dependencies plus send -> recv."""
    stages = sorted(programs)
    base = {}
    n = 0
    for s in stages:
        base[s] = n
        n += len(programs[s])
    preds: list[list[int]] = [[] for _ in range(n)]
    weight_c = [0.0] * n
    coll = [None] * n
    for s in stages:
        ops = programs[s]
        b = base[s]
        for i, op in enumerate(ops):
            for u in op.data_deps + op.ctrl_deps:
                preds[b + i].append(b + u)
            if op.kind == COMP:
                weight_c[b + i] = op.duration_micros * 1000.0
            elif op.kind == COLL:
                coll[b + i] = (op.coll, op.size_bytes, op.axis)
            elif op.kind == SEND:
                coll[b + i] = ("P2P", op.size_bytes, "pp")
        # receives wait for the matching sends of the neighbouring stage, k-th to k-th
        recv_prev = [i for i, op in enumerate(ops) if op.kind == RECV and op.peer_offset < 0]
        recv_next = [i for i, op in enumerate(ops) if op.kind == RECV and op.peer_offset > 0]
        if s - 1 in programs:
            other = [i for i, op in enumerate(programs[s - 1]) if op.kind == SEND and op.peer_offset > 0]
            for r, u in zip(recv_prev, other):
                preds[b + r].append(base[s - 1] + u)
        if s + 1 in programs:
            other = [i for i, op in enumerate(programs[s + 1]) if op.kind == SEND and op.peer_offset < 0]
            for r, u in zip(recv_next, other):
                preds[b + r].append(base[s + 1] + u)
    return preds, weight_c, coll


def _topo(preds: list[list[int]]) -> list[int]:
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for v, ps in enumerate(preds):
        for u in ps:
            succ[u].append(v)
            indeg[v] += 1
    order = [v for v in range(n) if indeg[v] == 0]
    i = 0
    while i < len(order):
        u = order[i]
        i += 1
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order


def reference_longest_paths(programs: dict, collective_bytes, total_bw_gbps: float | None) -> list[PathSummary]:
    """The longest compute-only path and (with a total bandwidth) the longest path weighting each
    collective by its bytes per NPU over the total bandwidth.

    ``collective_bytes(kind, size, axis)`` gives a collective's bytes per NPU summed over dimensions
    (placement-independent for the hierarchical algorithm: 2 m (P-1)/P for all-reduce, ...)."""
    preds, wc, coll = _stage_graph(programs)
    order = _topo(preds)
    out = []
    alphas = [("compute path", 0.0)]
    if total_bw_gbps:
        alphas.append(("bytes path", 1.0 / total_bw_gbps))
    cb = [collective_bytes(*c) if c is not None else 0.0 for c in coll]
    n = len(preds)
    # both weightings in one pass: (compute only, compute + alpha * bytes)
    alpha = alphas[-1][1]
    d0, d1 = [0.0] * n, [0.0] * n
    a0, a1 = [-1] * n, [-1] * n
    for v in order:
        b0 = b1 = 0.0
        w0 = w1 = -1
        for u in preds[v]:
            if w0 < 0 or d0[u] > b0:
                b0, w0 = d0[u], u
            if w1 < 0 or d1[u] > b1:
                b1, w1 = d1[u], u
        d0[v] = b0 + wc[v]
        d1[v] = b1 + wc[v] + alpha * cb[v]
        a0[v], a1[v] = w0, w1
    for (name, _), dist, arg in zip(alphas, (d0, d1), (a0, a1)):
        end = max(range(n), key=dist.__getitem__) if n else -1
        comp = 0.0
        colls: Counter = Counter()
        v = end
        while v >= 0:
            comp += wc[v]
            if coll[v] is not None and coll[v][0] != "P2P":
                colls[coll[v]] += 1
            v = arg[v]
        out.append(PathSummary(name, comp, tuple(sorted(colls.items()))))
    return out




def _spec(tp, pp, dp, sp, iterations=1, layers=12, batch=16):
    raw = {"name": "t", "iterations": iterations,
           "model": {"type": "transformer", "layers": layers, "hidden_size": 256, "heads": 8, "seq_length": 64,
                     "vocab_size": 1000, "micro_batch": 1, "global_batch": batch, "bytes_per_element": 2},
           "parallel": {"tp": tp, "pp": pp, "dp": dp, "sequence_parallel": sp, "grad_bucket_mb": 0.01},
           "placement": {a: [i] for i, a in enumerate(a for a, g in (("tp", tp), ("pp", pp), ("dp", dp)) if g > 1)},
           "network": {"npus_per_dim": [g for g in (tp, pp, dp) if g > 1]},
           "compute": {"tflops": 100}}
    return spec_from_dict(raw, "t.yml")


def _weights(spec):
    deg = {"tp": spec.parallel.tp, "pp": spec.parallel.pp, "dp": spec.parallel.dp}
    return lambda k, s, a: _collective_bytes(k, s, deg.get(a, 1))


def _length(p: PathSummary, weight, alpha):
    return p.compute_ns + alpha * sum(weight(k, s, a) * n for (k, s, a), n in p.colls)


@pytest.mark.parametrize("tp,pp,dp,sp,iterations", [
    (2, 4, 2, True, 1), (2, 6, 1, False, 2), (1, 3, 4, False, 1), (4, 2, 2, True, 1), (2, 1, 8, False, 1),
    (1, 12, 1, True, 1)])
def test_fast_paths_equal_the_reference(tp, pp, dp, sp, iterations):
    spec = _spec(tp, pp, dp, sp, iterations)
    w = _weights(spec)
    full = build_plan(spec).programs
    want = reference_longest_paths(full, w, 400.0)
    # the same paths from the full programs and from the programs sharing the middle stages
    for programs in (full, build_plan(spec, names=False).programs):
        got = bnd.longest_paths(programs, w, 400.0)
        assert got == want
        assert bnd.longest_paths(programs, w, None) == want[:1]
        assert sorted(bnd.collective_chains(programs), key=repr) == sorted(bnd.collective_chains(full), key=repr)
    assert want[0].compute_ns > 0 and (bool(want[1].colls) == (tp > 1 or dp > 1))


def test_paths_are_the_longest_of_their_weighting():
    """The bytes path is at least as long as the compute path under its weighting, and the compute
    path has the most compute; both are paths of the graph (no longer than the reference's)."""
    spec = load_spec("traces/gpt_tp2_pp2_dp4/spec.yml")
    w = _weights(spec)
    cp, bp = bnd.longest_paths(build_plan(spec).programs, w, 100.0)
    alpha = 1.0 / 100.0
    assert cp.compute_ns >= bp.compute_ns
    assert _length(bp, w, alpha) >= _length(cp, w, alpha)


def test_a_cycle_between_stages_is_an_error():
    # each stage's send waits for its receive, which waits for the other stage's send
    s0 = (Op(RECV, "r", axis="pp", peer_offset=1), Op(SEND, "s", data_deps=(0,), size_bytes=8, axis="pp",
                                                     peer_offset=1))
    s1 = (Op(RECV, "r", axis="pp", peer_offset=-1), Op(SEND, "s", data_deps=(0,), size_bytes=8, axis="pp",
                                                      peer_offset=-1))
    with pytest.raises(ValueError, match="cycle"):
        bnd.longest_paths({0: s0, 1: s1}, lambda k, s, a: float(s), 100.0)
