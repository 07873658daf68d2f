"""Communicator groups across ranks: METADATA process groups agree, members issue the same
collectives in the same order, and which ranks share a communicator."""

from __future__ import annotations

from typing import Collection, Iterable, Sequence

import numpy as np

from . import groups as grp
from ..errors import LibraError
from ..traces.reader import RankProgram
from .context import Context
from .program import Program


def merge_metadata(ctx: Context, progs: Sequence[RankProgram]) -> None:
    """Process groups from the programs' METADATA nodes into ``ctx``; every rank must agree."""
    merge_process_groups(((prog.path, prog.pg_info) for prog in progs), ctx.net.npus_count, ctx.file_groups,
                         ctx.meta_groups, ctx.meta_where)


def merge_process_groups(sources: Iterable[tuple[str, Iterable[tuple[str, Sequence[int]]]]], n: int,
                         file_groups: Collection[str], groups: dict[str, tuple[int, ...]],
                         where: dict[str, str]) -> None:
    """METADATA process groups, (file, its (name, ranks) pairs) at a time, into ``groups`` (key ->
    sorted members) and ``where`` (key -> the first file to define it). Groups of all ranks are
    skipped; every file must describe a group the same way, and a group the comm-groups file
    (``file_groups``) does not define must fit the ``n`` NPUs."""
    for path, pairs in sources:
        for name, ranks in pairs:
            key = grp.normalize_key(name)
            if key == grp.ALL_RANKS:
                continue
            members = tuple(sorted(set(ranks)))
            prev = groups.get(key)
            if prev is not None and prev != members:
                raise LibraError(
                    f"{path}: METADATA defines process group {key} with ranks {list(members)[:8]} but "
                    f"{where[key]} defines it with {list(prev)[:8]}; every rank must describe a group the "
                    "same way"
                )
            groups[key] = members
            where.setdefault(key, path)
    for key, members in groups.items():
        if key in file_groups:
            continue
        bad = grp.outside(members, n)
        if bad:
            raise LibraError(
                f"{where[key]}: METADATA process group {key} has rank(s) {bad[:5]} outside 0..{n - 1} "
                f"(the network has {n} NPUs); use the matching network"
            )


def _describe_seq(ctx: Context, info: Program, comm: tuple[int, int]) -> list[tuple[str, int]]:
    """(type, size) sequence of a program's collectives on one communicator, in issue order."""
    ckey, cinv = info.coll_comm
    return [ctx.sems[i] for i in info.coll_sem[(ckey == comm[0]) & (cinv == comm[1])].tolist()]


def communicators(ctx: Context, comm: tuple[int, int]) -> tuple[np.ndarray, str]:
    """Communicator id per rank (-1: not a member) for a group key, and its name for messages.

    An all-ranks collective with ``involved_dim`` runs among the ranks that share their
    coordinates in the dimensions it does not involve: one communicator per such sub-grid.
    """
    net = ctx.net
    n = net.npus_count
    kidx, inv = comm
    key = ctx.keys[kidx]
    if key != grp.ALL_RANKS:
        cid = np.full(n, -1, dtype=np.int64)
        cid[np.asarray(ctx.members(key), dtype=np.int64)] = 0
        return cid, f"group {key}"
    parts = grp.all_ranks_participants(net, ctx.reader.attrs.involved[inv])
    coords = net.coords_array(np.arange(n, dtype=np.int64))
    cid = np.zeros(n, dtype=np.int64)
    stride = 1
    for d, dim in enumerate(net.dims):
        if parts[d] == 1:  # not involved: ranks that differ here are in different communicators
            cid += coords[:, d] * stride
            stride *= dim.npus
    dims = [d for d, p in enumerate(parts) if p > 1]
    return cid, f"all ranks over dimension(s) {dims}"


def check_group_sequences(ctx: Context, programs: list[Program], rank_prog: np.ndarray) -> None:
    """Members of a communicator must issue the same collectives on it in the same order."""
    # a rank that issues on a named group must be one of its members
    member_sets: dict[int, frozenset[int]] = {}
    for info in programs:
        for kidx in info.used_keys:
            key = ctx.keys[kidx]
            if key == grp.ALL_RANKS:
                continue
            ms = member_sets.get(kidx)
            if ms is None:
                ms = member_sets[kidx] = frozenset(ctx.members(key))
            outside = [r for r in info.ranks if r not in ms]
            if outside:
                r = outside[0]
                node = int(info.prog.node_ids[info.key_node[kidx]])
                shown = sorted(ms)
                raise LibraError(
                    f"{info.prog.path}: node {node} of rank {r} runs a collective on group {key}, whose "
                    f"members {shown[:8]}{'...' if len(shown) > 8 else ''} do not include rank {r}; "
                    "add the rank to the group or fix pg_name"
                )
    # every member of a communicator issues the same sequence on it (a member that never
    # issues on it has the empty sequence)
    # (a program's communicators only, so the work grows with the trace, not programs x groups)
    seqs: dict = {}
    for pi, info in enumerate(programs):
        for comm, h in info.seq_hash.items():
            seqs.setdefault(comm, []).append((pi, h))
    for comm in sorted(seqs):
        hash_ids: dict[bytes, int] = {b"": 0}
        entries = seqs[comm]
        ids = [hash_ids.setdefault(h, len(hash_ids)) for _, h in entries]
        if len(set(ids) | ({0} if len(entries) < len(programs) else set())) == 1:
            continue
        per_prog = np.zeros(len(programs), dtype=np.int64)
        per_prog[[pi for pi, _ in entries]] = ids
        cid, label = communicators(ctx, comm)
        rank_hash = per_prog[rank_prog]
        members = np.nonzero(cid >= 0)[0]
        order = members[np.argsort(cid[members], kind="stable")]
        c_sorted = cid[order]
        starts = np.concatenate(([0], np.nonzero(c_sorted[1:] != c_sorted[:-1])[0] + 1))
        first_of = np.repeat(order[starts], np.diff(np.concatenate((starts, [order.size]))))
        bad = np.nonzero(rank_hash[order] != rank_hash[first_of])[0]
        if bad.size == 0:
            continue
        other, first = int(order[bad[0]]), int(first_of[bad[0]])
        path = programs[int(rank_prog[other])].prog.path
        sa = _describe_seq(ctx, programs[int(rank_prog[first])], comm)
        sb = _describe_seq(ctx, programs[int(rank_prog[other])], comm)
        for j, (x, y) in enumerate(zip(sa, sb)):
            if x != y:
                raise LibraError(
                    f"{path}: rank {other} issues {y[0]} of {y[1]} B as its collective #{j + 1} on {label}, but rank "
                    f"{first} issues {x[0]} of {x[1]} B; members of a group must issue the same collectives in the "
                    "same order"
                )
        raise LibraError(
            f"{path}: rank {other} issues {len(sb)} collectives on {label} but rank {first} issues {len(sa)}; "
            "members of a group must issue the same collectives in the same order"
        )
