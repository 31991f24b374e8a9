"""Lagrangian relaxation of memory, for models too large for exact search.

Memory couples all variables; relaxing it leaves a pairwise cost function
network that toulbar2 handles well. With one multiplier ``lam[p] >= 0`` per
kept time point, the penalised problem

    min_x  cost(x) + sum_p lam[p] * (load_p(x) - limit)

adds to each value the usage it holds at every point, weighted by ``lam``
(prefix sums make that one vectorised expression). Each round:

1. *relax*: solve the penalised problem with toulbar2 under a short time limit
   (a heuristic here: such solves are rarely proven optimal on large models);
2. *repair and relink*: repair the relaxed solution greedily until it fits,
   and walk the best solution toward the relaxed one (each variable takes its
   relaxed value where memory allows); *polish* both with the local search's
   memory-feasible descent and the best with a little local search
   (perturbations; for odd seeds exchange moves first); keep whatever is
   cheaper;
3. *update*: subgradient step ``lam += step * (load - limit)`` (Polyak step
   from the best cost and the relaxed value, shrunk when the relaxed value
   stalls), clipped at zero;
4. *bound* (even seeds): a second of min-sum diffusion on the penalised
   problem (:mod:`maxshard.bound`) gives a valid lower bound for the current
   multipliers, whether or not toulbar2 proved anything.

Every solution it reports fits in memory (the relinking never leaves the
feasible region). When toulbar2 proves a relaxed solve optimal, the dual value
of that round is a valid lower bound too (see :func:`relax`). Each better bound
is reported as soon as it is found.
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..bound import Diffusion
from ..instance import FORBIDDEN
from ..model import Model
from . import toulbar2
from .local import Search

#: MAXSHARD_DEBUG=1 traces every round on stderr (relaxed value, overloaded points, step).
DEBUG = bool(os.environ.get("MAXSHARD_DEBUG"))


class Lagrange:
    name = "lagrange"
    capabilities = Capabilities(exact=False, anytime=True, memory=True, lower_bound=True)

    #: toulbar2 CPU seconds per relaxed solve at the start (doubled while it finds nothing)
    relax_seconds = 3
    #: initial Polyak step factor (0.3 measured worse on S and N: multipliers grow too slowly)
    theta = 1.0
    #: local search on the best solution after every round: perturbations for
    #: even seeds, exchange moves first for odd seeds (with twice the time).
    #: Measured one worker each: exchanges here helped S (1.612e9 on average
    #: over four seeds in 120 s, 1.640e9 without) and hurt N at both seeds
    #: tried (2.075e11 and 2.086e11 in 90 s, 2.023e11 and 2.051e11 without),
    #: so the two workers of the default plan run one kind each.
    polish_seconds = 1.0
    #: greedy repair budget per round (far-off relaxed solutions are left to relinking)
    repair_seconds = 2.0
    #: min-sum diffusion per round for the lower bound (workers with an even seed)
    bound_seconds = 1.0

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

        lam = np.zeros(len(model.base))
        best_bound: int | None = None
        diffusion = Diffusion(model) if seed % 2 == 0 else None

        def improve_bound(bound: int | None) -> bool:
            """Keep and report a better bound; True once it proves ``best_x`` optimal."""
            nonlocal best_bound
            if bound is not None and (best_bound is None or bound > best_bound):
                best_bound = bound
                report(lower_bound=bound)
            return best_bound is not None and best_bound >= best_cost

        theta, stall, best_relaxed = self.theta, 0, -np.inf
        seconds = self.relax_seconds * (1 + seed % 2)  # two workers: short and long relaxed solves
        rounds = 0
        light = False  # skip toulbar2's preprocessing (measured: S needs it, M and N not)
        while time.monotonic() + seconds + 1 < deadline:
            rounds += 1
            x_r, bound = relax(model, lam, seconds, seed + rounds, light)
            if diffusion is not None:
                end = min(deadline, time.monotonic() + self.bound_seconds)
                if improve_bound(diffusion.bound(lam, penalties(model, lam), end)):
                    return Result(Status.OPTIMAL, best_x, best_cost)
            if improve_bound(bound):
                return Result(Status.OPTIMAL, best_x, best_cost)
            if x_r is None:  # toulbar2 found nothing in time: lighter, then longer solves
                # (A memory-free descent on the penalised costs was tried in its
                # place, and after every relaxed solve: it cut the relaxed
                # solutions' penalised value on N by a third, 3.2e11 to 2.0e11,
                # but S ended 4-7% worse in single runs at equal seeds.)
                light, seconds = True, seconds * 2 if light else seconds
                continue
            # primal: solutions built from the relaxed one, polished; keep the cheapest
            for x in self.primal(search, x_r, best_x, deadline, exchanges=seed % 2 == 1):
                cost = model.cost(x)
                if cost < best_cost and not model.forbidden(x):
                    best_x, best_cost = x, cost
                    report(best_x)
            # dual: subgradient step on the memory excess of the relaxed solution
            excess = (model.load(x_r) - model.limit).astype(np.float64)
            relaxed = float(model.cost(x_r)) + float(lam @ excess)
            if relaxed > best_relaxed:
                best_relaxed, stall = relaxed, 0
            else:
                stall += 1
                if stall >= 3:  # shrink the step; restart it once it is negligible
                    theta, stall = (theta / 2 if theta > 1e-3 else 1.0), 0
            active = (lam > 0) | (excess > 0)
            norm = float(excess[active] @ excess[active])
            if norm == 0:
                continue  # fits with complementary slackness: no direction to move in
            step = theta * max(best_cost - relaxed, 0.01 * best_cost) / norm
            if DEBUG:
                print(
                    f"round {rounds} t={time.monotonic():.1f} relaxed={relaxed:.4g} "
                    f"cost_r={model.cost(x_r):.4g} over={int((excess > 0).sum())} "
                    f"maxover={excess.max():.3g} best={best_cost:.4g} "
                    f"theta={theta:.3g}",
                    file=sys.stderr,
                )
            lam = np.maximum(0.0, lam + step * excess)
        return Result(Status.FEASIBLE, best_x, best_bound)

    def primal(
        self,
        search: Search,
        x_r: np.ndarray,
        best_x: np.ndarray,
        deadline: float,
        exchanges: bool = False,
    ) -> list[np.ndarray]:
        """Fitting solutions derived from the relaxed solution ``x_r``: repaired and
        descended; the best one relinked toward it and descended; then a little
        local search from the best of those (with ``exchanges``, exchange moves
        first and for twice the time)."""
        found = []
        search.reset(x_r)
        if repair(search, min(deadline, time.monotonic() + self.repair_seconds)):
            search.descend(deadline)
            found.append(search.x.copy())
        search.reset(best_x)
        relink(search, x_r)
        search.descend(deadline)
        found.append(search.x.copy())
        search.reset(min([best_x, *found], key=search.model.cost))
        # its finds reach the caller as the last candidate, in order with the others
        seconds = self.polish_seconds * (2 if exchanges else 1)
        end = min(deadline, time.monotonic() + seconds)
        search.iterate(end, lambda _x: None, exchange_every=3.0 if exchanges else math.inf)
        found.append(search.x.copy())
        return found


def penalties(model: Model, lam: np.ndarray) -> np.ndarray:
    """Per value: sum over its memory terms of usage times the multipliers it spans."""
    prefix = np.concatenate([[0.0], np.cumsum(lam)])
    weight = prefix[model.term_hi] - prefix[model.term_lo]  # per term
    pen = np.zeros(int(model.dom_off[-1]))
    per_value = np.repeat(weight, np.diff(model.term_off)) * model.term_usage
    slots = np.repeat(model.dom_off[model.term_var] - model.term_off[:-1], np.diff(model.term_off))
    np.add.at(pen, slots + np.arange(len(model.term_usage)), per_value)
    return pen


def relax(
    model: Model, lam: np.ndarray, seconds: int, seed: int, light: bool = False
) -> tuple[np.ndarray | None, int | None]:
    """A good solution of the penalised, memory-free problem, and the lower bound
    on the model's optimum that it proves when toulbar2 finished (else None).

    Why the bound holds: for x that fits, ``load_p(x) <= limit``, so
    ``cost(x) >= cost(x) + sum_p lam_p (load_p(x) - limit) = cost(x) + pen(x) -
    sum_p lam_p (limit - base_p)``, and ``pen >= floor(pen)`` value by value;
    the optimum of ``cost + floor(pen)`` is what toulbar2 proved.

    ``light`` turns toulbar2's preprocessing off: on S (domains up to 853) its
    preprocessing alone used the 3 s budget and no solution came out, while
    without it a solution did; on M and N it is the other way round.

    (Seeding toulbar2 with the incumbent's penalised cost as upper bound was
    tried: on S it often found nothing better in time, and rounds stalled.)
    """
    pen = np.floor(penalties(model, lam)).astype(np.int64)
    unary = np.where(model.unary >= FORBIDDEN, model.unary, model.unary + pen)
    from pytoulbar2.pytb2 import Contradiction

    try:
        cfn = toulbar2.build(model, unary, seed, None, memory=False)
        if light:
            cfn.NoPreprocessing()
    except Contradiction:  # only forbidden assignments remain: nothing to relax toward
        return None, None
    proved, x = toulbar2.run(cfn, model.nv, seconds, lambda _x: None)
    if x is None or not proved:
        return x, None
    return x, _dual(model, lam, pen, x)


def _dual(model: Model, lam: np.ndarray, pen: np.ndarray, x: np.ndarray) -> int:
    """The Lagrangian bound of an optimal penalised solution ``x`` (see :func:`relax`)."""
    relaxed = model.cost(x) + int(pen[model.dom_off[:-1] + x].sum())
    slack = float(lam @ (model.limit - model.base).astype(np.float64))
    return math.floor(relaxed - slack * (1 + 1e-9) - 1)


def repair(search: Search, deadline: float, max_moves: int = 20_000) -> bool:
    """Greedy memory repair: at the most overloaded point, make the change that
    saves usage there at the smallest cost increase per unit saved, among the
    changes that overload no other point (so the total overflow only shrinks)."""
    for _ in range(max_moves):
        over = search.load - search.limit
        p = int(np.argmax(over))
        if over[p] <= 0:
            return True
        if time.monotonic() > deadline:
            return False
        v, value = search.repair_move(p)
        if v < 0:
            return False  # stuck: no single change helps without harm elsewhere
        search.move(v, value)
    return False


def relink(search: Search, target: np.ndarray) -> None:
    """Move each variable to its target value where memory allows, in random order."""
    differ = np.flatnonzero(search.x != target)
    for v in search.rng.permutation(differ):
        _, fits = search.options(int(v))
        if fits[target[v]]:
            search.move(int(v), int(target[v]))
