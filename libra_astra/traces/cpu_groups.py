"""Which process group a typed gloo collective used: given by the user, read from the trace, or guessed.

A ``c10d::`` op records its process group only as ``<Object>`` (:mod:`.cpu_collectives`), so
the group of each typed collective is settled here, first rule that applies:

1. given: the first entry of the user's mapping file (``--cpu-collective-groups FILE``) that
   matches the op;
2. named: a ``pg_name`` attribute on the op, where the tool that wrote the trace recorded one;
3. fixed by the trace: the rank's METADATA process groups (PyTorch lists every group the rank
   is in) leave one candidate: the only one of them, the world included, of the size the op's
   tensors fix (all-gather: output / input, reduce-scatter: input / output, all-to-all: its
   split sizes or tensors), or the world for a rank in no other group;
4. guessed: the first group of the fixed size by name; without a fixed size the rank's only
   group besides the world if it has one, else the world. Guesses are tallied
   (:class:`GroupTally`) and named in the demand report.

The mapping file (YAML, or JSON by its ``.json`` suffix) is a list of entries, each naming an op
and the group it ran on, in one of three ways::

    - op: c10d::allreduce_          # the c10d op as the trace names it
      nth: 1                        # optional: its 1st occurrence on each rank (file order); or [1, 3]
      size_bytes: 1024              # optional: only ops with this many input bytes
      ranks: [[0, 1], [2, 3]]       # sets of ranks, each rank taking the set holding it; or: all
    - op: c10d::_reduce_scatter_base_
      group: [5, 6]                 # group ids (comm-groups file, METADATA pg_name), each rank its own
    - op: c10d::allgather_
      desc: mesh_tp                 # the pg_desc PyTorch recorded for the group in METADATA

A set of ranks or a group id must be one of the rank's process groups (its METADATA, or the
comm-groups file), of the size the op's tensors fix if they do; an entry that decides no typed
collective (none matches, or earlier entries take them all) is refused, as a typo would be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from ..errors import LibraError
from ..files import load_yaml, read_json
from ..spans import rank_spans

GIVEN, NAMED, FIXED, GUESSED = "given", "named", "fixed", "guessed"
_KEYS = ("op", "nth", "size_bytes", "ranks", "group", "desc")
_HOW = "ranks (sets of ranks, or all), group (ids) or desc (a METADATA pg_desc)"
_EXAMPLE = "[{op: c10d::allreduce_, ranks: [[0, 1], [2, 3]]}]"


@dataclass(frozen=True)
class GroupRule:
    """One entry of a mapping file: which ops it matches and the group it gives them."""

    entry: int                                   # 1-based position in the file
    op: str
    nth: frozenset[int] | None = None            # 1-based occurrences of ``op`` on a rank; None: all
    size_bytes: int | None = None
    ranks: tuple[tuple[int, ...], ...] | None = None   # () : all ranks
    group: tuple[str, ...] | None = None
    desc: str | None = None

    def matches(self, op: str, nth: int, size_bytes: int) -> bool:
        return (op == self.op and (self.nth is None or nth in self.nth)
                and (self.size_bytes is None or size_bytes == self.size_bytes))


@dataclass(frozen=True)
class GroupMap:
    """A mapping file: its path (for errors) and its entries in order."""

    path: str
    rules: tuple[GroupRule, ...]

    def check_npus(self, npus: int) -> None:
        """Every rank named is an NPU of a network with ``npus`` NPUs."""
        for rule in self.rules:
            for s in rule.ranks or ():
                bad = [r for r in s if r >= npus]
                if bad:
                    raise LibraError(f"{self.path}: entry {rule.entry} ({rule.op}): rank {bad[0]} is outside "
                                     f"0..{npus - 1} (the network has {npus} NPUs); fix ranks")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _rule(i: int, item: Any, path: str) -> GroupRule:
    at = f"{path}: entry {i}"
    if not isinstance(item, Mapping):
        raise LibraError(f"{at} must be a mapping like {{op: c10d::allreduce_, ranks: [[0, 1], [2, 3]]}}")
    unknown = [k for k in item if k not in _KEYS]
    if unknown:
        raise LibraError(f"{at}: unknown key {unknown[0]!r}; the keys are {', '.join(_KEYS)}")
    op = item.get("op")
    if not isinstance(op, str) or not op.startswith("c10d::") or op == "c10d::":
        raise LibraError(f"{at}: op must name a c10d op as the trace does, e.g. c10d::allreduce_; got {op!r}")
    at = f"{at} ({op})"
    given = [k for k in ("ranks", "group", "desc") if k in item]
    if len(given) != 1:
        raise LibraError(f"{at}: give the group the op used as exactly one of {_HOW}"
                         + (f"; it has {' and '.join(given)}" if given else ""))
    nth = item.get("nth")
    if nth is not None:
        vals = nth if isinstance(nth, list) else [nth]
        if not vals or not all(_int(v) and v >= 1 for v in vals):
            raise LibraError(f"{at}: nth must be an occurrence number >= 1 or a list of them, got {nth!r}")
        nth = frozenset(vals)
    size = item.get("size_bytes")
    if size is not None and not (_int(size) and size >= 0):
        raise LibraError(f"{at}: size_bytes must be an integer >= 0, got {size!r}")
    ranks = group = desc = None
    if "ranks" in item:
        ranks = _ranks(item["ranks"], at)
    elif "group" in item:
        g = item["group"]
        vals = g if isinstance(g, list) else [g]
        if not vals or not all((_int(v) and v >= 0) or (isinstance(v, str) and v.strip()) for v in vals):
            raise LibraError(f"{at}: group must be a group id (e.g. 5 or \"5\") or a list of them, got {g!r}")
        group = tuple(str(v).strip() for v in vals)
    else:
        desc = item["desc"]
        if not isinstance(desc, str) or not desc:
            raise LibraError(f"{at}: desc must be the pg_desc of a METADATA process group (e.g. mesh_tp), "
                             f"got {desc!r}")
    return GroupRule(i, op, nth, size, ranks, group, desc)


def _ranks(v: Any, at: str) -> tuple[tuple[int, ...], ...]:
    """``all`` -> (); a list of ranks -> one set; a list of lists -> the sets (disjoint)."""
    if v == "all":
        return ()
    bad = f"{at}: ranks must be all, a list of ranks or a list of such lists (e.g. [[0, 1], [2, 3]]), got {v!r}"
    if not isinstance(v, list) or not v:
        raise LibraError(bad)
    sets = v if all(isinstance(s, list) for s in v) else [v]
    out: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for s in sets:
        if not s or not all(_int(r) and r >= 0 for r in s):
            raise LibraError(bad)
        again = sorted(seen.intersection(s)) or [r for r in s if s.count(r) > 1]
        if again:
            raise LibraError(f"{at}: rank {again[0]} is in ranks twice; each rank uses one group for an op")
        seen.update(s)
        out.append(tuple(sorted(s)))
    return tuple(out)


def group_map_from_data(data: Any, path: str) -> GroupMap:
    """The mapping held by ``data`` (a file's content); ``path`` names it in errors."""
    if not isinstance(data, list) or not data:
        raise LibraError(f"{path}: a CPU collective group file is a non-empty list of entries like {_EXAMPLE}")
    return GroupMap(path, tuple(_rule(i, item, path) for i, item in enumerate(data, 1)))


def load_group_map(path: str | Path) -> GroupMap:
    """Read a mapping file (see the module docstring)."""
    what = "CPU collective group"
    data = read_json(path, what) if str(path).endswith(".json") else load_yaml(path, what)
    return group_map_from_data(data, str(path))


@dataclass(frozen=True)
class RankGroups:
    """What a rank's trace and the comm-groups file say about the rank's process groups."""

    rank: int
    npus: int
    recorded: bool                            # the rank's file has METADATA process-group info
    groups: Mapping[str, tuple[int, ...]]     # its METADATA groups besides the world: name -> members
    world: frozenset[str] = frozenset()       # METADATA names of the world group
    descs: Mapping[str, str] = field(default_factory=dict)           # name -> pg_desc
    file_groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # precede METADATA by name

    def members(self, name: str) -> tuple[int, ...] | None:
        if name in self.file_groups:
            return tuple(self.file_groups[name])
        if name in self.world:
            return tuple(range(self.npus))
        return self.groups.get(name)

    def mine(self) -> list[str]:
        """The rank's METADATA groups besides the world, by name."""
        return sorted((k for k, m in self.groups.items() if self.rank in m and len(m) < self.npus),
                      key=lambda k: (len(k), k))

    def describe(self) -> str:
        """The rank's METADATA groups for a message: ``0 all ranks (pg_desc default_pg), 1 [0, 1]``."""
        def desc(k: str) -> str:
            return f" (pg_desc {self.descs[k]})" if k in self.descs else ""
        parts = [f"{w} all ranks{desc(w)}" for w in sorted(self.world)]
        parts += [f"{k} {list(self.groups[k])}{desc(k)}" for k in self.mine()]
        return ", ".join(parts) or "none recorded"


class Choice(NamedTuple):
    pg_name: str | None     # None: the world group
    how: str                # GIVEN, NAMED, FIXED or GUESSED
    entry: int = 0          # the mapping file's entry, when given


def choose(op: str, nth: int, size_bytes: int, group_size: int, named: str | None, rg: RankGroups,
           gm: GroupMap | None) -> Choice:
    """The group of one typed collective: the ``nth`` ``op`` of rank ``rg.rank`` (1-based, file
    order), ``size_bytes`` of input, its tensors fixing a group of ``group_size`` ranks (0: they
    do not), ``named`` its own pg_name attribute if it has one (see the module docstring)."""
    if gm is not None:
        for rule in gm.rules:
            if rule.matches(op, nth, size_bytes):
                return Choice(_given(rule, rg, group_size, gm.path), GIVEN, rule.entry)
    if named is not None:
        return Choice(None if named in rg.world else named, NAMED)
    if group_size == rg.npus:
        return Choice(None, FIXED)
    mine = rg.mine()
    if group_size:
        fits = [k for k in mine if len(rg.groups[k]) == group_size]
        return Choice(fits[0] if fits else None, FIXED if len(fits) == 1 and rg.recorded else GUESSED)
    if rg.recorded and not mine:
        return Choice(None, FIXED)
    return Choice(mine[0] if len(mine) == 1 else None, GUESSED)


def _given(rule: GroupRule, rg: RankGroups, group_size: int, path: str) -> str | None:
    at = f"{path}: entry {rule.entry} ({rule.op})"
    r = rg.rank
    name: str | None
    if rule.ranks == ():
        name = None
    elif rule.ranks is not None:
        s = next((s for s in rule.ranks if r in s), None)
        if s is None:
            raise LibraError(f"{at}: rank {r} issues this op but is in none of the sets of ranks; add the set "
                             f"holding rank {r}")
        if len(s) == rg.npus:
            name = None
        else:
            names = sorted(rg.file_groups, key=lambda k: (len(k), k)) + rg.mine()
            name = next((k for k in names if tuple(sorted(rg.members(k) or ())) == s), None)
            if name is None:
                raise LibraError(f"{at}: ranks {list(s)} are none of rank {r}'s process groups (its METADATA "
                                 f"groups: {rg.describe()}; or a comm-groups file group); give the ranks of one "
                                 "of them")
    elif rule.group is not None:
        name = next((g for g in rule.group if r in (rg.members(g) or ())), None)
        if name is None:
            raise LibraError(f"{at}: none of groups {', '.join(rule.group)} holds rank {r}, which issues this op "
                             f"(its METADATA groups: {rg.describe()}); list the group of every rank that issues it")
    else:
        found = [k for k, d in rg.descs.items() if d == rule.desc and (k in rg.world or k in rg.mine())]
        if len(found) != 1:
            raise LibraError(f"{at}: rank {r}'s METADATA has {'no' if not found else 'more than one'} process group "
                             f"with pg_desc {rule.desc!r} (its groups: {rg.describe()}); fix desc, or give "
                             "ranks or group")
        name = found[0]
    if name is not None and name in rg.world and name not in rg.file_groups:
        name = None
    size = rg.npus if name is None else len(rg.members(name) or ())
    if group_size and size != group_size:
        raise LibraError(f"{at}: rank {r}'s op has tensors for a group of {group_size} ranks, but the entry gives "
                         f"{'all ranks' if name is None else 'group ' + name} ({size} ranks); fix the entry")
    return name


class GuessedOp(NamedTuple):
    """Typed collectives whose group was guessed: the ``nth`` ``op`` of ``size_bytes`` on ``ranks``."""

    op: str
    nth: int
    size_bytes: int
    pg_name: str | None     # the guess; None: the world group
    ranks: tuple[int, ...]

    def text(self) -> str:
        return (f"{self.op} #{self.nth} ({self.size_bytes:,} B) on ranks {rank_spans(self.ranks)} -> "
                f"{'all ranks' if self.pg_name is None else 'group ' + self.pg_name}")


@dataclass
class GroupTally:
    """How the groups of a trace set's typed collectives were settled, added up over its ranks."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((GIVEN, NAMED, FIXED, GUESSED), 0))
    matched: set[int] = field(default_factory=set)                    # mapping entries that matched an op
    ops: dict[str, None] = field(default_factory=dict)                # typed collective ops, first seen first
    _guesses: dict[tuple[str, int, int, str | None], list[int]] = field(default_factory=dict)

    def add(self, op: str, nth: int, size_bytes: int, rank: int, choice: Choice) -> None:
        self.counts[choice.how] += 1
        self.ops.setdefault(op)
        if choice.how == GIVEN:
            self.matched.add(choice.entry)
        elif choice.how == GUESSED:
            self._guesses.setdefault((op, nth, size_bytes, choice.pg_name), []).append(rank)

    def guessed(self) -> tuple[GuessedOp, ...]:
        return tuple(GuessedOp(*k, tuple(v)) for k, v in self._guesses.items())

    def check_used(self, gm: GroupMap | None) -> None:
        """Refuse an entry that decided no typed collective's group: a misspelt op, nth or size, or
        an entry earlier ones leave nothing to."""
        for rule in gm.rules if gm is not None else ():
            if rule.entry not in self.matched:
                ops = ", ".join(self.ops) or "none"
                raise LibraError(f"{gm.path}: entry {rule.entry} ({rule.op}) matches no typed collective of the "
                                 f"trace that earlier entries leave (its typed collectives: {ops}); fix op, nth or "
                                 "size_bytes, or remove the entry")

    def guess_note(self, limit: int = 4) -> str | None:
        """The report's line on guessed groups, or None when none was guessed."""
        n = self.counts[GUESSED]
        if not n:
            return None
        g = self.guessed()
        shown = "; ".join(x.text() for x in g[:limit]) + (f"; and {len(g) - limit} more" if len(g) > limit else "")
        return (f"process group guessed for {n} typed CPU collective(s): {shown}; the trace records a gloo op's "
                "group only as <Object>: give --cpu-collective-groups FILE to set it")
