"""libra-astra doctor: one hand-made bad set per check (exact messages), --fix on each, the real
corpus with and without the ASTRA-sim binary."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from chakra.schema.protobuf import et_def_pb2 as pb
from libra_astra.astra.emit import system_config
from libra_astra.astra.parse import parse_output
from libra_astra.cli import main
from libra_astra.doctor import CHECKS, FAILS, SYSTEM_CODES, diagnose, fix
from libra_astra.errors import LibraError
from libra_astra.traces import chakra_io as cio

REAL = Path(__file__).parent / "fixtures" / "real"

def attr(name, kind, value):
    return cio.make_attr(name, kind, value)

def node(nid, typ, attrs=(), data=(), ctrl=(), name="n", dur=0):
    n = pb.Node(id=nid, name=name, type=typ, duration_micros=dur)
    n.data_deps.extend(data); n.ctrl_deps.extend(ctrl); n.attr.extend(attrs)
    return n

def comp(nid, data=(), ctrl=(), cpu=False, name="c", dur=1):
    return node(nid, pb.COMP_NODE, [attr("is_cpu_op", "bool_val", cpu)], data, ctrl, name, dur)

def coll(nid, ctype=0, size=1024, inv=(True,), pg=None, extra=(), data=(), ctrl=(), skip=()):
    a = [attr("is_cpu_op", "bool_val", False)]
    if ctype is not None and "comm_type" not in skip:
        a.append(attr("comm_type", "int64_val", ctype))
    if size is not None and "comm_size" not in skip:
        a.append(attr("comm_size", "int64_val", size))
    if inv is not None:
        a.append(attr("involved_dim", "bool_list", list(inv)))
    if pg is not None:
        a.append(attr("pg_name", "string_val", pg) if isinstance(pg, str) else attr("pg_name", "int64_val", pg))
    names = {x.name for x in extra}
    a = [x for x in a if x.name not in names] + list(extra)
    return node(nid, pb.COMM_COLL_NODE, a, data, ctrl, "coll")

def p2p(nid, typ, src, dst, tag=1, size=64, skip=()):
    a = [attr("is_cpu_op", "bool_val", False)]
    for k, v in (("comm_src", src), ("comm_dst", dst), ("comm_tag", tag), ("comm_size", size)):
        if k not in skip and v is not None:
            a.append(attr(k, "int32_val" if k != "comm_size" else "int64_val", v))
    return node(nid, typ, a, name="p2p")

def send(nid, src, dst, **kw): return p2p(nid, pb.COMM_SEND_NODE, src, dst, **kw)
def recv(nid, src, dst, **kw): return p2p(nid, pb.COMM_RECV_NODE, src, dst, **kw)

def metadata(nid, groups):
    n = node(nid, pb.METADATA_NODE, name="## process_group:init ##")
    n.inputs.values = str([json.dumps(groups)])
    return n

def write_set(prefix, ranks, gz=False, groups=None):
    prefix = Path(prefix)
    for r, nodes in enumerate(ranks):
        if nodes is None:
            continue
        data = cio.encode_et(nodes)
        if gz:
            Path(f"{prefix}.{r}.et.gz").write_bytes(gzip.compress(data))
        else:
            Path(f"{prefix}.{r}.et").write_bytes(data)
    if groups is not None:
        Path(f"{prefix}.groups.json").write_text(json.dumps(groups))
    return prefix



# name: (ranks, options, code) ; ranks = list of node lists
CASES = {
    "dangling-dep": ([[comp(1, data=[42]), comp(2, ctrl=[7])], [comp(1)]], {}, "dangling-dep"),
    "self-dep": ([[comp(1), comp(2, ctrl=[2]), comp(3, data=[2])], [comp(1)]], {}, "self-dep"),
    "cycle": ([[comp(1), comp(2, data=[3]), comp(3, data=[2]), comp(4, data=[3])], [comp(1)]], {}, "cycle"),
    "no-ready-node": ([[comp(1, data=[2]), comp(2, data=[1])], [comp(1)]], {}, "no-ready-node"),
    "empty-rank": ([[], [comp(1)]], {}, "empty-rank"),
    "duplicate-id": ([[comp(1), comp(1, dur=3), comp(2)], [comp(1)]], {}, "duplicate-id"),
    "unknown-node-type": ([[comp(1), node(2, 12)], [comp(1)]], {}, "unknown-node-type"),
    "metadata-node": ([[comp(1), metadata(2, [{"pg_name": "0", "ranks": []}])], [comp(1)]], {}, "metadata-node"),
    "invalid-node": ([[comp(1), node(2, pb.INVALID_NODE, data=[1]), comp(3, data=[2])], [comp(1)]], {}, "invalid-node"),
    "mem-node": ([[comp(1), node(2, pb.MEM_LOAD_NODE), node(3, pb.MEM_STORE_NODE)], [comp(1)]], {}, "mem-node"),
    "is-cpu-op-type": ([[node(1, pb.COMP_NODE, [attr("is_cpu_op", "float_val", 1.0)], dur=1)], [comp(1)]], {},
                       "is-cpu-op-type"),
    "comm-on-cpu": ([[coll(1, extra=[attr("is_cpu_op", "bool_val", True)])], [coll(1)]], {}, "comm-on-cpu"),
    "comm-type-missing": ([[coll(1, skip=("comm_type",))], [coll(1)]], {}, "comm-type-missing"),
    "comm-type-unsupported": ([[coll(1, ctype=1), coll(2, ctype=3, data=[1])], [coll(1, 1), coll(2, 3)]], {},
                              "comm-type-unsupported"),
    "comm-type-convertible": ([[coll(1, ctype=8), coll(2, ctype=9)], [coll(1, 8), coll(2, 9)]], {},
                              "comm-type-convertible"),
    "broadcast-replayed": ([[coll(1, ctype=5)], [coll(1, 5)]], {}, "broadcast-replayed"),
    "attr-type": ([[coll(1, extra=[attr("comm_size", "double_val", 1024.0)])], [coll(1)]], {}, "attr-type"),
    "comm-size-missing": ([[coll(1, skip=("comm_size",))], [coll(1)]], {}, "comm-size-missing"),
    "size-not-divisible": ([[coll(1, size=1022)], [coll(1, size=1022)]], {"splits": 4}, "size-not-divisible"),
    "involved-dim-type": ([[coll(1, inv=None, extra=[attr("involved_dim", "int64_list", [1])])], [coll(1)]], {},
                          "involved-dim-type"),
    "no-involved-dim": ([[coll(1, inv=[False])], [coll(1, inv=[False])]], {}, "no-involved-dim"),
    "involved-dim-absent": ([[coll(1, inv=None)], [coll(1, inv=None)]], {"network": "net5"}, "involved-dim-absent"),
    "involved-dim-length": ([[coll(1, inv=[True])], [coll(1, inv=[True])]], {"network": "net2x1"},
                            "involved-dim-length"),
    "involved-dim-extra": ([[coll(1, inv=[True, True])], [coll(1, inv=[True, True])]], {"network": "net2"},
                           "involved-dim-extra"),
    "pg-name-type": ([[coll(1, pg=1)], [coll(1, pg=1)]], {"groups": {"1": [0, 1]}}, "pg-name-type"),
    "pg-name-non-numeric": ([[coll(1, pg="tp")], [coll(1, pg="tp")]], {}, "pg-name-non-numeric"),
    "pg-name-suffix": ([[coll(1, pg="1a")], [coll(1, pg="1a")]], {"groups": {"1": [0, 1]}}, "pg-name-suffix"),
    "unknown-group": ([[coll(1, pg="3")], [coll(1, pg="3")]], {"groups": {"1": [0, 1]}}, "unknown-group"),
    "not-member": ([[coll(1, pg="1")], [comp(1)]], {"groups": {"1": [1]}}, "not-member"),
    "collective-count": ([[coll(1), coll(2, data=[1])], [coll(1)]], {}, "collective-count"),
    "group-of-one": ([[coll(1, pg="1")], [coll(1, pg="2")]], {"groups": {"1": [0], "2": [1]}}, "group-of-one"),
    "groups-path-empty": ([[coll(1, pg="1")], [coll(1, pg="1")]], {"groups": {"1": [0, 1]}, "groups_dir": "empty_dir"},
                          "groups-path-empty"),
    "group-id": ([[comp(1)], [comp(1)]], {"groups": {"0": [0, 1]}}, "group-id"),
    "group-members": ([[comp(1)], [comp(1)]], {"groups": {"1": [0, 5]}}, "group-members"),
    "p2p-attr-missing": ([[send(1, 0, 1, skip=("comm_tag",))], [recv(1, 0, 1)]], {}, "p2p-attr-missing"),
    "p2p-wrong-rank": ([[send(1, 1, 0)], [recv(1, 1, 0)]], {}, "p2p-wrong-rank"),
    "p2p-size-zero": ([[send(1, 0, 1, size=0)], [recv(1, 0, 1, size=0)]], {}, "p2p-size-zero"),
    "p2p-unmatched-recv": ([[send(1, 0, 1, size=64)], [recv(1, 0, 1, size=32)]], {}, "p2p-unmatched-recv"),
    "p2p-unmatched-send": ([[send(1, 0, 1, tag=5)], [comp(1)]], {}, "p2p-unmatched-send"),
    "cpu-ops": ([[comp(1, cpu=True), comp(2, cpu=True, name="gloo:all_reduce")], [comp(1)]], {}, "cpu-ops"),
    "gloo-cpu-collectives": ([[comp(1, cpu=True, name="gloo:all_reduce")], [comp(1)]], {}, "gloo-cpu-collectives"),
    "missing-rank": ([[comp(1)], None, [comp(1)]], {}, "missing-rank"),
    "gzipped": ([[comp(1)], [comp(1)]], {"gz": True}, "gzipped"),
    "rank-count": ([[comp(1)], [comp(1)]], {"network": "net4"}, "rank-count"),
}

NETWORKS = {
    "net5": "topology: [ Ring, Ring, Ring, Ring, Ring ]\nnpus_count: [ 2, 1, 1, 1, 1 ]\n",
    "net2x1": "topology: [ Ring, Ring ]\nnpus_count: [ 2, 1 ]\n",
    "net2": "topology: [ Ring ]\nnpus_count: [ 2 ]\n",
    "net4": "topology: [ Ring ]\nnpus_count: [ 4 ]\n",
}

def make(tmp, name):
    ranks, opts, code = CASES[name]
    tmp = Path(tmp)
    kw = {}
    if "groups" in opts:
        d = tmp / opts.get("groups_dir", "g")
        d.mkdir(exist_ok=True)
        gp = d / "groups.json"
        gp.write_text(json.dumps(opts["groups"]))
        kw["groups"] = str(gp)
    if "network" in opts:
        np_ = tmp / f"{opts['network']}.yml"
        np_.write_text(NETWORKS[opts["network"]])
        kw["network"] = str(np_)
    if "splits" in opts:
        kw["splits"] = opts["splits"]
    prefix = write_set(tmp / "t", ranks, gz=opts.get("gz", False))
    return prefix, kw, code


# severity, rank, node ids, count, the other checks that fire, problem, what ASTRA-sim does
EXPECTED = {
    'dangling-dep': ('fails', 0, (1, 2), 2, [],
        '2 dependencies on node ids absent from the file (node 1 -> 42 (data), node 2 -> 7 (ctrl))',
        'aborts at start: "Node 42 in data_dep graph, but not found in index, file might be corrupted"'),
    'self-dep': ('wrong', 0, (2,), 1, [],
        '1 node depends on itself (node 2)',
        'the node never becomes ready: it and every node after it (2 nodes in all) are skipped silently, and the rank still prints finished'),
    'cycle': ('wrong', 0, (2,), 1, [],
        'dependency cycle through nodes 2 -> 3 -> 2',
        'the nodes of the cycle never become ready: they and every node after them (3 nodes in all) are skipped silently, and the rank still prints finished'),
    'no-ready-node': ('fails', 0, (), 1, ['cycle'],
        'no node is free of dependencies',
        'aborts at start: "No dependancy free nodes found, there might be deadlocks"'),
    'empty-rank': ('fails', 0, (), 1, [],
        'the rank file has no node',
        'aborts at start: "No dependancy free nodes found, there might be deadlocks"'),
    'duplicate-id': ('wrong', 0, (1,), 1, [],
        '1 node id appears more than once (id 1 x 2)',
        'keeps only the last record of each id, with the dependencies of all of them merged: the other records never run'),
    'unknown-node-type': ('fails', 0, (2,), 1, [],
        '1 node of a type the schema does not define (node 2 type 12)',
        'exits 1 at the node: "Unknown node type"'),
    'metadata-node': ('fails', 0, (2,), 1, [],
        "1 METADATA node (node 2 '## process_group:init ##')",
        'aborts at the node: "Invalid node_type, node.id=2, node.type=1" (Statistics.cc asserts)'),
    'invalid-node': ('fails', 0, (2,), 1, [],
        '1 INVALID node (node 2)',
        'skips the node without issuing its children: the rank stalls and never prints finished, or aborts when its statistics are collected'),
    'mem-node': ('fails', 0, (2, 3), 2, [],
        '2 MEM_LOAD/MEM_STORE nodes (node 2, node 3)',
        'exits 1: "Remote memory access is not supported in NO_MEMORY_EXPANSION"'),
    'is-cpu-op-type': ('fails', 0, (1,), 1, ['cpu-ops'],
        '1 node whose is_cpu_op is not a bool or integer (node 1 float_val)',
        'aborts: std::bad_cast'),
    'comm-on-cpu': ('fails', 0, (1,), 1, [],
        '1 communication node with is_cpu_op true (node 1 COMM_COLL)',
        'throws "Comm node should not be on CPU": aborts, or the rank stalls if it is issued later'),
    'comm-type-missing': ('fails', 0, (1,), 1, [],
        '1 collective without comm_type (node 1)',
        'throws "Attribute comm_type not found in node 1": aborts or the rank stalls'),
    'comm-type-unsupported': ('fails', 0, (1, 2), 2, [],
        '2 collectives of a kind ASTRA-sim does not simulate (node 1 REDUCE, node 2 GATHER)',
        'throws "Unsupported collective comm type": aborts or the rank stalls'),
    'comm-type-convertible': ('fails', 0, (1, 2), 2, [],
        '2 collectives of a kind ASTRA-sim does not simulate (node 1 REDUCE_SCATTER_BLOCK, node 2 BARRIER)',
        'throws "Unsupported collective comm type": aborts or the rank stalls'),
    'broadcast-replayed': ('wrong', 0, (1,), 1, [],
        '1 BROADCAST collective (node 1)',
        'replays them for their duration_micros (1 ns when 0) as communication time: no traffic is simulated'),
    'attr-type': ('fails', 0, (1,), 1, [],
        '1 attribute of a type ASTRA-sim cannot convert to an integer (node 1 comm_size double_val)',
        'aborts: std::bad_cast (only integer kinds convert)'),
    'comm-size-missing': ('fails', 0, (1,), 1, [],
        '1 collective without comm_size (node 1)',
        'throws "Attribute comm_size not found in node 1": aborts or the rank stalls'),
    'size-not-divisible': ('wrong', 0, (1,), 1, [],
        '1 collective size not divisible by the 4 chunks (node 1: 1022 B)',
        'cuts size // 4-byte chunks and charges the remainder as one more full chunk (up to 1/4 more time)'),
    'involved-dim-type': ('fails', 0, (1,), 1, [],
        '1 collective whose involved_dim is not a bool_list (node 1 int64_list)',
        'exits 1: "Expected bool_list in involved_dim but found another type."'),
    'no-involved-dim': ('fails', 0, (1,), 1, [],
        '1 collective that reaches no other NPU (node 1 involved_dim [False])',
        'the collective generates no transfer and never finishes: the rank stalls and never prints finished'),
    'involved-dim-absent': ('fails', 0, (1,), 1, [],
        '1 collective without involved_dim on a network of 5 dimensions (node 1)',
        'uses a default of 4 entries and reads past it (undefined behaviour)'),
    'involved-dim-length': ('fails', 0, (1,), 1, [],
        "1 collective whose involved_dim is shorter than the network's 2 dimensions (node 1 1 entries)",
        'reads past the list (undefined behaviour)'),
    'involved-dim-extra': ('wrong', 0, (1,), 1, [],
        "1 collective names dimensions beyond the network's 1 (node 1 2 entries)",
        "ignores the entries past the network's dimensions"),
    'pg-name-type': ('fails', 0, (1,), 1, [],
        '1 collective whose pg_name is not a string (node 1 int64_val 1)',
        'aborts: std::bad_cast (pg_name is read as a string)'),
    'pg-name-non-numeric': ('fails', 0, (1,), 1, [],
        "1 collective whose pg_name is not a number (node 1 'tp')",
        'aborts: std::invalid_argument from std::stoi (group ids are integers)'),
    'pg-name-suffix': ('wrong', 0, (1,), 1, [],
        "1 collective whose pg_name has trailing characters (node 1 '1a' read as 1)",
        'std::stoi reads the leading number only'),
    'unknown-group': ('fails', 0, (1,), 1, [],
        '1 collective on a group the communicator-group file does not define (node 1 group 3)',
        'exits 1: "For rank 0 ET node 1, communicator group 3 not found"'),
    'not-member': ('fails', 0, (1,), 1, [],
        '1 collective on a group that does not contain this rank (node 1 group 1 [1])',
        'aborts: assert(index_in_ring >= 0) in RingTopology'),
    'collective-count': ('fails', None, (), 1, [],
        'the ranks of a group issue different numbers of collectives on it (all ranks: rank 0: 2, rank 1: 1)',
        'matches collectives across ranks by issue order: the ranks with more wait for partners that never come, stall and never print finished'),
    'group-of-one': ('fails', 0, (1,), 1, [],
        '1 collective on a one-member group (node 1 group 1)',
        'the collective generates no transfer and never finishes: the rank stalls and never prints finished'),
    'groups-path-empty': ('fails', None, (), 1, ['unknown-group'],
        'the communicator-group file\'s path contains "empty" ({tmp}/empty_dir/groups.json)',
        'ignores the file (any path containing "empty" means no groups), so every group is unknown'),
    'group-id': ('fails', None, (), 1, [],
        "1 communicator group with an id that is not a positive integer ('0')",
        'aborts while loading the file: assert(id > 0), or std::stoi throws'),
    'group-members': ('wrong', None, (), 1, [],
        '1 communicator group with members that are not NPUs of the set (1: [0, 5])',
        'loads the group; a collective on it reads out of range or aborts'),
    'p2p-attr-missing': ('fails', 0, (1,), 1, ['p2p-unmatched-recv'],
        '1 send/receive without a required attribute (node 1 (COMM_SEND) without comm_tag)',
        'throws "Attribute comm_tag not found in node ...": aborts or the rank stalls'),
    'p2p-wrong-rank': ('fails', 0, (1,), 1, [],
        '1 send/receive that names another rank as its own end or a peer outside the set (node 1 comm_src 1)',
        'throws "Send node should be issued by the sender": aborts or the rank stalls'),
    'p2p-size-zero': ('fails', 0, (1,), 1, [],
        '1 send/receive of 0 bytes (node 1)',
        'aborts: assert(chunk_size > 0)'),
    'p2p-unmatched-recv': ('fails', 1, (1,), 1, ['p2p-unmatched-send'],
        '1 receive with no send of the same (tag, src, dst, size) (node 1: tag 1 0 -> 1, 32 B)',
        'the receive never completes: the rank stalls and never prints finished'),
    'p2p-unmatched-send': ('wrong', 0, (1,), 1, [],
        '1 send with no receive of the same (tag, src, dst, size) (node 1: tag 5 0 -> 1, 64 B)',
        'the send is charged its transfer and completes; nothing waits for it'),
    'cpu-ops': ('note', 0, (), 2, ['gloo-cpu-collectives'],
        '2 CPU ops (is_cpu_op true)',
        'replays them one at a time beside GPU compute and counts their time as exposed communication; the rank prints finished but no Wall/CPU/GPU/Comm statistics'),
    'gloo-cpu-collectives': ('note', 0, (1,), 1, ['cpu-ops'],
        "1 collective recorded as a CPU op (node 1 'gloo:all_reduce')",
        'replays them for their recorded duration: no traffic is simulated'),
    'missing-rank': ('fails', None, (), 1, [],
        'rank files missing: rank 1',
        'aborts at start: "Failed to open file" (one file per NPU is opened, PREFIX.RANK.et)'),
    'gzipped': ('fails', None, (), 2, [],
        '2 rank files exist only gzipped (t.0.et.gz, t.1.et.gz)',
        'aborts at start: "Failed to open file": it opens PREFIX.RANK.et and cannot read gzip'),
    'rank-count': ('fails', None, (), 1, [],
        'the set has 2 ranks but {tmp}/net4.yml has 4 NPUs',
        'aborts at start: it opens one file per NPU and ranks are missing'),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_check_finds_its_problem_with_the_exact_message(tmp_path, name):
    prefix, kw, code = make(tmp_path, name)
    d = diagnose(prefix, **kw)
    got = [f for f in d.findings if f.code == code]
    severity, rank, ids, count, others, problem, effect = EXPECTED[name]
    assert got, f"{code} not found; findings: {[f.code for f in d.findings]}"
    f = got[0]
    assert (f.severity, f.rank, f.node_ids, f.count) == (severity, rank, ids, count)
    assert f.problem == problem.format(tmp=tmp_path)
    assert f.effect == effect
    assert sorted({g.code for g in d.findings if g.code != code}) == others
    assert d.fails == any(g.severity == FAILS for g in d.findings)


def test_every_check_has_a_case():
    # the system-file checks have their cases in test_doctor_system.py
    assert set(CHECKS) - set(CASES) - set(SYSTEM_CODES) == {"unreadable", "group-in-metadata-only"}


def test_clean_set_has_no_finding(tmp_path):
    prefix = write_set(tmp_path / "ok", [[comp(1), coll(2, data=[1]), send(3, 0, 1)],
                                         [comp(1), coll(2, data=[1]), recv(3, 0, 1)]])
    d = diagnose(prefix, network=_net(tmp_path, "net2"))
    assert d.findings == () and not d.fails


def test_damaged_file_is_a_finding_not_an_error(tmp_path):
    write_set(tmp_path / "t", [[comp(1)], [comp(1)]])
    good = (tmp_path / "t.1.et").read_bytes()
    (tmp_path / "t.1.et").write_bytes(good[:-3])
    d = diagnose(tmp_path / "t")
    f = [f for f in d.findings if f.code == "unreadable"]
    assert len(f) == 1 and f[0].rank == 1 and f[0].severity == FAILS
    assert f[0].problem.startswith(f"{tmp_path}/t.1.et: truncated: the message at byte offset")
    with pytest.raises(LibraError, match=r"t\.1\.et: cannot be read, so it cannot be fixed"):
        fix(tmp_path / "t", tmp_path / "out")


def _net(tmp_path, name):
    p = tmp_path / f"{name}.yml"
    p.write_text(NETWORKS[name])
    return str(p)


_FIXABLE = [n for n in CASES if CHECKS[CASES[n][2]].fixable]


@pytest.mark.parametrize("name", _FIXABLE)
def test_fix_repairs_each_fixable_check(tmp_path, name):
    prefix, kw, code = make(tmp_path, name)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    (tmp_path / "out").mkdir()
    res = fix(prefix, tmp_path / "out" / "t", **kw)
    assert [f.code for f in res.after.findings if f.code == code] == []
    assert not res.after.fails, [f.code for f in res.after.findings]
    assert res.actions
    after = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "out" not in p.parts}
    assert after == before  # the input is never modified


def test_fix_actions_are_counted(tmp_path):
    ranks = [[comp(1, ctrl=[0]), metadata(2, [{"pg_name": "0", "ranks": []}]), comp(3, data=[2], ctrl=[3]),
              node(4, pb.INVALID_NODE, data=[3]), coll(5, data=[4], extra=[attr("is_cpu_op", "bool_val", True)]),
              coll(6, ctype=8, size=1022), coll(7, inv=[False])],
             [comp(1), coll(5), coll(6, ctype=8, size=1022), coll(7, inv=[False])]]
    prefix = write_set(tmp_path / "t", ranks, gz=True)
    res = fix(prefix, tmp_path / "f", splits=4)
    assert res.actions == (
        ("rank files written plain (ASTRA-sim cannot read gzip)", 2),
        ("dependencies on nodes absent from the file dropped", 1),
        ("self dependencies dropped", 1),
        ("METADATA nodes removed (their dependents inherit their dependencies)", 1),
        ("INVALID nodes removed (their dependents inherit their dependencies)", 1),
        ("is_cpu_op set false on communication nodes", 1),
        ("REDUCE_SCATTER_BLOCK collectives written as REDUCE_SCATTER", 2),
        ("collective sizes rounded to a multiple of 4 bytes", 2),
        ("collectives reaching no other NPU replaced by zero-duration compute", 2),
    )
    assert not res.after.fails and res.after.findings == ()
    _, nodes = cio.read_et(tmp_path / "f.0.et")
    assert [(n.id, n.type) for n in nodes] == [(1, 4), (3, 4), (5, 7), (6, 7), (7, 4)]
    assert list(nodes[0].ctrl_deps) == [] and list(nodes[1].ctrl_deps) == [] and list(nodes[1].data_deps) == []
    assert list(nodes[2].data_deps) == [3]          # through the INVALID node to its parent
    attrs = cio.node_attrs(nodes[3])
    assert attrs["comm_type"] == pb.REDUCE_SCATTER and attrs["comm_size"] == 1024


def test_fix_takes_groups_from_metadata(tmp_path):
    meta = metadata(9, [{"pg_name": "0", "ranks": []}, {"pg_name": "1", "ranks": [0, 1]}])
    prefix = write_set(tmp_path / "t", [[meta, coll(1, pg="1")], [coll(1, pg="1")]])
    d = diagnose(prefix)
    f = [f for f in d.findings if f.code == "group-in-metadata-only"][0]
    assert f.problem == "1 collective on a group that only the trace's METADATA process groups define (node 1 group 1)"
    assert f.effect == ('exits 1: "For rank 0 ET node 1, communicator group 1 not found" (it reads groups only from '
                        "--comm-group-configuration)")
    res = fix(prefix, tmp_path / "f")
    assert res.groups_file == str(tmp_path / "f.groups.json")
    assert json.loads((tmp_path / "f.groups.json").read_text()) == {"1": [0, 1]}
    assert ("of them taken from the trace's METADATA process groups", 1) in res.actions
    assert not res.after.fails


def test_fix_never_overwrites_or_touches_the_input(tmp_path):
    prefix = write_set(tmp_path / "t", [[comp(1, ctrl=[0])], [comp(1)]])
    with pytest.raises(LibraError, match="is the input prefix; the doctor never modifies its input"):
        fix(prefix, prefix, overwrite=True)
    fix(prefix, tmp_path / "f")
    with pytest.raises(LibraError, match=r"f\.0\.et: already exists; choose another --out prefix or pass --force"):
        fix(prefix, tmp_path / "f")
    (tmp_path / "f.5.et").write_bytes(b"stale")
    fix(prefix, tmp_path / "f", overwrite=True)
    assert not (tmp_path / "f.5.et").exists()
    with pytest.raises(LibraError, match="does not exist; create it first"):
        fix(prefix, tmp_path / "nodir" / "f")


def test_cli_reports_and_exits_1_when_astra_sim_would_fail(tmp_path):
    prefix = write_set(tmp_path / "t", [[comp(1, ctrl=[0])], [comp(1, ctrl=[0])]])
    r = CliRunner().invoke(main, ["doctor", str(prefix)])
    assert r.exit_code == 1
    assert r.output.splitlines() == [
        f"{prefix}: 2 ranks, 2 nodes; 2 failing, 0 wrong-result, 0 note findings: ASTRA-sim would fail on it",
        "FAILS dangling-dep (ranks 0-1): 1 dependency on node ids absent from the file (node 1 -> 0 (ctrl))",
        '  ASTRA-sim: aborts at start: "Node 0 in ctrl_dep graph, but not found in index, file might be corrupted"',
        "  fix: drop those dependencies (--fix does it)",
    ]
    r = CliRunner().invoke(main, ["doctor", str(prefix), "--json"])
    assert r.exit_code == 1
    js = json.loads(r.output)
    assert js["fails_in_astra_sim"] is True and js["counts"] == {"fails": 2, "wrong": 0, "note": 0}
    assert js["findings"][0] == {"check": "dangling-dep", "severity": "fails", "rank": 0, "node_ids": [1], "count": 1,
                                 "problem": "1 dependency on node ids absent from the file (node 1 -> 0 (ctrl))",
                                 "astra_sim": 'aborts at start: "Node 0 in ctrl_dep graph, but not found in index, '
                                              'file might be corrupted"',
                                 "fix": "drop those dependencies", "fixed_by_fix": True}
    r = CliRunner().invoke(main, ["doctor", str(prefix), "--fix", "--out", str(tmp_path / "f")])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-3:] == [
        f"wrote {tmp_path}/f.0.et .. {tmp_path}/f.1.et",
        "  fixed: dependencies on nodes absent from the file dropped: 2",
        "the copy has no failing or wrong-result finding",
    ]
    r = CliRunner().invoke(main, ["doctor", str(prefix), "--fix"])
    assert r.exit_code == 2 and "--fix needs --out NEWPREFIX" in r.output
    r = CliRunner().invoke(main, ["doctor", str(tmp_path / "nothing")])
    assert r.exit_code == 1 and "no trace files" in r.output


def test_cli_says_what_fix_cannot_do(tmp_path):
    prefix = write_set(tmp_path / "t", [[comp(1), coll(2, ctype=1, ctrl=[9])], [comp(1), coll(2, ctype=1)]])
    r = CliRunner().invoke(main, ["doctor", str(prefix), "--fix", "--out", str(tmp_path / "f")])
    assert r.exit_code == 1
    out = r.output.splitlines()
    i = out.index("not fixed (the copy still has):")
    assert out[i + 1] == ("  FAILS comm-type-unsupported (ranks 0-1): 1 collective of a kind ASTRA-sim does not "
                          "simulate (node 2 REDUCE)")
    assert out[i + 3] == ("    fix: replace them in the trace (e.g. REDUCE by ALL_REDUCE, GATHER/SCATTER by "
                          "ALL_GATHER) (--fix cannot)")


# ---------------------------------------------------------------- the real corpus

_SETS = {"ddp4": 4, "tpdp4": 4, "tpdp8": 8, "pipeline4": 4, "param_dlrm8": 8, "astra_megatron8": 8}
# per rank: dependencies on node 0 (the converter drops node 0 but not the dependencies on it)
_DANGLING = {"ddp4": 1, "tpdp4": 2, "tpdp8": 2, "pipeline4": 1, "param_dlrm8": 2, "astra_megatron8": 1}
_NCCL = {"param_dlrm8", "astra_megatron8"}      # GPU runs: no METADATA node, no gloo CPU collectives


@pytest.mark.parametrize("name", list(_SETS))
def test_real_sets_diagnosed_and_fixed(tmp_path, name):
    n = _SETS[name]
    d = diagnose(REAL / name / name, network=REAL / f"ring{n}.yml")
    fails = {(f.code, f.rank) for f in d.findings if f.severity == FAILS}
    expect = {("gzipped", None)} | {("dangling-dep", r) for r in range(n)}
    if name not in _NCCL:
        expect |= {("metadata-node", r) for r in range(n)}
    assert fails == expect
    assert {f.code for f in d.findings if f.severity != FAILS} == (
        {"cpu-ops"} if name in _NCCL else {"cpu-ops", "gloo-cpu-collectives"})
    res = fix(REAL / name / name, tmp_path / name, network=REAL / f"ring{n}.yml")
    actions = [("rank files written plain (ASTRA-sim cannot read gzip)", n),
               ("dependencies on nodes absent from the file dropped", n * _DANGLING[name])]
    if name not in _NCCL:
        actions.append(("METADATA nodes removed (their dependents inherit their dependencies)", n))
    assert list(res.actions) == actions
    assert not res.after.fails and all(f.severity == "note" for f in res.after.findings)
    assert res.groups_file is None


_BIN = os.environ.get("ASTRA_SIM_BIN", "")


@pytest.mark.astra
@pytest.mark.skipif(not (_BIN and os.access(_BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these")
@pytest.mark.parametrize("name", list(_SETS))
def test_fixed_real_sets_run_in_astra_sim_with_every_rank_finished(tmp_path, name):
    n = _SETS[name]
    fix(REAL / name / name, tmp_path / "w")
    (tmp_path / "net.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {n} ]\nbandwidth: [ 100.0 ]\n"
                                      "latency: [ 100.0 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps(system_config(
        1, splits=1, endpoint_delay_ns=1, local_mem_bw_gbps=1e9, peak_perf_tflops=1000, scheduling_policy="LIFO")))
    (tmp_path / "mem.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    (tmp_path / "log").mkdir()
    p = subprocess.run([_BIN, "--workload-configuration=w", "--system-configuration=sys.json",
                        "--remote-memory-configuration=mem.json", "--network-configuration=net.yml",
                        "--logging-folder=log"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    parsed = parse_output(p.stdout)
    assert parsed.missing(n) == ()
    assert all(r.finished_ns > 0 for r in parsed.ranks)
    # the unfixed set aborts on the dependency on node 0
    for r in range(n):
        (tmp_path / f"w.{r}.et").write_bytes(gzip.decompress((REAL / name / f"{name}.{r}.et.gz").read_bytes()))
    p = subprocess.run([_BIN, "--workload-configuration=w", "--system-configuration=sys.json",
                        "--remote-memory-configuration=mem.json", "--network-configuration=net.yml",
                        "--logging-folder=log"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode in (134, -6)
    assert "Node 0 in ctrl_dep graph, but not found in index" in p.stdout + p.stderr


def test_docs_list_every_check():
    page = (Path(__file__).resolve().parents[1] / "docs" / "doctor.md").read_text()
    section = page.split("\n## The checks\n", 1)[1].split("\n## ", 1)[0]
    assert [c for c in CHECKS if f"`{c}`" not in section] == []


def _run_astra(tmp_path, prefix, npus, groups=None):
    """Run the binary on a set; (exit code, ranks that printed finished)."""
    (tmp_path / "net.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 100.0 ]\n"
                                      "latency: [ 100.0 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps(system_config(
        1, splits=1, endpoint_delay_ns=1, local_mem_bw_gbps=1e9, peak_perf_tflops=1000, scheduling_policy="LIFO")))
    (tmp_path / "mem.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    (tmp_path / "log").mkdir(exist_ok=True)
    args = [_BIN, f"--workload-configuration={prefix}", "--system-configuration=sys.json",
            "--remote-memory-configuration=mem.json", "--network-configuration=net.yml", "--logging-folder=log"]
    if groups:
        args.append(f"--comm-group-configuration={groups}")
    p = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return p.returncode, [r.rank for r in parse_output(p.stdout).ranks]


# checks whose claim needs a network other than Ring 2, or is undefined behaviour: not run
_NOT_RUN = {"involved-dim-absent", "involved-dim-length", "involved-dim-extra", "rank-count", "missing-rank"}


@pytest.mark.astra
@pytest.mark.skipif(not (_BIN and os.access(_BIN, os.X_OK)),
                    reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Unaware binary to run these")
@pytest.mark.parametrize("name", [n for n in CASES if n not in _NOT_RUN])
def test_hand_made_sets_fail_in_astra_sim_as_told_and_run_once_fixed(tmp_path, name):
    prefix, kw, code = make(tmp_path, name)
    d = diagnose(prefix, **kw)
    if CHECKS[code].severity == FAILS and code != "gzipped":
        rc, done = _run_astra(tmp_path, "t", 2, kw.get("groups"))
        assert rc != 0 or len(done) < 2, (rc, done)
    elif code != "gzipped":
        rc, done = _run_astra(tmp_path, "t", 2, kw.get("groups"))
        assert rc == 0 and sorted(done) == [0, 1]
    if not d.fails or all(f.fixable for f in d.findings if f.severity == FAILS):
        res = fix(prefix, tmp_path / "f", **kw)
        rc, done = _run_astra(tmp_path, "f", 2, res.groups_file)
        assert rc == 0 and sorted(done) == [0, 1], (rc, done)


def test_command_module_severities_are_the_library_s():
    from libra_astra.cli import doctor as cli_doctor
    from libra_astra.doctor import catalog

    assert (cli_doctor.FAILS, cli_doctor.WRONG, cli_doctor.NOTE) == catalog.SEVERITIES


def test_progress_is_reported_per_rank_file(tmp_path):
    prefix = write_set(tmp_path / "t", [[comp(1)], [comp(1)], [comp(1)]])
    calls = []
    diagnose(prefix, on_progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_strict_fails_on_wrong_results(tmp_path):
    prefix = write_set(tmp_path / "t", [[comp(1), comp(2, ctrl=[2])], [comp(1)]])
    assert CliRunner().invoke(main, ["doctor", str(prefix)]).exit_code == 0
    r = CliRunner().invoke(main, ["doctor", str(prefix), "--strict"])
    assert r.exit_code == 1 and "WRONG self-dep (rank 0): 1 node depends on itself (node 2)" in r.output


@pytest.mark.parametrize("prefix", ["dlrm_16/dlrm", "gpt3_tp8_dp8/gpt3", "gpt_tp2_pp2_dp4/gpt", "resnet50_dp16/resnet50"])
def test_shipped_sample_traces_have_no_finding(prefix):
    d = diagnose(Path(__file__).resolve().parents[1] / "traces" / prefix, splits=4)
    assert d.findings == ()


@pytest.mark.parametrize("name", ["gpt_tp2_pp2_dp4/gpt", "dlrm_16/dlrm"])
def test_emitted_workloads_pass_the_doctor(tmp_path, name):
    root = Path(__file__).resolve().parents[1]
    design = tmp_path / "design.json"
    args = ["optimize", str(root / "traces" / name), "--network", str(root / "network_configs/sample_4x4.yml"),
            "--cost", str(root / "network_configs/cost.yml"), "--total-bw", "300", "-o", str(design)]
    assert CliRunner().invoke(main, args).exit_code == 0
    r = CliRunner().invoke(main, ["emit", str(design), "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    run = tmp_path / "run"
    prefix = str(next((run / "workload").glob("*.0.et"))).removesuffix(".0.et")
    groups = run / "comm_groups.json"
    splits = json.loads((run / "system.json").read_text())["preferred-dataset-splits"]
    d = diagnose(prefix, network=run / "network.yml", groups=groups if groups.exists() else None, splits=splits)
    assert [f.code for f in d.findings] == []
