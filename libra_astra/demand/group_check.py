"""Communicator groups across ranks: METADATA process groups agree, members issue the same
collectives in the same order, and which ranks share a communicator."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import groups as grp
from ..errors import LibraError
from ..traces.reader import RankProgram
from .context import Context
from .program import Program


def merge_metadata(ctx: Context, progs: Sequence[RankProgram]) -> None:
    """Process groups from the programs' METADATA nodes into ``ctx``; every rank must agree."""
    n = ctx.net.npus_count
    for prog in progs:
        for name, ranks in prog.pg_info:
            key = grp.normalize_key(name)
            if key == grp.ALL_RANKS:
                continue
            members = tuple(sorted(set(ranks)))
            prev = ctx.meta_groups.get(key)
            if prev is not None and prev != members:
                raise LibraError(
                    f"{prog.path}: METADATA defines process group {key} with ranks {list(members)[:8]} but "
                    f"{ctx.meta_where[key]} defines it with {list(prev)[:8]}; every rank must describe a group the "
                    "same way"
                )
            ctx.meta_groups[key] = members
            ctx.meta_where.setdefault(key, prog.path)
    check_groups = {k: v for k, v in ctx.meta_groups.items() if k not in ctx.file_groups}
    for key, members in check_groups.items():
        bad = grp.outside(members, n)
        if bad:
            raise LibraError(
                f"{ctx.meta_where[key]}: METADATA process group {key} has rank(s) {bad[:5]} outside 0..{n - 1} "
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
    for comm in sorted({k for info in programs for k in info.seq_hash}):
        hash_ids: dict[bytes, int] = {}
        per_prog = np.asarray([hash_ids.setdefault(info.seq_hash.get(comm, b""), len(hash_ids)) for info in programs])
        if len(hash_ids) == 1:
            continue
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
