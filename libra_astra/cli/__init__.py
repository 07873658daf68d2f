"""The ``libra-astra`` command line: one module per command group, registered in :mod:`.main`."""

from .main import main

__all__ = ["main"]
