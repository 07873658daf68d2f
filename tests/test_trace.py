"""Chakra ET reader: the compact program must say exactly what the schema's own parse says."""

import gzip
import io
import json
import random

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from libra_astra.traces import chakra_io as cio
from libra_astra.errors import LibraError
from libra_astra.traces.files import find_rank_files, is_trace_prefix, rank_files
from libra_astra.traces.graph import topological_order
from libra_astra.traces.process_groups import parse_pg_metadata
from libra_astra.traces import attr_blocks
from libra_astra.traces.reader import TraceReader


def encode(nodes, version="1"):
    f = io.BytesIO()
    encodeMessage(f, pb.GlobalMetadata(version=version))
    for n in nodes:
        encodeMessage(f, n)
    return f.getvalue()


def framed(payload: bytes) -> bytes:
    return cio.frame(payload)


WANTED = ("is_cpu_op", "num_ops", "tensor_size", "comm_type", "comm_size", "involved_dim", "pg_name",
          "comm_src", "comm_dst")


def random_node(rng, i, ids):
    n = pb.Node(id=ids[i])
    if rng.random() < 0.5:
        n.name = "x" * rng.randint(0, 300)  # also forces two-byte length prefixes
    n.type = rng.choice([0, 2, 3, 4, 4, 5, 6, 7])
    if i and rng.random() < 0.8:
        n.data_deps.extend(ids[rng.randrange(i)] for _ in range(rng.randint(1, 4)))
    if i and rng.random() < 0.3:
        n.ctrl_deps.extend(ids[rng.randrange(i)] for _ in range(rng.randint(1, 3)))
    if rng.random() < 0.3:
        n.start_time_micros = rng.randint(0, 2**40)
    if rng.random() < 0.7:
        n.duration_micros = rng.randint(0, 2**63)
    if rng.random() < 0.2:
        n.inputs.values = "abc" * rng.randint(0, 50)
    if rng.random() < 0.2:
        n.outputs.shapes = "[[1]]"
    for _ in range(rng.randint(0, 6)):
        k = rng.choice(WANTED + ("rf_id", "op_schema"))
        a = n.attr.add(name=k)
        if k in ("pg_name", "op_schema"):
            a.string_val = str(rng.randint(0, 5))
        elif k == "involved_dim":
            a.bool_list.values.extend(rng.random() < 0.5 for _ in range(3))
        elif k == "is_cpu_op":
            a.bool_val = rng.random() < 0.5
        elif k == "tensor_size":
            a.uint64_val = rng.randint(0, 2**63 - 1)
        elif k in ("comm_src", "comm_dst"):
            a.int32_val = rng.randint(0, 100)
        else:
            a.int64_val = rng.randint(-5, 2**62)
    return n


def expected_attrs(node):
    out = {}
    for a in node.attr:
        if a.name in WANTED:
            kind = a.WhichOneof("value")
            v = getattr(a, kind)
            out[a.name] = tuple(v.values) if kind.endswith("_list") else v
    return out


def check_program(reader, prog, nodes):
    assert prog.num_nodes == len(nodes)
    for i, x in enumerate(nodes):
        assert int(prog.node_ids[i]) == x.id
        assert int(prog.types[i]) == x.type
        assert int(prog.duration_micros[i]) == x.duration_micros
        got = sorted(int(prog.node_ids[j]) for j in prog.dep_index[prog.dep_ptr[i]:prog.dep_ptr[i + 1]])
        assert got == sorted(list(x.data_deps) + list(x.ctrl_deps))
        row = reader.attrs.rows[prog.attr[i]]
        for k, v in expected_attrs(x).items():
            assert getattr(row, k) == v, (k, v, row)


