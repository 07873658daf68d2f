"""The checks: every way ASTRA-sim (2.0, analytical) is known to crash or silently misbehave on a
trace set, each with what the simulator does and the fix.

Severity:

- ``fails``: ASTRA-sim aborts, exits non-zero, or a rank never prints its ``finished`` line;
- ``wrong``: it runs to the end but simulates something other than the trace says;
- ``note``: worth knowing, nothing to fix.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

from ..traces.graph import cycle_error, file_first_order
from ..traces.process_groups import metadata_groups
from ..traces.schema import NODE_TYPE_NAMES, comm_type_name, pb
from .load import GroupFile, RankFile, Target

FAILS, WRONG, NOTE = "fails", "wrong", "note"
SEVERITIES = (FAILS, WRONG, NOTE)
SHOWN_IDS = 5          # node ids listed per finding (the count says how many in all)
_SHOWN_DETAILS = 2     # examples spelled out in a finding's problem text

_INT_KINDS = frozenset(k for k in ("int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val", "sint64_val",
                                   "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val"))
_COMM_NODES = (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE) if pb is not None else ()
_SIMULATED = (0, 2, 6, 7)           # ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER
_BROADCAST, _RSB, _BARRIER = 5, 8, 9
_TAG_MOD = 500_000_000              # ASTRA-sim maps a p2p tag to tag % 500,000,000
_INT_MAX = 2**31 - 1


class Check(NamedTuple):
    code: str
    severity: str
    problem: str      # "{n}" = how many; "{examples}" = the first instances
    effect: str       # what ASTRA-sim does; "{arg}" = the first instance's argument
    fix: str          # what the user should do (or what --fix does)
    fixable: bool     # --fix repairs it


_C = [
    Check("unreadable", FAILS, "{examples}",
          "ASTRA-sim parses damaged messages without checking, so it reads partial nodes silently or stops",
          "re-create or re-copy the file", False),
    Check("missing-rank", FAILS, "rank files missing: {examples}",
          'aborts at start: "Failed to open file" (one file per NPU is opened, PREFIX.RANK.et)',
          "provide a file for every rank 0..N-1", False),
    Check("gzipped", FAILS, "{n} rank files exist only gzipped ({examples})",
          'aborts at start: "Failed to open file": it opens PREFIX.RANK.et and cannot read gzip',
          "gunzip copies of the files", True),
    Check("rank-count", FAILS, "{examples}",
          "{arg}", "use a network with as many NPUs as the set has ranks", False),
    Check("empty-rank", FAILS, "the rank file has no node",
          'aborts at start: "No dependancy free nodes found, there might be deadlocks"',
          "give the rank one zero-duration compute node", True),
    Check("unknown-node-type", FAILS, "{n} nodes of a type the schema does not define ({examples})",
          'exits 1 at the node: "Unknown node type"', "fix the trace generator", False),
    Check("duplicate-id", WRONG, "{n} node ids appear more than once ({examples})",
          "keeps only the last record of each id, with the dependencies of all of them merged: "
          "the other records never run", "give every node a unique id", False),
    Check("dangling-dep", FAILS, "{n} dependencies on node ids absent from the file ({examples})",
          'aborts at start: "Node {arg} graph, but not found in index, file might be corrupted"',
          "drop those dependencies", True),
    Check("self-dep", WRONG, "{n} nodes depend on themselves ({examples})",
          "the node never becomes ready: it and every node after it ({arg} nodes in all) are skipped "
          "silently, and the rank still prints finished", "drop the self dependencies", True),
    Check("cycle", WRONG, "{examples}",
          "the nodes of the cycle never become ready: they and every node after them ({arg} nodes in all) "
          "are skipped silently, and the rank still prints finished", "remove one dependency of the cycle", False),
    Check("no-ready-node", FAILS, "no node is free of dependencies",
          'aborts at start: "No dependancy free nodes found, there might be deadlocks"',
          "break the dependency cycles", False),
    Check("metadata-node", FAILS, "{n} METADATA nodes ({examples})",
          'aborts at the node: "Invalid node_type, node.id={arg}, node.type=1" (Statistics.cc asserts)',
          "remove them; their dependents inherit their dependencies", True),
    Check("invalid-node", FAILS, "{n} INVALID nodes ({examples})",
          "skips the node without issuing its children: the rank stalls and never prints finished, or aborts "
          "when its statistics are collected", "remove them; their dependents inherit their dependencies", True),
    Check("mem-node", FAILS, "{n} MEM_LOAD/MEM_STORE nodes ({examples})",
          'exits 1: "Remote memory access is not supported in NO_MEMORY_EXPANSION"',
          "remove them (their memory time is not simulated); their dependents inherit their dependencies", True),
    Check("is-cpu-op-type", FAILS, "{n} nodes whose is_cpu_op is not a bool or integer ({examples})",
          "aborts: {arg}", "write is_cpu_op as a bool (bool_val)", True),
    Check("comm-on-cpu", FAILS, "{n} communication nodes with is_cpu_op true ({examples})",
          'throws "Comm node should not be on CPU": aborts, or the rank stalls if it is issued later',
          "set is_cpu_op false on communication nodes", True),
    Check("comm-type-missing", FAILS, "{n} collectives without comm_type ({examples})",
          'throws "Attribute comm_type not found in node {arg}": aborts or the rank stalls',
          "give every COMM_COLL node its comm_type", False),
    Check("comm-type-convertible", FAILS, "{n} collectives of a kind ASTRA-sim does not simulate ({examples})",
          'throws "Unsupported collective comm type": aborts or the rank stalls',
          "REDUCE_SCATTER_BLOCK becomes REDUCE_SCATTER, BARRIER a zero-byte ALL_REDUCE", True),
    Check("comm-type-unsupported", FAILS, "{n} collectives of a kind ASTRA-sim does not simulate ({examples})",
          'throws "Unsupported collective comm type": aborts or the rank stalls',
          "replace them in the trace (e.g. REDUCE by ALL_REDUCE, GATHER/SCATTER by ALL_GATHER)", False),
    Check("broadcast-replayed", WRONG, "{n} BROADCAST collectives ({examples})",
          "replays them for their duration_micros (1 ns when 0) as communication time: no traffic is simulated",
          "replace them by a simulated collective if the traffic matters", False),
    Check("attr-type", FAILS, "{n} attributes of a type ASTRA-sim cannot convert to an integer ({examples})",
          "aborts: std::bad_cast (only integer kinds convert)", "write them as int64_val", True),
    Check("comm-size-missing", FAILS, "{n} collectives without comm_size ({examples})",
          'throws "Attribute comm_size not found in node {arg}": aborts or the rank stalls',
          "give every COMM_COLL node its comm_size in bytes", False),
    Check("size-not-divisible", WRONG, "{n} collective sizes not divisible by the {arg} chunks ({examples})",
          "cuts size // {arg}-byte chunks and charges the remainder as one more full chunk (up to 1/{arg} more time)",
          "round sizes to a multiple of the chunk count", True),
    Check("involved-dim-type", FAILS, "{n} collectives whose involved_dim is not a bool_list ({examples})",
          'exits 1: "Expected bool_list in involved_dim but found another type."',
          "write involved_dim as a bool_list, one entry per network dimension", False),
    Check("no-involved-dim", FAILS, "{n} collectives that reach no other NPU ({examples})",
          "the collective generates no transfer and never finishes: the rank stalls and never prints finished",
          "replace them by zero-duration compute nodes", True),
    Check("involved-dim-absent", FAILS, "{n} collectives without involved_dim on a network of {arg} dimensions "
          "({examples})", "uses a default of 4 entries and reads past it (undefined behaviour)",
          "set involved_dim, one entry per network dimension (--fix sets all of them)", True),
    Check("involved-dim-length", FAILS, "{n} collectives whose involved_dim is shorter than the network's {arg} "
          "dimensions ({examples})", "reads past the list (undefined behaviour)",
          "give involved_dim one entry per network dimension", False),
    Check("involved-dim-extra", WRONG, "{n} collectives name dimensions beyond the network's {arg} ({examples})",
          "ignores the entries past the network's dimensions", "regenerate the trace for this network", False),
    Check("pg-name-type", FAILS, "{n} collectives whose pg_name is not a string ({examples})",
          "aborts: std::bad_cast (pg_name is read as a string)", "write pg_name as a string (string_val)", True),
    Check("pg-name-non-numeric", FAILS, "{n} collectives whose pg_name is not a number ({examples})",
          "aborts: std::invalid_argument from std::stoi (group ids are integers)",
          "name communicator groups by positive integers", False),
    Check("pg-name-suffix", WRONG, "{n} collectives whose pg_name has trailing characters ({examples})",
          "std::stoi reads the leading number only", "write the group id alone", False),
    Check("unknown-group", FAILS, "{n} collectives on groups the communicator-group file does not define "
          "({examples})", 'exits 1: "For rank {arg} not found"', "add the group to the communicator-group file", False),
    Check("group-in-metadata-only", FAILS, "{n} collectives on groups that only the trace's METADATA process groups "
          "define ({examples})", 'exits 1: "For rank {arg} not found" (it reads groups only from '
          "--comm-group-configuration)", "write the METADATA groups to a communicator-group file", True),
    Check("not-member", FAILS, "{n} collectives on groups that do not contain this rank ({examples})",
          "aborts: assert(index_in_ring >= 0) in RingTopology", "fix the trace or the communicator-group file", False),
    Check("collective-count", FAILS, "the ranks of a group issue different numbers of collectives on it "
          "({examples})", "matches collectives across ranks by issue order: the ranks with more wait for partners "
          "that never come, stall and never print finished", "give every member the same collectives in the same order",
          False),
    Check("group-of-one", FAILS, "{n} collectives on one-member groups ({examples})",
          "the collective generates no transfer and never finishes: the rank stalls and never prints finished",
          "replace them by zero-duration compute nodes", True),
    Check("groups-path-empty", FAILS, "the communicator-group file's path contains \"empty\" ({examples})",
          "ignores the file (any path containing \"empty\" means no groups), so every group is unknown",
          "rename the file or its directory", True),
    Check("group-id", FAILS, "{n} communicator groups with an id that is not a positive integer ({examples})",
          "aborts while loading the file: assert(id > 0), or std::stoi throws",
          "drop or renumber them (pg_name \"\" or \"0\" already means all ranks)", True),
    Check("group-members", WRONG, "{n} communicator groups with members that are not NPUs of the set "
          "({examples})", "loads the group; a collective on it reads out of range or aborts",
          "list NPU ids 0..N-1, each once", False),
    Check("p2p-attr-missing", FAILS, "{n} sends/receives without a required attribute ({examples})",
          'throws "Attribute {arg} not found in node ...": aborts or the rank stalls',
          "give SEND comm_dst, comm_tag, comm_size and RECV comm_src, comm_tag, comm_size", False),
    Check("p2p-wrong-rank", FAILS, "{n} sends/receives that name another rank as their own end or a peer "
          "outside the set ({examples})", 'throws "{arg}": aborts or the rank stalls',
          "SEND's comm_src (RECV's comm_dst) must be the rank of its file, the peer a rank of the set", False),
    Check("p2p-size-zero", FAILS, "{n} sends/receives of 0 bytes ({examples})",
          "aborts: assert(chunk_size > 0)", "give them a size of at least 1 byte or remove them", False),
    Check("p2p-unmatched-recv", FAILS, "{n} receives with no send of the same (tag, src, dst, size) ({examples})",
          "the receive never completes: the rank stalls and never prints finished",
          "make tag, peers and size agree with a send on the source rank", False),
    Check("p2p-unmatched-send", WRONG, "{n} sends with no receive of the same (tag, src, dst, size) "
          "({examples})", "the send is charged its transfer and completes; nothing waits for it",
          "add the receive or remove the send", False),
    Check("cpu-ops", NOTE, "{n} CPU ops (is_cpu_op true)",
          "replays them one at a time beside GPU compute and counts their time as exposed communication; "
          "the rank prints finished but no Wall/CPU/GPU/Comm statistics", "nothing to fix", False),
    Check("gloo-cpu-collectives", NOTE, "{n} collectives recorded as CPU ops ({examples})",
          "replays them for their recorded duration: no traffic is simulated",
          "type them as collectives (the converter only types NCCL kernels)", False),
]
CHECKS: dict[str, Check] = {c.code: c for c in _C}


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
class _Collect:
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
            out.append(Finding(code, c.severity, rank, ids[:SHOWN_IDS], n,
                               (c.problem if n != 1 else _singular(c.problem)).format(n=n, examples=ex, arg=arg), c.effect.format(arg=arg),
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
             ("collectives recorded as CPU ops", "collective recorded as a CPU op"))


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


def first_attrs(node) -> dict[str, Any]:
    """First attribute of each name (AttributeProto), as the simulator's lookup finds it."""
    out: dict[str, Any] = {}
    for a in node.attr:
        out.setdefault(a.name, a)
    return out


