"""The schema constants libra_astra relies on, checked against mlc-chakra's et_def.proto."""

from chakra.schema.protobuf import et_def_pb2 as pb

from libra_astra.model.collectives import COLLECTIVE_TYPES
from libra_astra.traces import schema


def test_node_types_match_the_schema():
    for name in schema.NODE_TYPE_NAMES:
        assert getattr(schema, f"{name}_NODE") == pb.NodeType.Value(f"{name}_NODE")


def test_collective_kinds_are_schema_names_in_value_order():
    assert schema.COMM_TYPE_NAMES == {0: "ALL_REDUCE", 2: "ALL_GATHER", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER"}
    assert set(schema.SUPPORTED_COMM_TYPES) == set(COLLECTIVE_TYPES)
    assert all(pb.CollectiveCommType.Value(k) == v for v, k in schema.COMM_TYPE_NAMES.items())
    assert schema.comm_type_name(pb.BARRIER) == "BARRIER" and schema.comm_type_name(99) == "comm_type 99"