def random_nodes_with_blocks(rng, max_count, id_top, planted, block):
    """1..max_count random nodes on rising ids below id_top; each node of planted(nodes) has, with
    probability 1/2, its attributes replaced by block() (blocks that repeat across nodes)."""
    count = rng.randint(1, max_count)
    ids = sorted(rng.sample(range(1, id_top), count))
    nodes = [random_node(rng, i, ids) for i in range(count)]
    for n in planted(nodes):
        if rng.random() < 0.5:
            del n.attr[:]
            for attr in block():
                n.attr.add(**attr)
    return nodes


@pytest.mark.parametrize("seed", range(8))
def test_reader_matches_schema_parse(seed):
    rng = random.Random(seed)
    count = rng.randint(1, 300)
    ids = rng.sample(range(1, 10**12 if seed % 2 else 1000), count)
    if seed % 3 == 0:
        ids.sort()
    nodes = [random_node(rng, i, ids) for i in range(count)]
    reader = TraceReader()
    prog = reader.parse(encode(nodes), "t.0.et")
    check_program(reader, prog, nodes)


def _per_block_reader():
    """A reader that always takes the per-block attribute decode (the path before the bulk one)."""
    r = TraceReader()
    r.blocks.bulk = lambda *a, **k: None
    return r


def _outcome(reader, bufs):
    try:
        progs = reader.parse_many(bufs, [f"t.{i}.et" for i in range(len(bufs))])
    except LibraError as e:
        return "error", str(e)
    arrays = [[getattr(p, f).tolist() for f in ("node_ids", "types", "duration_micros", "attr", "dep_ptr",
                                                 "dep_index")] + [p.digest, p.dangling] for p in progs]
    return arrays, list(reader.attrs.rows)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_bulk_attribute_decode_equals_the_per_block_decode(seed, compiled, monkeypatch):
    # the numpy bulk decode, or the compiled block keys where built, against the per-block decode
    if compiled and attr_blocks._kernel is None:
        pytest.skip("the compiled block keys are not built here")
    kernel = attr_blocks._kernel if compiled else None
    # several files in one batch; odd seeds damage one attribute block (a length, a tag, a value)
    rng = random.Random(1000 + seed)
    bufs = []
    for f in range(rng.randint(1, 4)):
        nodes = random_nodes_with_blocks(
            rng, 200, 10**9, lambda nodes: nodes[: rng.randint(0, len(nodes))],  # blocks repeat across nodes and files
            lambda: [dict(name="comm_size", int64_val=4096),
                     dict(name="comm_tag", int64_val=rng.randint(0, 2**40)),  # unwanted, unique
                     dict(name="is_cpu_op", bool_val=False)])
        frames = [cio.encode_metadata()]
        for n in nodes:
            raw = bytearray(n.SerializeToString())
            if seed % 2 and n.attr and rng.random() < 0.05:
                at = len(raw) - rng.randint(1, len(n.attr[-1].SerializeToString()) + 2)
                raw[at] = rng.choice([0x80, 0xFF, 0x0A, 0x52, 0x00, raw[at] ^ 1])
            frames.append(framed(bytes(raw)) if raw else framed(b"\x08\x01"))
        bufs.append(b"".join(frames))
    monkeypatch.setattr(attr_blocks, "_kernel", kernel)
    got = _outcome(TraceReader(), bufs)
    monkeypatch.setattr(attr_blocks, "_kernel", None)
    assert got == _outcome(_per_block_reader(), bufs)


@pytest.fixture
def numpy_walk(monkeypatch):
    """The numpy framing and walk, whose template files these tests are about (the compiled walk
    reads every message; tests/test_trace_walk.py holds it to the numpy one)."""
    from libra_astra.traces import batch
    monkeypatch.setattr(batch, "_kernel", None)


def _unshared_outcome(bufs, monkeypatch):
    """The outcome with every file's messages read by itself (no template files)."""
    from libra_astra.traces import templates as tpl
    with monkeypatch.context() as m:
        m.setattr(tpl, "_TEMPLATE_TRIES", 0)
        return _outcome(TraceReader(), bufs)


