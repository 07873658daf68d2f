"""The collectives of a CPU (gloo) run, read from its host operators.

A gloo collective shows twice in a Kineto trace: the ``c10d::*`` operator on the thread that
called it (it only queues the work and returns, or waits) and the ``gloo:*`` operator on one of
the process group's worker threads, which does the exchange. Neither records a process group.

- pairing: each ``gloo:*`` operator belongs to the earliest not yet paired ``c10d::*`` operator
  (on any thread; gloo's own thread for a collective run in place) that started before it, says
  a compatible kind (gloo runs a reduce-scatter
  as a ``gloo:all_reduce``) and holds a tensor of the gloo operator's element count;
- kind: the ``c10d::*`` operator's (``_reduce_scatter_base_`` is a reduce-scatter), else the
  gloo operator's; size: the gloo operator's input tensor (``Input Dims`` x ``Input type``);
  issue order: the ``c10d::*`` operator's start (DDP's buckets start out of order on the
  worker threads); a send or receive is between its rank and the peer its ``c10d::send`` /
  ``c10d::recv_`` names (``Concrete Inputs``: taken as a global rank, as in the default group);
- group: a worker thread serves one process group, so all its operators share one. The
  candidates are the rank's groups (``distributedInfo.pg_config``) of the size the tensors fix
  (an all-gather's output over its input, a reduce-scatter's input over its output), common to
  all the thread's collectives. Where more than one is left (in a 2 x 2 TP x DP job both groups
  of a rank have two members) the trace cannot tell: the ``--cpu-collective-groups`` file gives
  it, as for the converted trace (traces/cpu_groups.py; here only ``ranks`` entries apply),
  else it is guessed and counted in a note. End times do not tell either: on a loaded CPU the
  members of one collective end up to milliseconds apart, and any subset of a group's members
  ends together as well as the group does.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ..errors import LibraError
from ..model.collectives import ALL_GATHER, ALL_REDUCE, P2P, REDUCE_SCATTER
from ..traces.cpu_groups import GroupMap, GroupRule
from .comms import RankComm, _facts, _ints, kind_of, rank_comms
from .kineto import HostOp, RankProfile


def _numels(op: HostOp) -> list[int]:
    """Element counts of the operator's tensor arguments (a tensor list's first tensor), in order."""
    out = []
    for d in op.args.get("Input Dims") or ():
        dims = _ints(d)
        if dims is None and isinstance(d, list) and d and isinstance(d[0], list):
            dims = _ints(d[0])
        if dims:
            out.append(math.prod(dims))
    return out


def _peer(op: HostOp) -> int | None:
    """The peer a ``c10d::send``/``c10d::recv_`` names (its third argument, as recorded)."""
    vals = op.args.get("Concrete Inputs")
    v = vals[2] if isinstance(vals, list) and len(vals) > 2 else None
    return int(v) if isinstance(v, str) and v.isdigit() else None


def _compatible(c10d_kind: str | None, gloo_kind: str | None) -> bool:
    return c10d_kind == gloo_kind or (c10d_kind == REDUCE_SCATTER and gloo_kind == ALL_REDUCE)


def _fixed_group_size(kind: str, numels: list[int]) -> int:
    # c10d's *_base_ operators list (output, input)
    if len(numels) >= 2 and min(numels[:2]) > 0:
        out, inp = numels[0], numels[1]
        if kind == ALL_GATHER and out % inp == 0:
            return out // inp
        if kind == REDUCE_SCATTER and inp % out == 0:
            return inp // out
    return 0


def gloo_comms(prof: RankProfile) -> list[RankComm]:
    """The rank's gloo collectives, each with the candidate groups of its worker thread's rank."""
    c10d = [o for o in prof.host if o.name.lower().startswith("c10d::")]
    paired: set[int] = set()
    out = []
    for op in prof.host:
        if not op.name.lower().startswith("gloo:"):
            continue
        gkind, n = kind_of(op.name), _numels(op)
        caller = None
        for i, c in enumerate(c10d):
            if c.start_ns > op.start_ns:
                break
            if i not in paired and _compatible(kind_of(c.name), gkind) \
                    and (not n or n[0] in _numels(c)):
                caller = i
                break
        names = [op.name]
        fixed = 0
        launch = op.start_ns
        if caller is not None:
            paired.add(caller)
            c = c10d[caller]
            names.insert(0, c.name)
            launch = c.start_ns
        kind, size, group, gname = _facts([op.args], names)
        if caller is not None and kind is not None:
            fixed = _fixed_group_size(kind, _numels(c10d[caller]))
        cands = tuple(g for g in prof.groups if prof.rank in g and (not fixed or len(g) == fixed))
        if kind == P2P and caller is not None and (peer := _peer(c10d[caller])) is not None:
            group = tuple(sorted({prof.rank, peer}))
        # a gloo operator on its caller's own thread says nothing of the other collectives' groups
        own = caller is not None and c10d[caller].tid == op.tid
        out.append(RankComm(kind or "UNKNOWN", size or 0, group, gname, op.start_ns, op.end_ns, launch, op.name,
                            False, thread=("op", op.tid, len(out)) if own else ("tid", op.tid), candidates=cands,
                            caller=c10d[caller].name if caller is not None else ""))
    out.sort(key=lambda c: (c.launch_ns, c.start_ns))
    return out


def _given(rule: GroupRule, rank: int, world: int, path: str) -> tuple[int, ...]:
    if rule.ranks is None:
        raise LibraError(f"{path}: entry {rule.entry} ({rule.op}): a measured run's groups are given as ranks "
                         "(a Kineto trace names no group ids or descriptions)")
    if rule.ranks == ():
        return tuple(range(world))
    for s in rule.ranks:
        if rank in s:
            return s
    raise LibraError(f"{path}: entry {rule.entry} ({rule.op}): rank {rank} is in none of its ranks; "
                     "give every rank's set")


def settle_groups(comms: dict[int, list[RankComm]], world: int, notes: list[str],
                  group_map: GroupMap | None = None) -> dict[int, list[RankComm]]:
    """Every gloo collective's group; NCCL kernels are returned as they are. First rule that applies:
    the mapping file's first entry matching the ``c10d::`` operator (its nth on the rank, its input
    bytes); the one candidate left to the worker thread's collectives (module docstring); a guess:
    the rank's only group besides the world if it has one, else the world (counted in a note)."""
    out: dict[int, list[RankComm]] = {}
    guessed = 0
    for r, cs in comms.items():
        threads: dict[tuple, list[RankComm]] = {}
        for c in cs:
            if not c.on_gpu and c.group is None and c.thread is not None:
                threads.setdefault(c.thread, []).append(c)
        left: dict[tuple, list[tuple[int, ...]]] = {}
        for tid, ops in threads.items():
            cands = set(ops[0].candidates)
            for c in ops[1:]:
                cands &= set(c.candidates)
            left[tid] = sorted(cands, key=lambda g: (len(g), g))
        nth: dict[str, int] = {}
        new = []
        for c in cs:
            if c.on_gpu or c.group is not None or c.thread is None:
                new.append(c)
                continue
            nth[c.caller] = nth.get(c.caller, 0) + 1
            rule = next((x for x in group_map.rules if x.matches(c.caller, nth[c.caller], c.size_bytes)), None) \
                if group_map is not None and c.caller else None
            if rule is not None:
                group = _given(rule, r, world, group_map.path)
            elif len(left[c.thread]) == 1:
                group = left[c.thread][0]
            else:
                guessed += 1
                others = [g for g in c.candidates if len(g) < world]
                group = others[0] if len(others) == 1 else tuple(range(world))
            new.append(replace(c, group=None if group == tuple(range(world)) else group))
        out[r] = new
    if guessed:
        notes.append(f"gloo: the process group of {guessed} collective(s) is not fixed by the trace (guessed: the "
                     "rank's only group besides the world, else the world); give --cpu-collective-groups FILE")
    return out


def run_comms(profiles: Sequence[RankProfile], world: int, notes: list[str],
              group_map: GroupMap | None = None) -> dict[int, list[RankComm]]:
    """Every rank's communication: its NCCL kernels, else (a CPU run) its gloo collectives."""
    comms = {p.rank: rank_comms(p) or gloo_comms(p) for p in profiles}
    return settle_groups(comms, world, notes, group_map)
