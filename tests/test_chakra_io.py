import gzip
import json

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils import protolib

from libra_astra.traces import chakra_io as cio
from libra_astra.errors import LibraError


def _kinds(node):
    return {a.name: a.WhichOneof("value") for a in node.attr}


def test_round_trip_keeps_fields_and_attribute_types(tmp_path):
    nodes = [
        cio.comp_node(0, "L0.fwd", 125, num_ops=10**12, tensor_size=2**33),
        cio.coll_node(1, "L0.tp_ar", "ALL_REDUCE", 3 * 2**30, involved_dim=[True, False], pg_name="2",
                      data_deps=[0]),
        cio.send_node(2, "send", 4096, 3, 5, 7, data_deps=[0]),
        cio.recv_node(3, "recv", 4096, 5, 3, 8, ctrl_deps=[1]),
    ]
    path = cio.write_et(tmp_path / "t.0.et", nodes)
    meta, back = cio.read_et(path)
    assert meta.version == cio.ET_VERSION != ""
    assert [n.id for n in back] == [0, 1, 2, 3]
    assert [n.type for n in back] == [pb.COMP_NODE, pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE]
    assert back[0].duration_micros == 125
    assert _kinds(back[0]) == {"is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val"}
    assert _kinds(back[1]) == {"is_cpu_op": "bool_val", "comm_type": "int64_val", "comm_size": "int64_val",
                               "involved_dim": "bool_list", "pg_name": "string_val"}
    assert cio.node_attrs(back[1]) == {"is_cpu_op": False, "comm_type": 0, "comm_size": 3 * 2**30,
                                       "involved_dim": [True, False], "pg_name": "2"}
    assert list(back[1].data_deps) == [0]
    for n in back[2:]:
        assert _kinds(n) == {"is_cpu_op": "bool_val", "comm_src": "int32_val", "comm_dst": "int32_val",
                             "comm_tag": "int32_val", "comm_size": "int64_val"}
    assert cio.node_attrs(back[3])["comm_src"] == 5 and list(back[3].ctrl_deps) == [1]


def test_all_ranks_collective_has_no_pg_name():
    for pg in (None, ""):
        assert "pg_name" not in cio.node_attrs(cio.coll_node(0, "ar", 0, 8, pg_name=pg))


def test_comm_type_names_and_values():
    assert cio.comm_type_value("ALL_TO_ALL") == 6
    assert cio.comm_type_value("REDUCE_SCATTER") == 7
    assert cio.comm_type_value(2) == 2
    with pytest.raises(LibraError, match=r"^unknown collective type 'ALLREDUCE'; use one of \['ALL_REDUCE'"):
        cio.comm_type_value("ALLREDUCE")


def test_invalid_values_are_refused_with_the_item_named():
    with pytest.raises(LibraError) as e:
        cio.send_node(0, "s", 8, -1, 2, 0)
    assert str(e.value) == "node 's': comm_src must be an integer in 0..2147483647, got -1"
    with pytest.raises(LibraError) as e:
        cio.comp_node(0, "c", 1.5)
    assert str(e.value) == "node 'c': duration_micros must be an integer in 0..18446744073709551615, got 1.5"
    with pytest.raises(LibraError, match="pg_name must be a string"):
        cio.coll_node(0, "ar", 0, 8, pg_name=3)
    with pytest.raises(LibraError, match="version must be non-empty"):
        cio.global_metadata("")
    with pytest.raises(LibraError, match="all-default ET node"):
        cio.encode_et([pb.Node()])


def test_framing_matches_protolib_and_appended_attrs_merge(tmp_path):
    node = cio.coll_node(4, "x", "ALL_GATHER", 1024)
    data = cio.encode_metadata() + cio.frame(cio.serialize_node(node)
                                             + cio.serialize_attrs([cio.make_attr("pg_name", "string_val", "9")]))
    path = tmp_path / "a.et"
    path.write_bytes(data)
    meta, nodes = cio.read_et(path)
    assert meta.version == cio.ET_VERSION
    assert len(nodes) == 1 and cio.node_attrs(nodes[0])["pg_name"] == "9"
    assert cio.node_attrs(nodes[0])["comm_type"] == 2
    # a long message needs a multi-byte length prefix
    big = cio.coll_node(1, "n" * 300, 0, 1)
    assert cio.encode_et([big]) == cio.encode_metadata() + cio.frame(big.SerializeToString())
    assert cio.frame(b"x" * 300)[:2] == bytes([0x80 | (300 & 0x7F), 300 >> 7])


def test_protolib_reads_what_we_write_and_gzip_is_accepted(tmp_path):
    nodes = [cio.comp_node(i, f"c{i}", i + 1) for i in range(5)]
    raw = cio.encode_et(nodes)
    gz = tmp_path / "g.0.et"
    gz.write_bytes(gzip.compress(raw))
    _, back = cio.read_et(gz)
    assert [n.duration_micros for n in back] == [1, 2, 3, 4, 5]
    plain = tmp_path / "p.0.et"
    plain.write_bytes(raw)
    with open(plain, "rb") as f:
        meta = pb.GlobalMetadata()
        assert protolib.decodeMessage(f, meta) and meta.version == cio.ET_VERSION


def test_write_et_never_overwrites_unless_asked(tmp_path):
    p = tmp_path / "x.0.et"
    cio.write_et(p, [cio.comp_node(0, "a", 1)])
    with pytest.raises(LibraError) as e:
        cio.write_et(p, [cio.comp_node(0, "b", 1)])
    assert str(e.value) == f"{p}: already exists; choose another path or pass --force to overwrite it"
    cio.write_et(p, [cio.comp_node(0, "b", 2)], overwrite=True)
    assert cio.read_et(p)[1][0].name == "b"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.0.et"]  # no temporary files left


def test_comm_groups_round_trip_and_format(tmp_path):
    from libra_astra.demand.groups import load_comm_groups

    p = cio.write_comm_groups(tmp_path / "g.json", {2: [7, 6], 1: [3, 1, 2]})
    assert json.loads(p.read_text()) == {"1": [1, 2, 3], "2": [6, 7]}
    assert load_comm_groups(p) == {"1": (1, 2, 3), "2": (6, 7)}
    with pytest.raises(LibraError, match=r"group id 0 must be an integer > 0"):
        cio.write_comm_groups(tmp_path / "h.json", {0: [1, 2]})