"""Lagrangian relaxation of memory, for models too large for exact search.

Memory couples all variables; relaxing it leaves a pairwise cost function
network that toulbar2 handles well. Memory moves into the unary costs as a
price per unit of usage, set one of two ways (backends ``lagrange`` and
``lagrange-terms``; the default plan for large models runs both):

- :class:`Multipliers` (:class:`Lagrange`): one multiplier ``lam[p] >= 0`` per kept
  time point, the true Lagrangian

      min_x  cost(x) + sum_p lam[p] * (load_p(x) - limit),

  moved by subgradient steps; every value pays its usage times the
  multipliers it spans (prefix sums make that one vectorised expression);
- :class:`TermWeights` (:class:`TermLagrange`): one weight per memory term, bracketed
  between a weight at which its range overflowed and one at which it fitted,
  like the contest winner's per-node weights.

The multiplier loop first *dives* (:mod:`maxshard.search.dive`): rounds whose relaxed
problem is solved roughly and fast (diffusion, rounding, a memory-free
descent; 0.1-0.4 s each on the large benchmarks), for its whole time when it
has at most :attr:`Lagrange.dive_all` seconds (a compiler's budget, a tenth
to a quarter of the contest's), else for :attr:`Lagrange.dive_max` seconds,
from whose multipliers the toulbar2 rounds go on; a dive of 8-20 s to the
deadline spends its last seconds climbing the dual ascent from the messages of its
best-bounding round (:attr:`Lagrange.dive_climb`). Each toulbar2 round:

1. *relax*: solve the priced, memory-free problem with toulbar2 under a short
   time limit (a heuristic here: such solves are rarely proven optimal on
   large models), longer only while it has found nothing: a lost round
   changed a loop's whole course (:func:`~maxshard.search.toulbar2.run`);
2. *repair and relink*: repair the relaxed solution greedily until it fits,
   and walk the best solution toward the relaxed one (each variable takes its
   relaxed value where memory allows); *polish* both with the local search's
   memory-feasible descent and the best with a little local search
   (perturbations, or exchange moves first); keep whatever is cheaper;
3. *update* the prices from where the relaxed solution overflows;
4. *bound*: a second spent on a valid lower bound. The multipliers spend it
   on min-sum diffusion for the loop's own multipliers
   (:class:`~maxshard.bound.Diffusion`) or on the dual block coordinate
   ascent (:mod:`maxshard.ascent`: messages and LP-optimal multipliers of its
   own), whichever has bounded higher (U: diffusion; S: the ascent; see
   :meth:`Multipliers.bound`), and toulbar2's own bound on the relaxed solve
   bounds for them too (its optimum when proved, else the global bound its
   cut-short search reached; see :func:`relax`). The term weights, no
   Lagrangian, climb the ascent. With both loops bounding, the bound goes on
   rising whichever loop leads after the switch. Where another worker climbs
   the ascent all along (``--prove``'s ``dual``), a loop's own ascent would
   only trail it: the multipliers keep to diffusion, the term weights skip
   the step and give the second to the search.

Where memory binds nowhere (no limit, or presolve kept no time point) there
is nothing to price: the loop runs :meth:`Lagrange.free_rounds` instead, the
dive's rounding without prices on TRW-S's messages (:class:`~maxshard.bound.TRWS`),
whose bound often proves its answer optimal (the frameworks' models without a
memory limit).

Every solution it reports fits in memory (the relinking never leaves the
feasible region). Each better bound is reported as soon as it is found. After
every round the loop hands its prices to the orchestrator
(:meth:`~maxshard.backend.Context.hand_over`): a worker restarted as a copy of the
leading loop starts from them rather than from zero (the plan's ``switch``,
:mod:`maxshard.orchestrate.plan`).
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from .. import work
from ..ascent import state_of
from ..backend import Capabilities, Context, Report, Result, Status, context
from ..bound import TRWS, integer_bound, slack
from ..instance import FORBIDDEN
from ..model import Model
from ..search import Searching, toulbar2_limits
from ..search.dive import Rounding
from ..search.local import Search
from ..search.multipliers import Multipliers, TermWeights, solve_penalised, whole

#: MAXSHARD_DEBUG=1 traces every round on stderr (relaxed value, overloaded points, step).
DEBUG = bool(os.environ.get("MAXSHARD_DEBUG"))


class Standing:
    """The loop's best solution and best lower bound, each reported as it
    improves (a solution only if it is cheaper and forbidden-free)."""

    def __init__(self, model: Model, x: np.ndarray, report: Report) -> None:
        self.model, self.report = model, report
        self.x, self.cost = x, model.cost(x)
        self.bound: int | None = None

    def offer(self, x: np.ndarray) -> None:
        cost = self.model.cost(x)
        if cost < self.cost and not self.model.forbidden(x):
            self.x, self.cost = x, cost
            self.report(x)

    def raise_bound(self, bound: int | None) -> bool:
        """Keep and report ``bound`` if it is higher; True once the best is proved optimal."""
        if bound is not None and (self.bound is None or bound > self.bound):
            self.bound = bound
            self.report(lower_bound=bound)
        return self.proved

    @property
    def proved(self) -> bool:
        return self.bound is not None and self.bound >= self.cost

    def result(self) -> Result:
        """The loop's result: optimal once proved, else feasible, with its bound."""
        return Result(Status.OPTIMAL if self.proved else Status.FEASIBLE, self.x, self.bound)


