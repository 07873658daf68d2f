"""The ``libra-astra`` group and the one place a LibraError becomes a one-line message."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import click

from .. import __version__
from .common import quiet_option
from .guard import guarded


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A LibraError (or an OSError) leaves as a ClickException: its one line on stderr, exit code 1,
    no traceback; a termination signal stops the command cleanly (guard.py)."""
    with guarded():
        yield


class Command(click.Command):
    """A command that reports LibraError as one line, also when invoked on its own (as tests do)."""

    def invoke(self, ctx: click.Context):
        with one_line_errors():
            return super().invoke(ctx)


def one_blas_thread() -> None:
    """numpy's OpenBLAS starts a thread per core when numpy is imported, and they spin before they
    sleep: 0.13 s of CPU per command on two cores, for matrices (the solver's Newton systems) too
    small to gain from them (tools/bench_optimize.py solves as fast on one). One thread, unless
    OPENBLAS_NUM_THREADS says otherwise; set before the command imports numpy."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class Group(click.Group):
    command_class = Command

    def invoke(self, ctx: click.Context):
        one_blas_thread()
        with one_line_errors():
            return super().invoke(ctx)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="libra-astra")
@quiet_option
def main() -> None:
    """LIBRA bandwidth optimization for multi-dimensional training networks.

    \b
    Chakra ET traces -> demand -> optimize -> emit ASTRA-sim inputs -> simulate -> loop -> plot.
    Run `libra-astra COMMAND --help` for each step; `libra-astra -q COMMAND` hides the progress
    lines (shown on stderr only when it is a terminal).
    """
