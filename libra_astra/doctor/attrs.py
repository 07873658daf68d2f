"""Attribute values as ASTRA-sim reads them: the first attribute of a name, integer kinds only,
``std::stoi`` on strings."""

from __future__ import annotations

import re
from typing import Any

INT_KINDS = frozenset(("int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val", "sint64_val",
                        "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val"))
_INT_MAX = 2**31 - 1


def first_attrs(node) -> dict[str, Any]:
    """First attribute of each name (AttributeProto), as the simulator's lookup finds it."""
    out: dict[str, Any] = {}
    for a in node.attr:
        out.setdefault(a.name, a)
    return out


def attr_kind(a) -> str | None:
    return a.WhichOneof("value") if a is not None else None


def value(a) -> Any:
    k = attr_kind(a)
    if k is None:
        return None
    v = getattr(a, k)
    return list(v.values) if k.endswith("_list") else v


def int_attr(a) -> int | None:
    """The integer ASTRA-sim reads from an attribute (integer kinds only), else None."""
    return int(getattr(a, attr_kind(a))) if attr_kind(a) in INT_KINDS else None


def convertible_int(a) -> int | None:
    """Integer value of a float or numeric string attribute that --fix can rewrite as int64_val."""
    k = attr_kind(a)
    v = value(a)
    if k in ("float_val", "double_val") and float(v).is_integer():
        return int(v)
    if k == "string_val" and re.fullmatch(r"[+-]?\d+", v.strip()):
        return int(v)
    return None


def is_cpu_op(a) -> bool | None:
    """is_cpu_op as ASTRA-sim reads it (absent = False); None if it cannot convert it."""
    k = attr_kind(a)
    if k is None:
        return False
    if k == "bool_val":
        return a.bool_val
    if k in INT_KINDS:
        return int(getattr(a, k)) != 0
    return None


def stoi(text: str) -> tuple[int | None, bool]:
    """std::stoi: (value or None if it throws, whether characters follow the number)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", text)
    if m is None:
        return None, False
    v = int(m.group(1))
    if not -_INT_MAX - 1 <= v <= _INT_MAX:
        return None, False
    return v, m.end() != len(text)
