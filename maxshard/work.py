"""The backends' clock: seconds, or counted work in a deterministic run.

Every backend reads the time through :func:`now` and counts what it does with
:func:`count`. In a normal run :func:`now` is ``time.monotonic()`` and counting
costs nothing: budgets are seconds. In a deterministic run
(:func:`start_deterministic`, in each worker process) :func:`now` is the work
this process has counted, in *work units*, so every decision a backend takes
by the clock ("until the deadline", "a second between reports") is taken at
the same point of its computation on every machine and under any load.

A work unit is about one second of one core of the machine the rates were
measured on (:data:`RATES`: how many of each counted thing make a unit). The
rates are fixed, not measured at run time: a slower machine takes longer per
unit, never does other work. Each call of :func:`now` counts :data:`TICK`
units too, so a loop that polls the clock always reaches its end.

Workers cooperate only at *barriers*: whenever a worker's work passes a
multiple of the epoch, :func:`now` calls the barrier hook the orchestrator
installed (it reports to the parent and waits for the merged best, see
:mod:`maxshard.orchestrate.workers`). The CP-SAT deterministic loop
(``ortools/sat/subsolver.cc``) works the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Counted things per work unit, measured on this project's 2-core machine
#: (docs/determinism.md): table entries a local-search kernel reads, entries a
#: diffusion sweep reads, toulbar2 search nodes and backtracks (times the
#: values of the problem searched), entries of the problems posted to toulbar2,
#: HiGHS simplex iterations (times the LP's size).
RATES = {
    "local": 3.0e8,
    "sweep": 2.0e8,
    "tb2-node": 2.5e7,  # search nodes and backtracks times the problem's values
    "tb2-entry": 3.0e6,  # with the Python that builds them (history: *A toulbar2 entry re-rated*)
    "lp": 3.0e8,  # simplex iterations times the LP's rows and columns
    "python": 5.0e7,  # numpy-level passes over model arrays (entries)
    "call": 1.0e4,  # calls into a kernel or a pass: their fixed cost, which rules small models
}

#: Work units each call of :func:`now` counts (progress for loops that poll).
TICK = 1e-5

#: A call given at least this many units (a long toulbar2 solve) reserves them
#: (:func:`reserved`) instead of counting what it did: the other workers need
#: not wait for it at the barriers it spans.
RESERVE_MIN = 2.0


def first_barrier(at: float, epoch: float) -> int:
    """The index of the first barrier at or after ``at`` units."""
    return math.ceil(at / epoch - 1e-9)


def last_barrier(at: float, epoch: float) -> int:
    """The index of the last barrier at or before ``at`` units (a worker that
    starts at ``at`` has passed it). Workers and the orchestrator both count
    barriers with these two functions, so they agree to the last bit."""
    return math.floor(at / epoch + 1e-9)


class _Deterministic:
    """A worker's work counter and its barriers."""

    def __init__(
        self, at: float, epoch: float, barrier: Callable[[int], None],
        busy: Callable[[float], None],
    ) -> None:  # fmt: skip
        self.t = at
        self.epoch = epoch
        self.barrier, self.busy = barrier, busy
        self.next = last_barrier(at, epoch) + 1  # the next barrier's index

    def advance(self, units: float) -> float:
        self.t += units
        while self.t >= self.next * self.epoch:
            k = self.next
            self.next += 1
            self.barrier(k)
        return self.t


_det: _Deterministic | None = None


def now() -> float:
    """Seconds (``time.monotonic()``), or in a deterministic run the work units
    counted so far (after a tick: see :data:`TICK`)."""
    if _det is None:
        return time.monotonic()
    return _det.advance(TICK)


def count(kind: str, amount: float) -> None:
    """Count ``amount`` of ``kind`` (a key of :data:`RATES`); free outside a
    deterministic run."""
    if _det is not None:
        _det.advance(amount / RATES[kind])


def deterministic() -> bool:
    return _det is not None


@contextmanager
def reserved(units: float) -> Iterator[None]:
    """Charge ``units`` for the block, whatever it does, announced before it
    runs: the orchestrator then merges the barriers it spans without this
    worker, and what the block reports counts at its end. (For one long call
    that cannot stop at a barrier; outside a deterministic run, nothing.)"""
    if _det is not None:
        until = _det.t + units
        _det.busy(until)
        _det.t = until
        _det.next = max(_det.next, first_barrier(until, _det.epoch))
    yield


def stamp() -> float:
    """The time or work so far, without counting (for stamping reports)."""
    return time.monotonic() if _det is None else _det.t


def start_deterministic(
    at: float, epoch: float, barrier: Callable[[int], None], busy: Callable[[float], None]
) -> None:
    """From now on this process counts work from ``at`` units, calls
    ``barrier(k)`` when it passes ``k * epoch`` units and ``busy(until)`` when a
    call reserves its work until then (the orchestrator's worker does this
    before its backend starts)."""
    global _det
    _det = _Deterministic(at, epoch, barrier, busy)


def stop_deterministic() -> None:
    global _det
    _det = None