def attr_kind(a) -> str | None:
    return a.WhichOneof("value") if a is not None else None


def _value(a) -> Any:
    k = attr_kind(a)
    if k is None:
        return None
    v = getattr(a, k)
    return list(v.values) if k.endswith("_list") else v


def int_attr(a) -> int | None:
    """The integer ASTRA-sim reads from an attribute (integer kinds only), else None."""
    return int(getattr(a, attr_kind(a))) if attr_kind(a) in _INT_KINDS else None


def convertible_int(a) -> int | None:
    """Integer value of a float or numeric string attribute that --fix can rewrite as int64_val."""
    k = attr_kind(a)
    v = _value(a)
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
    if k in _INT_KINDS:
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
            if n.type != pb.METADATA_NODE:
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


def file_groups(groups: GroupFile | None, num_ranks: int, col: _Collect | None = None) -> dict[int, tuple[int, ...]]:
    """The valid groups of the file (id -> members); what is wrong with the others goes to ``col``."""
    col = col if col is not None else _Collect()
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


def _dependency_checks(col: _Collect, rf: RankFile, nodes: list) -> None:
    r = rf.rank
    ids = [n.id for n in nodes]
    deps = [(list(n.data_deps), list(n.ctrl_deps)) for n in nodes]   # one read each: field access is slow
    counts = Counter(ids)
    for d in (i for i, k in counts.items() if k > 1):
        col.add("duplicate-id", r, d, f"id {d} x {counts[d]}")
    pos = {nid: i for i, nid in enumerate(ids)}
    first_data = first_ctrl = None
    for nid, (data, ctrl) in zip(ids, deps):
        for kind, ds in (("data", data), ("ctrl", ctrl)):
            for d in ds:
                if d not in pos:
                    if kind == "data" and first_data is None:
                        first_data = d
                    if kind == "ctrl" and first_ctrl is None:
                        first_ctrl = d
                    col.add("dangling-dep", r, nid, f"node {nid} -> {d} ({kind})")
    key = ("dangling-dep", r)
    if key in col.by_code:  # the simulator checks data dependencies first
        arg = f"{first_data} in data_dep" if first_data is not None else f"{first_ctrl} in ctrl_dep"
        col.by_code[key][0] = col.by_code[key][0]._replace(arg=arg)
    # readiness as the simulator sees it: each id's position is its last record's
    parents: list[set[int]] = [set() for _ in nodes]
    self_dep = []
    for nid, (data, ctrl) in zip(ids, deps):
        i = pos[nid]
        for d in data + ctrl:
            if d in pos:
                parents[i].add(pos[d])
        if nid in data or nid in ctrl:
            self_dep.append(nid)
    live = sorted(set(pos.values()))
    edges = [(p, i) for i in live for p in parents[i] if p != i]
    order, indeg = file_first_order(len(nodes), edges)
    order_set = set(order)
    blocked_by_cycles = [i for i in live if i not in order_set]
    selfs = {pos[x] for x in self_dep}
    skipped = len(blocked_by_cycles)
    if selfs:  # with the self loops as well: everything a self dependency (or a cycle) keeps from running
        done = set(file_first_order(len(nodes), edges + [(i, i) for i in selfs])[0])
        skipped = sum(1 for i in live if i not in done)
    for x in dict.fromkeys(self_dep):
        col.add("self-dep", r, x, f"node {x}", skipped)
    if blocked_by_cycles:
        err = cycle_error("", [n.id for n in nodes], indeg, lambda u: sorted(parents[u] - {u}))
        text = str(err).split(": ", 1)[1].split(";")[0]
        col.add("cycle", r, int(re.findall(r"\d+", text)[0]), text, skipped)
    if live and all(parents[i] for i in live):
        col.add("no-ready-node", r)


