"""Reading and writing files: readers whose errors name the file, atomic writers.

A written file appears whole or not at all, and an existing one is kept unless asked.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

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
    return read_bytes(path, what, missing_hint).decode()


def read_json(path: str | Path, what: str, missing_hint: str = "") -> Any:
    """Parse a JSON file; a missing file or bad JSON is a one-line LibraError naming the file."""
    p = Path(path)
    text = read_text(p, what, missing_hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise LibraError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}; fix the {what} file") from None


def load_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file (safe loader) with the same one-line errors."""
    p = Path(path)
    text = read_text(p, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise LibraError(f"{p}: not valid YAML{at}; fix the syntax of the {what} file") from None


def check_writable(path: str | Path, overwrite: bool) -> Path:
    p = Path(path)
    if p.exists() and not overwrite:
        raise LibraError(f"{p}: already exists; choose another path or pass --force to overwrite it")
    if not p.parent.exists():
        raise LibraError(f"{p}: directory {p.parent} does not exist; create it first")
    return p


def write_text_atomic(path: str | Path, text: str | bytes, overwrite: bool = False) -> Path:
    """Write via a temporary file in the same directory, then rename over the target."""
    p = check_writable(path, overwrite)
    data = text.encode() if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def write_json_atomic(path: str | Path, data: Any, overwrite: bool = False) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=1) + "\n", overwrite)
