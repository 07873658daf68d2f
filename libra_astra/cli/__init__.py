"""The ``libra-astra`` command line: one module per step, each command registered below.

Command modules import click and light modules only; the library (numpy, scipy, the Chakra
schema) is imported inside the command that runs, so --help and completion start at once.

Adding a command: write ``cli/NAME.py`` with a ``click.command(cls=Command)`` (shared options
from :mod:`.options`, output helpers from :mod:`.format`) and add one ``main.add_command`` line.
"""

from .app import main
from .astra import emit_command, simulate_command
from .calibrate import calibrate_command
from .demand import demand_command
from .doctor import doctor_command
from .generate import generate_command
from .loop import loop_command
from .measure import measure_command
from .optimize import optimize_command, pareto_command
from .predict import predict_command
from .show import plot_command, show_command
from .search import search_command, sweep_command

main.add_command(generate_command)
main.add_command(demand_command)
main.add_command(optimize_command)
main.add_command(pareto_command)
main.add_command(emit_command)
main.add_command(simulate_command)
main.add_command(predict_command)
main.add_command(loop_command)
main.add_command(show_command)
main.add_command(plot_command)
main.add_command(doctor_command)
main.add_command(measure_command)
main.add_command(calibrate_command)
main.add_command(search_command)
main.add_command(sweep_command)

__all__ = ["main"]