@pytest.mark.parametrize("seed", range(24))
def test_files_sharing_a_template_read_as_when_read_alone(seed, monkeypatch, numpy_walk):
    # copies of a few files with bytes changed in place (names, attributes, ids, length prefixes,
    # the GlobalMetadata, anything): same length, so each copy is compared with a template
    rng = random.Random(3000 + seed)
    bases = []
    for _ in range(rng.randint(1, 3)):
        nodes = random_nodes_with_blocks(
            rng, 120, 10**6, lambda nodes: nodes,
            lambda: [dict(name="comm_size", int64_val=4096), dict(name="pg_name", string_val=str(rng.randint(0, 9)))])
        bases.append(encode(nodes))
    bufs = []
    for _ in range(rng.randint(2, 12)):
        buf = bytearray(rng.choice(bases))
        meta = len(cio.encode_metadata())
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 8])):
            at = rng.randrange(len(buf)) if rng.random() < 0.3 else rng.randrange(meta, len(buf))
            buf[at] = rng.choice([buf[at] ^ 1, ord("0") + rng.randint(0, 9), 0x80, 0x00, rng.randrange(256)])
        bufs.append(bytes(buf))
    assert _outcome(TraceReader(), bufs) == _unshared_outcome(bufs, monkeypatch)


def test_template_files_share_most_messages_and_step_aside_on_a_moved_boundary(monkeypatch, numpy_walk):
    from libra_astra.traces import templates as tpl
    seen = []
    real = tpl.repeated_messages
    monkeypatch.setattr(tpl, "repeated_messages", lambda *a: seen.append(real(*a)) or seen[-1])
    nodes = [cio.comp_node(1, "c", 5), cio.coll_node(2, "ar", "ALL_REDUCE", 1 << 20, data_deps=[1]),
             cio.comp_node(3, "d", 7, data_deps=[2])]
    a = cio.encode_et(nodes)
    b = a.replace(b"8\x05", b"8\x06")  # another duration (field 7, tag 0x38): one message differs
    assert len(b) == len(a) and b != a
    progs = TraceReader().parse_many([a, b, a], ["t.0.et", "t.1.et", "t.2.et"])
    assert seen[-1].tolist() == [0, 1, 2, 3, 1, 2, 0, 1, 2]
    assert [p.duration_micros.tolist() for p in progs] == [[5, 0, 7], [6, 0, 7], [5, 0, 7]]
    # the same bytes cut into messages elsewhere: a length prefix differs, every file reads its own
    rest = b"".join(framed(bytes([8, i])) for i in range(3, 7))
    one = cio.encode_metadata() + framed(b"\x08\x01\x12\x03abc") + framed(b"\x08\x02") + rest
    two = cio.encode_metadata() + framed(b"\x08\x01\x12\x01a") + framed(b"\x08\x02\x12\x00") + rest
    assert len(one) == len(two)
    calls = len(seen)
    progs = TraceReader().parse_many([one, two], ["t.0.et", "t.1.et"])
    assert len(seen) == calls + 1 and seen[-1] is None
    assert [p.node_ids.tolist() for p in progs] == [[1, 2, 3, 4, 5, 6]] * 2
    assert _outcome(TraceReader(), [one, two]) == _unshared_outcome([one, two], monkeypatch)


def test_bulk_attribute_decode_runs_on_plain_traces_and_steps_aside_otherwise(monkeypatch):
    monkeypatch.setattr(attr_blocks, "_kernel", None)   # the numpy path (the compiled keys skip bulk)
    calls = []
    reader = TraceReader()
    bulk = reader.blocks.bulk
    reader.blocks.bulk = lambda *a, **k: calls.append(bulk(*a, **k)) or calls[-1]
    nodes = [cio.comp_node(1, "c", 5), cio.coll_node(2, "ar", "ALL_REDUCE", 1024, data_deps=[1])]
    reader.parse(encode(nodes), "t.0.et")
    assert calls[-1] is not None
    # a 3-byte attribute length is legal protobuf but not plain: the per-block decode takes it
    long = pb.Node(id=3, type=pb.COMP_NODE, attr=[pb.AttributeProto(name="op_schema", string_val="x" * 20000)])
    prog = reader.parse(encode(nodes + [long]), "t.0.et")
    assert calls[-1] is None
    assert prog.num_nodes == 3


