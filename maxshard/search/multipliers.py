"""Prices on memory for the Lagrangian loops: :class:`Multipliers` (one per kept
point, a true Lagrangian relaxation) and :class:`TermWeights` (one per memory
term), the relaxed solve under them (:func:`relax`, :func:`solve_penalised`)
and the bound it proves.
"""

from __future__ import annotations

import math

import numpy as np

from .. import work
from ..ascent import Ascent
from ..bound import Diffusion, dot, integer_bound, slack
from ..instance import FORBIDDEN
from ..model import Model, penalties, term_penalties
from . import toulbar2


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

    #: the loop dives first with these prices (:meth:`Lagrange.dive`): a true
    #: Lagrangian relaxation bounds every fast round
    dives = True

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

    #: no dive with these prices: its fast rounds bound nothing without multipliers
    dives = False
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
    (:func:`~maxshard.search.toulbar2.run`).

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
    return integer_bound(model, relaxed - model.offset, slack(model, lam))
