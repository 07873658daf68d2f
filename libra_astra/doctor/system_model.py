"""A user's ASTRA-sim system.json as the optimizer's time model: the settings it takes from the
file (``preferred-dataset-splits``, ``local-mem-bw``, and as a ``SystemTiming`` the
implementations, ``active-chunks-per-dimension``, ``endpoint-delay``, ``collective-optimization``),
and a one-line refusal for any setting the model does not follow.

The model (timing/system_phases.py, system_flow.py, system_trees.py) follows ring, direct,
halvingDoubling and doubleBinaryTree in any dimension, any splits and active chunks, both
collective optimizations, any endpoint delay and local-mem-bw; docs/astra-sim-settings.md says
what each value changes. The flattened one* variants, direct windows, custom collectives, the
roofline compute model and the shared memory bus are refused with a pointer to
``libra-astra predict``, which times them.
The file is read by :func:`.system.load_system`, as ASTRA-sim reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import LibraError
from ..model.network import Dimension
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS
from ..timing.system_phases import SystemTiming, check_timing
from .system import CUSTOM_KEYS, PER_NODE_CUSTOM, SystemFile, load_system

# flags that change what ASTRA-sim times (roofline: compute from FLOPs and peak-perf)
_TIMING_FLAGS = ("roofline-enabled",)


@dataclass(frozen=True)
class UserSystem:
    """A system.json the optimizer models: its path, the keys as written, the settings the time
    model takes from it and a note per key ASTRA-sim ignores (or reads in a way worth knowing).
    ``local_mem_bw_gbps`` None: absent or 0, which ASTRA-sim turns into free reductions."""

    path: str
    data: Mapping[str, Any]
    splits: int
    local_mem_bw_gbps: float | None
    notes: tuple[str, ...]
    timing: SystemTiming | None = None

    def to_dict(self) -> dict[str, Any]:
        """The design file's record (``system``)."""
        return {"path": self.path, "settings": dict(self.data)}


def _not_modeled(path: str, key: str, value: Any, why: str = "") -> LibraError:
    return LibraError(f"{path}: {key} {value!r}: the optimizer does not yet model it{why}; "
                      f"'libra-astra predict' times it exactly")


def _refusal(sf: SystemFile, dims: tuple[Dimension, ...]) -> LibraError | None:
    path, data = sf.path, sf.data
    for key in sf.missing:
        return LibraError(f"{path}: {key} is missing, which leaves ASTRA-sim undefined; set it")
    for key, written, stored in sf.wrapped:
        return LibraError(f"{path}: {key} {written!r} wraps to {stored:,} in ASTRA-sim's C int; give a value "
                          f"from 1 to {2**31 - 1:,}")
    if sf.splits < 1:
        return LibraError(f"{path}: preferred-dataset-splits {data.get('preferred-dataset-splits')!r} makes "
                          "ASTRA-sim divide by zero; set it to 1 or more")
    if sf.active_chunks < 1:
        return LibraError(f"{path}: active-chunks-per-dimension {data.get('active-chunks-per-dimension')!r} runs no "
                          "chunk (ASTRA-sim never ends); set it to 1 or more")
    if sf.endpoint_delay_ns < 1:
        return LibraError(f"{path}: endpoint-delay {data.get('endpoint-delay')!r}: ASTRA-sim aborts on a collective "
                          "that starts at time 0 with it; set it to 1 or more")
    for kind, _prefix in sf.custom:
        return _not_modeled(path, CUSTOM_KEYS[kind], data[CUSTOM_KEYS[kind]])
    if sf.per_node_custom is not None:
        return _not_modeled(path, PER_NODE_CUSTOM, sf.per_node_custom)
    for key in _TIMING_FLAGS:
        if key in sf.flags_on:
            return _not_modeled(path, key, data[key], " (compute from each node's FLOPs and peak-perf)")
    if data.get("model-shared-bus", 0) != 0:
        return _not_modeled(path, "model-shared-bus", data["model-shared-bus"])
    try:
        check_timing(SystemTiming.from_settings(sf.settings), dims, path)
    except LibraError as e:
        return e
    return None


def _ignored_notes(sf: SystemFile) -> tuple[str, ...]:
    notes = [f"{sf.path}: {key} is ignored by ASTRA-sim (did you mean {means}?); kept as written"
             for key, means in sf.typos]
    notes += [f"{sf.path}: {key} {value!r} is ignored by ASTRA-sim ({instead}); kept as written"
              for key, value, instead in sf.not_read]
    notes += [f"{sf.path}: {key} is ignored by ASTRA-sim; kept as written" for key in sf.ignored]
    return tuple(notes)


def _tree_note(sf: SystemFile) -> tuple[str, ...]:
    keys = [IMPLEMENTATION_KEYS[k] for k in KINDS if "doubleBinaryTree" in sf.settings.implementations(k)]
    if not keys:
        return ()
    return (f"{sf.path}: doubleBinaryTree in {', '.join(keys)}: each tree collective is timed as its slowest rank "
            "(exact for the collective alone); ASTRA-sim's ranks that finish a tree early start what follows "
            "early, so a chain of them can take less than the model says; 'libra-astra predict' times every rank",)


def read_user_system(path: str | Path, dims: tuple[Dimension, ...]) -> UserSystem:
    """The system.json at ``path`` for a network with dimensions ``dims``; LibraError (one line
    naming the file, the key and its value) for a setting the optimizer does not model."""
    sf = load_system(path)
    refusal = _refusal(sf, tuple(dims))
    if refusal is not None:
        raise refusal
    notes = _ignored_notes(sf) + _tree_note(sf)
    mem = float(sf.settings.local_mem_bw_gbps) or None
    if mem is None:
        notes += (f"{sf.path}: local-mem-bw {sf.data.get('local-mem-bw', 'absent')!r}: ASTRA-sim reduces in 0 ns "
                  "(a division by zero); modeled so",)
    return UserSystem(sf.path, dict(sf.data), sf.splits, mem, notes, SystemTiming.from_settings(sf.settings))
