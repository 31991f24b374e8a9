"""The one interface every solver backend implements, and their discovery.

A backend is any object with a ``name``, ``capabilities`` and a ``solve``
method. It receives the reduced :class:`~maxshard.model.Model`, a monotonic
``deadline`` (``time.monotonic()`` seconds) it must respect itself, the best
known model solution (or None), and a ``report`` callback: ``report(x)`` hands
over each improving solution as soon as it has one (anytime backends), and
``report(lower_bound=b)`` a proven lower bound on the model cost as soon as it
has one. It returns a :class:`Result`. Backends never print to stdout.

Workers run side by side; :func:`shared_best` gives a backend the best
solution any of them has reported, when it changed since it last asked (the
orchestrator's ``report`` offers it; plain callables simply have none). A
backend may also hand over its search state with :func:`share_state` (e.g. a
Lagrangian loop's prices); a worker restarted as a copy of another backend
receives that backend's last state from :func:`inherited_state`, and its own
from :func:`previous_state`.

Backends register under the entry-point group ``maxshard.backends``; the
built-in ones do so in maxshard's own ``pyproject.toml``, exactly as a
third-party plugin would::

    [project.entry-points."maxshard.backends"]
    mybackend = "my_package.module:MyBackend"
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

import numpy as np

from .model import Model

GROUP = "maxshard.backends"


class Status(enum.Enum):
    OPTIMAL = "optimal"  # solution proven optimal
    FEASIBLE = "feasible"  # solution found, optimality unknown
    INFEASIBLE = "infeasible"  # proven: no solution fits in memory
    UNKNOWN = "unknown"  # nothing found in time


@dataclass(frozen=True)
class Capabilities:
    exact: bool  # can prove optimality
    anytime: bool  # reports improving solutions while it runs
    memory: bool  # enforces the memory limit exactly
    lower_bound: bool  # can prove a lower bound


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

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result: ...


def shared_best(report: Report) -> np.ndarray | None:
    """The best model solution of all running workers, if it changed since this
    worker last asked; None otherwise or when ``report`` shares nothing."""
    best = getattr(report, "best", None)
    return best() if callable(best) else None


def share_state(report: Report, state: object) -> None:
    """Hand the backend's current search state (picklable) to the orchestrator,
    which passes the latest one on to a worker restarted as this backend."""
    send = getattr(report, "state", None)
    if callable(send):
        send(state)


def inherited_state(report: Report) -> object | None:
    """The state handed over by the worker this one continues, or None."""
    return getattr(report, "inherited", None)


def previous_state(report: Report) -> object | None:
    """The last state this worker handed over as the backend it ran before it
    was restarted as another (at the leader switch), or None."""
    return getattr(report, "previous", None)


def ascent_elsewhere(report: Report) -> bool:
    """True when another worker of the run climbs the dual ascent all along
    (``--prove``'s ``dual``): a backend's own ascent would repeat it, behind."""
    return bool(getattr(report, "ascent_elsewhere", False))


class BackendError(ValueError):
    """A backend that cannot be loaded or used."""


def available() -> dict[str, object]:
    """Backends by name, not yet loaded: the registered entry points, then the
    command-line solvers declared in config files or with ``--solver``
    (:mod:`maxshard.backends.external`; a declared name hides an entry point)."""
    from .backends.external import declared

    found: dict[str, object] = {ep.name: ep for ep in entry_points(group=GROUP)}
    found.update(declared())
    return found


def _unknown(name: str, eps: dict) -> BackendError:
    known = ", ".join(sorted(eps)) or "none"
    return BackendError(f"unknown backend {name!r} (known: {known})")


def check_names(names: Iterable[str]) -> None:
    """Raise BackendError naming the first of ``names`` that is not registered."""
    eps = available()
    for name in names:
        if name not in eps:
            raise _unknown(name, eps)


def load(name: str) -> Backend:
    """Import and instantiate backend ``name``; BackendError says why not."""
    from .backends.external import External, Spec

    eps = available()
    if name not in eps:
        raise _unknown(name, eps)
    if isinstance(eps[name], Spec):
        return External(eps[name])
    try:
        backend = eps[name].load()()
    except BackendError:
        raise
    except Exception as exc:  # a broken plugin must never take the solver down
        raise BackendError(f"backend {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, Backend):
        raise BackendError(f"backend {name!r} does not implement the Backend interface")
    return backend
