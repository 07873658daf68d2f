"""Atomic output: a file appears whole or not at all, and an existing one is kept unless asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import publish
from .strictload import load_json


def read_json(path: str | Path, what: str, missing_hint: str = "") -> Any:
    """Parse a JSON file strictly; any problem is a one-line LibraError naming the file."""
    return load_json(path, what, missing_hint)


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
        from .errors import LibraError
        raise LibraError(f"{path}: refusing to write a non-finite number (NaN or infinity); "
                         "check the inputs for values that overflow") from None
    return write_text_atomic(path, text + "\n", overwrite)
