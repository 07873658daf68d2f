"""What every result-producing command shares: the quiet switch, progress and ``--plot FILE``.

Imports nothing heavy at module level, so the commands that use it stay quick to list."""

from __future__ import annotations

from typing import Any, Callable

import click

from .progress import QUIET_KEY, Progress

PLOT_METAVAR = "FILE.svg|FILE.png"


def quiet_option(f: Callable) -> Callable:
    """``-q/--quiet`` on the group: no progress lines on stderr (results and errors still print)."""
    def store(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        ctx.meta[QUIET_KEY] = value
        return value
    return click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=store, is_eager=True,
                        help="No progress lines on stderr (they appear only on a terminal anyway).")(f)


def plot_option(what: str) -> Callable:
    return click.option("--plot", "plot_out", type=click.Path(dir_okay=False), metavar=PLOT_METAVAR,
                        help=f"Also draw {what} (needs the plot extra); --force overwrites it.")


def check_plot(plot_out: str | None, force: bool) -> None:
    """Refuse a bad or existing picture path before the slow work, not after."""
    if plot_out:
        from ..plot import check_output

        check_output(plot_out, force)


def draw(kind: str, content: Any, plot_out: str | None, force: bool, echo: bool = True,
         dims: list[str] | None = None) -> None:
    if plot_out:
        from .show import plot_any

        plot_any(kind, content, plot_out, force, dims)
        if echo:
            click.echo(f"wrote {plot_out}")


def progress(label: str) -> Progress:
    """A stderr progress line for ``label`` (silent off a terminal and under -q)."""
    return Progress(label)
