"""The ASTRA-sim system.json ``doctor --system`` checks a trace set against, read as ASTRA-sim
518bd51 reads it (``Sys::initialize_sys``, ``CollectiveImplLookup``).

The implementation lists, policy, optimization and local-mem-bw are read by
:func:`..timing.astra_settings.settings_from_json`. The values it refuses but ASTRA-sim accepts
(and then misbehaves on: splits < 1, a negative endpoint-delay, no active chunk, numbers beyond a
C int, a missing policy or optimization) are read here first, as ASTRA-sim stores them, and
replaced by valid ones in the copy handed to it: what ASTRA-sim does with them is a finding of
:mod:`.system_checks`, not an error. A file ASTRA-sim cannot read at all (not JSON, a value of the
wrong type, an unknown implementation name) is a one-line LibraError naming the file and the key.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import LibraError
from ..files import read_json
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS, SystemSettings, settings_from_json

CUSTOM_KEYS = {k: v + "-custom" for k, v in IMPLEMENTATION_KEYS.items()}
PER_NODE_CUSTOM = "per-node-custom-implementation"
FLAGS = ("roofline-enabled", "trace-enabled", "replay-only", "track-local-mem")
_NUMBERS = ("peak-perf", "local-reduction-delay", "L", "o", "g", "G", "model-shared-bus")
_STRINGS = ("local-mem-trace-filename", PER_NODE_CUSTOM)
READ_KEYS = frozenset(("scheduling-policy", "collective-optimization", "preferred-dataset-splits", "endpoint-delay",
                       "active-chunks-per-dimension", "local-mem-bw", *_NUMBERS, *_STRINGS, *FLAGS,
                       *IMPLEMENTATION_KEYS.values(), *CUSTOM_KEYS.values()))
# keys older ASTRA-sim releases read from this file, and command-line options: 518bd51 ignores
# them here, so only a value asking for something else than what it does is worth a warning
NOT_READ = {"boost-mode": (0, "boost mode is off"),
            "intra-dimension-scheduling": ("fifo", "chunks of a dimension run first come first served"),
            "inter-dimension-scheduling": ("ascending", "dimensions are visited in ascending order"),
            "num-queues-per-dim": (1, "a command-line option (--num-queues-per-dim, default 1)"),
            "injection-scale": (1, "a command-line option (--injection-scale, default 1)"),
            "comm-scale": (1, "a command-line option (--comm-scale, default 1)"),
            "rendezvous-protocol": (0, "a command-line option (--rendezvous-protocol, default off)")}
_C_INT = 2**32
_C_INT_MAX = 2**31 - 1
# values a user writes to mean "off" that ASTRA-sim's `j[key] != 0` reads as on
_OFF_WORDS = frozenset(("", "0", "false", "no", "off", "none", "null"))


@dataclass(frozen=True)
class SystemFile:
    """A system.json as ASTRA-sim reads it: ``settings`` (validated) and the raw facts the checks need."""

    path: str
    keys: frozenset[str]                          # the keys written
    settings: SystemSettings
    splits: int                                   # preferred-dataset-splits as stored (absent: 0)
    endpoint_delay_ns: int                        # as stored (absent: 10)
    active_chunks: int                            # as stored (absent: 1)
    peak_perf_tflops: float                       # absent: 0
    flags_on: frozenset[str]                      # FLAGS that are on
    flags_misread: tuple[tuple[str, Any], ...]    # (key, value): written as off, read as on
    missing: tuple[str, ...]                      # scheduling-policy / collective-optimization absent
    wrapped: tuple[tuple[str, Any, int], ...]     # (key, written, stored): C int overflow
    custom: tuple[tuple[str, str], ...]           # (collective kind, ET prefix)
    per_node_custom: str | None
    typos: tuple[tuple[str, str], ...]            # (key, the read key it most likely means)
    not_read: tuple[tuple[str, Any, str], ...]    # (key, value, what ASTRA-sim does instead): value not the default
    ignored: tuple[str, ...]                      # other keys nothing reads
    data: Mapping[str, Any] = field(default_factory=dict)   # the file as written, for emit to keep

    @property
    def local_mem_bw_gbps(self) -> float:
        return self.settings.local_mem_bw_gbps

    def custom_prefix(self, kind: str) -> str | None:
        return dict(self.custom).get(kind)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _c_int(path: str, key: str, v: int | float) -> int:
    """What ``int x = j[key]`` stores: integers wrap modulo 2^32, floats truncate."""
    if isinstance(v, float):
        if not -_C_INT_MAX - 1 <= v < _C_INT_MAX + 1:
            raise LibraError(f"{path}: {key} {v!r} is beyond a C int, which ASTRA-sim cannot store (undefined); "
                             f"give an integer from 0 to {_C_INT_MAX:,}")
        return math.trunc(v)
    return (v + 2**31) % _C_INT - 2**31


def _flag_on(v: Any) -> bool:
    # nlohmann's `j[key] != 0` is false only for a number equal to 0
    return not (_is_number(v) and v == 0)


def _misread_off(v: Any) -> bool:
    return v is None or v is False or (isinstance(v, str) and v.strip().lower() in _OFF_WORDS)


def _same(a: Any, default: Any) -> bool:
    """A written value equal to a setting's default (strings ignoring case, booleans as 0/1)."""
    if isinstance(default, str):
        return isinstance(a, str) and a.strip().lower() == default
    return isinstance(a, (int, float)) and a == default


