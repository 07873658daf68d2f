"""Trace input never raises anything but LibraError, stays within limits, and interrupted sets are detected."""

from __future__ import annotations

import gzip
import importlib
import json

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from libra_astra.traces import chakra_io as cio
from libra_astra.errors import LibraError
from libra_astra.demand.groups import comm_groups_from_dict
from libra_astra.model.network import network_from_dict
from libra_astra.traces.files import rank_files, read_file_bytes
from libra_astra.traces.reader import TraceReader
from libra_astra.demand.from_traces import demand_from_traces

gen_mod = importlib.import_module("libra_astra.tracegen.generate")
ATTR_TAG = (pb.Node.DESCRIPTOR.fields_by_name["attr"].number << 3) | 2


def _et(*nodes: pb.Node, tail: bytes = b"") -> bytes:
    body = b"".join(cio.frame(n.SerializeToString()) for n in nodes[:-1])
    last = nodes[-1].SerializeToString() + tail
    return cio.encode_metadata() + body + cio.frame(last)


def test_bare_attribute_tag_at_the_end_of_a_node():
    node = cio.coll_node(1, "ar", "ALL_REDUCE", 1024)
    data = _et(cio.comp_node(0, "c", 5), node, tail=bytes([ATTR_TAG]))
    with pytest.raises(LibraError, match=r"^x\.et: corrupt node message at byte offset \d+ \(protobuf cannot decode "
                                         r"it\); the file is damaged or not a Chakra ET file$"):
        TraceReader().parse(data, "x.et")


def test_attribute_length_varint_cut_at_the_end_of_a_node():
    node = cio.coll_node(1, "ar", "ALL_REDUCE", 1024)
    with pytest.raises(LibraError, match=r"corrupt node message"):
        TraceReader().parse(_et(node, tail=bytes([ATTR_TAG, 0x85])), "x.et")


def test_uint64_at_or_above_2_63_is_refused():
    n = pb.Node(id=1, name="c", type=pb.COMP_NODE, duration_micros=1)
    n.attr.add(name="tensor_size", uint64_val=2**63)
    with pytest.raises(LibraError, match=r"^x\.et: node 1: attribute tensor_size = 9223372036854775808 is outside "
                                         r"0\.\.2\^63-1; fix the trace generator$"):
        TraceReader().parse(_et(n), "x.et")


@pytest.mark.parametrize("name", ["comm_size", "comm_type"])
def test_negative_comm_values_are_refused_not_read_as_absent(name):
    n = pb.Node(id=1, name="ar", type=pb.COMM_COLL_NODE)
    n.attr.add(name="comm_type", int64_val=0)
    n.attr.add(name="comm_size", int64_val=1024)
    for a in n.attr:
        if a.name == name:
            a.int64_val = -5
    with pytest.raises(LibraError, match=rf"^x\.et: node 1: attribute {name} = -5 is outside 0\.\.2\^63-1"):
        TraceReader().parse(_et(n), "x.et")


def test_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    p = tmp_path / "t.0.et.gz"
    p.write_bytes(gzip.compress(b"\0" * (8 << 20)))
    monkeypatch.setenv("LIBRA_ASTRA_MAX_DECOMPRESSED_BYTES", str(1 << 20))
    with pytest.raises(LibraError, match=r"t\.0\.et\.gz: gzip data inflates to more than 1,048,576 bytes, more than "
                                         r"the limit of 1,048,576 bytes of one gunzipped trace file; if the input is "
                                         r"genuine, raise the limit with LIBRA_ASTRA_MAX_DECOMPRESSED_BYTES=N$"):
        read_file_bytes(p)
    monkeypatch.setenv("LIBRA_ASTRA_MAX_DECOMPRESSED_BYTES", str(8 << 20))
    assert len(read_file_bytes(p)) == 8 << 20


def test_multi_member_gzip_reads_whole(tmp_path):
    data = cio.encode_et([cio.comp_node(0, "c", 5), cio.comp_node(1, "d", 6, data_deps=[0])])
    p = tmp_path / "t.0.et.gz"
    p.write_bytes(gzip.compress(data[:10]) + gzip.compress(data[10:]))
    assert read_file_bytes(p) == data


def test_huge_network_missing_ranks_without_listing_them(tmp_path, monkeypatch):
    cio.write_et(tmp_path / "t.0.et", [cio.comp_node(0, "c", 5)])
    cio.write_et(tmp_path / "t.2.et", [cio.comp_node(0, "c", 5)])
    monkeypatch.setenv("LIBRA_ASTRA_MAX_RANKS", str(2**64))
    with pytest.raises(LibraError, match=r"t: 18446744073709551614 rank file\(s\) missing: .*t\.1\.et, .*t\.3\.et, .*t\.4\.et \.\.\.; every rank"):
        rank_files(tmp_path / "t", 2**64)


def test_rank_count_limit(tmp_path):
    net = network_from_dict({"dimensions": [{"name": f"d{i}", "topology": "Ring", "npus": 2} for i in range(64)]})
    with pytest.raises(LibraError, match=r"network '<network>' has 18,446,744,073,709,551,616 NPUs, more than the "
                                         r"limit of 1,048,576 NPUs .* LIBRA_ASTRA_MAX_RANKS=N$"):
        demand_from_traces(tmp_path / "t", net)


