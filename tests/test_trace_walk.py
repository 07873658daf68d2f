"""The compiled one-pass walk (traces/_walk.pyx) reads every batch as the numpy walk does: the same
programs, attribute rows and errors, on random files damaged anywhere and on hostile varints."""

import random

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from libra_astra.traces import attr_blocks, batch
from libra_astra.traces import chakra_io as cio
from libra_astra.traces.reader import TraceReader
from test_trace import _outcome, encode, framed, random_nodes_with_blocks

pytestmark = pytest.mark.skipif(batch._kernel is None, reason="the compiled walk is not built here (no C compiler), "
                                                             "or LIBRA_ASTRA_PYTHON_WALK=1 turns it off")


def _both(bufs, monkeypatch):
    """(compiled outcome, numpy outcome) of one batch."""
    compiled = _outcome(TraceReader(), bufs)
    with monkeypatch.context() as m:
        m.setattr(batch, "_kernel", None)
        return compiled, _outcome(TraceReader(), bufs)


def _files(rng, count):
    out = []
    for _ in range(count):
        nodes = random_nodes_with_blocks(
            rng, 80, 10**6, lambda nodes: nodes,
            lambda: [dict(name="comm_size", int64_val=4096), dict(name="comm_tag", int64_val=rng.randint(0, 2**40)),
                     dict(name="pg_name", string_val=str(rng.randint(0, 3)))])
        out.append(encode(nodes))
    return out


def _damage(rng, buf: bytes) -> bytes:
    b = bytearray(buf)
    kind = rng.choice(["flip", "flip", "byte", "cut", "append", "none"])
    if kind == "cut" and len(b) > 1:
        return bytes(b[:rng.randrange(1, len(b))])
    if kind == "append":
        return bytes(b) + bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
    for _ in range(rng.randint(1, 4) if kind != "none" else 0):
        at = rng.randrange(len(b))
        b[at] = b[at] ^ (1 << rng.randrange(8)) if kind == "flip" else rng.choice([0x00, 0x80, 0xFF, 0x0A, 0x52, 0x2A])
    return bytes(b)


@pytest.mark.parametrize("attr_keys", [True, False])
@pytest.mark.parametrize("seed", range(40))
def test_compiled_walk_reads_damaged_batches_as_the_numpy_walk(seed, attr_keys, monkeypatch):
    if not attr_keys:
        monkeypatch.setattr(attr_blocks, "_kernel", None)
    rng = random.Random(9000 + seed)
    bases = _files(rng, rng.randint(1, 3))
    bufs = [rng.choice(bases) if rng.random() < 0.5 else _damage(rng, rng.choice(bases))
            for _ in range(rng.randint(1, 6))]
    compiled, numpy_ = _both(bufs, monkeypatch)
    assert compiled == numpy_


def _node_bytes(*fields: bytes) -> bytes:
    return b"".join(fields)


HOSTILE = {
    # data_deps (field 5, packed) holding an 11-byte varint: protobuf rejects it, so does the reader
    "long packed varint": _node_bytes(b"\x08\x02", b"\x2a\x0c" + b"\x81" * 10 + b"\x01" + b"\x01"),
    # a name (field 2) whose length is 2**62: no such message fits
    "huge field length": _node_bytes(b"\x08\x02", b"\x12" + b"\x80" * 8 + b"\x40"),
    # duration (field 7) as a 10-byte varint beyond 64 bits: the bits above 64 are dropped by both
    "wide duration": _node_bytes(b"\x08\x02", b"\x38" + b"\xff" * 9 + b"\x7f"),
    # type (field 3) beyond the schema's 0..7
    "unknown type": _node_bytes(b"\x08\x02", b"\x18\x63"),
    # an attribute block followed by a top-level field: out of order, the schema's parse decides
    "field after attributes": _node_bytes(b"\x08\x02", pb.Node(attr=[pb.AttributeProto(
        name="comm_size", int64_val=8)]).SerializeToString(), b"\x38\x05"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_messages_read_as_the_numpy_walk(name, monkeypatch):
    good = cio.encode_et([cio.comp_node(1, "c", 5)])
    bad = good + framed(HOSTILE[name])
    compiled, numpy_ = _both([good, bad, good], monkeypatch)
    assert compiled == numpy_


@pytest.mark.parametrize("prefix", [b"\x80" * 8 + b"\x40", b"\xff" * 9 + b"\x01", b"\xff" * 10 + b"\x01"])
def test_a_length_prefix_of_2_62_or_more_is_damage_to_both(prefix, monkeypatch):
    good = cio.encode_et([cio.comp_node(1, "c", 5)])
    compiled, numpy_ = _both([good, good + prefix + b"\x08\x01"], monkeypatch)
    assert compiled == numpy_
    assert compiled[0] == "error" and "t.1.et: truncated or corrupt length prefix" in compiled[1]


def test_blocks_that_differ_only_in_unwanted_attributes_share_one_row(monkeypatch):
    # the compiled walk points such blocks at the first one: one row, decoded once
    calls = []
    reader = TraceReader()
    real = reader.blocks.block
    reader.blocks.block = lambda *a, **k: calls.append(1) or real(*a, **k)
    nodes = [cio.coll_node(i + 1, "ar", "ALL_REDUCE", 1024) for i in range(50)]
    for i, n in enumerate(nodes):
        n.attr.add(name="comm_tag", int64_val=1000 + i)        # unwanted, and unique to each node
    prog = reader.parse(encode(nodes), "t.0.et")
    assert len(set(prog.attr.tolist())) == 1 and len(calls) == 1
    assert reader.attrs.rows[int(prog.attr[0])].comm_size == 1024
