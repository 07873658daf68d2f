"""Communicator groups as ASTRA-sim will see them: the group file's valid groups, and the numeric
process groups the trace's METADATA nodes record (which the simulator ignores, --fix writes out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..traces.process_groups import metadata_groups
from ..traces.schema import METADATA_NODE
from .attrs import stoi
from .findings import Collect
from .load import GroupFile, RankFile


@dataclass(frozen=True)
class GroupView:
    """Communicator groups as ASTRA-sim will see them: from the file, else from METADATA (after --fix)."""

    members: dict[int, tuple[int, ...]]
    from_metadata: dict[int, tuple[int, ...]]
    file_ignored: bool


def metadata_group_table(ranks: Sequence[RankFile], num_ranks: int) -> dict[int, tuple[int, ...]]:
    """Numeric PyTorch process groups (id > 0) recorded in METADATA nodes; () ranks = all ranks."""
    out: dict[int, tuple[int, ...]] = {}
    for rf in ranks:
        for n in rf.nodes or ():
            if n.type != METADATA_NODE:
                continue
            try:
                groups = metadata_groups(n, f"{rf.path}: node {n.id}")
            except Exception:  # unreadable metadata is reported by the metadata-node check anyway
                continue
            for name, members in groups:
                gid, extra = stoi(name)
                if gid is not None and gid > 0 and not extra:
                    out.setdefault(gid, members or tuple(range(num_ranks)))
    return out


def file_groups(groups: GroupFile | None, num_ranks: int, col: Collect | None = None) -> dict[int, tuple[int, ...]]:
    """The valid groups of the file (id -> members); what is wrong with the others goes to ``col``."""
    col = col if col is not None else Collect()
    if groups is None:
        return {}
    out: dict[int, tuple[int, ...]] = {}
    for key, members in groups.groups.items():
        gid, extra = stoi(key)
        if gid is None or gid <= 0 or extra:
            col.add("group-id", None, None, f"{key!r}")
            continue
        ok = isinstance(members, list) and all(isinstance(m, int) and not isinstance(m, bool) for m in members)
        if not ok or len(set(members)) != len(members) or any(not 0 <= m < num_ranks for m in members):
            col.add("group-members", None, None, f"{key}: {members!r}")
            continue
        out[gid] = tuple(members)
    return out
