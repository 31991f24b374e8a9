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

The multiplier loop first *dives* (:mod:`.dive`): rounds whose relaxed
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
   changed a loop's whole course (:func:`~maxshard.backends.toulbar2.run`);
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
from collections.abc import Callable

import numpy as np

from .. import work
from ..ascent import Ascent, state_of
from ..backend import Capabilities, Report, Result, Status, context
from ..bound import Diffusion, dot, floor_bound, slack
from ..instance import FORBIDDEN
from ..model import Model, penalties, term_penalties
from . import toulbar2
from .dive import Rounding
from .local import Search, warm_up

#: MAXSHARD_DEBUG=1 traces every round on stderr (relaxed value, overloaded points, step).
DEBUG = bool(os.environ.get("MAXSHARD_DEBUG"))


class Lagrange:
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
    #: local search on the best solution after every round: perturbations, or
    #: with ``exchanges`` exchange moves first (and twice the time). Measured
    #: with multipliers, one worker each: exchanges here helped S (1.612e9 on
    #: average over four seeds in 120 s, 1.640e9 without) and hurt N at both
    #: seeds tried (2.075e11 and 2.086e11 in 90 s, 2.023e11 and 2.051e11
    #: without); :class:`TermLagrange` runs them.
    polish_seconds = 1.0
    exchanges = False
    #: greedy repair budget per round (far-off relaxed solutions are left to relinking)
    repair_seconds = 2.0
    #: seconds per round for the lower bound (the ascent's first round also
    #: waits for its first LP: S 2 s, P 2-8 s)
    bound_seconds = 1.0
    #: the fast rounds first (:meth:`dive`): all the time when the loop has at
    #: most ``dive_all`` seconds, else ``dive_max`` seconds (the toulbar2 rounds
    #: go on from their multipliers). Measured, default plan, seed 0: N at 45 s
    #: 2.093e11 diving all its stage, 2.119e11 diving 30% of it; S at 60 s
    #: 1.516e9 against 1.550e9, and both bounds higher. At the full limits,
    #: seed 0, the same day, 10 s of dive first against none: M 1.0000 / 0.9964,
    #: N 0.9844 / 0.9901, S 1.0014 / 0.9908, U 1.1499 / 1.0635, the bound
    #: nearer the answer on all four (U 9.5% / 27.2%). A relaxed solution whose
    #: repair takes longer than ``dive_repair_seconds`` is given up (the first
    #: rounds overflow widely; the next round is nearer)
    dive_all = 60.0
    dive_max = 10.0
    dive_repair_seconds = 0.3
    #: a dive to the deadline of 8-20 s (S and U at a tenth of their limits)
    #: ends climbing the dual ascent (:mod:`maxshard.ascent`) from the messages
    #: of its best-bounding round, for this share of its time, at most
    #: ``dive_climb`` seconds. Measured on S at a tenth (24 s), seeds 10-17, one
    #: run after another: the gap 4.8-9.1% (mean 6.4%) against 8.7-11.9%
    #: (10.4%) without, the score 0.9898 on average against 0.9881. Not in a
    #: shorter dive: on M at a tenth (5.5 s) the dive's own bound rose faster in
    #: its last second than the climb. Not in a longer one, where the dive's
    #: bound is within a few percent already: N at a quarter (a 25 s dive),
    #: seeds 0-1, scored 1.0082 / 0.9996 with the climb, 1.0101 / 1.0104 without.
    dive_climb, dive_climb_share, dive_climb_spans = 2.5, 0.2, (8.0, 20.0)
    # Tried and left out (S, 120-240 s, 3-4 seeds each): restarting each round
    # from the best of all workers (shared_best), 2 s of memory-free local search
    # on each relaxed solution, 6 s of local search on each repaired one; none
    # beat the spread between seeds.

    def prepare(self) -> None:
        warm_up()
        toulbar2.load()

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result:
        search = Search(model, seed)
        if incumbent is None or not search.reset(incumbent):
            search.reset(model.min_usage_solution())
        search.descend(deadline)
        best_x, best_cost = search.x.copy(), model.cost(search.x)
        report(best_x)
        if model.limit is None or not len(model.base):
            return Result(Status.FEASIBLE, best_x)

        ctx = context(report)
        prices = self.prices(model, best_cost, ascent=not ctx.peer_provides("ascent"))
        # a copy restarted at the leader switch goes on from the leader's prices
        warm = ctx.inherited
        if warm is not None:
            prices.restore(warm)
        # a worker restarted as the other loop goes on with its own ascent:
        # the bound it had climbed to is not lost at the switch
        previous = ctx.previous
        if isinstance(previous, dict) and "ascent" in previous and prices.ascent is not None:
            prices.ascent.restore(previous["ascent"])
        best_bound: int | None = None

        def improve_bound(bound: int | None) -> bool:
            """Keep and report a better bound; True once it proves ``best_x`` optimal."""
            nonlocal best_bound
            if bound is not None and (best_bound is None or bound > best_bound):
                best_bound = bound
                report(lower_bound=bound)
            return best_bound is not None and best_bound >= best_cost

        # a short run dives all the way (a copy restarted at the switch too, from
        # the leader's prices), a long one first, unless it has the leader's prices
        left = deadline - work.now()
        if isinstance(prices, Multipliers) and (left <= self.dive_all or warm is None):
            end = deadline if left <= self.dive_all else work.now() + self.dive_max
            span, (shortest, longest) = end - work.now(), self.dive_climb_spans
            # the original loop's dive to the deadline ends climbing (not a copy's)
            climbs = end == deadline and warm is None and prices.ascent is not None
            climb = 0.0
            if climbs and shortest <= span <= longest:
                climb = min(self.dive_climb, self.dive_climb_share * span)
            best_x, best_cost = self.dive(
                model, prices, search, best_x, end, report, improve_bound, climb
            )
            if best_bound is not None and best_bound >= best_cost:
                return Result(Status.OPTIMAL, best_x, best_bound)

        seconds = self.relax_seconds
        rounds = 0
        light = False  # skip toulbar2's preprocessing (measured: S needs it, M and N not)
        while work.now() + seconds + 1 < deadline:
            rounds += 1
            raw = prices.penalties()
            # longer while it finds nothing (see toulbar2.run), not past the deadline
            grace = max(0, min(seconds, math.floor(deadline - work.now()) - seconds - 1))
            x_r, relaxed = solve_penalised(model, whole(raw), seconds, seed + rounds, light, grace)
            end = min(deadline, work.now() + self.bound_seconds)
            if improve_bound(prices.bound(raw, relaxed, end)):
                return Result(Status.OPTIMAL, best_x, best_cost)
            if x_r is None:  # toulbar2 found nothing in time: lighter, then longer solves
                # (A memory-free descent on the penalised costs was tried in its
                # place, and after every relaxed solve: it cut the relaxed
                # solutions' penalised value on N by a third, 3.2e11 to 2.0e11,
                # but S ended 4-7% worse in single runs at equal seeds.)
                light, seconds = True, seconds * 2 if light else seconds
                continue
            # primal: solutions built from the relaxed one, polished; keep the cheapest
            for x in self.primal(search, x_r, best_x, deadline):
                cost = model.cost(x)
                if cost < best_cost and not model.forbidden(x):
                    best_x, best_cost = x, cost
                    report(best_x)
            prices.update(x_r, best_cost)
            ctx.hand_over(prices.state())
            if DEBUG:
                excess = model.load(x_r) - model.limit
                print(
                    f"round {rounds} t={work.now():.1f} cost_r={model.cost(x_r):.4g} "
                    f"over={int((excess > 0).sum())} maxover={excess.max():.3g} "
                    f"best={best_cost:.4g}",
                    file=sys.stderr,
                )
        return Result(Status.FEASIBLE, best_x, best_bound)

    def dive(
        self,
        model: Model,
        prices: Multipliers,
        search: Search,
        best_x: np.ndarray,
        end: float,
        report: Report,
        improve_bound: Callable[[int | None], bool],
        climb: float = 0.0,
    ) -> tuple[np.ndarray, int]:
        """Fast rounds (:mod:`.dive`) until ``end``: the relaxed problem solved
        roughly, its solution repaired and descended, the multipliers stepped;
        the last ``climb`` seconds climb the dual ascent from the messages of
        the round that bounded highest (see :attr:`dive_climb`).
        Returns the best solution and its cost; reports each better one."""
        ctx = context(report)
        best_cost = model.cost(best_x)
        rounding = Rounding(model, prices.diffusion, int(search.rng.integers(2**31)))
        shared = work.now()
        diffusion, top, at_top = prices.diffusion, -math.inf, None
        stop = end - climb
        while work.now() < stop:
            x_r, value = rounding.solve(prices.penalties())
            if value is not None:
                bound = floor_bound(model, value, slack(model, prices.lam))
                improve_bound(bound)
                if bound >= best_cost:  # proved optimal: nothing left to dive for
                    break
                if climb and bound > top:  # the messages the climb starts from
                    top = bound
                    at_top = {k: a.copy() for k, a in state_of(prices.lam, diffusion).items()}
            search.reset(x_r)
            # a far-off relaxed solution is not worth a long repair: the next round is near
            if search.repair(min(stop, work.now() + self.dive_repair_seconds)):
                search.descend(stop)
                cost = model.cost(search.x)
                if cost < best_cost and not model.forbidden(search.x):
                    best_x, best_cost = search.x.copy(), cost
                    report(best_x)
            prices.update(x_r, best_cost)
            if work.now() > shared + 1:  # for a copy restarted at the switch
                ctx.hand_over(prices.state())
                shared = work.now()
        ctx.hand_over(prices.state())
        if at_top is not None and work.now() < end:
            prices.ascent.restore(at_top)
            while work.now() < end and not prices.ascent.converged:
                improve_bound(prices.ascent.step(end))
        return best_x, best_cost

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


