"""emit's byte-level trace rewrite writes exactly what the schema path writes.

Every case rewrites one trace set twice -- on the bytes (the default) and node by node with the
schema (``byte_level=False``) -- and compares the rank files byte for byte and the counts that go
to the manifest. Where the byte path must hand a file back to the schema path, the output is
still compared; where it must not, the tests check that it did not (else they would compare the
schema path with itself).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from libra_astra.astra import rewrite_bytes
from libra_astra.astra.rewrite import rewrite_traces
from libra_astra.astra.trace_groups import trace_metadata_groups
from libra_astra.demand.from_traces import demand_from_traces
from libra_astra.errors import LibraError
from libra_astra.model.network import load_network, network_from_dict
from libra_astra.optimize.design import Design, WorkloadRef
from libra_astra.traces import chakra_io as cio
from libra_astra.traces.files import default_groups_path

emit_mod = importlib.import_module("libra_astra.astra.emit")
ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real"
REAL_SETS = {"param_dlrm8": "ring8", "ddp4": "ring4", "tpdp4": "ring2x2", "tpdp8": "ring2x4", "pipeline4": "ring4"}
GENERATED = {"gpt3_tp8_dp8/gpt3": (8, 8), "gpt_tp2_pp2_dp4/gpt": (4, 4), "dlrm_16/dlrm": (4, 4),
             "resnet50_dp16/resnet50": (4, 4)}


def net_of(*dims):
    return network_from_dict({"name": "n", "dimensions": [
        {"name": f"d{i}", "topology": t, "npus": n, "latency_ns": 100.0} for i, (t, n) in enumerate(dims)]})


class Spy:
    """Counts the files the byte path rewrote and the ones it handed back."""

    def __init__(self, monkeypatch):
        self.done = self.back = self.depth = 0
        orig = rewrite_bytes.Rewriter.rewrite

        def rewrite(rw, bufs, ranks, wheres):
            self.depth += 1     # a batch may be split into calls for single files
            try:
                out = orig(rw, bufs, ranks, wheres)
            finally:
                self.depth -= 1
            if self.depth == 0:
                self.done += sum(o is not None for o in out)
                self.back += sum(o is None for o in out)
            return out

        monkeypatch.setattr(rewrite_bytes.Rewriter, "rewrite", rewrite)


def both_paths(tmp_path, prefix, net, comm_groups=None, splits=1, typed=False, bw=None):
    """Rank files and stats of both paths; asserts they are equal."""
    ref = WorkloadRef("w", traces=str(prefix), comm_groups=str(comm_groups) if comm_groups else None,
                      type_cpu_collectives=typed)
    design = Design("d", net, tuple(bw or [100.0] * net.num_dims), workloads=(ref,))
    w = emit_mod._load_workload(design, ref, None)
    got = {}
    for byte_level in (True, False):
        out = tmp_path / ("bytes" if byte_level else "schema")
        out.mkdir(parents=True)
        stats = rewrite_traces(prefix, out / "w", w.lnet, w.groups, w.masks, splits, type_cpu_collectives=typed,
                               byte_level=byte_level)
        files = [(out / f"w.{r}.et").read_bytes() for r in range(net.npus_count)]
        got[byte_level] = (files, json.dumps(stats.to_dict()))
    for r, (a, b) in enumerate(zip(got[True][0], got[False][0])):
        assert a == b, f"rank {r} differs"
    assert got[True][1] == got[False][1]
    return got[True][0]


@pytest.mark.parametrize("name", sorted(REAL_SETS))
@pytest.mark.parametrize("splits", [1, 4])
def test_real_traces_byte_identical(tmp_path, monkeypatch, name, splits):
    spy = Spy(monkeypatch)
    net = load_network(REAL / f"{REAL_SETS[name]}.yml")
    both_paths(tmp_path, REAL / name / name, net, splits=splits)
    assert spy.done == net.npus_count and spy.back == 0


@pytest.mark.parametrize("name", ["ddp4", "tpdp4", "pipeline4"])
def test_typed_gloo_sets_take_the_schema_path_and_agree(tmp_path, monkeypatch, name):
    spy = Spy(monkeypatch)
    net = load_network(REAL / f"{REAL_SETS[name]}.yml")
    both_paths(tmp_path, REAL / name / name, net, typed=True)
    assert spy.back == net.npus_count


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_traces_byte_identical(tmp_path, monkeypatch, name):
    spy = Spy(monkeypatch)
    prefix = ROOT / "traces" / name
    dims = GENERATED[name]
    net = net_of(("Ring", dims[0]), ("Switch", dims[1]))
    both_paths(tmp_path, prefix, net, comm_groups=default_groups_path(prefix), splits=4)
    assert spy.done == net.npus_count and spy.back == 0


def write_set(prefix, ranks, nodes_of):
    for r in range(ranks):
        cio.write_et(f"{prefix}.{r}.et", nodes_of(r), overwrite=True)


def node(i, name, typ, data=(), ctrl=(), dur=0):
    n = pb.Node(id=i, name=name, type=typ, duration_micros=dur)
    n.data_deps.extend(data)
    n.ctrl_deps.extend(ctrl)
    return n


def coll(i, kind, size, data=(), ctrl=(), pg=None, inv=None, name="c"):
    return cio.coll_node(i, name, kind, size, pg_name=pg, involved_dim=inv, data_deps=data, ctrl_deps=ctrl)


def awkward(r):
    """Removed nodes in chains, dangling, self and repeated dependencies, dependencies on later
    nodes, converted and trivial collectives, a collective already waiting for the one before."""
    return [
        node(10, "meta", pb.METADATA_NODE, data=[999]),
        node(11, "inv", pb.INVALID_NODE, data=[10], ctrl=[12]),
        cio.comp_node(12, "comp", 5, data_deps=[11, 11, 12, 777]),
        coll(13, "ALL_REDUCE", 1001, data=[11, 12], ctrl=[15]),       # waits for a later node
        coll(14, "BARRIER", 0, data=[13]),
        coll(15, "REDUCE_SCATTER_BLOCK", 4097, data=[12, 12]),
        coll(16, "ALL_GATHER", 64, data=[14], inv=[False, False]),     # reaches no NPU: compute
        coll(17, "ALL_TO_ALL", 1 << 40, data=[14, 16], pg="1" if r < 4 else "2"),
        cio.send_node(18, "s", 8, r, (r + 1) % 8, 1, data_deps=[17]),
        cio.recv_node(19, "v", 8, (r - 1) % 8, r, 1, ctrl_deps=[18]),
        coll(20, "ALL_REDUCE", 3, data=[17], pg="3" if r % 2 else "4"),  # a flat ring
        coll(2**33 + 5, "BROADCAST", 77, data=[20]),
    ]


def test_unusual_dependencies_and_collectives(tmp_path, monkeypatch):
    spy = Spy(monkeypatch)
    gpath = tmp_path / "g.json"
    cio.write_comm_groups(gpath, {1: [0, 1, 2, 3], 2: [4, 5, 6, 7], 3: [1, 3, 5, 7], 4: [0, 2, 4, 6]})
    prefix = tmp_path / "in" / "job"
    prefix.parent.mkdir()
    write_set(prefix, 8, awkward)
    for splits in (1, 4):
        files = both_paths(tmp_path / str(splits), prefix, net_of(("Ring", 4), ("Switch", 2)), comm_groups=gpath,
                           splits=splits)
    assert spy.done == 16 and spy.back == 0
    nodes = {n.id: n for n in cio.parse_et(files[0], "x")[1]}
    assert 10 not in nodes and 11 not in nodes and nodes[16].type == pb.COMP_NODE
    assert list(nodes[13].ctrl_deps) == [15]      # issue order puts 15 first; 13 already waits for it


def test_empty_ranks_ids_too_large_for_a_batch_and_canonical_quirks(tmp_path, monkeypatch):
    spy = Spy(monkeypatch)
    prefix = tmp_path / "in" / "job"
    prefix.parent.mkdir()

    def nodes_of(r):
        if r == 0:
            return [node(1, "m", pb.METADATA_NODE)]                        # empty once rewritten
        if r == 1:
            return [cio.comp_node(2**50, "big", 1), coll(2**50 + 1, "ALL_REDUCE", 8, data=[2**50])]
        return [cio.comp_node(0, "zero", 0), coll(1, "ALL_REDUCE", 8, data=[0], ctrl=[2**45])]

    write_set(prefix, 4, nodes_of)
    # a node with an explicit zero field and a non-minimal varint: the schema path drops the one and
    # shortens the other, so the byte path must hand that file back
    raw = bytearray(Path(f"{prefix}.3.et").read_bytes())
    extra = cio.frame(bytes([0x08, 0x85, 0x00, 0x18, 0x04, 0x38, 0x00]))
    Path(f"{prefix}.3.et").write_bytes(bytes(raw) + extra)
    both_paths(tmp_path, prefix, net_of(("Ring", 4)))
    assert spy.done == 3 and spy.back == 1


def test_errors_are_the_schema_paths(tmp_path):
    net = net_of(("Ring", 4))
    design = lambda p: Design("d", net, (10.0,), workloads=(WorkloadRef("job", traces=str(p)),))  # noqa: E731
    prefix = tmp_path / "cyc"
    write_set(prefix, 4, lambda r: [cio.comp_node(1, "a", 1, data_deps=[2]), cio.comp_node(2, "b", 1, data_deps=[1])])
    with pytest.raises(LibraError, match=r"cyc.0.et: dependency cycle through nodes 1 -> 2 -> 1"):
        emit_mod.emit(design(prefix), tmp_path / "run")
    prefix = tmp_path / "bad"
    write_set(prefix, 4, lambda r: [coll(0, "ALL_REDUCE", 8)])
    Path(f"{prefix}.2.et").write_bytes(Path(f"{prefix}.2.et").read_bytes()[:-3])
    with pytest.raises(LibraError, match=r"bad.2.et: corrupt message at byte offset"):
        emit_mod.emit(design(prefix), tmp_path / "run")
    prefix = tmp_path / "grp"
    write_set(prefix, 4, lambda r: [coll(0, "ALL_REDUCE", 8, pg="1")])
    gpath = tmp_path / "g.json"
    cio.write_comm_groups(gpath, {1: [0, 1]})
    d = Design("d", net, (10.0,), workloads=(WorkloadRef("job", traces=str(prefix), comm_groups=str(gpath)),))
    with pytest.raises(LibraError, match=r"grp.2.et: node 0 \('c'\): rank 2 runs a collective on group 1"):
        emit_mod.emit(d, tmp_path / "run")


@pytest.mark.parametrize("name", sorted(REAL_SETS))
def test_metadata_groups_without_the_demand_are_the_summarys(name):
    net = load_network(REAL / f"{REAL_SETS[name]}.yml")
    _, summary = demand_from_traces(REAL / name / name, net)
    assert trace_metadata_groups(REAL / name / name, net.npus_count, set()) == dict(summary.metadata_groups)


@pytest.mark.parametrize("typed", [False, True])
def test_emit_with_a_known_demand_does_not_read_it_again(tmp_path, monkeypatch, typed):
    net = load_network(REAL / "ring2x2.yml")
    prefix = REAL / "tpdp4" / "tpdp4"
    design = Design("d", net, (50.0, 25.0), workloads=(WorkloadRef("job", traces=str(prefix),
                                                                   type_cpu_collectives=typed),))
    emit_mod.emit(design, tmp_path / "a")
    demand, _ = demand_from_traces(prefix, net, type_cpu_collectives=typed)

    def refuse(*a, **kw):
        raise AssertionError("emit read the demand again")

    monkeypatch.setattr(emit_mod, "demand_from_traces", refuse)
    emit_mod.emit(design, tmp_path / "b", demand=demand)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    # typed, the collectives name METADATA process groups: without them the rewrite would refuse them
    stats = json.loads((tmp_path / "b" / "manifest.json").read_text())["workload_stats"]
    assert bool(stats.get("group_collectives_to_dims")) == typed
    for f in files:
        assert (tmp_path / "b" / f).read_bytes() == (tmp_path / "a" / f).read_bytes(), f


def test_names_beyond_ascii_and_invalid_utf8(tmp_path, monkeypatch):
    spy = Spy(monkeypatch)
    prefix = tmp_path / "in" / "job"
    prefix.parent.mkdir()
    write_set(prefix, 4, lambda r: [cio.comp_node(1, "grad·Σ", 1), coll(2, "ALL_REDUCE", 8, data=[1]),
                                    node(3, "", pb.COMP_NODE, data=[2], dur=1)])
    both_paths(tmp_path / "ok", prefix, net_of(("Ring", 4)))
    assert spy.done == 4 and spy.back == 0
    # a name that is not UTF-8: the schema's parse refuses the file, and so does emit
    body = pb.Node(id=4, name="zz", type=pb.COMP_NODE, duration_micros=1).SerializeToString()
    body = body.replace(b"zz", b"\xff\xfe")
    Path(f"{prefix}.1.et").write_bytes(Path(f"{prefix}.1.et").read_bytes() + cio.frame(body))
    design = Design("d", net_of(("Ring", 4)), (10.0,), workloads=(WorkloadRef("job", traces=str(prefix)),))
    with pytest.raises(LibraError, match=r"job.1.et: corrupt message at byte offset"):
        emit_mod.emit(design, tmp_path / "run")


def test_a_file_handed_back_leaves_the_rest_of_its_batch_on_the_byte_path(tmp_path, monkeypatch):
    spy = Spy(monkeypatch)
    prefix = tmp_path / "in" / "job"
    prefix.parent.mkdir()

    def nodes_of(r):
        out = [cio.comp_node(1, "a", 3), coll(2, "ALL_REDUCE", 64, data=[1]), coll(3, "ALL_GATHER", 8, data=[1])]
        if r == 2:    # a send without its peer: infer_peers gives it one, on the schema path only
            out.append(node(4, "send", pb.COMM_SEND_NODE, data=[3]))
            out[-1].attr.append(cio.make_attr("comm_size", "int64_val", 8))
        return out

    write_set(prefix, 4, nodes_of)
    both_paths(tmp_path, prefix, net_of(("Ring", 4)))
    assert spy.done == 3 and spy.back == 1


def test_distinct_spans_group_exactly_in_bulk_even_when_hashes_collide():
    import numpy as np
    from libra_astra.astra.node_bytes import _FEW, distinct_spans
    c, m = 0x9E3779B97F4A7C15, (1 << 64) - 1
    w0a, w1a, w0b = 12345, 678, 999
    w1b = ((w0a * c & m) ^ w1a) ^ (w0b * c & m)  # the same word hash as (w0a, w1a)
    pairs = [(w0a, w1a), (w0b, w1b)] * 3 + [(i % 40, 7) for i in range(_FEW)]  # enough for the bulk path
    buf = b"".join(a.to_bytes(8, "little") + b.to_bytes(8, "little") for a, b in pairs) + b"xyz"
    at = np.arange(len(pairs) + 1, dtype=np.int64) * 16
    end = at + 16
    end[-1] = at[-1]                                               # one empty span
    group, reps = distinct_spans(buf, at, end)
    spans = [buf[a:e] for a, e in zip(at.tolist(), end.tolist())]
    assert group[-1] == -1
    for i, s in enumerate(spans[:-1]):
        assert spans[reps[group[i]]] == s
    assert len(set(group[:-1].tolist())) == len(set(spans[:-1])) == 42
