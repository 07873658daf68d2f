"""Reading and writing files: readers whose errors name the file, atomic writers.

A written file appears whole or not at all, and an existing one is kept unless asked. Input is
read strictly and within limits (strictload.py); output is published without replacing what
appeared meanwhile (publish.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import publish, strictload
from .errors import LibraError


def read_bytes(path: str | Path, what: str, missing_hint: str = "") -> bytes:
    """A whole file; a missing or unreadable file is a one-line LibraError naming it."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise LibraError(f"{p}: {what} file not found{'; ' + missing_hint if missing_hint else ''}") from None
    except IsADirectoryError:
        raise LibraError(f"{p}: is a directory, not a {what} file") from None
    except OSError as e:
        raise LibraError(f"{p}: cannot read {what} file: {e.strerror}") from None


def read_text(path: str | Path, what: str, missing_hint: str = "") -> str:
    """A UTF-8 text file (size-limited); anything else is a one-line LibraError."""
    return strictload.read_text(path, what, missing_hint)


def read_json(path: str | Path, what: str, missing_hint: str = "") -> Any:
    """Parse a JSON file strictly; any problem is a one-line LibraError naming the file."""
    return strictload.load_json(path, what, missing_hint)


def load_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file strictly (safe loader, no duplicate keys, bounded aliases and depth)."""
    return strictload.load_yaml(path, what)


def check_writable(path: str | Path, overwrite: bool) -> Path:
    return publish.check_new(path, overwrite)


def write_text_atomic(path: str | Path, text: str | bytes, overwrite: bool = False) -> Path:
    """Write via a temporary file in the same directory, then publish it (no-replace unless ``overwrite``)."""
    return publish.write_bytes(path, text.encode() if isinstance(text, str) else text, overwrite)


def write_json_atomic(path: str | Path, data: Any, overwrite: bool = False) -> Path:
    # allow_nan=False: a NaN or infinity here is a bug upstream, never something to write for a reader.
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except ValueError:
        raise LibraError(f"{path}: refusing to write a non-finite number (NaN or infinity); "
                         "check the inputs for values that overflow") from None
    return write_text_atomic(path, text + "\n", overwrite)
