"""Process groups recorded in METADATA nodes by PyTorch (``## process_group:init ##``)."""

from __future__ import annotations

import ast
import json
from typing import Any

from ..errors import LibraError


def _pg_entries(values: str, where: str) -> list[tuple[str, tuple[int, ...], str | None]]:
    """(pg_name, ranks, pg_desc or None) of each group a ``## process_group:init ##`` node's
    inputs.values holds; see :func:`parse_pg_metadata`."""
    def decode(text: str) -> Any:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None

    groups: list[tuple[str, tuple[int, ...], str | None]] = []

    def walk(obj: Any, depth: int = 0) -> None:
        if depth > 8:
            return
        if isinstance(obj, str):
            inner = decode(obj)
            if inner is not None and not isinstance(inner, str):
                walk(inner, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x, depth + 1)
        elif isinstance(obj, dict) and ("pg_name" in obj or "pg_id" in obj) and "ranks" in obj:
            name = obj.get("pg_name", obj.get("pg_id"))
            ranks = obj["ranks"]
            if isinstance(ranks, dict):
                ranks = list(ranks.keys())
            try:
                members = tuple(sorted(int(r) for r in ranks))
            except (TypeError, ValueError):
                raise LibraError(
                    f"{where}: process group {name!r} has non-integer ranks {ranks!r}; fix the trace"
                ) from None
            desc = obj.get("pg_desc")
            groups.append((str(name), members, desc if isinstance(desc, str) else None))

    if values.strip():
        top = decode(values)
        if top is None:
            raise LibraError(
                f"{where}: cannot read process-group info from inputs.values (not JSON or a Python literal); "
                "fix the trace or give the groups with --comm-groups"
            )
        walk(top)
    return groups


def parse_pg_metadata(values: str, where: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Process groups from a PyTorch ``## process_group:init ##`` METADATA node.

    PyTorch records ``json.dumps(pg_config_info)`` as the node's only input; Chakra's PyTorch
    converter stores ``str(inputs["values"])``, i.e. a Python list literal holding that JSON
    string. Each group is ``{"pg_name": "3", "ranks": [...], ...}``; ``ranks`` is empty when the
    group has every rank, and older PyTorch wrote ``pg_id`` and a {global: local} ``ranks`` map.
    Returns ``(pg_name, ranks)`` pairs, ranks ``()`` meaning all ranks.
    """
    return tuple((name, ranks) for name, ranks, _ in _pg_entries(values, where))


def metadata_group_entries(node: Any, where: str) -> list[tuple[str, tuple[int, ...], str | None]]:
    """(pg_name, ranks, pg_desc or None) of a METADATA node's process groups (ranks ``()``: all
    ranks; pg_desc is PyTorch's ``group_desc``, e.g. ``default_pg``, or ``mesh_tp`` for a
    DeviceMesh dimension); other metadata (no group info) gives []."""
    values = node.inputs.values
    if "process_group:init" in node.name:
        return _pg_entries(values, where)
    # ASTRA-sim reads any METADATA node as process-group info; accept it when it parses
    try:
        return _pg_entries(values, where)
    except LibraError:
        return []


def metadata_groups(node: Any, where: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Process groups of a METADATA node; other metadata (no group info) gives ()."""
    return tuple((name, ranks) for name, ranks, _ in metadata_group_entries(node, where))
