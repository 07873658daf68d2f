"""How a command ends when it fails or is stopped: one line, temporaries removed, outputs accounted for.

SIGTERM and SIGHUP are turned into an exception (like SIGINT's KeyboardInterrupt), so the code
unwinds: the simulator child is killed, temporary files and directories are removed, and the
user is told what the command had already published. An OSError that escaped the library is
reported as one line naming the file.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Iterator

import click

from .. import publish
from ..errors import LibraError


class Interrupted(BaseException):
    """A termination signal arrived; unwinds like KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise(signum, _frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, _raise)
        except (ValueError, OSError):   # not the main thread
            pass
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _interrupted_message(signum: int) -> str:
    publish.remove_temporaries()   # those the unwinding code did not remove itself
    done = publish.published()
    name = signal.Signals(signum).name
    parts = [f"interrupted by {name}", "temporary files removed"]
    if done:
        more = f" and {len(done) - 1} more" if len(done) > 1 else ""
        parts.append(f"already written: {done[-1]}{more} (a trace set stays marked incomplete until written again)")
    else:
        parts.append("nothing was written")
    return "; ".join(parts)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Run a command: LibraError and OSError become one-line errors, signals a clean stop."""
    publish.forget_published()
    with _signals():
        try:
            yield
        except LibraError as e:
            raise click.ClickException(str(e)) from None
        except OSError as e:
            where = e.filename if e.filename is not None else "libra-astra"
            raise click.ClickException(str(publish.write_error(where, e))) from None
        except KeyboardInterrupt:
            click.echo(f"Error: {_interrupted_message(signal.SIGINT)}", err=True)
            sys.exit(130)
        except Interrupted as e:
            click.echo(f"Error: {_interrupted_message(e.signum)}", err=True)
            sys.exit(128 + e.signum)