def _collective_checks(col: _Collect, rf: RankFile, n, a: dict[str, Any], target: Target | None,
                       view: GroupView, splits: int) -> None:
    r = rf.rank
    ct = a.get("comm_type")
    if ct is None:
        col.add("comm-type-missing", r, n.id, f"node {n.id}", n.id)
    else:
        v = int_attr(ct)
        if v is None:
            col.add("attr-type", r, n.id, f"node {n.id} comm_type {attr_kind(ct)}")
            v = convertible_int(ct)
        if v is not None:
            if v in (_RSB, _BARRIER):
                col.add("comm-type-convertible", r, n.id, f"node {n.id} {comm_type_name(v)}")
            elif v == _BROADCAST:
                col.add("broadcast-replayed", r, n.id, f"node {n.id}")
            elif v not in _SIMULATED:
                col.add("comm-type-unsupported", r, n.id, f"node {n.id} {comm_type_name(v)}")
    cs = a.get("comm_size")
    size = None
    if cs is None:
        col.add("comm-size-missing", r, n.id, f"node {n.id}", n.id)
    else:
        size = int_attr(cs)
        if size is None:
            col.add("attr-type", r, n.id, f"node {n.id} comm_size {attr_kind(cs)}")
            size = convertible_int(cs)
    if size is not None and splits > 1 and size % splits:
        col.add("size-not-divisible", r, n.id, f"node {n.id}: {size} B", splits)
    # group
    gid = None
    pg = a.get("pg_name")
    if pg is not None:
        k = attr_kind(pg)
        text = None
        if k == "string_val":
            text = pg.string_val
        elif k is not None:
            col.add("pg-name-type", r, n.id, f"node {n.id} {k} {_value(pg)!r}")
            if k in _INT_KINDS:
                text = str(int_attr(pg))
        if text not in (None, "", "0"):
            gid, extra = stoi(text)
            if gid is None:
                col.add("pg-name-non-numeric", r, n.id, f"node {n.id} {text!r}")
            elif extra:
                col.add("pg-name-suffix", r, n.id, f"node {n.id} {text!r} read as {gid}")
            if gid == 0:
                gid = None
    inv = a.get("involved_dim")
    if gid is not None:
        members = view.members.get(gid)
        if members is None:
            arg = f"{r} ET node {n.id}, communicator group {gid}"
            members = view.from_metadata.get(gid)
            col.add("unknown-group" if members is None else "group-in-metadata-only", r, n.id,
                    f"node {n.id} group {gid}", arg)
            if members is None:
                return
        if r not in members:
            col.add("not-member", r, n.id, f"node {n.id} group {gid} {list(members)}")
        elif len(members) == 1:
            col.add("group-of-one", r, n.id, f"node {n.id} group {gid}")
        return
    # all ranks: involved_dim decides
    if inv is not None and attr_kind(inv) != "bool_list":
        col.add("involved-dim-type", r, n.id, f"node {n.id} {attr_kind(inv)}")
        return
    mask = None if inv is None else list(inv.bool_list.values)
    if target is not None:
        d = target.num_dims
        if mask is None:
            if d > 4:
                col.add("involved-dim-absent", r, n.id, f"node {n.id}", d)
            mask = [True] * min(d, 4)
        elif len(mask) < d:
            col.add("involved-dim-length", r, n.id, f"node {n.id} {len(mask)} entries", d)
            return
        elif any(mask[d:]):
            col.add("involved-dim-extra", r, n.id, f"node {n.id} {len(mask)} entries", d)
        if not any(m and target.npus_per_dim[i] > 1 for i, m in enumerate(mask[:d])):
            col.add("no-involved-dim", r, n.id, f"node {n.id} involved_dim {mask}")
    elif mask is not None and not any(mask):
        col.add("no-involved-dim", r, n.id, f"node {n.id} involved_dim {mask}")


