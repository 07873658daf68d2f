"""Strict reading of YAML and JSON input: a value is read exactly one way, within limits.

- duplicate keys are refused (YAML and JSON parsers silently keep the last one);
- JSON ``NaN``/``Infinity`` and numbers beyond float range are refused;
- nesting depth, YAML alias expansion and file size are bounded (limits.py);
- files must be UTF-8, and every failure is a one-line LibraError naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from . import limits
from .errors import LibraError


def read_text(path: str | Path, what: str, missing_hint: str = "") -> str:
    """A UTF-8 text file's content; LibraError if missing, unreadable, too large or not UTF-8."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            cap = limits.value(limits.MAX_INPUT_BYTES)
            raw = f.read(cap + 1)
    except FileNotFoundError:
        raise LibraError(f"{p}: {what} file not found{'; ' + missing_hint if missing_hint else ''}") from None
    except IsADirectoryError:
        raise LibraError(f"{p}: is a directory, not a {what} file") from None
    except OSError as e:
        raise LibraError(f"{p}: cannot read {what} file: {e.strerror or e}") from None
    if len(raw) > cap:
        raise limits.exceeded(limits.MAX_INPUT_BYTES, str(p), f"the {what} file is larger than {cap:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise LibraError(f"{p}: not UTF-8 text (byte 0x{raw[e.start]:02x} at line {line}); save the {what} file "
                         "as UTF-8") from None


# ---------------------------------------------------------------- JSON

_DEPTH_CHUNK_BYTES = 1 << 22


def json_depth(text: str) -> int:
    """Deepest bracket nesting of JSON text (brackets inside strings skipped); linear, without recursion,
    vectorized in chunks (a regular expression over a 40 MB profile takes seconds)."""
    import numpy as np   # here, not at import: the command line's --help loads no numerical library

    raw = text.encode()
    depth = best = 0
    in_string = False   # carried across chunks, as is the run of backslashes a chunk ends with
    run = 0
    chunk = _DEPTH_CHUNK_BYTES
    for i in range(0, len(raw), chunk):
        n = min(chunk, len(raw) - i)
        a = np.frombuffer(raw, dtype=np.uint8, count=n, offset=i)
        quote = a == 34
        if run or raw.find(b"\\", i, i + n) >= 0:
            # a quote after an odd run of backslashes is escaped
            idx = np.arange(n, dtype=np.int32)
            last_other = np.maximum.accumulate(np.where(a == 92, -1, idx))
            before = np.empty(n, dtype=np.int32)
            before[0] = run
            before[1:] = idx[:-1] - last_other[:-1] + np.where(last_other[:-1] < 0, run, 0)
            quote &= before % 2 == 0
            run = int(n - 1 - last_other[-1]) + (run if last_other[-1] < 0 else 0)
        # a byte after an odd count of real quotes is inside a string (its closing quote too)
        inside = (np.cumsum(quote, dtype=np.int32) + in_string) & 1 == 1
        outside = ~(inside | quote)
        step = (((a == 91) | (a == 123)) & outside).view(np.int8) - (((a == 93) | (a == 125)) & outside).view(np.int8)
        c = np.cumsum(step, dtype=np.int64) + depth
        best = max(best, int(c.max()))
        depth = int(c[-1])
        in_string = bool(inside[-1])
    return best


class _Duplicate(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _float(text: str) -> float:
    f = float(text)
    if f in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:30]} is beyond the range of a double")
    return f


def loads_json(text: str, where: str, what: str) -> Any:
    """Parse JSON text strictly (see the module docstring)."""
    depth_cap = limits.value(limits.MAX_NESTING_DEPTH)
    depth = json_depth(text)
    if depth > depth_cap:
        raise limits.exceeded(limits.MAX_NESTING_DEPTH, where, f"JSON nested {depth:,} levels deep")
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant, parse_float=_float)
    except _Duplicate as e:
        raise LibraError(f"{where}: key {str(e)!r} appears twice in one object; keep one (JSON readers "
                         f"disagree on which wins); fix the {what} file") from None
    except json.JSONDecodeError as e:
        raise LibraError(f"{where}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}; fix the {what} "
                         "file") from None
    except (ValueError, RecursionError) as e:   # NaN/Infinity, huge numbers, int digit limit
        msg = str(e).split(";")[0][:120]
        raise LibraError(f"{where}: not valid JSON: {msg}; fix the {what} file") from None


def load_json(path: str | Path, what: str, missing_hint: str = "") -> Any:
    return loads_json(read_text(path, what, missing_hint), str(path), what)


# ---------------------------------------------------------------- YAML


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                        key_node.start_mark) from None
            if dup:
                raise _YamlDuplicate(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _YamlDuplicate(Exception):
    def __init__(self, key: Any, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


def _expanded_size(root: yaml.Node, where: str) -> None:
    """Refuse documents whose aliases expand past the node limit, or nest too deeply (no recursion)."""
    cap_nodes = limits.value(limits.MAX_YAML_NODES)
    cap_depth = limits.value(limits.MAX_NESTING_DEPTH)
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    on_path: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1
            for child in _children(node):
                total += size[id(child)]
            if total > cap_nodes:
                raise limits.exceeded(limits.MAX_YAML_NODES, where,
                                      f"YAML aliases expand to more than {cap_nodes:,} nodes")
            size[key] = total
            continue
        if key in size:
            continue
        if depth > cap_depth:
            raise limits.exceeded(limits.MAX_NESTING_DEPTH, where, f"YAML nested more than {cap_depth} levels deep")
        if key in on_path:   # a recursive alias (the composer does not allow it, but be safe)
            raise LibraError(f"{where}: YAML alias refers to itself; remove the cycle")
        on_path.add(key)
        stack.append((node, depth, True))
        for child in _children(node):
            if id(child) not in size:
                stack.append((child, depth + 1, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def loads_yaml(text: str, where: str, what: str) -> Any:
    """Parse one YAML document safely and strictly (see the module docstring)."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, where)
        return loader.construct_document(node)
    except _YamlDuplicate as e:
        raise LibraError(f"{where}: key {str(e.key)[:60]!r} appears twice in one mapping (line {e.line}); keep "
                         f"one; fix the {what} file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise LibraError(f"{where}: not valid YAML{at}; fix the syntax of the {what} file") from None
    except RecursionError:
        raise limits.exceeded(limits.MAX_NESTING_DEPTH, where, "YAML nested too deeply") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path, what: str) -> Any:
    return loads_yaml(read_text(path, what), str(path), what)
