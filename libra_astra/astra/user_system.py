"""The user's own system.json, written back for an emitted run: every key kept as written, and
only what the run needs set (the implementation lists sized to the emitted logical network, the
optimized ``preferred-dataset-splits``), each change said in a note for the manifest and the CLI.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..timing.astra_settings import IMPLEMENTATION_KEYS
from .logical import LogicalNetwork


def user_system_config(settings: Mapping[str, Any], lnet: LogicalNetwork, splits: int,
                       path: str) -> tuple[dict[str, Any], list[str]]:
    """(system.json, notes): ``settings`` (the keys of the user's file ``path``) for ``lnet``.

    A physical dimension split into logical ones by partial communicator groups gives each piece
    its own entry in every implementation list (ASTRA-sim reads one per dimension), the physical
    dimension's."""
    system = dict(settings)
    notes: list[str] = []
    if lnet.is_split:
        changed = []
        for key in IMPLEMENTATION_KEYS.values():
            names = settings.get(key)
            if not isinstance(names, list) or len(names) != lnet.physical.num_dims:
                continue        # read_user_system refused it when the design was made
            system[key] = [names[d.physical_dim] for d in lnet.dims]
            changed.append(f"{key} {names} as {system[key]}")
        if changed:
            notes.append(f"{path}: written with one implementation per emitted dimension "
                         f"({', '.join(d.name for d in lnet.dims)}), each its physical dimension's: "
                         + "; ".join(changed))
    if settings.get("preferred-dataset-splits") != splits:
        system["preferred-dataset-splits"] = splits
        notes.append(f"{path}: preferred-dataset-splits {settings.get('preferred-dataset-splits')!r} written as "
                     f"{splits}, the value the design was optimized for")
    return system, notes