class Lagrange(Searching):
    name = "lagrange"
    # its multipliers price memory in lns's priced moves (LNS.multiplier_spread)
    capabilities = Capabilities(
        exact=False, anytime=True, memory=True, lower_bound=True, deterministic=True,
        provides=frozenset({"multipliers"}),
    )  # fmt: skip

    #: toulbar2 CPU seconds per relaxed solve at the start (doubled while it finds nothing)
    relax_seconds = 3
    #: initial Polyak step factor (0.3 measured worse on S and N: multipliers grow too slowly)
    theta = 1.0
    #: local search on the best solution after every round (perturbations; with
    #: ``exchanges`` exchange moves first, twice the time) (history: *Tuning
    #: notes*, lagrange polish and exchanges)
    polish_seconds = 1.0
    exchanges = False
    #: greedy repair budget per round (far-off relaxed solutions are left to relinking)
    repair_seconds = 2.0
    #: seconds per round for the lower bound (the ascent's first round also
    #: waits for its first LP: S 2 s, P 2-8 s)
    bound_seconds = 1.0
    #: the fast rounds first (:meth:`dive`): all the loop's time when it has at most ``dive_all``
    #: seconds, else ``dive_max``; a relaxed solution whose repair takes over
    #: ``dive_repair_seconds`` is given up (history: *Tuning notes*, lagrange dive lengths)
    dive_all = 60.0
    dive_max = 10.0
    dive_repair_seconds = 0.3
    #: a dive to a deadline within ``dive_climb_spans`` seconds ends climbing the
    #: dual ascent from its best-bounding round's messages, for ``dive_climb_share``
    #: of its time, at most ``dive_climb`` seconds (history: *Tuning notes*,
    #: lagrange dive climb)
    dive_climb, dive_climb_share, dive_climb_spans = 2.5, 0.2, (8.0, 20.0)
    # Tried and left out (S, 120-240 s, 3-4 seeds each): restarting each round
    # from the best of all workers (shared_best), 2 s of memory-free local search
    # on each relaxed solution, 6 s of local search on each repaired one; none
    # beat the spread between seeds.

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        search = Search(model, seed)
        if incumbent is None or not search.reset(incumbent):
            search.reset(model.min_usage_solution())
        search.descend(deadline)
        best = Standing(model, search.x.copy(), report)
        report(best.x)
        ctx = context(report)
        if model.limit is None or not len(model.base):  # nothing to price
            self.free_rounds(model, search, best, deadline, ctx)
            return best.result()
        prices, warm = self._start_prices(model, best.cost, ctx)
        diving = self._dive_span(prices, warm, deadline)
        if diving is not None:
            end, climb = diving
            self.dive(model, prices, search, best, end, climb)
        if not best.proved:
            self._rounds(model, prices, search, best, deadline, seed)
        return best.result()

    def free_rounds(
        self, model: Model, search: Search, best: Standing, deadline: float, ctx: Context
    ) -> None:
        """Where memory binds nowhere, what is left is the pairwise problem, whose
        local-polytope bound TRW-S's message passing climbs: each round sweeps it
        a few times (:class:`~maxshard.search.dive.Rounding`, no prices), decodes
        a solution from the messages and descends; the bound often proves the
        best optimal (the frameworks' models without a memory limit). The
        messages go on from those of this loop in an earlier stage, and are
        handed over every second. Once the rounds bring nothing new, local
        search goes on from the best until ``deadline``."""
        messages = TRWS(model)  # not usable where forbidden unary costs keep it out
        if isinstance(ctx.inherited, dict):
            messages.restore(ctx.inherited)
        rounding = Rounding(model, messages, int(search.rng.integers(2**31)))
        no_prices = np.zeros(len(model.unary))
        last, top, shared = None, -math.inf, work.now()
        while messages.usable and work.now() < deadline:
            if work.now() > shared + 1:
                ctx.hand_over(state_of(np.zeros(0), messages))
                shared = work.now()
            x, value = rounding.solve(no_prices)
            if value is not None and best.raise_bound(integer_bound(model, value, 0.0)):
                return
            risen = value is not None and value > top + 1e-9 * abs(top)
            if not risen and last is not None and np.array_equal(x, last):
                break  # the messages have settled, and so has their rounding
            top = max(top, value) if value is not None else top
            best.offer(x)
            last = x
        if messages.usable:
            ctx.hand_over(state_of(np.zeros(0), messages))
        search.reset(best.x)
        search.iterate(deadline, best.offer)

    def _rounds(
        self,
        model: Model,
        prices: Multipliers | TermWeights,
        search: Search,
        best: Standing,
        deadline: float,
        seed: int,
    ) -> None:
        """The toulbar2 rounds (the module docstring's steps 1-4) until
        ``deadline`` or until ``best`` is proved optimal."""
        ctx = context(best.report)
        seconds = self.relax_seconds
        rounds = 0
        light = False  # skip toulbar2's preprocessing (measured: S needs it, M and N not)
        # what a deterministic solve is charged besides its search
        prepared = toulbar2_limits.preparation_of(model)
        while work.now() + seconds + prepared + 1 < deadline:
            rounds += 1
            raw = prices.penalties()
            # longer while it finds nothing (see toulbar2.run), not past the deadline
            grace = max(0, min(seconds, math.floor(deadline - work.now()) - seconds - 1))
            x_r, relaxed = solve_penalised(model, whole(raw), seconds, seed + rounds, light, grace)
            end = min(deadline, work.now() + self.bound_seconds)
            if best.raise_bound(prices.bound(raw, relaxed, end)):
                return
            if x_r is None:  # toulbar2 found nothing in time: lighter, then longer solves
                # (A memory-free descent on the penalised costs was tried in its
                # place, and after every relaxed solve: it cut the relaxed
                # solutions' penalised value on N by a third, 3.2e11 to 2.0e11,
                # but S ended 4-7% worse in single runs at equal seeds.)
                light, seconds = True, seconds * 2 if light else seconds
                continue
            # primal: solutions built from the relaxed one, polished; keep the cheapest
            for x in self.primal(search, x_r, best.x, deadline):
                best.offer(x)
            prices.update(x_r, best.cost)
            ctx.hand_over(prices.state())
            if DEBUG:
                excess = model.load(x_r) - model.limit
                print(
                    f"round {rounds} t={work.now():.1f} cost_r={model.cost(x_r):.4g} "
                    f"over={int((excess > 0).sum())} maxover={excess.max():.3g} "
                    f"best={best.cost:.4g}",
                    file=sys.stderr,
                )

    def _start_prices(
        self, model: Model, cost: int, ctx: Context
    ) -> tuple[Multipliers | TermWeights, object]:
        """The loop's prices for a model whose first solution costs ``cost``,
        and the leader's state it was restarted from at the switch (or None)."""
        prices = self.prices(model, cost, ascent=not ctx.peer_provides("ascent"))
        # a copy restarted at the leader switch goes on from the leader's prices
        warm = ctx.inherited
        if warm is not None:
            prices.restore(warm)
        # a worker restarted as the other loop goes on with its own ascent:
        # the bound it had climbed to is not lost at the switch
        previous = ctx.previous
        if isinstance(previous, dict) and "ascent" in previous and prices.ascent is not None:
            prices.ascent.restore(previous["ascent"])
        return prices, warm

    def _dive_span(
        self, prices: Multipliers | TermWeights, warm: object, deadline: float
    ) -> tuple[float, float] | None:
        """(its end, the seconds it ends climbing) of the dive the loop starts
        with, or None. A short run dives all the way (a copy restarted at the
        switch too, from the leader's prices), a long one first, unless it has
        the leader's prices."""
        left = deadline - work.now()
        if not (prices.dives and (left <= self.dive_all or warm is None)):
            return None
        end = deadline if left <= self.dive_all else work.now() + self.dive_max
        span, (shortest, longest) = end - work.now(), self.dive_climb_spans
        # the original loop's dive to the deadline ends climbing (not a copy's)
        climbs = end == deadline and warm is None and prices.ascent is not None
        climb = 0.0
        if climbs and shortest <= span <= longest:
            climb = min(self.dive_climb, self.dive_climb_share * span)
        return end, climb

    def dive(
        self,
        model: Model,
        prices: Multipliers,
        search: Search,
        best: Standing,
        end: float,
        climb: float = 0.0,
    ) -> None:
        """Fast rounds (:mod:`maxshard.search.dive`) until ``end``: the relaxed problem solved
        roughly, its solution repaired and descended, the multipliers stepped;
        the last ``climb`` seconds climb the dual ascent from the messages of
        the round that bounded highest (see :attr:`dive_climb`). Each better
        solution and bound goes to ``best``; stops once it is proved optimal."""
        ctx = context(best.report)
        rounding = Rounding(model, prices.diffusion, int(search.rng.integers(2**31)))
        shared = work.now()
        diffusion, top, at_top = prices.diffusion, -math.inf, None
        stop = end - climb
        while work.now() < stop:
            x_r, value = rounding.solve(prices.penalties())
            if value is not None:
                bound = integer_bound(model, value, slack(model, prices.lam))
                if best.raise_bound(bound):  # proved optimal: nothing left to dive for
                    break
                if climb and bound > top:  # the messages the climb starts from
                    top = bound
                    at_top = {k: a.copy() for k, a in state_of(prices.lam, diffusion).items()}
            search.reset(x_r)
            # a far-off relaxed solution is not worth a long repair: the next round is near
            if search.repair(min(stop, work.now() + self.dive_repair_seconds)):
                search.descend(stop)
                best.offer(search.x.copy())
            prices.update(x_r, best.cost)
            if work.now() > shared + 1:  # for a copy restarted at the switch
                ctx.hand_over(prices.state())
                shared = work.now()
        ctx.hand_over(prices.state())
        if at_top is not None and work.now() < end and not best.proved:
            prices.ascent.restore(at_top)
            while work.now() < end and not prices.ascent.converged:
                best.raise_bound(prices.ascent.step(end))

    def prices(self, model: Model, cost: int, ascent: bool = True) -> Multipliers | TermWeights:
        """The loop's prices, for a model whose first solution costs ``cost``;
        ``ascent=False``: without a dual ascent of their own."""
        return Multipliers(model, self.theta, ascent)

    def primal(
        self, search: Search, x_r: np.ndarray, best_x: np.ndarray, deadline: float
    ) -> list[np.ndarray]:
        """Fitting solutions derived from the relaxed solution ``x_r``: repaired and
        descended; the best one relinked toward it and descended; then a little
        local search from the best of those (with ``exchanges``, exchange moves
        first and for twice the time)."""
        found = []
        search.reset(x_r)
        if search.repair(min(deadline, work.now() + self.repair_seconds)):
            search.descend(deadline)
            found.append(search.x.copy())
        search.reset(best_x)
        relink(search, x_r)
        search.descend(deadline)
        found.append(search.x.copy())
        search.reset(min([best_x, *found], key=search.model.cost))
        # its finds reach the caller as the last candidate, in order with the others
        seconds = self.polish_seconds * (2 if self.exchanges else 1)
        end = min(deadline, work.now() + seconds)
        search.iterate(end, lambda _x: None, exchange_every=3.0 if self.exchanges else math.inf)
        found.append(search.x.copy())
        return found


