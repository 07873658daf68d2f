"""Write (and read back) Chakra execution traces with mlc-chakra's protobuf schema.

One file per rank, ``PREFIX.RANK.et``: a stream of varint-length-prefixed protobuf messages, one
``GlobalMetadata`` first, then one ``Node`` per message (``protolib.encodeMessage`` framing).

Attribute types are the ones both the old and the new ASTRA-sim feeders accept:

============== ============ =======================================================
attribute      type         on
============== ============ =======================================================
is_cpu_op      bool_val     every node (always false: GPU work)
comm_type      int64_val    COMM_COLL (CollectiveCommType value)
comm_size      int64_val    COMM_COLL, COMM_SEND, COMM_RECV (bytes; all-gather: shard)
involved_dim   bool_list    COMM_COLL (optional; one entry per network dimension)
pg_name        string_val   COMM_COLL (optional; communicator group id, "" = all ranks)
comm_src/dst   int32_val    COMM_SEND, COMM_RECV
comm_tag       int32_val    COMM_SEND, COMM_RECV
num_ops        int64_val    COMP (optional; floating-point operations, for roofline)
tensor_size    uint64_val   COMP (optional; bytes touched, for roofline)
============== ============ =======================================================

A zero-length message reads as end of file to ``protolib.decodeMessage``, so the metadata always
carries a version and every node an id, a name or a type.

Fast path for many similar ranks: a protobuf message may be serialized in pieces, and repeated
fields of concatenated pieces append. ``serialize_node`` + ``serialize_attrs`` + ``frame`` let a
caller encode the rank-independent part of a node once and append rank-specific attributes
(``pg_name``, ``comm_src``...) as bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils import protolib

from ..errors import LibraError
from ..files import write_json_atomic, write_text_atomic

ET_VERSION = "0.0.4"

COMP = pb.COMP_NODE
COMM_SEND = pb.COMM_SEND_NODE
COMM_RECV = pb.COMM_RECV_NODE
COMM_COLL = pb.COMM_COLL_NODE

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


def comm_type_value(kind: str | int) -> int:
    """CollectiveCommType value for a name such as ``"ALL_REDUCE"`` (or a valid integer)."""
    if isinstance(kind, bool):
        raise LibraError(f"collective type {kind!r} is neither a name nor an integer")
    if isinstance(kind, int):
        if kind in pb.CollectiveCommType.values():
            return kind
    elif kind in pb.CollectiveCommType.keys():
        return pb.CollectiveCommType.Value(kind)
    raise LibraError(f"unknown collective type {kind!r}; use one of {list(pb.CollectiveCommType.keys())}")


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise LibraError(f"{what} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def make_attr(name: str, kind: str, value: Any) -> pb.AttributeProto:
    """One attribute; ``kind`` is the oneof field name, e.g. ``"int64_val"`` or ``"bool_list"``."""
    a = pb.AttributeProto(name=name)
    if kind.endswith("_list"):
        getattr(a, kind).values.extend(value)
    else:
        setattr(a, kind, value)
    return a


def attr_value(a: pb.AttributeProto) -> Any:
    """Python value of an attribute, whatever its oneof type (lists become lists)."""
    kind = a.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(a, kind)
    return list(v.values) if kind.endswith("_list") else v


def node_attrs(node: pb.Node) -> dict[str, Any]:
    """Attributes of a node as ``{name: value}``."""
    return {a.name: attr_value(a) for a in node.attr}


def _node(node_id: int, name: str, node_type: int, data_deps: Iterable[int], ctrl_deps: Iterable[int]) -> pb.Node:
    n = pb.Node(id=_int(node_id, f"node {name!r}: id", 0, _UINT64_MAX), name=name, type=node_type)
    n.data_deps.extend(data_deps)
    n.ctrl_deps.extend(ctrl_deps)
    n.attr.append(make_attr("is_cpu_op", "bool_val", False))
    return n


def comp_node(node_id: int, name: str, duration_micros: int, *, num_ops: int | None = None,
              tensor_size: int | None = None, data_deps: Iterable[int] = (),
              ctrl_deps: Iterable[int] = (), is_cpu_op: bool = False) -> pb.Node:
    """A GPU compute node (a CPU op with ``is_cpu_op``); ASTRA-sim (roofline off) runs it for
    ``duration_micros`` * 1000 ns, 1 ns when that is 0."""
    n = _node(node_id, name, COMP, data_deps, ctrl_deps)
    if is_cpu_op:
        n.attr[0].bool_val = True
    n.duration_micros = _int(duration_micros, f"node {name!r}: duration_micros", 0, _UINT64_MAX)
    if num_ops is not None:
        n.attr.append(make_attr("num_ops", "int64_val", _int(num_ops, f"node {name!r}: num_ops", 0, _INT64_MAX)))
    if tensor_size is not None:
        n.attr.append(make_attr("tensor_size", "uint64_val",
                                _int(tensor_size, f"node {name!r}: tensor_size", 0, _UINT64_MAX)))
    return n


def coll_node(node_id: int, name: str, comm_type: str | int, comm_size: int, *,
              involved_dim: Sequence[bool] | None = None, pg_name: str | None = None,
              data_deps: Iterable[int] = (), ctrl_deps: Iterable[int] = ()) -> pb.Node:
    """A collective. ``comm_size`` in bytes (all-gather: the per-rank shard); ``pg_name`` None or
    "" means all ranks (attribute omitted)."""
    n = _node(node_id, name, COMM_COLL, data_deps, ctrl_deps)
    n.attr.append(make_attr("comm_type", "int64_val", comm_type_value(comm_type)))
    n.attr.append(make_attr("comm_size", "int64_val", _int(comm_size, f"node {name!r}: comm_size", 0, _INT64_MAX)))
    if involved_dim is not None:
        n.attr.append(make_attr("involved_dim", "bool_list", [bool(x) for x in involved_dim]))
    if pg_name:
        if not isinstance(pg_name, str):
            raise LibraError(f"node {name!r}: pg_name must be a string (a group id such as '3'), got {pg_name!r}")
        n.attr.append(make_attr("pg_name", "string_val", pg_name))
    return n


def _p2p(node_type: int, node_id: int, name: str, comm_size: int, src: int, dst: int, tag: int,
         data_deps: Iterable[int], ctrl_deps: Iterable[int]) -> pb.Node:
    n = _node(node_id, name, node_type, data_deps, ctrl_deps)
    n.attr.append(make_attr("comm_src", "int32_val", _int(src, f"node {name!r}: comm_src", 0, _INT32_MAX)))
    n.attr.append(make_attr("comm_dst", "int32_val", _int(dst, f"node {name!r}: comm_dst", 0, _INT32_MAX)))
    n.attr.append(make_attr("comm_tag", "int32_val", _int(tag, f"node {name!r}: comm_tag", 0, _INT32_MAX)))
    n.attr.append(make_attr("comm_size", "int64_val", _int(comm_size, f"node {name!r}: comm_size", 0, _INT64_MAX)))
    return n


def send_node(node_id: int, name: str, comm_size: int, src: int, dst: int, tag: int, *,
              data_deps: Iterable[int] = (), ctrl_deps: Iterable[int] = ()) -> pb.Node:
    """Point-to-point send of ``comm_size`` bytes; matched with the receive by (src, dst, tag, size)."""
    return _p2p(COMM_SEND, node_id, name, comm_size, src, dst, tag, data_deps, ctrl_deps)


def recv_node(node_id: int, name: str, comm_size: int, src: int, dst: int, tag: int, *,
              data_deps: Iterable[int] = (), ctrl_deps: Iterable[int] = ()) -> pb.Node:
    """Point-to-point receive, the counterpart of :func:`send_node` on rank ``dst``."""
    return _p2p(COMM_RECV, node_id, name, comm_size, src, dst, tag, data_deps, ctrl_deps)


def global_metadata(version: str = ET_VERSION) -> pb.GlobalMetadata:
    if not version:
        raise LibraError("ET metadata version must be non-empty (an empty message reads as end of file)")
    return pb.GlobalMetadata(version=version)


def frame(payload: bytes) -> bytes:
    """Prefix a serialized message with its varint32 length, as protolib.encodeMessage does."""
    n = len(payload)
    if n == 0:
        raise LibraError("refusing to write an empty ET message: readers take it for end of file")
    out = bytearray()
    while n > 0x7F:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def serialize_node(node: pb.Node) -> bytes:
    """Unframed bytes of a node (append :func:`serialize_attrs` output, then :func:`frame`)."""
    return node.SerializeToString()


def serialize_attrs(attrs: Iterable[pb.AttributeProto]) -> bytes:
    """Unframed bytes that, appended to a serialized Node, add these attributes to it."""
    n = pb.Node()
    n.attr.extend(attrs)
    return n.SerializeToString()


def encode_et(nodes: Iterable[pb.Node], metadata: pb.GlobalMetadata | None = None) -> bytes:
    """Bytes of one rank's ET file: metadata then nodes."""
    buf = io.BytesIO()
    protolib.encodeMessage(buf, metadata if metadata is not None else global_metadata())
    for node in nodes:
        if node.ByteSize() == 0:
            raise LibraError("refusing to write an all-default ET node: readers take it for end of file")
        protolib.encodeMessage(buf, node)
    return buf.getvalue()


