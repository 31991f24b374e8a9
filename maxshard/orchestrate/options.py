"""The options of a solve, checked and built in one place.

Every way into a solve (``maxshard solve``, ``iopddl``, :func:`maxshard.solve`,
``maxshard compare``'s runs and through the CLI ``tools/bench.py``) builds its
:class:`Options` with :func:`options_for`, so a bad option is the same
:class:`UsageError`, with the same one-line message, wherever it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .plan import Plan, PlanError, choose
from .workers import available_cores


class UsageError(ValueError):
    """Bad input from the user, in one line naming it: the CLI prints it and
    exits with code 2, the API raises it."""


@dataclass(frozen=True)
class Options:
    """How to solve: the plan (None: the built-in one, ``default`` or, with
    ``prove``, ``prove``), the seed, the workers (None: the cores available),
    the target gap, whether to presolve, and whether the backends start from
    the least-usage solutions (off: a backend compared alone starts from
    nothing, and only what it finds counts).

    ``deterministic``: the stages advance by counted work, not seconds
    (:mod:`maxshard.work`), so the answer depends only on the input, the seed,
    the worker count and ``work``, the budget in work units over all workers
    (None: :func:`default_work` of ``seconds``, the time given, the instance's
    strategies and the plan case's pace)."""

    plan: Plan | None = None
    prove: bool = False
    seed: int = 0
    workers: int | None = None
    gap: float | None = None
    presolve: bool = True
    starts: bool = True
    deterministic: bool = False
    work: float | None = None
    seconds: float | None = None

    def plan_name(self) -> str:
        return self.plan.name if self.plan else ("prove" if self.prove else "default")


#: Share of the time given that a deterministic run fills with work at its
#: plan case's pace: the rest is for reading and presolve, the waits at the
#: barriers and a busier machine (docs/history.md, *Deterministic budgets*).
WORK_SHARE = 0.65
#: Work units between two barriers (at most; fewer in a short run).
EPOCH = 0.5


#: Seconds a deterministic budget leaves for start-up, reading and presolve before
#: its share of the time: this many (history: *A budget that leaves the start-up out*)
STARTUP_SECONDS = 1.0
#: and this many more per strategy of the instance (0.7 s per 100,000; same entry)
STARTUP_PER_STRATEGY = 7e-6


def default_work(seconds: float, workers: int, pace: float, strategies: int) -> float:
    """The work budget (units, over all workers) of a deterministic run given
    ``seconds`` for an instance of ``strategies`` strategies, at ``pace`` units
    a worker counts per second (the plan case's, itself chosen by the presolved
    model's size): :data:`WORK_SHARE` of the seconds left after the start-up
    estimated from the instance's size. A function of these numbers alone
    (rounded to 0.01), so the same input gets the same budget on any machine."""
    startup = STARTUP_SECONDS + STARTUP_PER_STRATEGY * strategies
    return round(WORK_SHARE * max(0.0, seconds - startup) * workers * pace, 2)


def options_for(
    timeout: float,
    *,
    plan: str | Path | Plan | None = None,
    backends: Sequence[str] | None = None,
    prove: bool = False,
    seed: int = 0,
    workers: int | None = None,
    gap: float | None = None,
    presolve: bool = True,
    starts: bool = True,
    deterministic: bool = False,
    work: float | None = None,
) -> Options:
    """The options of a solve given ``timeout`` seconds, each one checked.

    Raises
    ------
    UsageError
        a bad timeout, gap, work budget or worker count, backends that are not
        installed, or a bad plan (with both a plan and backends given too).
    """
    from ..backend import BackendError
    from ..registry import check_names

    if not timeout > 0:
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout:g}")
    if gap is not None and not 0 <= gap < 1:
        raise UsageError(f"gap must be a fraction in [0, 1) (0.01 = 1%), got {gap:g}")
    if work is not None and not deterministic:
        raise UsageError("a work budget is for a deterministic run: add --deterministic")
    if work is not None and not work > 0:
        raise UsageError(f"the work budget must be a positive number of units, got {work:g}")
    if workers is not None and workers < 1:
        raise UsageError(f"workers must be at least 1, got {workers}")
    workers = workers or available_cores()
    names = list(backends or [])
    try:
        check_names(names)
        chosen = choose(plan, names, workers)
    except (BackendError, PlanError) as exc:
        raise UsageError(str(exc)) from None
    return Options(
        plan=chosen, prove=prove, seed=seed, workers=workers, gap=gap, presolve=presolve,
        starts=starts, deterministic=deterministic, work=work, seconds=timeout,
    )  # fmt: skip