_P2P_NEEDS = {5: ("comm_dst", "comm_tag", "comm_size"), 6: ("comm_src", "comm_tag", "comm_size")}


def _p2p_checks(col: _Collect, rf: RankFile, n, a: dict[str, Any], num_ranks: int,
                sends: dict, recvs: dict) -> None:
    r = rf.rank
    needs = _P2P_NEEDS[n.type]
    vals: dict[str, int | None] = {}
    for k in ("comm_src", "comm_dst", "comm_tag", "comm_size"):
        at = a.get(k)
        if at is None:
            vals[k] = None
            continue
        v = int_attr(at)
        if v is None:
            col.add("attr-type", r, n.id, f"node {n.id} {k} {attr_kind(at)}")
            v = convertible_int(at)
        vals[k] = v
    missing = [k for k in needs if a.get(k) is None]
    if missing:
        col.add("p2p-attr-missing", r, n.id, f"node {n.id} ({NODE_TYPE_NAMES[n.type]}) without {'/'.join(missing)}",
                missing[0])
        return
    own, peer = ("comm_src", "comm_dst") if n.type == pb.COMM_SEND_NODE else ("comm_dst", "comm_src")
    if vals[own] is None:
        vals[own] = r
    if any(v is None for v in vals.values()):
        return
    msg = "Send node should be issued by the sender" if n.type == pb.COMM_SEND_NODE else \
        "Recv node should be issued by the receiver"
    if vals[own] != r:
        col.add("p2p-wrong-rank", r, n.id, f"node {n.id} {own} {vals[own]}", msg)
        return
    if not 0 <= vals[peer] < num_ranks:
        col.add("p2p-wrong-rank", r, n.id, f"node {n.id} {peer} {vals[peer]}", msg)
        return
    if vals["comm_size"] == 0:
        col.add("p2p-size-zero", r, n.id, f"node {n.id}")
        return
    key = (vals["comm_tag"] % _TAG_MOD, vals["comm_src"], vals["comm_dst"], vals["comm_size"])
    (sends if n.type == pb.COMM_SEND_NODE else recvs).setdefault(key, []).append((r, n.id))