class Multipliers:
    """One multiplier per kept point, moved by subgradient steps: a true
    Lagrangian relaxation, so every relaxed solve bounds the optimum.

    Step ``lam += step * (load - limit)`` on the relaxed solution's excess, with
    Polyak's step from the best cost and the relaxed value; the factor
    ``theta`` halves when the relaxed value stalls for three rounds and restarts
    at 1 once negligible; multipliers stay >= 0.

    Tried and left out: Kelley's cutting planes in a trust region (the next
    multipliers maximise the lowest of the planes ``cost(x_i) + lam . g_i`` of
    all relaxed solutions so far, in a box around the best, an LP over the
    points ever overloaded). Alone on V for 120 s it beat these steps (bound
    1,365,269 against 1,336,172, best 1,632,051 against 1,724,180), but beside
    toulbar2 in the default plan V's bound was no better (1,360,363 against
    1,365,360), and on cuts of the suite at 20 s it won on S-2000, M-2000 and
    V-600 and lost on U-2000 (160.2e6 against 164.0e6) and S-1000 (53.7e6
    against 59.8e6): one run each, no clear winner.
    """

    def __init__(self, model: Model, theta: float = 1.0, ascent: bool = True) -> None:
        self.model, self.theta = model, theta
        self.lam = np.zeros(len(model.base))
        self.best_relaxed, self.stall = -np.inf, 0
        # the two ways to a bound (see bound), and the best each has reached
        # None where another worker climbs the ascent (see the module docstring)
        self.ascent = Ascent(model) if ascent else None
        self.diffusion = Diffusion(model)
        self.best, self.rounds = [-math.inf, -math.inf], 0

    def penalties(self) -> np.ndarray:
        return penalties(self.model, self.lam)

    def state(self) -> dict:
        return {"lam": self.lam, "theta": self.theta, **_ascent_state(self.ascent)}

    def restore(self, state: dict) -> None:
        if "lam" in state and len(state["lam"]) == len(self.lam):
            self.lam, self.theta = np.array(state["lam"], dtype=np.float64), state["theta"]

    def bound(self, raw: np.ndarray, relaxed: int | None, end: float) -> int | None:
        """A bound from one of two ways of spending the time until ``end``, and
        ``relaxed``'s: toulbar2's lower bound on the problem these multipliers
        penalise (None: none).

        The two ways: min-sum diffusion for these multipliers (penalties ``raw``;
        the messages kept from round to round), or the dual ascent on messages
        and multipliers of its own (:mod:`maxshard.ascent`). Which bounds higher
        depends on the model, and shows early: measured alone in these rounds
        (default run, seed 0), U at 30 s 1.75e9 with diffusion against 1.42e9
        with the ascent, at 180 s 2.009-2.022e9 against 1.86-1.90e9; S at 30 s
        1.03e9 against 1.18e9, at 60 s 1.28e9 against 1.37-1.39e9. So each
        round goes to the way whose bound leads, every fourth to the other.
        """
        self.rounds += 1
        use_ascent = self.best[0] >= self.best[1]
        if self.rounds <= 2:
            use_ascent = self.rounds == 1
        elif self.rounds % 4 == 0:
            use_ascent = not use_ascent
        use_ascent = use_ascent and self.ascent is not None
        way = 0 if use_ascent else 1
        got = _climb(self.ascent, end) if use_ascent else self.diffusion.bound(self.lam, raw, end)
        if got is not None:
            self.best[way] = max(self.best[way], got)
        found = [got]
        if relaxed is not None:
            found.append(_dual(self.model, self.lam, relaxed))
        return max((b for b in found if b is not None), default=None)

    def update(self, x_r: np.ndarray, best_cost: int) -> None:
        model = self.model
        excess = (model.load(x_r) - model.limit).astype(np.float64)
        relaxed = float(model.cost(x_r)) + dot(self.lam, excess)
        if relaxed > self.best_relaxed:
            self.best_relaxed, self.stall = relaxed, 0
        else:
            self.stall += 1
            if self.stall >= 3:  # shrink the step; restart it once it is negligible
                self.theta, self.stall = (self.theta / 2 if self.theta > 1e-3 else 1.0), 0
        active = (self.lam > 0) | (excess > 0)
        norm = dot(excess[active], excess[active])
        if norm == 0:
            return  # fits with complementary slackness: no direction to move in
        step = self.theta * max(best_cost - relaxed, 0.01 * best_cost) / norm
        self.lam = np.maximum(0.0, self.lam + step * excess)