def test_out_of_order_and_unpacked_fields_take_the_schema_path():
    # concatenated serialized pieces merge: attributes first, then id/type/deps
    a = pb.Node(attr=[pb.AttributeProto(name="comm_size", int64_val=4096),
                      pb.AttributeProto(name="comm_type", int64_val=2)]).SerializeToString()
    b = pb.Node(id=7, type=pb.COMM_COLL_NODE, data_deps=[3]).SerializeToString()
    # an unpacked repeated field (tag 5, wire type 0) and an unknown field number 20
    unpacked = bytes([0x08, 9, 0x18, 4, 0x28, 3, 0x28, 7, 0xA0, 0x01, 5])
    data = (cio.encode_metadata() + framed(pb.Node(id=3, type=pb.COMP_NODE, duration_micros=2).SerializeToString())
            + framed(a + b) + framed(unpacked))
    reader = TraceReader()
    prog = reader.parse(data, "t")
    assert prog.node_ids.tolist() == [3, 7, 9]
    assert prog.types.tolist() == [4, 7, 4]
    row = reader.attrs.rows[prog.attr[1]]
    assert (row.comm_type, row.comm_size) == (2, 4096)
    deps = [sorted(prog.node_ids[prog.dep_index[prog.dep_ptr[i]:prog.dep_ptr[i + 1]]].tolist()) for i in range(3)]
    assert deps == [[], [3], [3, 7]]


def test_identical_files_are_decoded_once(tmp_path):
    nodes = [cio.comp_node(1, "c", 5), cio.coll_node(2, "ar", "ALL_REDUCE", 1024, data_deps=[1])]
    for r in range(4):
        cio.write_et(tmp_path / f"t.{r}.et", nodes)
    reader = TraceReader()
    progs = [reader.read(tmp_path / f"t.{r}.et") for r in range(4)]
    assert reader.files_decoded == 1
    assert all(p is progs[0] for p in progs)


def test_gzipped_file_reads_the_same(tmp_path):
    nodes = [cio.comp_node(1, "c", 5), cio.coll_node(2, "ag", "ALL_GATHER", 64, data_deps=[1], pg_name="3")]
    (tmp_path / "z.0.et.gz").write_bytes(gzip.compress(cio.encode_et(nodes)))
    cio.write_et(tmp_path / "p.0.et", nodes)
    r1, r2 = TraceReader(), TraceReader()
    a, b = r1.read(tmp_path / "z.0.et.gz"), r2.read(tmp_path / "p.0.et")
    assert a.digest == b.digest
    assert r1.attrs.rows[a.attr[1]].pg_name == "3"
    assert is_trace_prefix(tmp_path / "z") and is_trace_prefix(tmp_path / "p") and not is_trace_prefix(tmp_path / "q")


def test_topological_order_of_a_file_written_children_first():
    nodes = [pb.Node(id=2, type=pb.COMP_NODE, data_deps=[1]), pb.Node(id=1, type=pb.COMP_NODE)]
    prog = TraceReader().parse(encode(nodes), "t")
    assert topological_order(prog).tolist() == [1, 0]
    in_order = TraceReader().parse(encode(nodes[::-1]), "t")
    assert topological_order(in_order) is None


