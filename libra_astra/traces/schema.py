"""The Chakra ET schema (mlc-chakra's ``et_def.proto``): its classes, node types and collective kinds.

mlc-chakra is installed with --no-deps and may be missing; importing this module still works and
:func:`need_chakra` gives the one-line fix.
"""

from __future__ import annotations

from ..errors import LibraError
from ..model.collectives import COLLECTIVE_TYPES

try:
    from chakra.schema.protobuf import et_def_pb2 as pb
except ImportError as _e:  # pragma: no cover - depends on the environment
    pb = None
    _IMPORT_ERROR: ImportError | None = _e
else:
    _IMPORT_ERROR = None

# Node types (et_def.proto NodeType); tests check them against the schema.
INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE = 0, 1, 2, 3
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
NODE_TYPE_NAMES = ("INVALID", "METADATA", "MEM_LOAD", "MEM_STORE", "COMP", "COMM_SEND", "COMM_RECV", "COMM_COLL")
MEM_NODE_TYPES = (MEM_LOAD_NODE, MEM_STORE_NODE)
COMM_NODE_TYPES = (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE)

# CollectiveCommType value -> collective kind, for the kinds the demand model knows (model/collectives.py),
# which are also the schema's names; in schema value order.
COMM_TYPE_NAMES: dict[int, str] = (
    dict(sorted((pb.CollectiveCommType.Value(k), k) for k in COLLECTIVE_TYPES)) if pb is not None
    else {0: "ALL_REDUCE", 2: "ALL_GATHER", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER"})
SUPPORTED_COMM_TYPES = tuple(COMM_TYPE_NAMES.values())


def need_chakra() -> None:
    if pb is None:
        raise LibraError(
            f"cannot import mlc-chakra ({_IMPORT_ERROR}); install it with "
            "'pip install --no-deps mlc-chakra \"protobuf>=6.31.1\"'"
        )


def comm_type_name(value: int) -> str:
    """Schema name of a CollectiveCommType value (``"REDUCE"``, ``"BARRIER"``, ...)."""
    try:
        return pb.CollectiveCommType.Name(int(value))
    except (ValueError, AttributeError):
        return f"comm_type {value}"
