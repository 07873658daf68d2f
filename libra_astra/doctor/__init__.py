"""``libra-astra doctor``: check a Chakra trace set against every way ASTRA-sim is known to crash
or silently misbehave, and write a copy it runs.

- :mod:`.load`: the rank files, group file and network, read raw (as the simulator reads them);
- :mod:`.catalog`: the checks' table, each with its severity, what ASTRA-sim does and the fix;
- :mod:`.attrs`, :mod:`.groups`: attribute values and communicator groups as ASTRA-sim reads them;
- :mod:`.checks`: the checks run on a set, collected as :mod:`.findings`;
- :mod:`.system`, :mod:`.system_checks`: an ASTRA-sim system.json read as ASTRA-sim reads it, and
  checked against the set's collectives and the network (``--system``);
- :mod:`.fix`: the fixed copy (``--fix --out NEWPREFIX``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import LibraError
from ..traces.files import default_groups_path
from .catalog import CHECKS, FAILS, NOTE, SEVERITIES, SYSTEM_CODES, WRONG
from .checks import check_set
from .findings import Finding, fails
from .fix import fix_set
from .load import load_groups, load_target, read_set
from .system import SystemFile, load_system


@dataclass(frozen=True)
class Diagnosis:
    """The findings on one trace set."""

    prefix: str
    num_ranks: int
    num_nodes: int
    network: str | None
    groups_file: str | None
    splits: int
    findings: tuple[Finding, ...]
    system: str | None = None        # the ASTRA-sim system.json checked against (--system)

    @property
    def fails(self) -> bool:
        """ASTRA-sim would abort, exit non-zero or leave a rank unfinished."""
        return fails(self.findings)

    def to_dict(self) -> dict[str, Any]:
        out = {"prefix": self.prefix, "ranks": self.num_ranks, "nodes": self.num_nodes, "network": self.network,
               "comm_groups": self.groups_file, "splits": self.splits, "fails_in_astra_sim": self.fails,
               "counts": {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES},
               "findings": [f.to_dict() for f in self.findings]}
        if self.system is not None:
            out["system"] = self.system
        return out


@dataclass(frozen=True)
class FixResult:
    """What ``--fix`` wrote and did, and the diagnosis of the copy (what it could not fix)."""

    out_prefix: str
    files: tuple[str, ...]
    groups_file: str | None
    actions: tuple[tuple[str, int], ...]
    after: Diagnosis

    def to_dict(self) -> dict[str, Any]:
        return {"out_prefix": self.out_prefix, "files": list(self.files), "comm_groups": self.groups_file,
                "actions": [{"action": a, "count": n} for a, n in self.actions], "after": self.after.to_dict()}


def _inputs(prefix, network, groups, on_progress=None):
    ranks = read_set(prefix, on_progress)
    target = load_target(network) if network else None
    gpath = groups if groups else default_groups_path(prefix)
    gfile = load_groups(gpath) if gpath else None
    return ranks, target, gfile


def _splits(splits: int | None, sysfile: SystemFile | None) -> int:
    """The splits sizes are checked against: ``splits``, else the system file's (when >= 1), else 1."""
    if sysfile is None or sysfile.splits < 1:
        return 1 if splits is None else splits
    if splits is not None and splits != sysfile.splits:
        raise LibraError(f"{sysfile.path}: preferred-dataset-splits is {sysfile.splits} but --splits is {splits}; "
                         "give one of them (--system sets the splits)")
    return sysfile.splits


def diagnose(prefix: str | Path, *, network: str | Path | None = None, groups: str | Path | None = None,
             splits: int | None = None, system: str | Path | None = None,
             on_progress: Callable[[int, int], None] | None = None) -> Diagnosis:
    """Check the set ``PREFIX.RANK.et[.gz]``; ``network`` (libra_astra or ASTRA-sim network YAML)
    enables the checks that need the dimensions; ``groups`` is the communicator-group JSON
    (default PREFIX.groups.json when it exists); ``splits`` the preferred-dataset-splits (default
    the system file's, else 1); ``system`` an ASTRA-sim system.json, read unmodified, whose traps are
    checked against the set; ``on_progress(files read, files)``."""
    sysfile = load_system(system) if system is not None else None
    return _diagnosis(prefix, network, groups, _splits(splits, sysfile), sysfile, on_progress)


def _diagnosis(prefix, network, groups, splits: int, sysfile: SystemFile | None, on_progress=None) -> Diagnosis:
    ranks, target, gfile = _inputs(prefix, network, groups, on_progress)
    findings = check_set(ranks, target=target, groups=gfile, splits=splits, system=sysfile)
    return Diagnosis(str(prefix), len(ranks), sum(len(rf.nodes or ()) for rf in ranks),
                     str(network) if network else None, gfile.path if gfile else None, splits, tuple(findings),
                     sysfile.path if sysfile is not None else None)


def fix(prefix: str | Path, out_prefix: str | Path, *, network: str | Path | None = None,
        groups: str | Path | None = None, splits: int | None = None, system: str | Path | None = None,
        overwrite: bool = False, on_progress: Callable[[int, int], None] | None = None,
        gpu_order: bool = False) -> FixResult:
    """Write a fixed copy of the set at ``out_prefix`` (the input is only read) and diagnose it.
    ``system`` is only read, never rewritten: its splits round the sizes, and the copy's diagnosis
    includes its findings. ``gpu_order``: also write the GPU-faithful dependencies (gpu_order.py)."""
    sysfile = load_system(system) if system is not None else None
    k = _splits(splits, sysfile)
    ranks, target, gfile = _inputs(prefix, network, groups, on_progress)
    files, gout, actions = fix_set(prefix, ranks, out_prefix, target=target, groups=gfile, splits=k,
                                   overwrite=overwrite, gpu_order=gpu_order)
    # the copy is checked against the groups written with it (PREFIX.groups.json is the default)
    after = _diagnosis(out_prefix, network, gout, k, sysfile)
    return FixResult(str(out_prefix), tuple(map(str, files)), str(gout) if gout else None, tuple(actions), after)


__all__ = ["CHECKS", "Diagnosis", "FAILS", "Finding", "FixResult", "NOTE", "SYSTEM_CODES", "WRONG", "diagnose",
           "fix"]