def test_metadata_process_groups_as_the_pytorch_converter_writes_them():
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [],
            "group_size": 4, "group_count": 3},
           {"pg_name": "1", "pg_desc": "tp", "backend_config": "cuda:nccl", "ranks": [0, 1],
            "group_size": 2, "group_count": 3}]
    # PyTorch records json.dumps(pg_config_info); the converter stores str(inputs["values"])
    values = str([json.dumps(pgs)])
    node = pb.Node(id=5, name="## process_group:init ##", type=pb.METADATA_NODE)
    node.inputs.values = values
    reader = TraceReader()
    prog = reader.parse(encode([node, pb.Node(id=6, type=pb.COMP_NODE, ctrl_deps=[5])]), "t")
    assert prog.pg_info == (("0", ()), ("1", (0, 1)))
    assert prog.types.tolist() == [1, 4]


@pytest.mark.parametrize("values, groups", [
    ('[[[{"pg_name": "2", "ranks": [3, 1]}]]]', (("2", (1, 3)),)),
    (str([json.dumps([{"pg_id": 4, "ranks": {"0": 0, "2": 1}}])]), (("4", (0, 2)),)),
    ("", ()),
])
def test_metadata_variants(values, groups):
    assert parse_pg_metadata(values, "t") == groups


def test_metadata_that_is_not_group_info_is_an_error():
    with pytest.raises(LibraError) as e:
        parse_pg_metadata("{not json", "t.0.et: node 5 (METADATA)")
    assert str(e.value) == ("t.0.et: node 5 (METADATA): cannot read process-group info from inputs.values "
                            "(not JSON or a Python literal); fix the trace or give the groups with --comm-groups")


# ---------------------------------------------------------------- bad input


def raises(data, message, where="bad.0.et"):
    with pytest.raises(LibraError) as e:
        TraceReader().parse(data, where)
    assert str(e.value) == message


def good_bytes():
    return cio.encode_et([cio.comp_node(1, "c", 5), cio.coll_node(2, "ar", "ALL_REDUCE", 1 << 20, data_deps=[1])])


def test_truncated_file():
    data = good_bytes()
    meta_len = len(cio.encode_metadata())
    cut = data[:-3]
    last = meta_len + len(framed(cio.comp_node(1, "c", 5).SerializeToString()))
    size = len(cio.coll_node(2, "ar", "ALL_REDUCE", 1 << 20, data_deps=[1]).SerializeToString())
    raises(cut, f"bad.0.et: truncated: the message at byte offset {last} needs {size} bytes but only {size - 3} "
                "remain; the file was cut short, re-create or re-copy it")


def test_truncated_length_prefix():
    raises(good_bytes() + b"\x80",
           f"bad.0.et: truncated or corrupt length prefix at byte offset {len(good_bytes())}; the file was cut "
           "short or damaged, re-create or re-copy it")


def test_corrupt_node():
    data = cio.encode_metadata() + framed(b"\x08\x01\x1a\x05ab")  # field 3 with a length: not a Node
    raises(data, f"bad.0.et: corrupt node message at byte offset {len(cio.encode_metadata())} (protobuf cannot "
                 "decode it); the file is damaged or not a Chakra ET file")


def test_zero_length_message():
    raises(good_bytes() + b"\x00" + framed(b"\x08\x05"),
           f"bad.0.et: zero-length message at byte offset {len(good_bytes())}; readers (and ASTRA-sim) stop there, "
           "so the rest of the file would be lost; never write a node with all fields at their defaults")


def test_empty_file():
    raises(b"", "bad.0.et: empty file; a trace file starts with a GlobalMetadata message")


def test_corrupt_gzip(tmp_path):
    p = tmp_path / "g.0.et"
    p.write_bytes(gzip.compress(good_bytes())[:-10])
    with pytest.raises(LibraError) as e:
        TraceReader().read(p)
    assert str(e.value).startswith(f"{p}: truncated or corrupt gzip data (")
    assert str(e.value).endswith("); re-create or re-copy the file")


