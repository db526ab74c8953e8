"""The kinds of failure an entry script reports in one line instead of a traceback.

``UserError``: the input is wrong (a flag's value, a config key, a file): the message names the
file or flag, the value and the fix. ``RunStopped``: the run itself decided to stop (NaN losses,
the fp16 loss scale at its floor, a rank that stopped answering); the message says why and what
to change. Both carry the exit code the entry script ends with, so launch scripts can tell them
apart from a crash (a programming error keeps its traceback and exit code 1).
"""
from __future__ import annotations

EXIT_USER_ERROR = 2        # argparse's code for a bad command line; the same for every bad input
EXIT_RUN_STOPPED = 3       # the run stopped itself (non-finite loss, loss-scale floor)
EXIT_DIST_TIMEOUT = 4      # a collective waited longer than --dist_timeout (a hung or dead rank)
EXIT_PREEMPTED = 75        # SIGTERM/SIGUSR1/SIGINT: a checkpoint was written; resume to continue (EX_TEMPFAIL)


class UserError(ValueError):
    """A mistake in the input (flag, config, file); the message names it and the fix."""
    exit_code = EXIT_USER_ERROR


class RunStopped(RuntimeError):
    """The run stopped itself on purpose; the message says why."""
    exit_code = EXIT_RUN_STOPPED


class DistributedTimeout(RunStopped):
    """A collective operation waited longer than the process-group timeout."""
    exit_code = EXIT_DIST_TIMEOUT


class Preempted(RunStopped):
    """A stop signal arrived: the current update finished and a checkpoint was written."""
    exit_code = EXIT_PREEMPTED


def one_line(err: BaseException) -> str:
    """An error's message on one line (line breaks and runs of spaces become one space), or its type."""
    return " ".join(str(err).split()) or type(err).__name__


def did_you_mean(name: str, known, cutoff: float = 0.75) -> str:
    """' (did you mean 'x'?)' for the closest of ``known`` to ``name``, or ''."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return f" (did you mean '{close[0]}'?)" if close else ""
