"""A user's ASTRA-sim system.json as the optimizer's time model: the settings it takes from the
file (``preferred-dataset-splits``, ``local-mem-bw``), and a one-line refusal for any setting
under which that model would not be ASTRA-sim's time.

The ``pipelined`` model (timing/model.py) is exact for ring collectives in every dimension, one
active chunk, ``localBWAware``, ``endpoint-delay`` 1 (the value emit writes: the model has no
term for it) and no roofline compute model; docs/astra-sim-settings.md says what each other value
changes. ``libra-astra predict`` times any of them exactly, so the refusal points there. The file
is read by :func:`.system.load_system`, as ASTRA-sim reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import LibraError
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS
from .system import CUSTOM_KEYS, PER_NODE_CUSTOM, SystemFile, load_system

# flags that change what ASTRA-sim times (roofline: compute from FLOPs and peak-perf)
_TIMING_FLAGS = ("roofline-enabled",)
_MODELED = {"active-chunks-per-dimension": 1, "collective-optimization": "localBWAware", "endpoint-delay": 1}


@dataclass(frozen=True)
class UserSystem:
    """A system.json the optimizer models exactly: its path, the keys as written, the two
    settings the time model takes from it and a note per key ASTRA-sim ignores."""

    path: str
    data: Mapping[str, Any]
    splits: int
    local_mem_bw_gbps: float
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The design file's record (``system``)."""
        return {"path": self.path, "settings": dict(self.data)}


def _not_modeled(path: str, key: str, value: Any, why: str = "") -> LibraError:
    return LibraError(f"{path}: {key} {value!r}: the optimizer does not yet model it{why}; "
                      f"'libra-astra predict' times it exactly")


def _refusal(sf: SystemFile, num_dims: int) -> LibraError | None:
    path, data = sf.path, sf.data
    for key in sf.missing:
        return LibraError(f"{path}: {key} is missing, which leaves ASTRA-sim undefined; set it")
    for key, written, stored in sf.wrapped:
        return LibraError(f"{path}: {key} {written!r} wraps to {stored:,} in ASTRA-sim's C int; give a value "
                          f"from 1 to {2**31 - 1:,}")
    if sf.splits < 1:
        return LibraError(f"{path}: preferred-dataset-splits {data.get('preferred-dataset-splits')!r} makes "
                          "ASTRA-sim divide by zero; set it to 1 or more")
    for kind in KINDS:
        key = IMPLEMENTATION_KEYS[kind]
        names = sf.settings.implementations(kind)
        if names != ("ring",) * num_dims:
            return _not_modeled(path, key, data.get(key, []),
                                f" (it models ring in each of the network's {num_dims} dimensions)")
    stored = {"active-chunks-per-dimension": sf.active_chunks, "endpoint-delay": sf.endpoint_delay_ns,
              "collective-optimization": sf.settings.collective_optimization}
    for key, want in _MODELED.items():
        if stored[key] != want:
            return _not_modeled(path, key, data.get(key, stored[key]), f" (it models {want})")
    if not sf.settings.local_mem_bw_gbps > 0:
        return LibraError(f"{path}: local-mem-bw {data.get('local-mem-bw', 'absent')!r}: the optimizer does not "
                          "yet model it (ASTRA-sim then reduces in 0 ns through a division by zero); set local-mem-bw "
                          "in GB/s")
    for key in _TIMING_FLAGS:
        if key in sf.flags_on:
            return _not_modeled(path, key, data[key])
    for kind, _prefix in sf.custom:
        return _not_modeled(path, CUSTOM_KEYS[kind], data[CUSTOM_KEYS[kind]])
    if sf.per_node_custom is not None:
        return _not_modeled(path, PER_NODE_CUSTOM, sf.per_node_custom)
    if data.get("model-shared-bus", 0) != 0:
        return _not_modeled(path, "model-shared-bus", data["model-shared-bus"])
    return None


def _ignored_notes(sf: SystemFile) -> tuple[str, ...]:
    notes = [f"{sf.path}: {key} is ignored by ASTRA-sim (did you mean {means}?); kept as written"
             for key, means in sf.typos]
    notes += [f"{sf.path}: {key} {value!r} is ignored by ASTRA-sim ({instead}); kept as written"
              for key, value, instead in sf.not_read]
    notes += [f"{sf.path}: {key} is ignored by ASTRA-sim; kept as written" for key in sf.ignored]
    return tuple(notes)


def read_user_system(path: str | Path, num_dims: int) -> UserSystem:
    """The system.json at ``path`` for a network of ``num_dims`` dimensions; LibraError (one line
    naming the file, the key and its value) for a setting the optimizer does not model exactly."""
    sf = load_system(path)
    refusal = _refusal(sf, num_dims)
    if refusal is not None:
        raise refusal
    return UserSystem(sf.path, dict(sf.data), sf.splits, float(sf.settings.local_mem_bw_gbps), _ignored_notes(sf))
