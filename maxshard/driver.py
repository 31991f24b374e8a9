"""Run a solve under a deadline: the signal guard (SIGTERM, SIGINT and the
deadline's alarm become :class:`Interrupted`) and the driver that always
returns what the run has by then. The CLI's ``solve`` and ``iopddl`` use it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from .orchestrate import Options, Run
from .orchestrate.workers import dump_stacks_on_request
from .output import Progress

#: Seconds the alarm waits past the deadline: the run's own loop answers at
#: the deadline; the alarm only rescues a run blocked elsewhere.
ALARM_GRACE = 0.2


class Interrupted(BaseException):
    """A signal or the hard deadline stopped the solve. Not an ``Exception``: a
    handler that catches any error (the registry's for a broken plugin) must not
    swallow it. Measured: A at 6 s, presolve done at 5.8 s, the alarm came while
    the backends' modules were importing, became a "failed to load" error, and
    the run ended 0.6 s late."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _guard(deadline: float) -> None:
    """Turn SIGTERM, SIGINT and the deadline alarm into :class:`Interrupted`."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, _interrupt)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic() + ALARM_GRACE))


def _unguard() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)


def run_solve(problem: Path, log: Progress, options: Options) -> Run:
    """Read and solve under the deadline of ``options.seconds`` (options built by
    :func:`~maxshard.orchestrate.options.options_for`); always returns what it
    has by then."""
    from .clock import deadline_for, process_start

    deadline = deadline_for(options.seconds)
    # progress and trace times count from the process start, as the budget does
    run = Run(options, log, start=process_start())
    dump_stacks_on_request()  # kill -USR1: where is the run? (the workers do the same)
    _guard(deadline)
    try:
        run.solve(problem, deadline)
    except Interrupted as exc:
        log(f"stopped by {exc}")
    finally:
        _unguard()
        log.close()
    return run
