"""Fast paths of the per-program demand analysis against the one-by-one code they replace: the
demand JSON must come out byte-identical, and errors must be the ones the old path gives."""

import json
from pathlib import Path

import numpy as np
import pytest

from libra_astra.traces import chakra_io as cio
from libra_astra.demand import from_traces as ft
from libra_astra.demand import links
from libra_astra.demand import program as pg
from libra_astra.demand.row_memo import RowMemo
from libra_astra.demand.types import demand_to_dict
from libra_astra.errors import LibraError
from libra_astra.model.network import Dimension, Network, load_network

ROOT = Path(__file__).resolve().parents[1]
SETS = [
    (ROOT / "traces" / "gpt_tp2_pp2_dp4" / "gpt", ROOT / "network_configs" / "sample_4x4.yml", False),
    (ROOT / "traces" / "gpt3_tp8_dp8" / "gpt3", ROOT / "network_configs" / "sample_8x8.yml", False),
    (ROOT / "tests" / "fixtures" / "real" / "pipeline4" / "pipeline4", ROOT / "tests" / "fixtures" / "real" / "ring4.yml", True),
]


def _send_pids_one_by_one(ctx, pairs):
    return [pg.send_pids(ctx, info, r) for info, r in pairs]


def _analyze_forgetting_rows(ctx, prog, ranks):
    """analyze as before the row memo: every row of every program resolved afresh."""
    ctx.rows = RowMemo()
    return pg.analyze(ctx, prog, ranks)


def _analyze_one_by_one(ctx, progs, ranks_of):
    """analyze_many as before: one program at a time, each forgetting the rows of the others."""
    return [_analyze_forgetting_rows(ctx, p, r) for p, r in zip(progs, ranks_of)]


def _split_reference(ctx, programs, groups):
    """split_by_peers as it was written before (numpy scalars, one generator per peer list)."""
    cols = ctx.reader.attrs.columns()
    n = ctx.net.npus_count
    peers = {}
    for info in programs:
        prog = info.prog
        recv = np.flatnonzero(prog.types == links.COMM_RECV_NODE)
        send = np.flatnonzero(prog.types == links.COMM_SEND_NODE)
        if not recv.size and not send.size:
            continue
        recv = recv[np.argsort(info.topo_of[recv], kind="stable")]
        send = send[np.argsort(info.topo_of[send], kind="stable")]
        srcs = tuple(int(s) for s in cols["comm_src"][prog.attr[recv]].tolist() if 0 <= s < n)
        dsts = tuple(int(d) for d in cols["comm_dst"][prog.attr[send]].tolist() if 0 <= d < n)
        for r in info.ranks:
            peers[r] = (srcs, dsts)
    if not peers:
        return groups
    cls_of = np.zeros(n, dtype=np.int64)
    for gi, (_, ranks) in enumerate(groups):
        cls_of[ranks] = gi
    count = len(groups)
    while True:
        sig = {}
        new = np.zeros(n, dtype=np.int64)
        for r in range(n):
            s, d = peers.get(r, ((), ()))
            k = (int(cls_of[r]), tuple(int(cls_of[x]) for x in s), tuple(int(cls_of[x]) for x in d))
            new[r] = sig.setdefault(k, len(sig))
        cls_of = new
        if len(sig) == count:
            break
        count = len(sig)
    key_of = {r: key for key, ranks in groups for r in ranks}
    members = {}
    for r in range(n):
        members.setdefault(int(cls_of[r]), []).append(r)
    return [(key_of[rs[0]], rs) for _, rs in sorted(members.items())]


def _slow(monkeypatch):
    monkeypatch.setattr(ft, "send_pids_many", _send_pids_one_by_one)
    monkeypatch.setattr(ft, "analyze_many", _analyze_one_by_one)
    monkeypatch.setattr(ft, "split_by_peers", _split_reference)


def _json(prefix, net, typed):
    groups = Path(f"{prefix}.groups.json")
    d, s = ft.demand_from_traces(prefix, load_network(net), comm_groups=groups if groups.exists() else None,
                                 type_cpu_collectives=typed)
    return json.dumps(demand_to_dict(d), sort_keys=True)


@pytest.mark.parametrize("prefix,net,typed", SETS, ids=lambda x: getattr(x, "name", str(x)))
def test_fast_paths_give_the_same_demand(monkeypatch, prefix, net, typed):
    fast = _json(prefix, net, typed)
    _slow(monkeypatch)
    assert _json(prefix, net, typed) == fast


def _pipeline(n_stages, width):
    """n_stages x width ranks; rank (s, w) sends to (s + 1, w) and receives from (s - 1, w), then
    all-reduces on its stage's group: every file differs (its own peers), as in a pipeline."""
    per_rank = []
    for r in range(n_stages * width):
        s, w = divmod(r, width)
        nodes = [cio.comp_node(1, "c", 5)]
        last = 1
        if s > 0:
            nodes.append(cio.recv_node(2, "rx", 256, r - width, r, 7, data_deps=[last]))
            last = 2
        if s < n_stages - 1:
            nodes.append(cio.send_node(3, "tx", 256 * (w + 1), r, r + width, 7, data_deps=[last]))
            last = 3
        nodes.append(cio.coll_node(4, "ar", "ALL_REDUCE", 1024, pg_name=str(s + 1), data_deps=[last]))
        per_rank.append(nodes)
    groups = {str(s + 1): list(range(s * width, (s + 1) * width)) for s in range(n_stages)}
    return per_rank, groups