def encode_metadata(metadata: pb.GlobalMetadata | None = None) -> bytes:
    """Framed bytes of the GlobalMetadata message that starts every ET file."""
    return frame((metadata if metadata is not None else global_metadata()).SerializeToString())


def write_et(path: str | Path, nodes: Iterable[pb.Node], overwrite: bool = False,
             metadata: pb.GlobalMetadata | None = None) -> Path:
    """Write one rank's ET file atomically; an existing file is kept unless ``overwrite``."""
    return write_text_atomic(path, encode_et(nodes, metadata), overwrite)


def read_et(path: str | Path) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """Metadata and nodes of one ET file (plain or gzipped), decoded with protolib.

    Bounded like the trace reader (gunzipped size) and, like it, raises only LibraError.
    """
    from .files import read_file_bytes   # the bounded gunzip of the reader
    p = Path(path)
    if not p.is_file():
        raise LibraError(f"{p}: ET file not found")
    return parse_et(read_file_bytes(p), p)


def parse_et(data: bytes, path: str | Path) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """:func:`read_et` of bytes already read (and gunzipped) from ``path``."""
    p = Path(path)
    f = io.BytesIO(data)
    meta = pb.GlobalMetadata()
    nodes = []
    at = 0
    try:
        if not protolib.decodeMessage(f, meta):
            raise LibraError(f"{p}: empty ET file; expected a GlobalMetadata message first")
        while True:
            at = f.tell()
            node = pb.Node()
            if not protolib.decodeMessage(f, node):
                break
            nodes.append(node)
    except LibraError:
        raise
    except Exception:   # protobuf and the varint decoder raise assorted errors on damaged bytes
        raise LibraError(f"{p}: corrupt message at byte offset {at}; the file is damaged "
                         "or not a Chakra ET file") from None
    return meta, nodes


def write_comm_groups(path: str | Path, groups: Mapping[int, Sequence[int]], overwrite: bool = False) -> Path:
    """ASTRA-sim communicator-group JSON: ``{"1": [0, 1, ...], ...}``; ids > 0, members sorted."""
    out: dict[str, list[int]] = {}
    for gid in sorted(groups):
        if isinstance(gid, bool) or not isinstance(gid, int) or gid <= 0:
            raise LibraError(f"{path}: communicator group id {gid!r} must be an integer > 0 (0 means all ranks)")
        members = sorted(set(groups[gid]))
        if len(members) < 2 or any(isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in members):
            raise LibraError(f"{path}: communicator group {gid} needs at least 2 distinct NPU ids >= 0, "
                             f"got {list(groups[gid])!r}")
        out[str(gid)] = members
    return write_json_atomic(path, out, overwrite)
