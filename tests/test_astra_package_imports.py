"""libra_astra.astra resolves its names on first use: ``predict`` (which needs only the manifest
reader) does not import the emitter, and the package's ``emit`` stays the function."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def test_predict_inputs_does_not_import_the_emitter():
    out = _run("import sys, libra_astra.astra.predict_inputs; "
               "print(sorted(m for m in ('libra_astra.astra.emit', 'libra_astra.astra.rewrite', "
               "'libra_astra.optimize.design') if m in sys.modules))")
    assert out == "[]"


def test_package_names_resolve_and_emit_stays_the_function():
    # the submodule emit loaded first (as libra_astra.loop does), then the package's name
    out = _run("import libra_astra.astra.emit, inspect; import libra_astra.astra as a; "
               "from libra_astra.astra import emit, simulate, load_manifest, parse_output; "
               "print(inspect.isfunction(emit), a.emit is emit, emit.__module__, simulate.__module__, "
               "load_manifest.__module__, parse_output.__module__)")
    assert out == ("True True libra_astra.astra.emit libra_astra.astra.run libra_astra.astra.manifest "
                   "libra_astra.astra.parse")


def test_unknown_name_is_an_attribute_error():
    out = _run("import libra_astra.astra as a\ntry:\n    a.nothing_here\nexcept AttributeError as e:\n    print(e)")
    assert "nothing_here" in out
