"""ASTRA-sim inputs for a design, the simulator run, and its output.

- :func:`emit` writes network.yml, system.json, memory.json, the per-rank Chakra ET workload,
  manifest.json and run.sh into a new directory (emit.py, with the logical network of logical.py and
  the workload of workload.py).
- :func:`simulate` runs the analytical ASTRA-sim binary there and returns a :class:`SimResult`
  (run.py); :func:`parse_output` reads its standard output (parse.py).
"""

from .emit import EmitResult, emit, load_manifest
from .logical import LogicalDim, LogicalNetwork
from .parse import ParsedOutput, RankStats, parse_output
from .run import SimResult, resolve_binary, simulate

__all__ = ["EmitResult", "emit", "load_manifest", "LogicalDim", "LogicalNetwork", "ParsedOutput", "RankStats",
           "parse_output", "SimResult", "resolve_binary", "simulate"]