class TermWeights:
    """One weight per memory term, each bracketed on its own, after the contest
    winner's per-node weights (not a Lagrangian dual: its bounds come from the
    dual ascent, :mod:`maxshard.ascent`, on multipliers of its own).

    A term is *broken* when a point of its range is overloaded in the relaxed
    solution. A broken term's weight becomes the lower end of its bracket, a
    fitting term's the upper end, and the next weight is the bracket's middle.
    Until a term has broken once (lower end 0), a fitting round divides its
    weight by ``descent``; until it has fitted once (no upper end), a broken
    round multiplies it by 4. Brackets go stale as the other weights move, so
    each round the lower end of a fitting term shrinks by 1.5 and the upper
    end of a broken one grows by 1.35. Every weight starts at ``start``:
    :class:`TermLagrange` gives its first solution's cost per unit of the limit.

    Measured on S, one worker, 120 s (weights then starting at 1): ``descent``
    2, 4 and 8 reached 1.549e9, 1.58e9 and 1.530-1.537e9 (each the same at
    every seed tried); the winner's seeded noise of +-12.5% on the weights
    scattered the outcome (1.559e9 and 1.646e9), so the weights here are
    deterministic.
    """

    descent = 8.0

    def __init__(self, model: Model, start: float = 1.0, ascent: bool = True) -> None:
        k = len(model.term_var)
        self.model = model
        self.w, self.lo, self.hi = np.full(k, start), np.zeros(k), np.full(k, np.inf)
        # None where another worker climbs the ascent (see the module docstring)
        self.ascent = Ascent(model) if ascent else None

    def penalties(self) -> np.ndarray:
        return term_penalties(self.model, self.w)

    def state(self) -> dict:
        return {"w": self.w, "lo": self.lo, "hi": self.hi, **_ascent_state(self.ascent)}

    def restore(self, state: dict) -> None:
        if "w" in state and len(state["w"]) == len(self.w):
            self.w, self.lo, self.hi = (np.array(state[k], dtype=float) for k in ("w", "lo", "hi"))

    def bound(self, raw: np.ndarray, relaxed: int | None, end: float) -> int | None:
        """The dual ascent's bound, climbed until ``end`` (``raw`` and
        ``relaxed`` belong to these weights, which bound nothing); None at once
        without an ascent of its own."""
        return _climb(self.ascent, end) if self.ascent is not None else None

    def update(self, x_r: np.ndarray, best_cost: int) -> None:
        model = self.model
        overloaded = np.concatenate([[0], np.cumsum(model.load(x_r) > model.limit)])
        broken = overloaded[model.term_hi] > overloaded[model.term_lo]
        self.lo = np.where(broken, self.w, self.lo / BRACKET_SHRINK)
        self.hi = np.where(broken, self.hi * BRACKET_GROW, self.w)
        w = np.where(self.lo > 0, (self.lo + self.hi) / 2, self.hi / self.descent)
        w = np.where(np.isfinite(self.hi), w, self.w * 4)
        self.w = np.minimum(w, MAX_PENALTY)  # a term that never fits must not reach inf


