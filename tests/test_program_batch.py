"""analyze_many (programs of one shape analysed together) against the one-by-one analysis it
replaces: the same Programs, ids interned in the same order, the same demand and the same errors,
on generated pipelines whose ranks share shapes, differ in them, or differ only in their groups
and peers."""

import dataclasses
import json
import random

import numpy as np
import pytest

from libra_astra.demand import from_traces as ft
from libra_astra.demand import links
from libra_astra.demand import program as pg
from libra_astra.demand import program_batch as pb
from libra_astra.demand.types import demand_to_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import Dimension, Network
from libra_astra.traces import chakra_io as cio

NET = Network("n24", (Dimension("a", "Ring", 4, 100.0), Dimension("b", "Switch", 2, 200.0),
                      Dimension("c", "Ring", 3, 300.0)))
STAGES, WIDTH = 3, 8


def _groups():
    g = {str(1 + s): [s * WIDTH + w for w in range(WIDTH)] for s in range(STAGES)}        # stage groups
    g.update({str(100 + w): [s * WIDTH + w for s in range(STAGES)] for w in range(WIDTH)})  # across stages
    return g


def _stage_template(rng, s, pair_colls):
    """One stage's program as (kind, args, dep offsets): every rank of the stage starts from it."""
    ops = []
    for i in range(rng.randint(4, 12)):
        kind = rng.choice(["comp", "comp", "cpu", "coll", "world"])
        deps = sorted({rng.randrange(i)} | ({rng.randrange(i)} if i > 2 and rng.random() < 0.3 else set())) if i else []
        ops.append((kind, rng.choice([0, 3, 5, 11]), rng.choice(["ALL_REDUCE", "ALL_GATHER"]),
                    rng.choice([256, 4096]), deps))
    if s > 0:
        ops.append(("recv", 0, "", 512, [len(ops) - 1]))
    if s < STAGES - 1:
        ops.append(("send", 0, "", 512 * (s + 1), [len(ops) - 1]))
    for ctype, size in pair_colls:
        ops.append(("dp", 0, ctype, size, [len(ops) - 1]))
    return ops


def _rank_nodes(ops, r, rng, mutate):
    s, w = divmod(r, WIDTH)
    base = 100 + r * 1000 if rng.random() < 0.5 else 100  # node ids shifted on some ranks
    nodes = []
    for i, (kind, dur, ctype, size, deps) in enumerate(ops):
        nid = base + i
        dd = [base + d for d in deps]
        if mutate and kind in ("comp", "cpu") and rng.random() < 0.15:
            dur += 1                                      # a compute time differs
        if mutate and deps and rng.random() < 0.1:
            dd = [base + rng.randrange(i)]                # a dependency differs (same count when it had one)
        if kind == "comp":
            nodes.append(cio.comp_node(nid, "c", dur, data_deps=dd))
        elif kind == "cpu":
            nodes.append(cio.comp_node(nid, "cpu", dur, data_deps=dd, is_cpu_op=not (mutate and rng.random() < 0.1)))
        elif kind == "coll":
            nodes.append(cio.coll_node(nid, "ar", ctype, size, pg_name=str(1 + s), data_deps=dd))
        elif kind == "world":
            nodes.append(cio.coll_node(nid, "w", ctype, size, involved_dim=[True, True, False], data_deps=dd))
        elif kind == "dp":
            nodes.append(cio.coll_node(nid, "dp", ctype, size, pg_name=str(100 + w), data_deps=dd))
        elif kind == "recv":
            nodes.append(cio.recv_node(nid, "rx", size, r - WIDTH, r, 7, data_deps=dd))
        else:
            nodes.append(cio.send_node(nid, "tx", size, r, r + WIDTH, 7, data_deps=dd))
    if mutate and len(nodes) > 3 and rng.random() < 0.2:
        i = rng.randrange(len(nodes) - 1)                 # file order no longer topological
        nodes[i], nodes[i + 1] = nodes[i + 1], nodes[i]
    return nodes