def _group_key(a: dict[str, Any]) -> tuple:
    """Which ranks share a collective: its group id, else all ranks (whatever its involved_dim: a
    collective over some dimensions still has a partner on every rank)."""
    pg = a.get("pg_name")
    text = pg.string_val if attr_kind(pg) == "string_val" else (
        str(int_attr(pg)) if int_attr(pg) is not None else "") if pg is not None else ""
    gid = stoi(text)[0] if text not in ("", "0") else None
    if gid:
        return ("group", gid)
    return ("all",)


def _count_checks(col: _Collect, counts: dict[tuple, Counter], view: GroupView, busy: list[int]) -> None:
    for key, per_rank in counts.items():
        if key[0] == "group":
            members = view.members.get(key[1]) or view.from_metadata.get(key[1])
            if members is None:
                continue
            what = f"group {key[1]}"
        else:
            members = busy
            what = "all ranks"
        got = {m: per_rank.get(m, 0) for m in members}
        if len(set(got.values())) > 1:
            shown = ", ".join(f"rank {m}: {k}" for m, k in list(got.items())[:4]) + (", ..." if len(got) > 4 else "")
            col.add("collective-count", None, None, f"{what}: {shown}")


def check_set(ranks: Sequence[RankFile], *, target: Target | None = None, groups: GroupFile | None = None,
              splits: int = 1) -> list[Finding]:
    """Every finding on a set, set-wide ones first, then by rank and check."""
    col = _Collect()
    present = [rf.rank for rf in ranks]
    num_ranks = max(present) + 1 if present else 0
    missing = [r for r in range(num_ranks) if r not in set(present)]
    for r in missing:
        col.add("missing-rank", None, None, f"rank {r}")
    gz = [rf for rf in ranks if rf.gzipped]
    for rf in gz:
        col.add("gzipped", None, None, rf.path.name)
    if target is not None and target.npus_count != num_ranks:
        effect = ("aborts at start: it opens one file per NPU and ranks are missing" if target.npus_count > num_ranks
                  else "runs ranks 0.." + str(target.npus_count - 1) + " only and ignores the other files")
        col.add("rank-count", None, None,
                f"the set has {num_ranks} ranks but {target.source} has {target.npus_count} NPUs", effect)
    file_ignored = groups is not None and "empty" in groups.path
    if file_ignored:
        col.add("groups-path-empty", None, None, groups.path)
    loaded = file_groups(groups, num_ranks, col)
    meta = metadata_group_table(ranks, num_ranks)
    view = GroupView({} if file_ignored else loaded, meta, file_ignored)
    sends: dict = {}
    recvs: dict = {}
    coll_counts: dict[tuple, Counter] = {}
    for rf in ranks:
        r = rf.rank
        if rf.nodes is None:
            col.add("unreadable", r, None, rf.error)
            continue
        nodes = rf.nodes
        if not nodes:
            col.add("empty-rank", r)
            continue
        _dependency_checks(col, rf, nodes)
        cpu = 0
        for n in nodes:
            a = first_attrs(n)
            t = n.type
            if not 0 <= t < len(NODE_TYPE_NAMES):
                col.add("unknown-node-type", r, n.id, f"node {n.id} type {t}")
                continue
            if t == pb.METADATA_NODE:
                col.add("metadata-node", r, n.id, f"node {n.id} {n.name!r}", n.id)
                continue
            if t == pb.INVALID_NODE:
                col.add("invalid-node", r, n.id, f"node {n.id}")
                continue
            if t in (pb.MEM_LOAD_NODE, pb.MEM_STORE_NODE):
                col.add("mem-node", r, n.id, f"node {n.id}")
                continue
            cpu_attr = a.get("is_cpu_op")
            on_cpu = is_cpu_op(cpu_attr)
            if on_cpu is None:
                k = attr_kind(cpu_attr)
                what = "std::invalid_argument (list attribute)" if k.endswith("_list") else "std::bad_cast"
                col.add("is-cpu-op-type", r, n.id, f"node {n.id} {k}", what)
                on_cpu = bool(_value(cpu_attr))
            if t in _COMM_NODES and on_cpu:
                col.add("comm-on-cpu", r, n.id, f"node {n.id} {NODE_TYPE_NAMES[t]}")
            if t == pb.COMP_NODE and on_cpu:
                cpu += 1
                if n.name.startswith("gloo:"):
                    col.add("gloo-cpu-collectives", r, n.id, f"node {n.id} {n.name!r}")
            if t == pb.COMM_COLL_NODE:
                _collective_checks(col, rf, n, a, target, view, splits)
                coll_counts.setdefault(_group_key(a), Counter())[r] += 1
            elif t in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                _p2p_checks(col, rf, n, a, num_ranks, sends, recvs)
        for _ in range(cpu):
            col.add("cpu-ops", r)
    _count_checks(col, coll_counts, view, [rf.rank for rf in ranks if rf.nodes])
    # p2p matching: the n-th send of a key matches the n-th receive of it
    for key in sorted(set(sends) | set(recvs)):
        s_list, r_list = sends.get(key, []), recvs.get(key, [])
        what = f"tag {key[0]} {key[1]} -> {key[2]}, {key[3]} B"
        for r, nid in r_list[len(s_list):]:
            col.add("p2p-unmatched-recv", r, nid, f"node {nid}: {what}")
        for r, nid in s_list[len(r_list):]:
            col.add("p2p-unmatched-send", r, nid, f"node {nid}: {what}")
    return col.findings(list(CHECKS))


def fails(findings: Iterable[Finding]) -> bool:
    """True if ASTRA-sim would abort or leave a rank unfinished on the set."""
    return any(f.severity == FAILS for f in findings)
