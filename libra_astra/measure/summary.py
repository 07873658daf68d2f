"""Collectives summed up by what they are: a profile of 100 steps holds each collective 100 times,
and the same-sized collectives of one group are one line of a report (each instance stays in the
JSON)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from .calibrate import CheckRow
from .collectives import MeasuredCollective

# Above this many instances the reports sum the collectives up unless asked for each.
EACH_LIMIT = 40


@dataclass(frozen=True)
class CollectiveClass:
    """The instances of one kind, size, group and dimension (ns)."""

    kind: str
    size_bytes: int
    group: tuple[int, ...]
    group_name: str
    dim: str | None
    count: int
    transfer_min_ns: int
    transfer_median_ns: float
    transfer_max_ns: int
    transfer_sum_ns: int
    wait_mean_ns: float      # over every member of every instance
    wait_max_ns: int


@dataclass(frozen=True)
class CheckClass:
    """The calibration's check of one kind, size and dimension: measured against ASTRA-sim's time (ns)."""

    kind: str
    size_bytes: int
    dim: str
    count: int
    measured_median_ns: float
    measured_sum_ns: int
    astra_ns: int            # one instance (the same size takes the same time)
    astra_sum_ns: int


def collective_classes(colls: Sequence[MeasuredCollective], dims: Sequence[str | None]) -> list[CollectiveClass]:
    """The collectives by (kind, size, group, dimension), in order of first appearance."""
    by: dict[tuple, list[MeasuredCollective]] = {}
    dim_of: dict[tuple, str | None] = {}
    for c, d in zip(colls, dims):
        key = (c.kind, c.size_bytes, c.group, d)
        by.setdefault(key, []).append(c)
        dim_of[key] = d
    out = []
    for key, cs in by.items():
        t = [c.transfer_ns for c in cs]
        waits = [w for c in cs for w in c.waits_ns]
        out.append(CollectiveClass(cs[0].kind, cs[0].size_bytes, cs[0].group, cs[0].group_name, dim_of[key], len(cs),
                                   min(t), statistics.median(t), max(t), sum(t), sum(waits) / len(waits), max(waits)))
    return out


def check_classes(rows: Sequence[CheckRow]) -> list[CheckClass]:
    """The calibration's checks by (kind, size, dimension), in order of first appearance."""
    by: dict[tuple, list[CheckRow]] = {}
    for r in rows:
        by.setdefault((r.kind, r.size_bytes, r.dim), []).append(r)
    out = []
    for (kind, size, dim), rs in by.items():
        m = [r.measured_ns for r in rs]
        out.append(CheckClass(kind, size, dim, len(rs), statistics.median(m), sum(m), rs[0].astra_ns,
                              sum(r.astra_ns for r in rs)))
    return out