class _NoCount(list):
    def count(self, x):   # the quadratic way to find duplicates
        raise AssertionError("list.count on a group: quadratic in the group size")


def test_duplicate_in_a_60k_group_is_found_in_one_pass():
    members = _NoCount(list(range(60_000)) + [17])
    with pytest.raises(LibraError, match=r"^g\.json: group 1 lists NPU\(s\) \[17\] more than once"):
        comm_groups_from_dict({"1": members}, "g.json")


# ---------------------------------------------------------------- completion marker

SPEC = "traces/gpt_tp2_pp2_dp4/spec.yml"
NET = "network_configs/sample_4x4.yml"


def _net():
    from libra_astra.model.network import load_network
    return load_network(NET)


def test_generate_marks_the_set_complete_and_demand_reads_it(tmp_path):
    res = gen_mod.generate(SPEC, tmp_path / "g")
    marker = json.loads((tmp_path / "g.set.json").read_text())
    assert marker["state"] == "complete" and marker["num_ranks"] == res.num_ranks == 16
    assert [f["file"] for f in marker["files"]] == [f"g.{r}.et" for r in range(16)]
    d, _ = demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")
    assert d.rank_classes


def test_interrupted_generate_force_leaves_a_set_readers_refuse(tmp_path, monkeypatch):
    gen_mod.generate(SPEC, tmp_path / "g")
    calls = []
    real = gen_mod.write_text_atomic

    def interrupted(path, data, overwrite=False):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(path)
        return real(path, data, overwrite)
    monkeypatch.setattr(gen_mod, "write_text_atomic", interrupted)
    other = tmp_path / "other.yml"
    other.write_text(open(SPEC).read().replace("layers: 4", "layers: 2"))
    with pytest.raises(KeyboardInterrupt):
        gen_mod.generate(other, tmp_path / "g", overwrite=True)
    with pytest.raises(LibraError, match=r"g: trace set is incomplete: g\.set\.json says it was still being written "
                                         r"by libra-astra generate \(interrupted\?\); write the set again"):
        demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary left


def test_set_without_a_marker_is_read(tmp_path):
    gen_mod.generate(SPEC, tmp_path / "g")
    (tmp_path / "g.set.json").unlink()
    d, _ = demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")
    assert d.rank_classes


def test_file_changed_after_the_set_was_written(tmp_path):
    gen_mod.generate(SPEC, tmp_path / "g")
    p = tmp_path / "g.3.et"
    (tmp_path / "g.4.et").write_bytes(p.read_bytes() + b"\0")
    with pytest.raises(LibraError, match=r"g\.4\.et: \d+ bytes but g\.set\.json recorded \d+ \(the file was changed"):
        demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")


def test_same_size_change_is_caught_by_the_digest(tmp_path):
    gen_mod.generate(SPEC, tmp_path / "g")
    data = bytearray((tmp_path / "g.0.et").read_bytes())
    i = data.index(b"\x10")          # some byte inside a node: same size, other content
    data[i + 1] ^= 1
    (tmp_path / "g.0.et").write_bytes(bytes(data))
    with pytest.raises(LibraError, match=r"g\.0\.et: content differs from the digest in the trace set's completion "
                                         r"marker"):
        demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")


def test_markers_record_sha256_and_version_1_markers_are_checked_by_blake2b(tmp_path):
    import hashlib
    gen_mod.generate(SPEC, tmp_path / "g")
    m = tmp_path / "g.set.json"
    marker = json.loads(m.read_text())
    data = (tmp_path / "g.0.et").read_bytes()
    assert marker["version"] == 2 and marker["files"][0]["sha256"] == hashlib.sha256(data).hexdigest()
    # a set written before version 2: blake2b-160 digests, read and checked as they are
    marker["version"] = 1
    for f in marker["files"]:
        f["blake2b"] = hashlib.blake2b((tmp_path / f["file"]).read_bytes(), digest_size=20).hexdigest()
        del f["sha256"]
    m.write_text(json.dumps(marker))
    d, _ = demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")
    assert d.rank_classes
    changed = bytearray(data)
    changed[changed.index(b"\x10") + 1] ^= 1
    (tmp_path / "g.0.et").write_bytes(bytes(changed))
    with pytest.raises(LibraError, match=r"g\.0\.et: content differs from the digest in the trace set's completion"):
        demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")


def test_gzipped_after_writing_is_still_checked_by_content(tmp_path):
    gen_mod.generate(SPEC, tmp_path / "g")
    for r in range(16):
        p = tmp_path / f"g.{r}.et"
        (tmp_path / f"g.{r}.et.gz").write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    d, _ = demand_from_traces(tmp_path / "g", _net(), comm_groups=tmp_path / "g.groups.json")
    assert d.rank_classes


def test_deeply_nested_process_group_info_is_one_line():
    from libra_astra.traces.process_groups import parse_pg_metadata
    with pytest.raises(LibraError, match=r"^x\.et: cannot read process-group info from inputs\.values"):
        parse_pg_metadata("[" * 100_000, "x.et")
