"""Running the `libra-astra` command in-process, as the CLI tests do."""

from __future__ import annotations

from click.testing import CliRunner

from libra_astra.cli import main


def run(*args, ok=True):
    """The command's result; with ``ok`` it must have exited 0."""
    r = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert r.exit_code == 0, r.output
    return r


def one_line_error(r, message, exit_code=None):
    """The command failed (with ``exit_code``, if given) printing exactly ``Error: message``."""
    assert r.exit_code != 0 if exit_code is None else r.exit_code == exit_code, r.output
    assert "Traceback" not in r.output
    assert r.output.strip().splitlines() == [f"Error: {message}"], r.output