def _check_types(path: str, data: dict[str, Any]) -> None:
    """The keys settings_from_json does not read, typed as ASTRA-sim converts them."""
    for key in _NUMBERS:
        if key in data and not isinstance(data[key], (int, float)):
            raise LibraError(f"{path}: {key} must be a number, got {data[key]!r} (ASTRA-sim aborts on a "
                             "json type_error); fix the value")
    for key in _STRINGS:
        if key in data and not isinstance(data[key], str):
            raise LibraError(f"{path}: {key} must be a string (a file path), got {data[key]!r}; fix the value")
    for key in CUSTOM_KEYS.values():
        v = data.get(key)
        if key in data and not (isinstance(v, list) and len(v) == 1 and isinstance(v[0], str) and v[0]):
            raise LibraError(f"{path}: {key} must be a list of exactly one ET prefix (read as PREFIX.RANK.et, one "
                             f"program for all dimensions), got {v!r}; ASTRA-sim aborts on anything else")


def _keys(data: dict[str, Any]) -> tuple[tuple, tuple, tuple]:
    typos, not_read, ignored = [], [], []
    known = sorted(READ_KEYS | set(NOT_READ))
    for key in data:
        if key in READ_KEYS:
            continue
        if key in NOT_READ:
            default, instead = NOT_READ[key]
            if _same(data[key], default):
                ignored.append(key)
            else:
                not_read.append((key, data[key], instead))
            continue
        norm = key.strip().lower().replace("_", "-").replace(" ", "-")
        exact = [k for k in known if k.lower() == norm]
        close = exact or difflib.get_close_matches(norm, known, n=1, cutoff=0.8)
        if close and close[0] in READ_KEYS:
            typos.append((key, close[0]))
        else:
            ignored.append(key)
    return tuple(typos), tuple(not_read), tuple(ignored)


def load_system(path: str | Path) -> SystemFile:
    """Read an ASTRA-sim system.json for the doctor; LibraError (one line) if ASTRA-sim cannot read it."""
    path = str(path)
    data = read_json(path, "system")
    if not isinstance(data, dict):
        raise LibraError(f"{path}: an ASTRA-sim system file is a JSON object ({{\"scheduling-policy\": \"LIFO\", "
                         f"...}}), got {type(data).__name__}; fix the file")
    _check_types(path, data)
    clean = dict(data)
    missing = tuple(k for k in ("scheduling-policy", "collective-optimization") if k not in data)
    clean.setdefault("scheduling-policy", "LIFO")
    clean.setdefault("collective-optimization", "localBWAware")
    stored: dict[str, int] = {}
    wrapped = []
    for key, absent, lowest in (("preferred-dataset-splits", 0, 1), ("endpoint-delay", 10, 0),
                                ("active-chunks-per-dimension", 1, 1)):
        v = data.get(key, absent)
        if not _is_number(v):
            continue            # settings_from_json names the key and the type it needs
        stored[key] = _c_int(path, key, v)
        if isinstance(v, int) and stored[key] != v:
            wrapped.append((key, v, stored[key]))
        clean[key] = max(stored[key], lowest)
    if _is_number(clean.get("model-shared-bus")):
        clean["model-shared-bus"] = 0   # ASTRA-sim's LogGP bus: a memory model, not a trap
    settings = settings_from_json(clean, path)
    flags_on = frozenset(k for k in FLAGS if k in data and _flag_on(data[k]))
    misread = tuple((k, data[k]) for k in FLAGS if k in data and _flag_on(data[k]) and _misread_off(data[k]))
    custom = tuple((kind, data[CUSTOM_KEYS[kind]][0]) for kind in KINDS if CUSTOM_KEYS[kind] in data)
    typos, not_read, ignored = _keys(data)
    peak = data.get("peak-perf", 0)
    # settings_from_json refused any of the three that is not a number: each is in stored
    return SystemFile(path, frozenset(data), settings, stored["preferred-dataset-splits"], stored["endpoint-delay"],
                      stored["active-chunks-per-dimension"],
                      float(peak), flags_on, misread, missing, tuple(wrapped), custom, data.get(PER_NODE_CUSTOM),
                      typos, not_read, ignored, data)