def test_dangling_dependency_is_dropped_and_kept_for_the_report():
    data = cio.encode_et([cio.comp_node(10, "c", 5, ctrl_deps=[0]), cio.comp_node(11, "d", 5, data_deps=[10, 99]),
                          cio.comp_node(12, "e", 5, data_deps=[11])])
    prog = TraceReader().parse(data, "ok.0.et")
    assert prog.dangling == ((10, 0), (11, 99))
    assert prog.dep_ptr.tolist() == [0, 0, 1, 2] and prog.dep_index.tolist() == [0, 1]


def test_duplicate_node_id():
    data = cio.encode_et([cio.comp_node(3, "c", 5), cio.comp_node(3, "d", 5)])
    raises(data, "bad.0.et: node id 3 appears twice; node ids must be unique within a file")


def test_dependency_cycle():
    data = cio.encode_et([cio.comp_node(1, "a", 1), cio.comp_node(2, "b", 1, data_deps=[1, 4]),
                          cio.comp_node(3, "c", 1, data_deps=[2]), cio.comp_node(4, "d", 1, ctrl_deps=[3])])
    prog = TraceReader().parse(data, "bad.0.et")
    with pytest.raises(LibraError) as e:
        topological_order(prog)
    assert str(e.value) == "bad.0.et: dependency cycle through nodes 2 -> 3 -> 4 -> 2; remove one of these dependencies"


def test_rank_files(tmp_path):
    for r in (0, 1, 2, 3):
        (tmp_path / f"s.{r}.et").write_bytes(b"")
    (tmp_path / "s.2.et.gz").write_bytes(b"")
    (tmp_path / "s.x.et").write_bytes(b"")
    found = find_rank_files(tmp_path / "s")
    assert sorted(found) == [0, 1, 2, 3] and found[2].name == "s.2.et"
    assert [p.name for p in rank_files(tmp_path / "s", 4)] == ["s.0.et", "s.1.et", "s.2.et", "s.3.et"]
    pre = tmp_path / "s"
    with pytest.raises(LibraError) as e:
        rank_files(pre, 8, "network 'x'")
    assert str(e.value) == (f"{pre}: found 4 rank files (ranks up to 3) but network 'x' has 8 NPUs; use a network "
                            "with 4 NPUs or traces for 8 ranks")
    (tmp_path / "s.1.et").unlink()
    with pytest.raises(LibraError) as e:
        rank_files(pre, 4)
    assert str(e.value) == f"{pre}: 1 rank file(s) missing: {pre}.1.et; every rank 0..3 needs a file"
    with pytest.raises(LibraError) as e:
        rank_files(tmp_path / "none", 4)
    assert str(e.value) == (f"{tmp_path / 'none'}: no trace files {tmp_path / 'none'}.0.et .. "
                            f"{tmp_path / 'none'}.3.et (or .et.gz); give the prefix without the '.RANK.et' suffix")


def test_errors_in_a_batch_name_the_right_file():
    good = good_bytes()
    first = framed(pb.Node(id=1, type=pb.COMP_NODE).SerializeToString())
    bad = cio.encode_metadata() + first + framed(b"\x08\x01\x1a\x05ab")
    offset = len(cio.encode_metadata()) + len(framed(pb.Node(id=1, type=pb.COMP_NODE).SerializeToString()))
    with pytest.raises(LibraError) as e:
        TraceReader().parse_many([good, good + b"", bad], ["a.0.et", "a.1.et", "a.2.et"])
    assert str(e.value) == (f"a.2.et: corrupt node message at byte offset {offset} (protobuf cannot decode it); "
                            "the file is damaged or not a Chakra ET file")
    progs = TraceReader().parse_many([good, cio.encode_et([cio.comp_node(4, "x", 9)])], ["a.0.et", "a.1.et"])
    assert [p.node_ids.tolist() for p in progs] == [[1, 2], [4]]
    assert progs[1].duration_micros.tolist() == [9]