#: Each round a fitting term's lower bracket end shrinks by this factor (brackets go stale).
BRACKET_SHRINK = 1.5
#: Each round a broken term's upper bracket end grows by this factor.
BRACKET_GROW = 1.35
#: Penalties are capped here: far above any real total cost, far below the
#: forbidden cost (a penalised value must never turn into a forbidden one).
MAX_PENALTY = 10**15


def whole(pen: np.ndarray) -> np.ndarray:
    """Penalties as int64, rounded down and capped (both keep a Lagrangian bound valid)."""
    return np.floor(np.minimum(pen, MAX_PENALTY)).astype(np.int64)


def solve_penalised(
    model: Model, pen: np.ndarray, seconds: int, seed: int, light: bool = False, grace: int = 0
) -> tuple[np.ndarray | None, int | None]:
    """A good solution of the memory-free problem with unary costs raised by
    ``pen`` (int64 per value), and a lower bound on that problem's optimum:
    the solution's own value when toulbar2 proved it optimal, else the global
    lower bound of toulbar2's cut-short search (``GetDDualBound``), or None.

    ``light`` turns toulbar2's preprocessing off: on S (domains up to 853) its
    preprocessing alone used the 3 s budget and no solution came out, while
    without it a solution did; on M and N it is the other way round.
    ``grace``: more seconds the solve may take while it has found nothing
    (:func:`~maxshard.backends.toulbar2.run`).

    (Seeding toulbar2 with the incumbent's penalised cost as upper bound was
    tried: on S it often found nothing better in time, and rounds stalled.)
    """
    unary = np.where(model.unary >= FORBIDDEN, model.unary, model.unary + pen)
    from pytoulbar2.pytb2 import Contradiction

    try:
        cfn = toulbar2.build(model, unary, seed, None, memory=False)
        if light:
            cfn.NoPreprocessing()
    except Contradiction:  # only forbidden assignments remain: nothing to relax toward
        return None, None
    proved, x = toulbar2.run(cfn, model.nv, seconds, lambda _x: None, grace)
    if x is None:
        return None, None
    if proved:
        return x, model.cost(x) + int(pen[model.dom_off[:-1] + x].sum())
    lower = cfn.GetDDualBound()  # in toulbar2's units: without the model's offset
    return x, model.offset + math.floor(lower) if math.isfinite(lower) else None


