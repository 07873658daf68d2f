"""Rank lists written as spans, the one way messages and reports name sets of ranks."""

from __future__ import annotations

from typing import Sequence


def rank_spans(values: Sequence[int], limit: int = 6) -> str:
    """0,1,2,3,8 -> '0-3,8' (at most ``limit`` spans, then '...')."""
    vals = sorted(values)
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        parts.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    if len(parts) > limit:
        parts = parts[:limit] + ["..."]
    return ",".join(parts)
