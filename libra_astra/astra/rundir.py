"""Publishing an emitted run directory, and checking its manifest before trusting it.

A new directory is built whole under a temporary name and renamed into place without
replacing anything (publish.rename_noreplace). ``emit --force`` on an existing run replaces
only what emit writes — the configuration files, run.sh, the workload files of the previous
emit and the manifest — and keeps everything else (``sim/`` results, the user's own files).
The manifest is the run's completion marker: it is first rewritten with ``state: "incomplete"``,
the files are swapped, and the new manifest is published last, so an interrupted replacement
is detected by simulate and repaired by running ``emit --force`` again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .. import publish
from ..traces import completion
from ..errors import LibraError

MANIFEST = "manifest.json"
# Top-level files emit writes (besides the workload files and the manifest).
OWN_FILES = ("network.yml", "system.json", "memory.json", "comm_groups.json", "run.sh")
INCOMPLETE = "incomplete"


def _old_workload_files(out: Path, old: dict[str, Any]) -> list[Path]:
    """Workload files the previous emit wrote (by the prefix its manifest records)."""
    wl = old.get("workload") if isinstance(old, dict) else None
    prefix = wl.get("prefix") if isinstance(wl, dict) else None
    if not isinstance(prefix, str) or not prefix.startswith("workload/") or "/" in prefix[len("workload/"):]:
        return []
    name = prefix[len("workload/"):]
    if name in ("", ".", ".."):
        return []
    pattern = re.compile(re.escape(name) + r"\.(\d+\.et|set\.json)$")
    d = out / "workload"
    if not d.is_dir():
        return []
    return [p for p in d.iterdir() if pattern.fullmatch(p.name)]


def publish_new(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``; LibraError (``tmp`` removed) if ``out`` appeared meanwhile."""
    publish.publish(tmp, out, appeared=f"{out}: appeared while emitting (another command wrote it?); it is kept: "
                    "choose another directory, or pass --force to replace an emitted one")


def replace_own(tmp: Path, out: Path) -> None:
    """Swap emit's own files in ``out`` for those built in ``tmp``; keep every other file of ``out``."""
    mpath = out / MANIFEST
    try:
        old = json.loads(mpath.read_text())
    except (OSError, ValueError):
        old = None
    if not isinstance(old, dict) or not str(old.get("format", "")).startswith("libra_astra."):
        publish.discard(tmp)
        raise LibraError(f"{out}: is no longer an emitted directory (its manifest.json changed or went away while "
                         "emitting); refusing to replace anything in it")
    trash = publish.temp_dir(out)
    try:
        # 1. mark the run unfinished, so an interruption from here on is detected
        publish.write_bytes(mpath, (json.dumps({**old, "state": INCOMPLETE}, indent=1) + "\n").encode(),
                            overwrite=True)
        # 2. mark the previous workload set as being rewritten (a reader must not take a mix of
        #    old and new rank files for a set), then move emit's previous files out of the way
        (trash / "workload").mkdir()
        new_markers = {p.name for p in (tmp / "workload").glob("*.set.json")}
        old_files = _old_workload_files(out, old)
        for p in old_files:
            if p.name.endswith(".set.json"):
                completion.begin(out / "workload" / p.name[:-len(".set.json")], 0, "libra-astra emit --force", True)
        for name in OWN_FILES:
            if os.path.lexists(out / name):
                os.rename(out / name, trash / name)
        for p in old_files:
            if p.name not in new_markers:
                os.rename(p, trash / "workload" / p.name)
        # 3. move the new files in (the workload files one by one: the directory may hold other
        #    files), the set's marker last
        for p in sorted(tmp.iterdir()):
            if p.name in (MANIFEST, "workload"):
                continue
            os.rename(p, out / p.name)
        wdir = out / "workload"
        if not os.path.lexists(wdir):
            os.rename(tmp / "workload", wdir)
        else:
            for p in sorted((tmp / "workload").iterdir()):
                if p.name in new_markers:
                    continue
                if os.path.lexists(wdir / p.name):   # same name as a file of ours: emit wrote it before
                    os.rename(wdir / p.name, trash / "workload" / p.name)
                os.rename(p, wdir / p.name)
            for name in sorted(new_markers):
                os.replace(tmp / "workload" / name, wdir / name)
        # 4. the new manifest last: the run is complete again
        os.replace(tmp / MANIFEST, mpath)
    except OSError as e:
        raise publish.write_error(out, e) from None
    finally:
        publish.discard(trash)
        publish.discard(tmp)