def _write_set(tmp_path, seed, mutate=True):
    rng = random.Random(seed)
    pair = [(rng.choice(["ALL_REDUCE", "ALL_GATHER"]), rng.choice([128, 1024])) for _ in range(rng.randint(1, 3))]
    templates = [_stage_template(rng, s, pair) for s in range(STAGES)]
    for r in range(STAGES * WIDTH):
        nodes = _rank_nodes(templates[r // WIDTH], r, rng, mutate)
        (tmp_path / f"p.{r}.et").write_bytes(cio.encode_et(nodes))
    return tmp_path / "p"


def _run(prefix, analyze, **kw):
    """Demand JSON, the Programs and the interned tables of one run with ``analyze`` as analyze_many."""
    got = {}

    def grab(ctx, progs, ranks_of):
        out = analyze(ctx, progs, ranks_of)
        got["programs"] = out
        got["ctx"] = ctx
        return out
    orig = ft.analyze_many
    ft.analyze_many = grab
    try:
        d, s = ft.demand_from_traces(prefix, NET, comm_groups=_groups(), **kw)
    finally:
        ft.analyze_many = orig
    ctx = got["ctx"]
    tables = (list(ctx.keys), list(ctx.physics), list(ctx.sems))
    return json.dumps(demand_to_dict(d), sort_keys=True), got["programs"], tables


def _same_program(a, b):
    for f in dataclasses.fields(pg.Program):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "prog":
            assert x.digest == y.digest
        elif f.name == "shape":
            assert x.struct == y.struct and np.array_equal(x.comm_pos, y.comm_pos)
        elif f.name == "coll_comm":
            assert all(np.array_equal(p, q) and p.dtype == q.dtype for p, q in zip(x, y))
        elif f.name == "counts":
            assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x), f.name
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y and type(x) is type(y), f.name


def _assert_equivalent(prefix, **kw):
    fast = _run(prefix, pb.analyze_many, **kw)
    slow = _run(prefix, pb._one_by_one, **kw)
    assert fast[0] == slow[0]
    assert fast[2] == slow[2]
    assert len(fast[1]) == len(slow[1])
    for a, b in zip(fast[1], slow[1]):
        _same_program(a, b)
    return fast


@pytest.mark.parametrize("seed", range(8))
def test_generated_pipelines_match_one_by_one(tmp_path, seed):
    _assert_equivalent(_write_set(tmp_path, seed))


@pytest.mark.parametrize("seed", range(3))
def test_generated_pipelines_match_one_by_one_with_roofline(tmp_path, seed):
    _assert_equivalent(_write_set(tmp_path, 100 + seed), peak_tflops=50.0, mem_bw_gbps=400.0)


def test_ranks_of_a_stage_share_a_shape_but_not_their_groups(tmp_path):
    """Without mutations every rank of a stage has one shape; the ranks still differ in their
    dp group and peers, which must stay per rank."""
    _, programs, _ = _assert_equivalent(_write_set(tmp_path, 7, mutate=False))
    assert len(programs) == STAGES * WIDTH
    by_shape = {}
    for p in programs:
        by_shape.setdefault(id(p.shape), []).append(p)
    assert len(by_shape) == STAGES
    for members in by_shape.values():
        assert len({tuple(p.coll_key.tolist()) for p in members}) == WIDTH


def _chain(first_kind, dur=5, dep_back=1, cpu=False, send_dst=None):
    """Four nodes in a chain; the variations below keep the node and dependency counts."""
    nodes = [cio.comp_node(1, "c", dur, is_cpu_op=cpu),
             cio.comp_node(2, "c", 7, data_deps=[1]),
             cio.comp_node(3, "c", 9, data_deps=[2 if dep_back == 1 else 1])]
    if first_kind == "send":
        nodes.append(cio.send_node(4, "tx", 64, 0, send_dst, 1, data_deps=[3]))
    else:
        nodes.append(cio.recv_node(4, "rx", 64, 1, 0, 1, data_deps=[3]))
    return nodes


@pytest.mark.parametrize("variant", [
    dict(dur=6),                       # one compute time
    dict(cpu=True),                    # a compute node on the CPU-op slot
    dict(dep_back=2),                  # a dependency on another node
    dict(first_kind="recv"),           # a send where the other has a receive
])
def test_equal_sized_programs_that_differ_are_not_merged(monkeypatch, variant):
    """Rank 0's program and a variant of it with the same node and dependency counts: the batch
    must give the variant its own shape, as the one-by-one analysis does."""
    net = Network("n2", (Dimension("a", "Ring", 2, 100.0),))
    from libra_astra.demand.context import Context
    from libra_astra.traces.reader import TraceReader

    base = dict(first_kind="send", send_dst=1)
    progs = []
    reader = TraceReader()
    for kw in (base, {**base, **variant}, base):
        progs.append(reader.parse(cio.encode_et(_chain(**kw)), f"r{len(progs)}"))
    results = []
    for fn in (pb.analyze_many, pb._one_by_one):
        ctx = Context(net, {}, "comm groups", None, None, reader)
        results.append(fn(ctx, progs, [[0], [1], [0]]))
    fast, slow = results
    for a, b in zip(fast, slow):
        _same_program(a, b)
    assert fast[0].shape is fast[2].shape
    assert fast[1].shape is not fast[0].shape


def test_fingerprint_collisions_fall_back_to_one_by_one(tmp_path, monkeypatch):
    """With every fingerprint equal, unequal programs of equal size land in one group; the exact
    comparison must catch it, and the result is still the one-by-one analysis's."""
    prefix = _write_set(tmp_path, 3)
    monkeypatch.setattr(pb, "_weights", lambda size: np.zeros(size, dtype=np.uint64))
    monkeypatch.setattr(pb, "_MIX", np.zeros(5, dtype=np.uint64))
    called = []
    orig = pb._one_by_one
    monkeypatch.setattr(pb, "_one_by_one", lambda *a: called.append(1) or orig(*a))
    fast = _run(prefix, pb.analyze_many)
    assert called  # the collision was seen
    slow = _run(prefix, orig)
    assert fast[0] == slow[0] and fast[2] == slow[2]


def test_wide_peer_lists_refine_the_same(tmp_path, monkeypatch):
    prefix = _write_set(tmp_path, 5)
    want = _run(prefix, pb.analyze_many)[0]
    monkeypatch.setattr(links, "_PADDED_CELLS", 0)  # the per-rank list loop
    assert _run(prefix, pb.analyze_many)[0] == want


def _errors(prefix):
    msgs = []
    for fn in (pb.analyze_many, pb._one_by_one):
        with pytest.raises(LibraError) as e:
            _run(prefix, fn)
        msgs.append(str(e.value))
    return msgs


@pytest.mark.parametrize("first_bad,second_bad", [("group", "type"), ("type", "group"), ("cycle", "group"),
                                                  ("group", "cycle")])
def test_errors_are_the_first_the_one_by_one_analysis_meets(tmp_path, first_bad, second_bad):
    """Two ranks with problems: the error is the one of the earlier program, whichever kind."""
    rng = random.Random(11)
    pair = [("ALL_REDUCE", 128)]
    templates = [_stage_template(rng, s, pair) for s in range(STAGES)]
    per_rank = [_rank_nodes(templates[r // WIDTH], r, random.Random(r), False) for r in range(STAGES * WIDTH)]

    def spoil(r, how):
        nodes = per_rank[r]
        last = nodes[-1].id
        if how == "group":
            nodes.append(cio.coll_node(last + 1, "bad", "ALL_REDUCE", 64, pg_name="77", data_deps=[last]))
        elif how == "type":
            nodes.append(cio.coll_node(last + 1, "bad", "GATHER", 64, pg_name=str(1 + r // WIDTH), data_deps=[last]))
        else:
            nodes[0].data_deps.append(last)
    spoil(9, first_bad)
    spoil(17, second_bad)
    for r, nodes in enumerate(per_rank):
        (tmp_path / f"p.{r}.et").write_bytes(cio.encode_et(nodes))
    fast, slow = _errors(tmp_path / "p")
    assert fast == slow and "p.9.et" in fast


def test_small_blocks_give_the_same_programs(tmp_path, monkeypatch):
    """Programs of one shape are worked on in blocks of rows (large reads): any block size."""
    monkeypatch.setattr(pb, "_BLOCK_CELLS", 7)
    _assert_equivalent(_write_set(tmp_path, 4))
