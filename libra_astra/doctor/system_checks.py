"""The system.json checks (``doctor --system``): each collective of the set planned as ASTRA-sim
518bd51 plans it under the file (``Sys::generate_collective``, ``GeneralComplexTopology``,
``CommunicatorGroup::get_collective_plan``), and the plan's phases checked against the traps.

A plan is the list of phases a collective runs: one algorithm on one ring (a dimension, the
whole machine for a ``one*`` entry, or a sub-group's members). :func:`.checks.check_set` hands
every collective and GPU compute node over while it reads the ranks; plans are made once per
(kind, group, involved_dim). What each check means is in :mod:`.catalog`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from ..model.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS, parse_implementation
from ..traces.schema import COMM_TYPE_NAMES
from .attrs import int_attr
from .findings import Collect
from .load import Target
from .system import SystemFile

_DEFAULT_INVOLVED = 4     # an absent involved_dim reads as this many true entries
_GROUP_INVOLVED = 10      # a group of every NPU runs with this many true entries


class Phase(NamedTuple):
    alg: str              # ring, direct, halvingDoubling, doubleBinaryTree
    window: int           # direct's messages in flight (-1: n - 1)
    kind: str             # the collective this phase runs
    npus: int | None      # NPUs on its ring (None: no network given)
    where: str


class Issue(NamedTuple):
    code: str
    detail: str
    arg: Any = None


def _power_of_two(n: int | None) -> bool:
    return n is None or n & (n - 1) == 0


class SystemChecks:
    """What the system checks collect while the ranks are read, and the findings they add."""

    def __init__(self, col: Collect, system: SystemFile, target: Target | None, num_ranks: int) -> None:
        self.col, self.sf = col, system
        self.dims = target.npus_per_dim if target is not None else None
        self.total = math.prod(self.dims) if self.dims is not None else num_ranks
        self.replay = "replay-only" in system.flags_on
        self.roofline = "roofline-enabled" in system.flags_on and not self.replay
        self.plans: dict[tuple, tuple[list[Phase], list[Issue]]] = {}
        self.collectives = self.comm_nodes = self.gpu_nodes = 0

    # ------------------------------------------------------------ per node

    def comm(self) -> None:
        self.comm_nodes += 1

    def gpu_compute(self, rank: int, node_id: int, attrs: dict[str, Any]) -> None:
        self.gpu_nodes += 1
        if not self.roofline:
            return
        ops, size = attrs.get("num_ops"), attrs.get("tensor_size")
        if ops is None or size is None:
            absent = "num_ops" if ops is None else "tensor_size"
            self.col.add("roofline-attrs", rank, node_id, f"node {node_id} without {absent}")
        elif int_attr(size) == 0:
            self.col.add("roofline-attrs", rank, node_id, f"node {node_id} tensor_size 0")

    def collective(self, rank: int, node_id: int, kind_value: int | None, size: int | None, gid: int | None,
                   members: tuple[int, ...] | None, mask: list[bool] | None, root: bool) -> None:
        kind = COMM_TYPE_NAMES.get(kind_value) if kind_value is not None else None
        if kind is None:
            return                 # absent or unsupported: checks of the traces
        self.collectives += 1
        if self.replay:
            return
        key = (kind, gid, None if mask is None else tuple(mask))
        if key not in self.plans:
            self.plans[key] = self._plan(kind, gid, members, mask)
        phases, issues = self.plans[key]
        for code, detail, arg in issues:
            self.col.add(code, rank, node_id, f"node {node_id} {kind}: {detail}", arg)
        if not phases:
            return
        splits = self.sf.splits
        if kind == ALL_GATHER and size is not None and 1 <= splits and size < splits:
            self.col.add("all-gather-small", rank, node_id, f"node {node_id}: {size} B", splits)
        # a group's ring pays a fixed 10 ns memory bus, not endpoint-delay: no event at t = 0
        whole = members is None or len(members) == self.total
        if root and whole and self.sf.endpoint_delay_ns == 0:
            self.col.add("endpoint-delay-zero", rank, node_id, f"node {node_id} {kind}")

    # ------------------------------------------------------------ plans

    def _plan(self, kind: str, gid: int | None, members: tuple[int, ...] | None,
              mask: list[bool] | None) -> tuple[list[Phase], list[Issue]]:
        sf, dims = self.sf, self.dims
        prefix = sf.custom_prefix(kind)
        if prefix is not None:
            issues = [Issue("custom-implementation", f"{prefix!r}, {self._custom_files(prefix)}")]
            if sf.splits != 1:      # the dataset waits for `splits` streams; the custom path runs one
                issues.append(Issue("custom-splits", f"{IMPLEMENTATION_KEYS[kind]}-custom", sf.splits))
            return [], issues
        names = sf.settings.implementations(kind)
        if not names:
            return [], [Issue("no-implementation", f"no {IMPLEMENTATION_KEYS[kind]} (or an empty one)")]
        if dims is not None and len(names) > len(dims):
            return [], []          # ASTRA-sim aborts at start: implementation-long, a finding on the set
        if members is not None and len(members) != self.total:
            return self._sub_group(kind, gid, members, names)
        inv = [True] * _GROUP_INVOLVED if members is not None else (
            list(mask) if mask is not None else [True] * _DEFAULT_INVOLVED)

        def involved(j: int) -> bool:
            return j < len(inv) and bool(inv[j])
        logical = []               # (alg, window, npus, where) per logical dimension
        flat_at = None
        for i, name in enumerate(names):
            alg, flat, window = parse_implementation(name)
            if flat:               # the logical topology ends here: one ring over every NPU
                logical.append((alg, window, self.total, f"{name} over all {self.total} NPUs"))
                flat_at = i
                break
            logical.append((alg, window, dims[i] if dims else None,
                            f"dimension {i}" + (f" ({dims[i]} NPUs)" if dims else "") + f" {name}"))
        active = [j for j, lg in enumerate(logical) if involved(j) and (lg[2] is None or lg[2] > 1)]
        issues: list[Issue] = []
        wanted = ([i for i, n in enumerate(dims) if n > 1 and involved(i)] if dims is not None
                  else [i for i in range(len(inv)) if involved(i)])
        if not wanted:
            return [], []          # no-involved-dim: a check of the traces
        if flat_at is not None:
            if not active:
                return [], [Issue("no-phase", f"involved_dim[{flat_at}] is false and {names[flat_at]} makes "
                                              f"dimension {flat_at} the whole machine")]
            if dims is not None and sum(n > 1 for n in dims) > 1:
                issues.append(Issue("one-flattened", f"{IMPLEMENTATION_KEYS[kind]} {list(names)}", self.total))
        else:
            left = [i for i in wanted if i >= len(names)]
            if left and dims is not None:
                what = (f"{IMPLEMENTATION_KEYS[kind]} has {_entries(len(names))}, involved dimension"
                        f"{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} left out")
                if not active:
                    return [], [Issue("no-phase", what)]
                issues.append(Issue("implementation-short", what))
        if not active:
            return [], [Issue("no-phase", f"involved_dim {list(inv)} against {len(logical)} logical dimensions")]
        if kind != ALL_REDUCE or sf.settings.collective_optimization == "baseline":
            order = [(kind, j) for j in active]
        else:                      # localBWAware: reduce-scatter up, all-reduce on the last, all-gather down
            order = ([(REDUCE_SCATTER, j) for j in active[:-1]] + [(ALL_REDUCE, active[-1])]
                     + [(ALL_GATHER, j) for j in reversed(active[:-1])])
        if kind == ALL_REDUCE and "collective-optimization" in sf.missing and len(active) > 1:
            issues.append(Issue("optimization-absent", f"{len(active)} dimensions"))
        phases = [Phase(logical[j][0], logical[j][1], k, logical[j][2], logical[j][3]) for k, j in order]
        return phases, issues + self._phase_issues(kind, phases)

    def _sub_group(self, kind: str, gid: int | None, members: tuple[int, ...],
                   names: tuple[str, ...]) -> tuple[list[Phase], list[Issue]]:
        n = len(members)
        where = f"group {gid} ({n} NPUs)"
        issues = []
        if self.sf.endpoint_delay_ns != 10:
            issues.append(Issue("sub-group-endpoint-delay", where, self.sf.endpoint_delay_ns))
        if len(names) > 1:         # CommunicatorGroup::get_collective_plan replaces several names by ring
            # on 2 NPUs direct and halvingDoubling send what ring sends: only a tree differs there
            if any(x != "ring" for x in names) and (n > 2 or "doubleBinaryTree" in names):
                issues.append(Issue("sub-group-ring", f"{where}, {IMPLEMENTATION_KEYS[kind]} {list(names)}"))
            phases = [Phase("ring", -1, kind, n, where)]
        else:
            alg, _, window = parse_implementation(names[0])
            if alg == "doubleBinaryTree":
                return [], issues + [Issue("tree-sub-group", where)]
            phases = [Phase(alg, window, kind, n, f"{where} {names[0]}")]
        return phases, issues + self._phase_issues(kind, phases)

    def _phase_issues(self, kind: str, phases: list[Phase]) -> list[Issue]:
        out: dict[str, Issue] = {}

        def add(code: str, detail: str, arg: Any = None) -> None:
            out.setdefault(code, Issue(code, detail, arg))
        reducing = None
        for p in phases:
            if p.alg == "halvingDoubling":
                if p.kind == ALL_TO_ALL:
                    add("hd-all-to-all", p.where)
                if not _power_of_two(p.npus):
                    add("hd-not-power-of-two", p.where)
            elif p.alg == "doubleBinaryTree":
                if not _power_of_two(p.npus):
                    add("tree-not-power-of-two", p.where)
                if p.kind != ALL_REDUCE:
                    add("tree-as-all-reduce", f"{p.kind} phase on {p.where}")
            elif p.alg == "direct":
                lanes = p.window if p.npus is None else (p.npus - 1 if p.window < 0 else min(p.window, p.npus - 1))
                if lanes < 0 or lanes > 1:
                    add("direct-unaware", p.where)
            if reducing is None and (p.kind in (ALL_REDUCE, REDUCE_SCATTER) or p.alg == "doubleBinaryTree"):
                reducing = p
        if reducing is not None and self.sf.local_mem_bw_gbps <= 0:
            add("local-mem-bw-zero", f"{reducing.kind} phase on {reducing.where}",
                "0" if "local-mem-bw" in self.sf.keys else "absent (0)")
        return list(out.values())

    def _custom_files(self, prefix: str) -> str:
        missing = [i for i in range(self.total) if not Path(f"{prefix}.{i}.et").is_file()]
        if not missing:
            return f"{prefix}.0.et .. {prefix}.{self.total - 1}.et found from the current directory"
        return f"{prefix}.{missing[0]}.et not found from the current directory"

    # ------------------------------------------------------------ the set

    def finish(self) -> None:
        """The findings on the file as a whole, against what the set holds."""
        col, sf, dims = self.col, self.sf, self.dims
        if dims is not None:
            for kind in KINDS:
                names = sf.settings.implementations(kind)
                if len(names) > len(dims):
                    col.add("implementation-long", None, None, f"{IMPLEMENTATION_KEYS[kind]} has "
                            f"{_entries(len(names))}, the network {len(dims)} dimension{'s' if len(dims) > 1 else ''}")
        else:
            col.add("no-network", None)
        if self.replay and self.comm_nodes:
            col.add("replay-only", None, None, "", self.comm_nodes)
        live = self.collectives and not self.replay
        if live and sf.splits < 1:
            effect = ("divides by zero at the first collective (SIGFPE)" if sf.splits == 0 else
                      "the chunk size is a huge unsigned number: the run hangs")
            col.add("splits-invalid", None, None, f"preferred-dataset-splits is read as {sf.splits}"
                    if "preferred-dataset-splits" in sf.keys else "preferred-dataset-splits is absent (read as 0)",
                    effect)
        if live and sf.endpoint_delay_ns < 0:
            col.add("endpoint-delay-negative", None, None, f"endpoint-delay is read as {sf.endpoint_delay_ns}")
        if live and sf.active_chunks < 1:
            col.add("active-chunks-invalid", None, None, f"active-chunks-per-dimension is read as {sf.active_chunks}")
        if live and sf.active_chunks > 1 and sf.splits > 1:
            col.add("active-chunks", None, None, f"active-chunks-per-dimension {sf.active_chunks}", sf.splits)
        for key, written, stored in sf.wrapped:
            col.add("int-wrapped", None, None, f"{key} {written} is read as {stored}")
        for key, value in sf.flags_misread:
            col.add("flag-false-on", None, None, f"{key} {_json(value)} is read as on")
        for key, close in sf.typos:
            col.add("key-typo", None, None, f"{key!r} (did you mean {close!r}?)")
        for key, value, instead in sf.not_read:
            col.add("setting-ignored", None, None, f"{key} {_json(value)}", instead)
        for key in sf.ignored:
            col.add("key-ignored", None, None, repr(key))
        if "scheduling-policy" in sf.missing:
            col.add("policy-absent", None)
        if self.roofline and self.gpu_nodes:
            zero = [f"{k} {v:g}" for k, v in (("peak-perf", sf.peak_perf_tflops),
                                               ("local-mem-bw", sf.local_mem_bw_gbps)) if v <= 0]
            if zero:
                col.add("roofline-zero", None, None, " and ".join(zero), self.gpu_nodes)
            for _ in range(self.gpu_nodes):
                col.add("roofline-on", None)
        if sf.per_node_custom is not None:
            found = ("found from the current directory" if Path(sf.per_node_custom).is_file() else
                     "not found from the current directory (ASTRA-sim aborts at start when it cannot open it)")
            col.add("per-node-custom", None, None, f"{sf.per_node_custom!r}, {found}")


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _json(value: Any) -> str:
    return json.dumps(value)
