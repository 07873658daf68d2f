"""ASTRA-sim inputs for a design, the simulator run, and its output.

- :func:`emit` writes network.yml, system.json, memory.json, the per-rank Chakra ET workload,
  manifest.json (manifest.py) and run.sh into a new directory (emit.py, with the logical network of
  logical.py and the workload of rewrite.py or synthesize.py).
- :func:`simulate` runs the analytical ASTRA-sim binary there and returns a :class:`SimResult`
  (run.py); :func:`parse_output` reads its standard output (parse.py).
- :func:`read_run` reads a run directory back: its manifest and what simulate left there (record.py).
"""

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

# Names are resolved on first use (PEP 562): importing one submodule, such as manifest for
# ``predict``, then does not pay for emit's imports (the trace rewriter, the optimizer's design).
_WHERE = {"EmitResult": "emit", "emit": "emit", "LogicalDim": "logical", "LogicalNetwork": "logical",
          "Manifest": "manifest", "load_manifest": "manifest", "ParsedOutput": "parse", "RankStats": "parse",
          "parse_output": "parse", "RunRecord": "record", "SimRecord": "record", "read_run": "record",
          "SimResult": "run", "resolve_binary": "run", "simulate": "run"}

if TYPE_CHECKING:
    from .emit import EmitResult, emit
    from .logical import LogicalDim, LogicalNetwork
    from .manifest import Manifest, load_manifest
    from .parse import ParsedOutput, RankStats, parse_output
    from .record import RunRecord, SimRecord, read_run
    from .run import SimResult, resolve_binary, simulate

__all__ = ["EmitResult", "emit", "Manifest", "load_manifest", "LogicalDim", "LogicalNetwork", "ParsedOutput", "RankStats",
           "parse_output", "RunRecord", "SimRecord", "read_run", "SimResult", "resolve_binary", "simulate"]


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


class _Package(ModuleType):
    """Keeps the function ``emit`` where loading the submodule of that name would set the module
    (as the eager ``from .emit import emit`` did: the function wins)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "emit" and isinstance(value, ModuleType):
            value = getattr(value, "emit")
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
