"""Findings: the instances each check collects on a set, grouped into one Finding per check and rank,
with the problem text worded for the count."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

from .catalog import CHECKS, FAILS

SHOWN_IDS = 5          # node ids listed per finding (the count says how many in all)
_SHOWN_DETAILS = 2     # examples spelled out in a finding's problem text


@dataclass(frozen=True)
class Finding:
    """One check that failed on one rank (``rank`` None: the set or a file beside it)."""

    code: str
    severity: str
    rank: int | None
    node_ids: tuple[int, ...]
    count: int
    problem: str
    effect: str
    fix: str
    fixable: bool

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.code, "severity": self.severity, "rank": self.rank, "node_ids": list(self.node_ids),
                "count": self.count, "problem": self.problem, "astra_sim": self.effect, "fix": self.fix,
                "fixed_by_fix": self.fixable}


class _Instance(NamedTuple):
    node_id: int | None
    detail: str
    arg: Any


@dataclass
class Collect:
    """The instances found so far, by (check, rank)."""

    by_code: dict[tuple[str, int | None], list[_Instance]] = field(default_factory=lambda: defaultdict(list))

    def add(self, code: str, rank: int | None, node_id: int | None = None, detail: str = "", arg: Any = None) -> None:
        self.by_code[(code, rank)].append(_Instance(node_id, detail, arg))

    def findings(self, codes_order: Sequence[str]) -> list[Finding]:
        order = {c: i for i, c in enumerate(codes_order)}
        out = []
        for (code, rank), inst in sorted(self.by_code.items(),
                                         key=lambda kv: (-1 if kv[0][1] is None else kv[0][1], order[kv[0][0]])):
            c = CHECKS[code]
            details = [i.detail for i in inst if i.detail]
            ex = ", ".join(details[:_SHOWN_DETAILS]) + (", ..." if len(details) > _SHOWN_DETAILS else "")
            n = len(inst)
            ids = tuple(dict.fromkeys(i.node_id for i in inst if i.node_id is not None))
            arg = inst[0].arg
            problem = (c.problem if n != 1 else _singular(c.problem)).format(n=n, examples=ex, arg=arg)
            out.append(Finding(code, c.severity, rank, ids[:SHOWN_IDS], n, problem, c.effect.format(arg=arg),
                               c.fix, c.fixable))
        return out


_SINGULAR = (("dependencies", "dependency"), ("nodes depend on themselves", "node depends on itself"),
             ("ids appear", "id appears"), ("files exist", "file exists"), ("collectives name", "collective names"),
             ("collectives that reach", "collective that reaches"),
             ("sends/receives that name another rank as their own", "send/receive that names another rank as its own"),
             ("sends/receives", "send/receive"), ("collectives on groups that do not contain", "collective on a group "
             "that does not contain"), ("collectives on groups that only", "collective on a group that only"),
             ("collectives on groups the", "collective on a group the"),
             ("collectives on one-member groups", "collective on a one-member group"),
             ("collectives recorded as CPU ops", "collective recorded as a CPU op"),
             ("collectives with no dependency, so they start", "collective with no dependency, so it starts"),
             ("collectives that run on", "collective that runs on"), ("sub-group collectives", "sub-group collective"),
             ("GPU compute nodes", "GPU compute node"), ("collectives that reduce", "collective that reduces"),
             ("collectives run a custom", "collective runs a custom"),
             ("keys ASTRA-sim does not read, close to keys it reads", "key ASTRA-sim does not read, close to a key it "
              "reads"))


def _singular(template: str) -> str:
    """A problem template for a count of one: its first noun (and verb) in the singular."""
    if not template.startswith("{n} "):
        return template
    out = template
    for a, b in _SINGULAR:
        out = out.replace(a, b, 1)
    if out != template:
        return out
    return re.sub(r"^(\{n\} (?:[\w/]+ )?[\w/]+?)s\b", r"\1", template, count=1)


def fails(findings: Iterable[Finding]) -> bool:
    """True if ASTRA-sim would abort or leave a rank unfinished on the set."""
    return any(f.severity == FAILS for f in findings)
