"""ASTRA-sim inputs for a design, the simulator run, and its output.

- :func:`emit` writes network.yml, system.json, memory.json, the per-rank Chakra ET workload,
  manifest.json (manifest.py) and run.sh into a new directory (emit.py, with the logical network of
  logical.py and the workload of rewrite.py or synthesize.py).
- :func:`simulate` runs the analytical ASTRA-sim binary there and returns a :class:`SimResult`
  (run.py); :func:`parse_output` reads its standard output (parse.py).
- :func:`read_run` reads a run directory back: its manifest and what simulate left there (record.py).
"""

from .emit import EmitResult, emit
from .logical import LogicalDim, LogicalNetwork
from .manifest import Manifest, load_manifest
from .parse import ParsedOutput, RankStats, parse_output
from .record import RunRecord, SimRecord, read_run
from .run import SimResult, resolve_binary, simulate

__all__ = ["EmitResult", "emit", "Manifest", "load_manifest", "LogicalDim", "LogicalNetwork", "ParsedOutput", "RankStats",
           "parse_output", "RunRecord", "SimRecord", "read_run", "SimResult", "resolve_binary", "simulate"]
