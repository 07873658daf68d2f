"""Resource limits on untrusted input, each with an environment variable that overrides it.

A hostile or broken file must end in a one-line error, not in gigabytes of memory or hours of
work: a small gzip file can inflate to gigabytes, a few hundred bytes of YAML aliases can expand
to billions of nodes, a 20-dimension design asks for a million rank files. The defaults are far
above anything a real workload needs; a user with a bigger real case raises the limit by setting
the variable named in the error.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .errors import LibraError


class Limit(NamedTuple):
    name: str        # environment variable that overrides the default
    default: int
    what: str        # what is limited, for messages and the README


MAX_DECOMPRESSED_BYTES = Limit("LIBRA_ASTRA_MAX_DECOMPRESSED_BYTES", 2 << 30, "bytes of one gunzipped trace file")
MAX_INPUT_BYTES = Limit("LIBRA_ASTRA_MAX_INPUT_BYTES", 1 << 30, "bytes of one YAML or JSON input file")
MAX_NESTING_DEPTH = Limit("LIBRA_ASTRA_MAX_NESTING_DEPTH", 100, "nesting depth of YAML or JSON input")
MAX_YAML_NODES = Limit("LIBRA_ASTRA_MAX_YAML_NODES", 1_000_000,
                       "nodes of a YAML document with its aliases expanded")
MAX_RANKS = Limit("LIBRA_ASTRA_MAX_RANKS", 1 << 20, "NPUs of a network that traces are read or emitted for")
MAX_EMIT_FILES = Limit("LIBRA_ASTRA_MAX_EMIT_FILES", 1 << 17, "files of one emitted run")
SIM_OUTPUT_TAIL_LINES = Limit("LIBRA_ASTRA_SIM_TAIL_LINES", 200, "simulator output lines kept in memory for messages")
MAX_SIM_LINE_BYTES = Limit("LIBRA_ASTRA_MAX_SIM_LINE_BYTES", 1 << 16, "bytes of one simulator output line parsed")

ALL = (MAX_DECOMPRESSED_BYTES, MAX_INPUT_BYTES, MAX_NESTING_DEPTH, MAX_YAML_NODES, MAX_RANKS, MAX_EMIT_FILES,
       SIM_OUTPUT_TAIL_LINES, MAX_SIM_LINE_BYTES)


def value(limit: Limit) -> int:
    """The limit in force: the environment variable if set (a positive integer), else the default."""
    raw = os.environ.get(limit.name)
    if raw is None or raw.strip() == "":
        return limit.default
    try:
        v = int(raw.strip().replace("_", ""))
    except ValueError:
        v = 0
    if v < 1:
        raise LibraError(f"{limit.name}={raw!r}: must be a positive integer ({limit.what}; default {limit.default})")
    return v


def exceeded(limit: Limit, where: str, got: str) -> LibraError:
    """The error for input beyond ``limit``: names the input, the limit and how to raise it."""
    return LibraError(f"{where}: {got}, more than the limit of {value(limit):,} {limit.what}; if the input is "
                      f"genuine, raise the limit with {limit.name}=N")
