"""Node attributes that matter for demand, checked once and interned in a table per read."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ..errors import LibraError
from ..interning import Interner


class NodeAttrs(NamedTuple):
    """The attributes of one node that matter for demand (absent = -1 / None)."""

    is_cpu_op: bool = False
    num_ops: int = -1
    tensor_size: int = -1
    comm_type: int = -1
    comm_size: int = -1
    involved_dim: tuple[bool, ...] | None = None
    pg_name: str | None = None
    comm_src: int = -1
    comm_dst: int = -1


_EMPTY_ATTRS = NodeAttrs()
_WANTED = frozenset(NodeAttrs._fields)
_WANTED_BYTES = frozenset(f.encode() for f in NodeAttrs._fields)
_INT64_MAX = (1 << 63) - 1
_INT_FIELDS = ("num_ops", "tensor_size", "comm_type", "comm_size", "comm_src", "comm_dst")


class AttrTable:
    """Distinct :class:`NodeAttrs` of a read, shared by all rank files, plus column arrays."""

    def __init__(self) -> None:
        self.rows: Interner[NodeAttrs] = Interner([_EMPTY_ATTRS])
        self.blocks: dict[bytes, int] = {}     # serialized attribute block -> row
        self.single: dict[bytes, tuple] = {}   # serialized attribute -> (field, value) or ()
        self._columns: dict[str, np.ndarray] | None = None
        self.pg_names: Interner[str | None] = Interner([None])
        self.involved: Interner[tuple[bool, ...] | None] = Interner([None])

    def intern(self, attrs: NodeAttrs) -> int:
        n = len(self.rows)
        i = self.rows.index(attrs)
        if i == n:
            self._columns = None
        return i

    def columns(self) -> dict[str, np.ndarray]:
        """Column arrays indexed by attribute row (pg_name and involved_dim as small ints)."""
        if self._columns is None or len(self._columns["comm_type"]) != len(self.rows):
            # column by column (a row count of ranks x peers on large sets); the small interned
            # values are numbered in first-seen order, as row by row would number them
            by_field = dict(zip(NodeAttrs._fields, zip(*self.rows)))
            out = {f: np.asarray(by_field[f], dtype=np.int64) for f in _INT_FIELDS}
            out["is_cpu_op"] = np.asarray(by_field["is_cpu_op"], dtype=bool)
            for key, field, table in (("pg", "pg_name", self.pg_names), ("involved", "involved_dim", self.involved)):
                ids = {v: table.index(v) for v in dict.fromkeys(by_field[field])}
                out[key] = np.asarray([ids[v] for v in by_field[field]], dtype=np.int32)
            self._columns = out
        return self._columns


def _attr_value(a: Any) -> Any:
    kind = a.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(a, kind)
    if kind.endswith("_list"):
        return tuple(v.values)
    return v


def _normalize(name: str, v: Any, where: str | Callable[[], str]) -> Any:
    """Checked value of one wanted attribute (None: leave the field at its default).

    ``where`` (or a function giving it, called only on error) names the node in messages.
    """
    if v is None:
        return None
    if name in _INT_FIELDS:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            w = where() if callable(where) else where
            raise LibraError(f"{w}: attribute {name} must be an integer, got {v!r}; fix the trace generator")
        if not 0 <= v <= _INT64_MAX:
            # -1 means "absent" inside the reader: a negative size or type must not read as missing
            w = where() if callable(where) else where
            raise LibraError(f"{w}: attribute {name} = {int(v)} is outside 0..2^63-1; fix the trace generator")
        return int(v)
    if name == "is_cpu_op":
        return bool(v)
    if name == "involved_dim":
        if not isinstance(v, tuple) or not all(isinstance(b, bool) for b in v):
            w = where() if callable(where) else where
            raise LibraError(f"{w}: attribute involved_dim must be a bool_list, got {v!r}; fix the trace generator")
        return v
    # pg_name: ASTRA-sim needs a string; an integer-typed pg_name still names a group unambiguously
    return v if isinstance(v, str) else str(v)


def _attrs_from_protos(attrs: Any, where: str) -> NodeAttrs:
    """NodeAttrs from parsed AttributeProto messages (the schema's classes)."""
    vals: dict[str, Any] = {}
    for a in attrs:
        name = a.name
        if name in _WANTED:
            v = _normalize(name, _attr_value(a), where)
            if v is not None:
                vals[name] = v
    return NodeAttrs(**vals) if vals else _EMPTY_ATTRS
