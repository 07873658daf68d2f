"""A script of tools/ loaded as a module, for the tests that check it or use its cases."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def tool_module(name: str) -> ModuleType:
    """tools/NAME.py, executed once per call as a module named NAME."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
