"""Publishing outputs: written under a fresh temporary name, then put in place without replacing.

Every output is first written whole under a hidden temporary name in its destination's
directory, then published:

- without ``replace``: by a rename that refuses to replace (``renameat2(RENAME_NOREPLACE)``
  where the kernel has it, else a hard link and an unlink), so a file or directory that appeared
  at the destination while the command ran is never overwritten: of two concurrent writers to
  one destination exactly one wins, and the other gets a one-line error;
- with ``replace`` (``--force``): by ``os.replace``, which swaps a file in one step.

Temporary names are registered while they exist, so an interrupted command can remove them
(:func:`remove_temporaries`) and say what it had already published (:func:`published`).
New files get the permissions the umask allows, like those of any other tool.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from .errors import LibraError

_lock = threading.Lock()
_temporaries: set[str] = set()
_published: list[str] = []
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _load_renameat2():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()


def current_umask() -> int:
    """The process umask: from /proc where the kernel shows it, else by setting and restoring it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _lock:   # setting it briefly is visible to other threads; only a fallback
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def write_error(path: str | Path, e: OSError) -> LibraError:
    """One line for a failed write: which file, what the system said, what to do."""
    reason = e.strerror or str(e)
    hint = {errno.ENOSPC: "free some space or write elsewhere",
            errno.EDQUOT: "free some space or write elsewhere",
            errno.EFBIG: "the file system refuses a file this large; write elsewhere",
            errno.EROFS: "the file system is read-only; write elsewhere",
            errno.EACCES: "no permission to write there; choose a writable directory",
            errno.EPERM: "no permission to write there; choose a writable directory"}.get(e.errno or 0,
                                                                                          "choose another path")
    return LibraError(f"{path}: cannot write ({reason}); {hint}")


def _register(tmp: str) -> None:
    with _lock:
        _temporaries.add(tmp)


def _unregister(tmp: str) -> None:
    with _lock:
        _temporaries.discard(tmp)


def remove_temporaries() -> list[str]:
    """Remove every temporary file or directory still registered (after an interruption)."""
    with _lock:
        left = sorted(_temporaries)
        _temporaries.clear()
    for t in left:
        if os.path.isdir(t) and not os.path.islink(t):
            shutil.rmtree(t, ignore_errors=True)
        else:
            try:
                os.unlink(t)
            except OSError:
                pass
    return left


def published() -> list[str]:
    """Paths published since :func:`forget_published` that still exist, in order (inside a
    temporary directory that was removed, they are gone)."""
    with _lock:
        done = list(_published)
    return [p for p in done if os.path.lexists(p)]


def forget_published() -> None:
    """Start a new account of published paths (at the start of a command)."""
    with _lock:
        _published.clear()


def _note_published(path: str) -> None:
    with _lock:
        _published.append(path)
        if len(_published) > 100_000:
            del _published[:50_000]


def _temporary(dest: Path, make, mode: int) -> str:
    """Make a registered temporary next to ``dest`` and give it the umask's permissions (mkstemp and
    mkdtemp make 0600/0700 entries; an output should honour the umask like any other tool's)."""
    try:
        made = make(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as e:
        raise write_error(dest, e) from None
    tmp = made[1] if isinstance(made, tuple) else made
    _register(tmp)
    try:
        os.chmod(tmp, mode & ~current_umask())
    except OSError:
        pass
    return made


def temp_file(dest: Path) -> tuple[int, str]:
    """A new, registered temporary file next to ``dest``, with umask permissions: (fd, path)."""
    return _temporary(dest, tempfile.mkstemp, 0o666)


def temp_dir(dest: Path) -> Path:
    """A new, registered temporary directory next to ``dest`` with umask permissions."""
    return Path(_temporary(dest, tempfile.mkdtemp, 0o777))


@contextmanager
def building(tmp: str | Path, dest: str | Path):
    """Work on the temporary ``tmp`` meant for ``dest``: any error removes ``tmp``, and an OSError
    becomes the one-line write error that names ``dest``."""
    try:
        yield
    except OSError as e:
        discard(tmp)
        raise write_error(dest, e) from None
    except BaseException:
        discard(tmp)
        raise


def discard(tmp: str | Path) -> None:
    """Remove a temporary file or directory made here (an error path)."""
    t = os.fspath(tmp)
    if os.path.isdir(t) and not os.path.islink(t):
        shutil.rmtree(t, ignore_errors=True)
    else:
        try:
            os.unlink(t)
        except OSError:
            pass
    _unregister(t)


def _appeared(dest: Path) -> LibraError:
    return LibraError(f"{dest}: appeared while this command ran (another command wrote it?); it is kept: choose "
                      "another path, or pass --force to replace it")


def rename_noreplace(src: str | Path, dest: str | Path) -> None:
    """Rename ``src`` to ``dest`` unless ``dest`` exists (even as a dangling link); FileExistsError if it does."""
    s, d = os.fspath(src), os.fspath(dest)
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(s), _AT_FDCWD, os.fsencode(d), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), d)
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), d)
    if os.path.isdir(s) and not os.path.islink(s):
        # No hard links for directories: a rename onto an existing non-empty directory fails, and
        # the existence check just before narrows the window for an empty one.
        if os.path.lexists(d):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), d)
        os.rename(s, d)
        return
    try:
        os.link(s, d, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(d):   # a file system without hard links: check, then rename
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), d) from None
        os.rename(s, d)
        return
    os.unlink(s)


def publish(tmp: str | Path, dest: str | Path, replace: bool = False, appeared: str | None = None) -> None:
    """Put the finished temporary ``tmp`` at ``dest``; without ``replace`` an existing ``dest`` is an error
    (``appeared``, when given, is its message).

    ``tmp`` is removed either way.
    """
    d = Path(dest)
    t = os.fspath(tmp)
    try:
        if replace:
            if os.path.isdir(d) and not os.path.islink(d):
                raise LibraError(f"{d}: is a directory; refusing to replace it with a file")
            os.replace(t, d)
        else:
            rename_noreplace(t, d)
    except FileExistsError:
        discard(t)
        raise (LibraError(appeared) if appeared else _appeared(d)) from None
    except LibraError:
        discard(t)
        raise
    except OSError as e:
        discard(t)
        raise write_error(d, e) from None
    _unregister(t)
    _note_published(str(d))


def check_new(path: str | Path, overwrite: bool) -> Path:
    """Refuse an existing ``path`` (a dangling symbolic link counts) unless ``overwrite``; its directory must exist."""
    p = Path(path)
    if os.path.lexists(p) and not overwrite:
        what = "is a symbolic link to a missing file" if p.is_symlink() and not p.exists() else "already exists"
        raise LibraError(f"{p}: {what}; choose another path or pass --force to overwrite it")
    if p.is_dir() and not p.is_symlink():
        raise LibraError(f"{p}: is a directory; give a file path")
    if not p.parent.is_dir():
        raise LibraError(f"{p}: directory {p.parent} does not exist; create it first")
    return p


def write_bytes(path: str | Path, data: bytes, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (temporary name, then publish); see the module docstring."""
    p = check_new(path, overwrite)
    fd, tmp = temp_file(p)
    with building(tmp, p), os.fdopen(fd, "wb") as f:
        f.write(data)
    publish(tmp, p, replace=overwrite)
    return p
