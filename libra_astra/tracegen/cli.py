"""The ``generate`` command (defined in libra_astra.cli_generate, so listing it does not import this package)."""

from ..cli_generate import generate_command

__all__ = ["generate_command"]
