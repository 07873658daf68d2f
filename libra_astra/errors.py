"""The one exception type for errors a user can cause."""


class LibraError(Exception):
    """Bad input, infeasible constraints, missing binary: anything the user can fix.

    The message is one line that names the file or item at fault and says how to fix it;
    the CLI prints it without a traceback and exits non-zero.
    """

    def __init__(self, message: str) -> None:
        # Names taken from user files may hold line breaks; the message must stay one line.
        super().__init__(str(message).replace("\r", "\\r").replace("\n", "\\n"))


class InfeasibleError(LibraError):
    """No point satisfies the linear constraints (the caller may name the culprit)."""


class TargetUnreachable(InfeasibleError):
    """A time target (min-cost) that no bandwidth split meets: this design cannot, though the
    linear constraints hold (another design, or other collective implementations, may)."""


class NeverEnds(LibraError):
    """Inputs on which ASTRA-sim's ranks wait on each other for ever (it exits with ranks unfinished)."""