def relax(
    model: Model, lam: np.ndarray, seconds: int, seed: int, light: bool = False
) -> tuple[np.ndarray | None, int | None]:
    """A good solution of the problem penalised by multipliers ``lam``, and the
    lower bound on the model's optimum that toulbar2's bound on the penalised
    problem gives (None when it has none).

    Why the bound holds: for x that fits, ``load_p(x) <= limit``, so
    ``cost(x) >= cost(x) + sum_p lam_p (load_p(x) - limit) = cost(x) + pen(x) -
    sum_p lam_p (limit - base_p)``, and ``pen >= whole(pen)`` value by value;
    toulbar2 bounds the minimum of ``cost + whole(pen)`` from below.
    """
    pen = whole(penalties(model, lam))
    x, relaxed = solve_penalised(model, pen, seconds, seed, light)
    return x, _dual(model, lam, relaxed) if relaxed is not None else None


def _ascent_state(ascent: Ascent | None) -> dict:
    """The ascent's part of a loop's handed-over state (none without one)."""
    return {} if ascent is None else {"ascent": ascent.state()}


def _climb(ascent: Ascent, end: float) -> int | None:
    """The best bound of the ascent's steps until ``end`` (at least one)."""
    found = [ascent.step(end)]
    while work.now() < end and not ascent.converged:
        found.append(ascent.step(end))
    return max((b for b in found if b is not None), default=None)


def _dual(model: Model, lam: np.ndarray, relaxed: int) -> int:
    """The Lagrangian bound from a lower bound ``relaxed`` on the penalised
    problem's optimum (see :func:`relax`)."""
    return math.floor(relaxed - slack(model, lam) * (1 + 1e-9) - 1)


def relink(search: Search, target: np.ndarray) -> None:
    """Move each variable to its target value where memory allows, in random order."""
    differ = np.flatnonzero(search.x != target)
    for v in search.rng.permutation(differ):
        _, fits = search.options(int(v))
        if fits[target[v]]:
            search.move(int(v), int(target[v]))