def test_attribute_of_the_wrong_type():
    node = cio.coll_node(2, "ar", "ALL_REDUCE", 8)
    node.attr.append(pb.AttributeProto(name="comm_dst", string_val="3"))
    with pytest.raises(LibraError) as e:
        TraceReader().parse(cio.encode_et([cio.comp_node(1, "c", 1), node]), "bad.0.et")
    assert str(e.value) == "bad.0.et: node 2: attribute comm_dst must be an integer, got '3'; fix the trace generator"
    node = cio.coll_node(2, "ar", "ALL_REDUCE", 8)
    node.attr.append(pb.AttributeProto(name="involved_dim", int64_val=3))
    with pytest.raises(LibraError) as e:
        TraceReader().parse(cio.encode_et([node]), "bad.0.et")
    assert str(e.value) == ("bad.0.et: node 2: attribute involved_dim must be a bool_list, got 3; "
                            "fix the trace generator")


def test_byte_row_grouping_is_exact_even_when_hashes_collide():
    import numpy as np
    from libra_astra.traces.attr_blocks import _distinct
    c = 0x9E3779B97F4A7C15
    m = (1 << 64) - 1
    w0a, w1a, w0b = 12345, 678, 999
    w1b = ((w0a * c & m) ^ w1a) ^ (w0b * c & m)  # the same word hash as (w0a, w1a)
    words = [(w0a, w1a), (w0b, w1b), (w0a, w1a), (w0b, w1b), (1, 2)]
    rows = b"".join(int(a).to_bytes(8, "little") + int(b).to_bytes(8, "little") for a, b in words)
    rng = random.Random(5)
    tail = bytes(rng.choice(b"ab") for _ in range(60))  # short strings of several lengths, with repeats
    arr = np.frombuffer(rows + tail, dtype=np.uint8)
    starts = [16 * i for i in range(5)] + [80 + i for i in range(50)]
    lens = [16] * 5 + [rng.randint(0, 9) for _ in range(50)]
    first, inv = _distinct(arr, np.asarray(starts, dtype=np.int64), np.asarray(lens, dtype=np.int64))
    data = arr.tobytes()
    strings = [data[s:s + n] for s, n in zip(starts, lens)]
    for i, s in enumerate(strings):
        assert strings[first[inv[i]]] == s and first[inv[i]] <= i
    assert len(set(inv.tolist())) == len(set(strings))


@pytest.mark.parametrize("damage", ["cut", "zero", "prefix", "empty", "meta"])
def test_a_batch_with_damaged_files_reports_the_first_damaged_file_as_alone(damage):
    # the batch frames all files in one pass; its errors must be those of the files read one by one
    good = good_bytes()
    bad = {"cut": good[:-3], "zero": good + b"\x00", "prefix": good + b"\x80", "empty": b"",
           "meta": b"\x05\x0a\x01"}[damage]
    later = {"cut": b"", "zero": good[:-3], "prefix": b"", "empty": good + b"\x80", "meta": good + b"\x00"}[damage]
    with pytest.raises(LibraError) as alone:
        TraceReader().parse(bad, "t.1.et")
    with pytest.raises(LibraError) as batch:
        TraceReader().parse_many([good, bad, later], ["t.0.et", "t.1.et", "t.2.et"])
    assert str(batch.value) == str(alone.value)
    meta_only = cio.encode_metadata()  # a file without nodes between two with nodes
    progs = TraceReader().parse_many([good, meta_only, good], ["t.0.et", "t.1.et", "t.2.et"])
    assert [p.num_nodes for p in progs] == [2, 0, 2]
    assert progs[2].dep_index.tolist() == [0]