def _write(tmp_path, per_rank):
    for r, nodes in enumerate(per_rank):
        (tmp_path / f"p.{r}.et").write_bytes(cio.encode_et(nodes))
    return tmp_path / "p"


NET8 = Network("n8", (Dimension("row", "Ring", 4, 100.0), Dimension("col", "Switch", 2, 200.0)))


def test_fast_paths_on_distinct_pipeline_programs(monkeypatch, tmp_path):
    per_rank, groups = _pipeline(2, 4)
    prefix = _write(tmp_path, per_rank)
    d, _ = ft.demand_from_traces(prefix, NET8, comm_groups=groups)
    fast = json.dumps(demand_to_dict(d), sort_keys=True)
    assert len({tuple(rc.ranks) for rc in d.rank_classes}) == len(d.rank_classes) > 1
    _slow(monkeypatch)
    d2, _ = ft.demand_from_traces(prefix, NET8, comm_groups=groups)
    assert json.dumps(demand_to_dict(d2), sort_keys=True) == fast


@pytest.mark.parametrize("bad_rank,src,dst,message", [
    (0, 0, 0, "send node 3 has comm_dst 0, which is the sending rank itself; fix comm_dst"),
    (1, 1, 9, "send node 3 has comm_dst 9, which is outside 0..7; fix comm_dst"),
    (2, 0, 7, "send node 3 has comm_src 0 but the file is rank 2; a send is issued by its sender, fix comm_src"),
])
def test_batched_sends_report_the_first_bad_rank_as_before(monkeypatch, tmp_path, bad_rank, src, dst, message):
    per_rank, groups = _pipeline(2, 4)
    per_rank[bad_rank][1] = cio.send_node(3, "tx", 64, src, dst, 7, data_deps=[1])
    # a later rank is bad too: the error must still name the first one, as rank-by-rank did
    per_rank[3][1] = cio.send_node(3, "tx", 64, 3, 3, 7, data_deps=[1])
    prefix = _write(tmp_path, per_rank)
    with pytest.raises(LibraError) as fast:
        ft.demand_from_traces(prefix, NET8, comm_groups=groups)
    assert str(fast.value) == f"{prefix}.{bad_rank}.et: {message}"
    _slow(monkeypatch)
    with pytest.raises(LibraError) as slow:
        ft.demand_from_traces(prefix, NET8, comm_groups=groups)
    assert str(slow.value) == str(fast.value)


def test_send_pids_many_matches_send_pids(tmp_path):
    """The ids themselves, pair by pair, and interned in the same order."""
    per_rank, groups = _pipeline(2, 4)
    prefix = _write(tmp_path, per_rank)
    got = {}
    for name, fn in (("many", pg.send_pids_many), ("one", _send_pids_one_by_one)):
        seen = {}

        def grab(ctx, pairs, fn=fn, seen=seen):
            out = fn(ctx, pairs)
            seen["pids"] = [p.tolist() for p in out]
            seen["physics"] = list(ctx.physics)
            return out
        orig = ft.send_pids_many
        ft.send_pids_many = grab
        try:
            ft.demand_from_traces(prefix, NET8, comm_groups=groups)
        finally:
            ft.send_pids_many = orig
        got[name] = seen
    assert got["many"]["pids"] and got["many"] == got["one"]


NET3 = Network("n3", (Dimension("a", "Ring", 4, 100.0), Dimension("b", "Switch", 2, 200.0),
                      Dimension("c", "Ring", 3, 300.0)))


@pytest.mark.parametrize("members", [
    [5], [0, 1, 2, 3], [0, 8, 16], [1, 3, 9, 11], [0, 1, 2, 3, 4, 5, 6, 7], list(range(24)),
    [0, 1, 5], [2, 7, 13, 22], [3, 3, 0], [23, 0],
])
def test_group_shape_matches_one_by_one(members):
    from libra_astra.demand import groups as grp
    assert grp.group_shape(NET3, "7", members, "src") == grp.group_shape_one_by_one(NET3, "7", members, "src")


@pytest.mark.parametrize("members", [[], [0, 24], [-1, 2]])
def test_group_shape_errors_match_one_by_one(members):
    from libra_astra.demand import groups as grp
    with pytest.raises(LibraError) as fast:
        grp.group_shape(NET3, "7", members, "src")
    with pytest.raises(LibraError) as slow:
        grp.group_shape_one_by_one(NET3, "7", members, "src")
    assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("seed", range(6))
def test_unique_rows_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 40)), int(rng.integers(1, 9))
    # few distinct values, negatives included (-1 marks a send), so rows repeat and bytes order
    # differs from value order
    a = rng.choice(np.array([-1, 0, 1, 2, 255, 256, 1 << 40], dtype=np.int64), size=(rows, cols))
    want_u, want_inv = np.unique(a, axis=0, return_inverse=True)
    got_u, got_inv = ft._unique_rows(np.ascontiguousarray(a))
    assert np.array_equal(got_u, want_u) and np.array_equal(got_inv, want_inv.reshape(-1))
