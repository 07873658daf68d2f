"""The ``generate`` command (defined in libra_astra.cli.generate, so that listing the commands does not
import this package and numpy)."""

from ..cli.generate import generate_command

__all__ = ["generate_command"]
