"""ASTRA-sim's system.json as far as it changes a collective's time (518bd51): a frozen
:class:`SystemSettings` value, checked when made, and the reading of a parsed system.json as
ASTRA-sim reads it (Sys::initialize_sys, CollectiveImplLookup). docs/astra-sim-settings.md says
what each setting does; timing/astra_collective.py times collectives with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import LibraError
from ..model.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER

KINDS = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)
POLICIES = ("LIFO", "FIFO", "EXPLICIT")
OPTIMIZATIONS = ("localBWAware", "baseline")
IMPLEMENTATION_KEYS = {ALL_REDUCE: "all-reduce-implementation", REDUCE_SCATTER: "reduce-scatter-implementation",
                       ALL_GATHER: "all-gather-implementation", ALL_TO_ALL: "all-to-all-implementation"}
_FIELDS = {ALL_REDUCE: "all_reduce", REDUCE_SCATTER: "reduce_scatter", ALL_GATHER: "all_gather",
           ALL_TO_ALL: "all_to_all"}
_C_INT_MAX = 2**31 - 1    # splits, endpoint delay and active chunks are C ints in ASTRA-sim


def parse_implementation(name: Any, where: str = "implementation") -> tuple[str, bool, int]:
    """(algorithm, flattened, window) of an implementation name as ASTRA-sim reads it:
    ``ring``, ``direct``/``directN``, ``halvingDoubling``, ``doubleBinaryTree`` and the flattened
    ``oneRing``, ``oneDirect``/``oneDirectN``, ``oneHalvingDoubling``; window -1 means n - 1."""
    if isinstance(name, str):
        flat = name.startswith("one") and name[3:4].isupper()
        base = name[3].lower() + name[4:] if flat else name
        if base in ("ring", "halvingDoubling") or (base == "doubleBinaryTree" and not flat):
            return base, flat, -1
        tail = base[6:] if base.startswith("direct") else "x"
        if tail == "":
            return "direct", flat, -1
        if tail.isdigit() and len(tail) <= 5 and int(tail) >= 1:
            return "direct", flat, int(tail)
    raise LibraError(f"{where}: unknown collective implementation {name!r}; use ring, direct, directN (N >= 1), "
                     "halvingDoubling, doubleBinaryTree, oneRing, oneDirect, oneDirectN or oneHalvingDoubling")


def _int_in(value: Any, lo: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= _C_INT_MAX:
        raise LibraError(f"system settings: {what} must be an integer in [{lo}, {_C_INT_MAX}], got {value!r}")
    return value


@dataclass(frozen=True)
class SystemSettings:
    """Every system.json value (and ``--num-queues-per-dim``) that changes a collective's time.

    Implementation tuples hold one name per network dimension; a shorter tuple leaves the
    higher dimensions out of that kind of collective, as ASTRA-sim does. ``local_mem_bw_gbps`` 0
    is ASTRA-sim's value for an absent key: it then divides by zero on the first reduction, so
    timing a reducing collective refuses it. ``scheduling_policy`` is checked but changes nothing: a rank
    runs one collective at a time, and its chunks share one priority.
    """

    all_reduce: tuple[str, ...]
    reduce_scatter: tuple[str, ...]
    all_gather: tuple[str, ...]
    all_to_all: tuple[str, ...]
    splits: int = 1
    active_chunks: int = 1
    endpoint_delay_ns: int = 10
    local_mem_bw_gbps: float = 0.0
    collective_optimization: str = "localBWAware"
    scheduling_policy: str = "LIFO"
    queues_per_dim: int = 1

    def __post_init__(self) -> None:
        for kind, field in _FIELDS.items():
            names = getattr(self, field)
            if isinstance(names, str) or not isinstance(names, (tuple, list)):
                raise LibraError(f"system settings: {IMPLEMENTATION_KEYS[kind]} must be a list of names, got {names!r}")
            object.__setattr__(self, field, tuple(names))
            for i, name in enumerate(names):
                parse_implementation(name, f"system settings: {IMPLEMENTATION_KEYS[kind]}[{i}]")
        _int_in(self.splits, 1, "preferred-dataset-splits")
        _int_in(self.active_chunks, 1, "active-chunks-per-dimension")
        _int_in(self.endpoint_delay_ns, 0, "endpoint-delay (ns)")
        _int_in(self.queues_per_dim, 1, "queues per dimension")
        mem = self.local_mem_bw_gbps
        if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not 0 <= mem < math.inf:
            raise LibraError(f"system settings: local-mem-bw must be a number of GB/s >= 0, got {mem!r}")
        if self.collective_optimization not in OPTIMIZATIONS:
            raise LibraError(f"system settings: collective-optimization must be one of {list(OPTIMIZATIONS)}, "
                             f"got {self.collective_optimization!r}")
        if self.scheduling_policy not in POLICIES:
            raise LibraError(f"system settings: scheduling-policy must be one of {list(POLICIES)}, "
                             f"got {self.scheduling_policy!r}")

    @classmethod
    def uniform(cls, num_dims: int, implementation: str = "ring", **kw: Any) -> "SystemSettings":
        """One implementation for every kind and dimension (what libra_astra emits: ring)."""
        names = (implementation,) * num_dims
        return cls(names, names, names, names, **kw)

    def implementations(self, kind: str) -> tuple[str, ...]:
        return getattr(self, _FIELDS[kind])


def settings_from_json(data: Mapping[str, Any], source: str = "system.json", queues_per_dim: int = 1) -> SystemSettings:
    """The settings of a parsed system.json, read as ASTRA-sim reads them (numbers into C ints
    truncate; absent keys take ASTRA-sim's defaults). Keys that leave ASTRA-sim undefined or that
    this model does not cover are refused."""
    if not isinstance(data, Mapping):
        raise LibraError(f"{source}: expected a JSON object, got {type(data).__name__}")
    for key in ("scheduling-policy", "collective-optimization", "preferred-dataset-splits"):
        if key not in data:
            raise LibraError(f"{source}: missing {key!r}; ASTRA-sim leaves it undefined or divides by zero; set it")
    if data.get("model-shared-bus", 0) == 1:
        raise LibraError(f"{source}: model-shared-bus 1 (LogGP memory bus) is not modeled; set it to 0")

    def num(key: str, default: Any) -> Any:
        v = data.get(key, default)      # C ints take a JSON float truncated
        return int(v) if isinstance(v, float) and math.isfinite(v) and key != "local-mem-bw" else v
    try:
        return SystemSettings(
            *(data.get(IMPLEMENTATION_KEYS[k], ()) for k in KINDS),
            splits=num("preferred-dataset-splits", 0), active_chunks=num("active-chunks-per-dimension", 1),
            endpoint_delay_ns=num("endpoint-delay", 10), local_mem_bw_gbps=num("local-mem-bw", 0.0),
            collective_optimization=data["collective-optimization"], scheduling_policy=data["scheduling-policy"],
            queues_per_dim=queues_per_dim)
    except LibraError as e:
        raise LibraError(f"{source}: {str(e).removeprefix('system settings: ')}") from None
