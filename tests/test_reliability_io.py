"""Outputs are published without replacing what appeared meanwhile; inputs are read strictly and within limits."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from libra_astra import publish
from libra_astra.errors import LibraError
from libra_astra.files import read_json, write_json_atomic, write_text_atomic
from libra_astra.model.network import load_network
from libra_astra.strictload import loads_json, loads_yaml


def test_files_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"x": 1})
        os.umask(0o077)
        write_text_atomic(tmp_path / "b.txt", "b")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o600


def test_dangling_symlink_is_not_replaced_without_force(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "missing-target.json")
    with pytest.raises(LibraError, match=r"out\.json: is a symbolic link to a missing file; choose another path or "
                                         r"pass --force"):
        write_json_atomic(link, {"x": 1})
    assert link.is_symlink()
    write_json_atomic(link, {"x": 1}, overwrite=True)
    assert not link.is_symlink() and read_json(link, "x") == {"x": 1}


def test_destination_that_appears_while_writing_is_kept(tmp_path, monkeypatch):
    dest = tmp_path / "d.json"
    real = publish.rename_noreplace

    def racing(src, dst):
        dest.write_text("someone else's\n")
        real(src, dst)
    monkeypatch.setattr(publish, "rename_noreplace", racing)
    with pytest.raises(LibraError, match=r"d\.json: appeared while this command ran"):
        write_json_atomic(dest, {"x": 1})
    assert dest.read_text() == "someone else's\n"
    assert [p.name for p in tmp_path.iterdir()] == ["d.json"]   # no temporary left


def test_concurrent_writers_exactly_one_wins(tmp_path):
    dest = tmp_path / "d.txt"
    wins, errors = [], []
    start = threading.Barrier(6)

    def writer(i):
        start.wait()
        try:
            write_text_atomic(dest, f"writer {i}\n")
            wins.append(i)
        except LibraError as e:
            errors.append(str(e))
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(errors) == 5
    assert dest.read_text() == f"writer {wins[0]}\n"
    assert all("already exists" in e or "appeared while" in e for e in errors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.txt"]


@pytest.mark.parametrize("code, text", [(errno.ENOSPC, "No space left on device"),
                                        (errno.EFBIG, "File too large"),
                                        (errno.EROFS, "Read-only file system")])
def test_write_errors_are_one_line(tmp_path, monkeypatch, code, text):
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            raise OSError(code, os.strerror(code))
    monkeypatch.setattr(os, "fdopen", Full)
    with pytest.raises(LibraError, match=rf"x\.json: cannot write \({text}\); "):
        write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(LibraError, match=r"x\.json: cannot write \(Permission denied\)"):
            write_json_atomic(ro / "x.json", {})
    finally:
        ro.chmod(0o755)


def test_read_only_directory_as_seen_by_the_writer(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(publish.tempfile, "mkstemp", refuse)
    with pytest.raises(LibraError, match=r"x\.json: cannot write \(Read-only file system\); the file system is "
                                         r"read-only; write elsewhere$"):
        write_json_atomic(tmp_path / "x.json", {})


def test_non_finite_numbers_are_never_written(tmp_path):
    with pytest.raises(LibraError, match="refusing to write a non-finite number"):
        write_json_atomic(tmp_path / "x.json", {"a": float("inf")})
    assert not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------- strict input


def test_duplicate_yaml_keys_are_refused(tmp_path):
    p = tmp_path / "n.yml"
    p.write_text("name: n\ndimensions:\n  - {name: a, topology: Ring, npus: 4}\n"
                 "dimensions:\n  - {name: b, topology: Ring, npus: 8}\n")
    with pytest.raises(LibraError, match=r"n\.yml: key 'dimensions' appears twice in one mapping \(line 4\); keep "
                                         r"one; fix the network file$"):
        load_network(p)


def test_duplicate_json_keys_are_refused():
    with pytest.raises(LibraError, match=r"g\.json: key '1' appears twice in one object"):
        loads_json('{"1": [0, 1], "1": [2, 3]}', "g.json", "comm-group")


def test_comm_group_ids_1_and_01_are_one_group(tmp_path):
    from libra_astra.demand.groups import load_comm_groups
    p = tmp_path / "g.json"
    p.write_text('{"1": [0, 1], "01": [2, 3]}')
    with pytest.raises(LibraError, match=r"g\.json: group id '01' is group 1 again"):
        load_comm_groups(p)


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1e400}'])
def test_json_non_finite_numbers_are_refused(text):
    with pytest.raises(LibraError, match=r"^d\.json: not valid JSON: .*; fix the demand file$"):
        loads_json(text, "d.json", "demand")


def test_json_huge_integer_is_one_line():
    with pytest.raises(LibraError, match=r"^d\.json: not valid JSON"):
        loads_json('{"a": ' + "9" * 5000 + "}", "d.json", "demand")


def test_deep_json_is_refused_without_recursion():
    with pytest.raises(LibraError, match=r"d\.json: JSON nested 200,000 levels deep, more than the limit of 100 "
                                         r"nesting depth of YAML or JSON input; if the input is genuine, raise the "
                                         r"limit with LIBRA_ASTRA_MAX_NESTING_DEPTH=N$"):
        loads_json("[" * 200_000 + "]" * 200_000, "d.json", "demand")


def test_depth_limit_override(monkeypatch):
    doc = "[" * 150 + "]" * 150
    with pytest.raises(LibraError):
        loads_json(doc, "d.json", "demand")
    monkeypatch.setenv("LIBRA_ASTRA_MAX_NESTING_DEPTH", "200")
    assert loads_json(doc, "d.json", "demand") is not None


def test_brackets_inside_strings_do_not_count():
    assert loads_json('{"a": "' + "[" * 500 + '"}', "d.json", "demand") == {"a": "[" * 500}


def test_deep_yaml_is_one_line():
    with pytest.raises(LibraError, match=r"^n\.yml: .*nest"):
        loads_yaml("[" * 50_000 + "]" * 50_000, "n.yml", "network")


BOMB = """a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
dimensions: *i
"""


def test_yaml_alias_bomb_is_refused(tmp_path):
    p = tmp_path / "bomb.yml"
    p.write_text(BOMB)
    with pytest.raises(LibraError, match=r"bomb\.yml: YAML aliases expand to more than 1,000,000 nodes, more than "
                                         r"the limit .* LIBRA_ASTRA_MAX_YAML_NODES=N$"):
        load_network(p)


def test_yaml_aliases_within_the_limit_are_read():
    data = loads_yaml("base: &b {npus: 4}\nother: *b\n", "x.yml", "network")
    assert data == {"base": {"npus": 4}, "other": {"npus": 4}}


def test_non_utf8_files_are_one_line(tmp_path):
    from libra_astra.optimize.constraints import load_constraints_file
    net = load_network("network_configs/sample_4x4.yml")
    p = tmp_path / "c.txt"
    p.write_bytes(b"bw[0] >= 1\n\xff\xfe\n")
    with pytest.raises(LibraError, match=r"c\.txt: not UTF-8 text \(byte 0xff at line 2\); save the constraints "
                                         r"file as UTF-8$"):
        load_constraints_file(p, net)
    y = tmp_path / "n.yml"
    y.write_bytes(b"name: \xe9t\xe9\n")
    with pytest.raises(LibraError, match=r"n\.yml: not UTF-8 text"):
        load_network(y)
    j = tmp_path / "d.json"
    j.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(LibraError, match=r"d\.json: not UTF-8 text"):
        read_json(j, "demand")


def test_bad_limit_value_is_one_line(monkeypatch):
    monkeypatch.setenv("LIBRA_ASTRA_MAX_NESTING_DEPTH", "lots")
    with pytest.raises(LibraError, match=r"LIBRA_ASTRA_MAX_NESTING_DEPTH='lots': must be a positive integer"):
        loads_json("[]", "d.json", "demand")


def _depth_by_hand(text: str) -> int:
    """Bracket depth outside strings, one character at a time (the reference for json_depth)."""
    depth = best = 0
    inside = escaped = False
    for ch in text:
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 22])
def test_json_depth_skips_brackets_in_strings_across_chunks(monkeypatch, chunk):
    import json
    import random

    from libra_astra import strictload

    monkeypatch.setattr(strictload, "_DEPTH_CHUNK_BYTES", chunk)
    leaves = ['"a\\\\"', '"x[{\\"]"', '"\\\\\\"{"', "1", '"]]]"', "null", '"\\u00e9[["', '"\\\\\\\\\\\\"', '"é{"']
    rng = random.Random(7)

    def doc(depth: int = 0) -> str:
        r = rng.random()
        if depth > 5 or r < 0.3:
            return rng.choice(leaves)
        if r < 0.65:
            return "[" + ",".join(doc(depth + 1) for _ in range(rng.randint(0, 3))) + "]"
        return "{" + ",".join(f'"k{i}\\\\[":' + doc(depth + 1) for i in range(rng.randint(0, 3))) + "}"

    for _ in range(300):
        text = doc()
        json.loads(text)
        assert strictload.json_depth(text) == _depth_by_hand(text), text
    # a closing bracket inside a string cannot hide real nesting
    assert strictload.json_depth('["]]]]", [[[["\\"]"]]]]]') == 5
