"""Progress of slow steps on stderr, for a person watching a terminal.

The library reports progress through plain callbacks (``on_progress(done, total)``); this module
turns them into one self-overwriting stderr line. It stays silent when stderr is not a terminal
(pipes, logs, CI, tests) and under ``libra-astra -q``, so standard output and JSON are never mixed
with it.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Callable

QUIET_KEY = "libra_astra.quiet"


def _quiet_from_click() -> bool:
    try:
        import click
    except ImportError:  # pragma: no cover - click is a dependency
        return False
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(QUIET_KEY))


def enabled(stream: IO[str] | None = None, quiet: bool | None = None) -> bool:
    """Whether to show progress: a terminal on ``stream`` (stderr) and not quiet."""
    stream = sys.stderr if stream is None else stream
    if quiet is None:
        quiet = _quiet_from_click()
    try:
        return not quiet and stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress line: ``label: 512/4,096 (12%) 3 s``, redrawn at most every ``interval_s``.

    Use as a callback ``p(done, total)``, for stage messages ``p.note(text)`` (redrawn with the
    seconds since the note every ``tick_s`` while nothing else is drawn: a simulator run shows
    that it is alive), and ``p.close()`` (or ``with``) to end the line. When not ``on``, every
    call does nothing."""

    def __init__(self, label: str, *, stream: IO[str] | None = None, on: bool | None = None,
                 interval_s: float = 0.1, clock: Callable[[], float] = time.monotonic, tick_s: float = 1.0):
        self.label = label
        self._base = label
        self.stream = sys.stderr if stream is None else stream
        self.on = enabled(self.stream) if on is None else on
        self.interval_s = interval_s
        self.clock = clock
        self.start = clock()
        self._last = -1e300
        self._width = 0
        self.tick_s = tick_s
        self._lock = threading.Lock()
        self._note: tuple[str, float] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __call__(self, done: int, total: int | None = None, what: str | None = None) -> None:
        if not self.on:
            return
        if what is not None and what != getattr(self, "_what", None):
            self._what = what
            self.label = f"{self._base} {what}"
            self._last = -1e300
        now = self.clock()
        if total is not None and done < total and now - self._last < self.interval_s:
            return
        self._last = now
        self._note = None
        if total:
            text = f"{self.label}: {done:,}/{total:,} ({done / total:.0%}) {now - self.start:.0f} s"
        else:
            text = f"{self.label}: {done:,} {now - self.start:.0f} s"
        self._draw(text)

    def note(self, text: str) -> None:
        """A stage message on the progress line (``label: text``), then ``label: text 12 s``."""
        if not self.on:
            return
        self._note = (text, self.clock())
        self._draw(f"{self.label}: {text}")
        if self._ticker is None and self.tick_s > 0:
            self._ticker = threading.Thread(target=self._tick, name="libra-astra-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            note = self._note
            if note is not None:
                self._draw(f"{self.label}: {note[0]} {self.clock() - note[1]:.0f} s")

    def _draw(self, text: str) -> None:
        with self._lock:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._width = len(text)

    def clear(self) -> None:
        """Erase the line (before the command prints a result line of its own)."""
        if self.on:
            with self._lock:
                if self._width:
                    self.stream.write("\r" + " " * self._width + "\r")
                    self.stream.flush()
                    self._width = 0

    def close(self) -> None:
        """Stop the ticker and erase the line, so the command's own output starts on a clean line."""
        self._note = None
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self.clear()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
