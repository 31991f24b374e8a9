"""Time budgets measured from the moment the process started.

The contest's timeout covers the whole run, interpreter start-up included, so
the budget is counted from the process start time the kernel recorded.

One catch: a shell that runs us as its last command may ``exec`` us in its own
process, whose kernel start time is then the shell's (measured: the README's
install-and-solve chain gave a 5 s solve an age of ~50 s, so it answered
``[]`` at once). So the time before this module was imported counts only up
to :data:`STARTUP_MAX`, a generous interpreter start-up.
"""

from __future__ import annotations

import os
import time

#: Imported by the package itself, so this is about when the interpreter got going.
IMPORTED = time.monotonic()
#: Longest start-up (interpreter to first import) counted before ``IMPORTED``.
STARTUP_MAX = 1.0


def kernel_age() -> float:
    """Seconds since the kernel started this process (0 where /proc is unavailable)."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def process_age() -> float:
    """Seconds this run has used: since our import, plus the start-up before it."""
    since_import = time.monotonic() - IMPORTED
    before_import = min(STARTUP_MAX, max(0.0, kernel_age() - since_import))
    return since_import + before_import


def process_start() -> float:
    """The ``time.monotonic()`` moment this run started (see :func:`process_age`)."""
    return time.monotonic() - process_age()


def deadline_for(timeout: float) -> float:
    """A ``time.monotonic()`` deadline that leaves room to verify and print the answer."""
    margin = min(3.0, 0.25 + 0.01 * timeout)
    return process_start() + timeout - margin