@pytest.mark.parametrize("seed", range(16))
def test_dependencies_resolved_together_as_file_by_file(seed):
    import numpy as np
    from libra_astra.traces.graph import resolve_deps, resolve_deps_many
    rng = random.Random(7000 + seed)
    ids_l, deps_l = [], []
    for _ in range(rng.randint(1, 8)):
        n = rng.choice([0, 1, 2, 5, 40])
        top = rng.choice([50, 10**6, 2**64 - 1])
        ids = sorted(rng.sample(range(1, min(top, 10**6)), n))
        if rng.random() < 0.4:  # consecutive ids, as generators write them
            ids = list(range(ids[0], ids[0] + n)) if ids else []
        if top > 10**6:  # ids near the top of uint64
            ids = [top - 10**6 + i for i in ids]
        if n > 1 and rng.random() < 0.3:
            ids[rng.randrange(n)] = ids[rng.randrange(n)]  # out of order or duplicated
        deps = [[rng.choice(ids) if ids and rng.random() < 0.95 else rng.randrange(1, top)
                 for _ in range(rng.randint(0, 3))] for _ in ids]
        ids_l.append(ids)
        deps_l.append(deps)
    node_ids = np.asarray([i for ids in ids_l for i in ids], dtype=np.uint64)
    flat = [d for deps in deps_l for node in deps for d in node]
    dep_ids = np.asarray(flat, dtype=np.uint64)
    per_node = [len(node) for deps in deps_l for node in deps]
    dep_first = np.concatenate(([0], np.cumsum(per_node))).astype(np.int64)
    first = np.concatenate(([0], np.cumsum([len(ids) for ids in ids_l]))).astype(np.int64)
    ok, pos = resolve_deps_many(node_ids, dep_ids, dep_first, first)
    for f, ids in enumerate(ids_l):
        lo, hi = int(first[f]), int(first[f + 1])
        ptr = dep_first[lo:hi + 1] - dep_first[lo]
        try:
            index, ptr2, dangling = resolve_deps(node_ids[lo:hi], dep_ids[dep_first[lo]:dep_first[hi]], ptr, "t")
        except LibraError:
            assert not ok[f]
            continue
        if ok[f]:
            assert dangling == () and ptr2.tolist() == ptr.tolist()
            assert pos[dep_first[lo]:dep_first[hi]].tolist() == index.tolist()
        else:
            assert dangling or ids != sorted(set(ids)) or not ids


def test_wanted_names_are_told_apart_from_near_misses():
    import numpy as np
    from libra_astra.traces.attrs import _WANTED_BYTES
    from libra_astra.traces.attr_blocks import _wanted_names
    rng = random.Random(11)
    names = sorted(_WANTED_BYTES) + [b"", b"x", b"comm_tag", b"rf_id", b"op_schema", b"seq_id"]
    for n in sorted(_WANTED_BYTES):  # one byte changed, cut, or added, at either end or inside
        for _ in range(6):
            b = bytearray(n)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            names += [bytes(b), n[:-1], n[1:], n + b"s", b"_" + n]
    data = b"".join(names)
    starts = np.cumsum([0] + [len(n) for n in names[:-1]]).astype(np.int64)
    got = _wanted_names(np.frombuffer(data, dtype=np.uint8), starts, np.asarray([len(n) for n in names]))
    assert got.tolist() == [n in _WANTED_BYTES for n in names]


def test_files_that_differ_throughout_stop_being_compared_with_many_templates(monkeypatch, numpy_walk):
    # every node id differs from rank to rank: no file fits another; after a run of such files
    # each one is compared with the latest file of its length only
    from libra_astra.traces import templates as tpl
    calls = []
    real = tpl._differing
    monkeypatch.setattr(tpl, "_differing", lambda *a: calls.append(1) or real(*a))
    bufs = [cio.encode_et([cio.comp_node(r * 1000 + i + 1, "c", 5) for i in range(20)]) for r in range(100, 140)]
    assert len({len(b) for b in bufs}) == 1
    got = _outcome(TraceReader(), bufs)
    assert len(calls) < 3 * 8 + (len(bufs) - 8)
    assert got == _unshared_outcome(bufs, monkeypatch)
