"""The one interface every solver backend implements.

A backend is any object with a ``name``, ``capabilities`` and a ``solve``
method::

    def solve(self, model, deadline, incumbent, report, seed=0) -> Result

It receives the reduced :class:`~maxshard.model.Model`, a ``deadline`` it
must respect itself (on the clock of :func:`maxshard.work.now`: seconds of
``time.monotonic()``, or work units in a deterministic run), the best
known model solution (or None), a ``report`` and a seed. ``report(x)`` hands
over each improving solution as soon as it has one (anytime backends),
``report(lower_bound=b)`` a proven lower bound on the model cost. It returns
a :class:`Result`. Backends never print to stdout.

In a run, ``report`` is a :class:`Context`: everything the run gives a
backend besides the model, declared in one place. A backend that cooperates
reads it through :func:`context` (which also accepts a plain callable, as
tests pass):

- ``ctx.best()``: the best solution any worker has reported, when it changed
  since this worker last asked;
- ``ctx.hand_over(state)``: hand the backend's search state (picklable, e.g.
  a Lagrangian loop's prices) to the run;
- ``ctx.inherited``: the state handed over by the worker this one continues
  (a copy at the leader switch, or its namesake of an earlier stage);
  ``ctx.previous``: this worker's own last state before the switch restarted
  it as another backend;
- ``ctx.peer_provides(what)``: whether another worker of the stage declares
  ``what`` in its :attr:`Capabilities.provides` (see :data:`PROVIDES`);
- ``ctx.multipliers``: memory prices, one per kept point of the model
  (``len(model.base)``): the last that a worker providing ``multipliers``
  handed over before this one started (a Lagrangian loop's multipliers,
  the ``"lam"`` entry of its state), or None.

A backend that only calls ``report(...)`` needs none of it.

A backend that improves a solution may subclass :class:`Improver`, which
answers an empty model and finds a start that fits, and implement only
``improve``.

A backend may also be :class:`Preparable`: its ``prepare()`` runs once in the
run's own process before any worker is forked, while presolve runs in a
process of its own (:mod:`maxshard.orchestrate.presolve`). What it loads
there (compiled kernels, slow imports) every worker of every stage inherits
instead of loading it again on its way to a first answer.

Backends register under the entry-point group ``maxshard.backends``; the
built-in ones do so in maxshard's own ``pyproject.toml``, exactly as a
third-party plugin would::

    [project.entry-points."maxshard.backends"]
    mybackend = "my_package.module:MyBackend"

:mod:`maxshard.registry` finds and loads them by name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .model import Model

GROUP = "maxshard.backends"


class Status(enum.Enum):
    OPTIMAL = "optimal"  # solution proven optimal
    FEASIBLE = "feasible"  # solution found, optimality unknown
    INFEASIBLE = "infeasible"  # proven: no solution fits in memory
    UNKNOWN = "unknown"  # nothing found in time


#: What a backend may declare that it provides to the other workers of a run.
PROVIDES = {
    "ascent": "climbs the LP dual ascent all run long (a peer's own ascent would repeat it)",
    "multipliers": "hands over memory multipliers per kept point, as its state's 'lam' entry",
}


@dataclass(frozen=True)
class Capabilities:
    exact: bool  # can prove optimality
    anytime: bool  # reports improving solutions while it runs
    memory: bool  # enforces the memory limit exactly
    lower_bound: bool  # can prove a lower bound
    #: what it provides to its peers (keys of :data:`PROVIDES`)
    provides: frozenset[str] = frozenset()
    #: reads the time through :func:`maxshard.work.now` and counts its work with
    #: :func:`maxshard.work.count`, so it runs the same in a deterministic run
    deterministic: bool = False

    def listed(self) -> list[str]:
        """Its capabilities in words, as ``maxshard backends`` prints them."""
        flags = {"exact": self.exact, "anytime": self.anytime, "memory": self.memory,
                 "lower_bound": self.lower_bound,
                 "deterministic": self.deterministic}  # fmt: skip
        return [f for f, on in flags.items() if on] + [
            f"provides {p}" for p in sorted(self.provides)
        ]


@dataclass
class Result:
    status: Status
    solution: np.ndarray | None = None  # model solution
    lower_bound: int | None = None  # proven bound on the model cost


class Report(Protocol):
    def __call__(
        self, solution: np.ndarray | None = None, lower_bound: int | None = None
    ) -> None: ...


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result: ...  # fmt: skip


@runtime_checkable
class Preparable(Protocol):
    """A backend with something to load once per run, before the workers fork."""

    def prepare(self) -> None:
        """Load what every worker of this backend needs (idempotent, no output)."""
        ...


class Context:
    """What a run gives a backend besides the model: passed as ``report``.

    This base class is the context of a backend run alone (``report`` wraps a
    plain callable, or nothing): no peers, no shared best, nothing inherited.
    The orchestrator's workers get a subclass that talks to the run.
    """

    def __init__(
        self,
        report: Report | None = None,
        *,
        inherited: object = None,
        previous: object = None,
        peers: frozenset[str] = frozenset(),
        multipliers: np.ndarray | None = None,
    ) -> None:
        self._report = report
        #: the state of the worker this one continues, or None
        self.inherited = inherited
        #: this worker's own last state before it restarted as another backend
        self.previous = previous
        #: what the other workers of the stage provide (see :data:`PROVIDES`)
        self.peers = peers
        #: memory prices per kept point handed over earlier in the run, or None
        self.multipliers = multipliers

    def __call__(self, solution: np.ndarray | None = None, lower_bound: int | None = None) -> None:
        if self._report is not None:
            self._report(solution, lower_bound)

    def best(self) -> np.ndarray | None:
        """The best model solution of all workers, if it changed since this
        worker last asked; else None."""
        return None

    def hand_over(self, state: object) -> None:
        """Hand the backend's search state (picklable) to the run, which gives
        the latest one to a worker that continues this backend."""

    def peer_provides(self, what: str) -> bool:
        return what in self.peers


def context(report: Report) -> Context:
    """``report`` as a :class:`Context` (a plain callable: one with no peers)."""
    return report if isinstance(report, Context) else Context(report)


class Improver:
    """Base of a backend that improves a solution that fits (``local``, ``lns``).

    Its :meth:`solve` answers a model that presolve emptied (the orchestrator
    never asks a backend for one; direct callers may), and starts from the
    incumbent if it fits, else from the minimum-usage solution (which fits
    whenever any solution does); where neither fits it returns UNKNOWN. The
    subclass implements :meth:`improve`.
    """

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        if not model.nv:
            return Result(Status.OPTIMAL, np.zeros(0, dtype=np.int64), model.offset)
        x = incumbent
        if x is None or not model.fits(x):
            x = model.min_usage_solution()
            if not model.fits(x):
                return Result(Status.UNKNOWN)
        return self.improve(model, np.array(x, dtype=np.int64), deadline, report, seed)

    def improve(
        self, model: Model, x: np.ndarray, deadline: float, report: Report, seed: int
    ) -> Result:
        """Improve ``x`` (a copy, it fits) until ``deadline``, reporting each
        better solution through ``report``."""
        raise NotImplementedError


# The first plugin interface's helpers, kept so that plugins written against
# it work unchanged: each is one call on the context.


def shared_best(report: Report) -> np.ndarray | None:
    """``context(report).best()``."""
    return context(report).best()


def share_state(report: Report, state: object) -> None:
    """``context(report).hand_over(state)``."""
    context(report).hand_over(state)


def inherited_state(report: Report) -> object | None:
    """``context(report).inherited``."""
    return context(report).inherited


def previous_state(report: Report) -> object | None:
    """``context(report).previous``."""
    return context(report).previous


def ascent_elsewhere(report: Report) -> bool:
    """``context(report).peer_provides("ascent")``."""
    return context(report).peer_provides("ascent")


class BackendError(ValueError):
    """A backend that cannot be loaded or used."""
