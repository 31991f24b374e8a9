"""The ``toulbar2`` backend: the whole model as a cost function network, solved by
toulbar2's branch and bound (the driver, :mod:`maxshard.search.toulbar2`, says
how), restarted from its best answer once its answers stop improving.

The reduced model maps one-to-one onto a weighted CSP: a variable per model
variable, unary and binary cost functions, and memory as one knapsack
constraint per kept time point (``sum of usages <= limit - base``). toulbar2's
depth-first branch and bound with soft arc consistency then proves optimality
on the small models and finds excellent solutions on the harder ones.
Optimality is claimed only when toulbar2 says its search finished.
"""

from __future__ import annotations

import math

import numpy as np

from .. import work
from ..backend import Capabilities, Context, Report, Result, Status, context
from ..instance import FORBIDDEN
from ..model import Model
from ..search import toulbar2 as driver


class Toulbar2:
    name = "toulbar2"
    capabilities = Capabilities(
        exact=True, anytime=True, memory=True, lower_bound=True, deterministic=True
    )

    #: virtual arc consistency in preprocessing (toulbar2's ``vac=1``) (history: *Tuning notes*,
    #: toulbar2 vac)
    vac = 1
    #: ... only in a search given at least this many seconds (VAC's preprocessing can take most of a
    #: short one) (history: *Tuning notes*, toulbar2 vac_seconds)
    vac_seconds = 40.0

    #: a search restarted after a quiet spell is depth-first (0), not hybrid
    #: best-first: its answer is often the optimum, the proof is what is left
    #: (history: *Tuning notes*, toulbar2 restart_hbfs)
    restart_hbfs = 0

    #: a restarted search enforces VAC down to this depth (``-A``) and branches as full EAC picks
    #: (``-fe``) (history: *Tuning notes*, toulbar2 restart_vac)
    restart_vac = 10
    restart_full_eac = True

    #: a search that found an answer, then nothing better for this many seconds,
    #: restarts with that answer's cost as its initial bound (see :meth:`solve`);
    #: so does one that found nothing for as long while a peer beat its bound
    restart_quiet = 10.0

    #: a search with no answer yet whose bound another worker's answer brings
    #: below this fraction of it starts again from that answer: from a loose
    #: bound (a start's) toulbar2's first answer comes seconds later (history:
    #: *toulbar2 outpaced*)
    outpaced_ratio = 0.5

    def prepare(self) -> None:
        driver.load()

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        """Search until a proof or the deadline, restarting from the best answer.

        toulbar2 prunes with its initial upper bound before and while it
        searches (VAC, dead-end elimination), and an answer found later does
        not redo that work. Measured on V, one core: started with the optimum's
        cost as its bound, the search proved it in 156 s; started 1,264 above
        (0.08%) it found the optimum at 44 s and proved it at 284 s; started
        with no bound it found it at 61 s, its proven gap still 18.4% at 350 s.
        So a search whose answers have stopped improving for
        :attr:`restart_quiet` seconds starts again, bounded by its best (or
        another worker's, if better). A search with no answer yet starts again
        from another worker's once that one costs less than
        :attr:`outpaced_ratio` of its bound, or less at all after
        :attr:`restart_quiet` seconds (:class:`RunBest`).
        """
        from pytoulbar2.pytb2 import Contradiction

        best, restarted = None, False
        while True:
            # the best answer so far (its own, the one it started from, another
            # worker's) that fits at a cost toulbar2 can take as its bound (no pick
            # at 10^18; where every answer has one, presolve priced them lower)
            found = (best, incumbent, context(report).best())
            starts = [x for x in found if x is not None and usable(model, x)]
            best, incumbent = min(starts, key=model.cost, default=None), None
            ub = None if best is None else driver.upper_bound(model.cost(best) - model.offset)
            try:
                long = deadline - work.now() >= self.vac_seconds
                vac = self.restart_vac if restarted else (self.vac if long else 0)
                hbfs = self.restart_hbfs if restarted else 1
                cfn = driver.build(model, model.unary, seed, ub, memory=True, vac=vac, hbfs=hbfs)
                if restarted:
                    cfn.Option.FullEAC = self.restart_full_eac
            except Contradiction:  # posting already proves: nothing below the bound fits
                return proved(model, best)
            # (toulbar2.run rounds a fraction up and ends the search at it on the clock)
            seconds = deadline - work.now()
            if work.deterministic():
                seconds = math.floor(seconds)
            if seconds < 1:
                break
            peers = RunBest.of(model, report, best)
            solved, x = driver.run(
                cfn, model.nv, seconds, report, quiet=self.restart_quiet,
                beaten=peers, outpaced=self.outpaced_ratio,
            )  # fmt: skip
            if x is not None:
                report(x)  # the reader process reported it already, but not to in-process callers
                best = x
            if solved:  # with no new answer: nothing below the bound exists
                return proved(model, best)
            if peers is not None:
                outpaced, beaten = peers(self.outpaced_ratio), peers(1.0)
                incumbent = peers.latest  # (best() answers a change once: keep it)
                if x is None and outpaced and deadline - work.now() >= 1:
                    continue  # again as it was, from the run's best
                if x is None and beaten:
                    x = incumbent  # quiet, beaten by a peer: restarted from its answer
            if x is None:  # its time ran out before any answer
                break
            # an answer and no proof: stopped to restart, or out of time (the loop ends)
            restarted = True
        if best is None:
            return Result(Status.UNKNOWN)
        return Result(Status.FEASIBLE, best)


class RunBest:
    """The run's best answer as a toulbar2 search sees it, read from the shared
    incumbent: in the reader's process while toulbar2 searches, then in the
    worker's. Called with ``fraction``: whether that answer costs less than
    ``fraction`` of the answer the search was bounded by (any answer, if none);
    :attr:`latest` is the last answer it read."""

    def __init__(self, model: Model, ctx: Context, bound: np.ndarray | None) -> None:
        self.model, self.ctx = model, ctx
        self.bound = math.inf if bound is None else self.cost(bound)
        self.latest: np.ndarray | None = None
        self.latest_cost = math.inf

    @classmethod
    def of(cls, model: Model, report: Report, bound: np.ndarray | None) -> RunBest | None:
        """The run's best for a search bounded by ``bound``; None in a
        deterministic run (no clock to stop on)."""
        return None if work.deterministic() else cls(model, context(report), bound)

    def __call__(self, fraction: float) -> bool:
        x = self.ctx.best()  # (only what changed since it was last asked)
        if x is not None and usable(self.model, x):  # what the next search could start from
            self.latest, self.latest_cost = x, self.cost(x)
        return self.latest_cost < fraction * self.bound

    def cost(self, x: np.ndarray) -> float:
        return self.model.cost(x) - self.model.offset


def proved(model: Model, best: np.ndarray | None) -> Result:
    """What a finished search proves: ``best`` optimal, or, with none, that no
    clean assignment fits."""
    if best is None:
        return Result(Status.INFEASIBLE)
    return Result(Status.OPTIMAL, best, model.cost(best))


def usable(model: Model, x: np.ndarray) -> bool:
    """``x`` can bound a search: it fits, with no pick at 10^18 (toulbar2's
    infinite cost)."""
    return model.fits(x) and model.cost(x) - model.offset < FORBIDDEN