class TermLagrange(Lagrange):
    """The same loop with memory priced by :class:`TermWeights` (bounds from the
    dual ascent), longer relaxed solves and exchange moves in the polish: the
    second worker of the default plan for large models, beside :class:`Lagrange`.

    Measured on S, one worker, 120 s: 1.530-1.537e9 at three seeds, where the
    multipliers with the same polish averaged 1.612e9 (1.55-1.66e9).
    """

    name = "lagrange-terms"
    capabilities = Capabilities(
        exact=False, anytime=True, memory=True, lower_bound=True, deterministic=True
    )
    relax_seconds = 6
    exchanges = True

    def prices(self, model: Model, cost: int, ascent: bool = True) -> Multipliers | TermWeights:
        # The weights start at the first solution's cost per unit of the limit,
        # not at 1 in the model's cost unit, from where the brackets took many
        # rounds of 6-10 s to grow: alone for 40 s, seed 0, N reached 2.44e11
        # against 3.01e11, S 1.62e9 against 1.71e9 (docs/history.md). A free or
        # forbidden first solution gives no scale (and a weight of 0 never grows).
        start = cost / max(1, model.limit or 0) if 0 < cost < FORBIDDEN else 1.0
        return TermWeights(model, start=start, ascent=ascent)


def relink(search: Search, target: np.ndarray) -> None:
    """Move each variable to its target value where memory allows, in random order."""
    differ = np.flatnonzero(search.x != target)
    for v in search.rng.permutation(differ):
        _, fits = search.options(int(v))
        if fits[target[v]]:
            search.move(int(v), int(target[v]))
