"""Dual block coordinate ascent: messages by diffusion, memory multipliers by LP.

The bound of :mod:`maxshard.bound` holds for any messages ``phi`` and any
memory multipliers ``lam >= 0``:

    D(phi, lam) = sum_v min_a [theta_v(a) + pen_lam(v, a)] + sum_e min theta_e
                  - sum_p lam_p (limit - base_p)

where ``theta`` are the costs reparametrised by ``phi`` and ``pen_lam(v, a)``
charges value ``a`` its usage times the multipliers of the points it spans
(:func:`~maxshard.model.penalties`). ``D`` is the dual of the LP relaxation
over the local polytope with the memory rows; :class:`Ascent` climbs it one
block at a time:

1. *messages*: for fixed ``lam``, sweeps of min-sum diffusion
   (:class:`~maxshard.bound.Diffusion`) raise ``D``;
2. *multipliers*: for fixed ``phi``, ``D`` is the Lagrangian of a small LP,
   one choice per variable under the memory rows,

       min sum_v sum_a theta_v(a) x[v, a]   s.t.  sum_a x[v, a] = 1,
                                                 load_p(x) <= limit - base_p,

   whose optimal duals are the best multipliers for these messages
   (:class:`MultiplierLP`: HiGHS on the part of it that binds, 0.03-0.3 s
   on the benchmarks). Neither step lowers ``D``.

Every value of ``D`` is a proven bound whatever the LP returned (it is
computed here, in float64 with a safety margin, from the multipliers as they
are), so numerical trouble in the LP can cost quality, never validity.

Measured (one worker, the other core busy, sweeps for half the LP's time),
at 30 s: S 1.494-1.496e9, M 4.938-4.949e10, N 1.878e11, U 1.836-1.849e9
(the published bounds, after hours of MILP: S 1.51124e9, M 4.941e10, N
1.729e11, U 2.019e9); with the whole LP solved each time, as before, S
reached 1.51116e9 in 180 s and U 2.096e9 in 300 s. On the 2,000-node cuts of S
and M of the standard suite it reaches the LP optimum (checked with HiGHS's
interior point solver). It can stall below it: on V at 1,245,926 (LP optimum
1,319,613), where the Lagrangian loop's proven relaxed solves bound higher.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import work
from .bound import Diffusion, integer_bound, slack
from .csr import offsets, ranks
from .mip import new_highs
from .model import Model, penalties, running_rows, usage_values


class Ascent:
    """The state of the block coordinate ascent on one model: messages (in
    :attr:`diffusion`) and multipliers (:attr:`lam`)."""

    #: seconds of diffusion per multiplier LP, as a share of the LP's own time
    #: (measured on S at 180 s: shares 0.25, 0.5 and 1 within 0.001% of each
    #: other; 2 and 4 left the bound 0.01% and 0.9% lower; at 60 s 0.5 led)
    sweep_share = 0.5

    def __init__(self, model: Model) -> None:
        self.model = model
        self.diffusion = Diffusion(model)
        self.usable = self.diffusion.usable and model.nv > 0
        self.memory = model.limit is not None and len(model.base) > 0 and len(model.term_var) > 0
        self.lam = np.zeros(len(model.base))
        self.lp = MultiplierLP(model) if self.memory and self.usable else None
        #: the last LP's seconds (None before the first, which may take longer:
        #: it starts from no active points)
        self.lp_seconds: float | None = None
        self.last = -np.inf
        #: no more progress to expect: diffusion alone (no memory) gained nothing
        self.converged = False

    def unary(self) -> np.ndarray:
        base = self.model.unary.astype(np.float64)
        return base + penalties(self.model, self.lam) if self.memory else base

    def step(self, deadline: float) -> int | None:
        """Diffusion (at least one sweep), then the best multipliers for its
        messages; returns the bound they prove (None when no bound can be had).

        The LP may run past ``deadline``: the first one without limit, later
        ones up to four times the last one's time (an LP cut short is lost
        whole: HiGHS starts the next one afresh)."""
        if not self.usable:
            return None
        unary = self.unary()
        last = self.lp_seconds or 0.05
        end = min(deadline, work.now() + self.sweep_share * last)
        self.diffusion.sweep(unary)
        while work.now() < end:
            self.diffusion.sweep(unary)
        if self.lp is not None:
            start = work.now()
            allowed = np.inf if self.lp_seconds is None else max(deadline - start, 4 * last)
            theta = self.diffusion.node_costs(self.model.unary.astype(np.float64))
            lam = self.lp.best(theta, allowed)
            self.lp_seconds = max(0.005, work.now() - start)
            if lam is not None:
                self.lam = lam
                unary = self.unary()
        value = self.diffusion.value(unary)
        self.converged = self.lp is None and value <= self.last + 1e-12 * abs(value)
        self.last = value
        return integer_bound(self.model, value, slack(self.model, self.lam))

    def state(self) -> dict:
        return state_of(self.lam, self.diffusion)

    def restore(self, state: dict) -> None:
        """Go on from :meth:`state` of an ascent on the same model."""
        self.diffusion.restore(state)
        if len(state.get("lam", ())) == len(self.lam):
            self.lam = np.array(state["lam"], dtype=np.float64)


def state_of(lam: np.ndarray, diffusion: Diffusion) -> dict:
    """The state :meth:`Ascent.restore` goes on from: multipliers ``lam`` and
    the messages of ``diffusion`` (the arrays themselves, not copies)."""
    return {"lam": lam, "phi_row": diffusion.phi_row, "phi_col": diffusion.phi_col}


class MultiplierLP:
    """``min sum theta . x`` over one value per variable under the memory rows,
    solved on a part of it that grows until its solution fits everywhere.

    Three reductions, each exact for multipliers ``>= 0``:

    * *points*: rows only for the *active* points, those whose multiplier was
      positive at the last call (S: 30-200 of 13,745). The solution is then
      checked at every point, the overloaded ones join, and the LP is solved
      again, until it fits everywhere: it is then optimal for the whole LP,
      and its duals (0 at the other points) are the whole LP's best
      multipliers. The first call starts from one point per stretch of points
      that the cheapest values overload.
    * *variables*: one with no term at an active point takes its cheapest
      value (the least usage among ties) and stays out of the LP.
    * *values*: of a variable with one memory term only the lower hull of its
      values' (usage, cost) points, from the least usage to the cheapest, can
      carry weight (any other is beaten by a mix of two hull values at no more
      usage); a variable with several terms keeps all its values.

    Each part is a fresh HiGHS LP: columns its values, then one memory level
    per active point (``0 <= level_p <= limit - base_p``, in units of
    :attr:`scale`); row ``p`` says ``level_p - level_(p-1) - (usage of the
    values starting at p - usage of those ending at p) = 0`` (the running-sum
    form, :func:`~maxshard.model.running_rows`). A level at its upper bound
    has reduced cost ``-lam_p``, the multiplier.

    Measured, the ascent alone (:mod:`maxshard.backends.dual`), beside the
    whole LP warm-started from its last basis as it was before: the first LP
    took 0.05-0.85 s on N, U, M and S (whole: 1.0-2.7 s; P 11.7 s), the later
    ones 0.03-0.23 s (0.17-0.79 s); the bound at 30 s rose 1.6-4.6% (details:
    docs/history.md, *The multiplier LP on its binding part*).
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        nval = int(model.dom_off[-1])
        self.room = np.maximum(model.limit - model.base, 0).astype(np.float64)
        # memory in units of the largest room: coefficients of order one
        self.scale = float(max(1.0, self.room.max()))
        sizes = np.diff(model.term_off)
        #: each usage entry's term and value (global index)
        self.entry_term = np.repeat(np.arange(len(sizes)), sizes)
        self.entry_value = usage_values(model)
        self.value_var = np.repeat(np.arange(model.nv), np.diff(model.dom_off))
        #: per value its usage summed over its terms (the tie-break among cheapest values)
        self.usage = np.bincount(self.entry_value, model.term_usage.astype(np.float64), nval)
        terms = np.bincount(model.term_var, minlength=model.nv)
        #: per variable its one memory term, or -1 (none, or several)
        self.single = np.full(model.nv, -1, dtype=np.int64)
        one = np.flatnonzero(terms[model.term_var] == 1)
        self.single[model.term_var[one]] = one
        #: the points with a row: those whose multiplier was positive last time
        self.active = np.zeros(len(model.base), dtype=bool)

    def best(self, theta: np.ndarray, seconds: float = np.inf) -> np.ndarray | None:
        """The LP's multipliers for value costs ``theta``; None if an LP failed
        or ``seconds`` ran out."""
        m = self.model
        end = work.now() + seconds
        hull = np.zeros(len(theta), dtype=np.bool_)
        lower_hull(m.dom_off, theta, self.single, m.term_off, m.term_usage, hull)
        x = np.zeros(len(theta))
        x[self._cheapest(theta)] = 1.0
        active = self.active.copy()
        if not active.any():
            active = self._overloaded(self._load(x), active, one_per_stretch=True)
        lam_part = np.zeros(0)
        while active.any():
            part = self._solve(theta, active, hull, max(0.01, end - work.now()))
            if part is None:
                return None
            lam_part, cols, x_part = part
            x_all = x.copy()
            x_all[np.isin(self.value_var, self.value_var[cols])] = 0.0
            x_all[cols] = x_part
            more = self._overloaded(self._load(x_all), active)
            if not more.any():
                break
            active |= more
        lam = np.zeros(len(m.base))
        lam[active] = lam_part
        self.active = lam > 0
        return lam

    def _cheapest(self, theta: np.ndarray) -> np.ndarray:
        """Per variable its cheapest value (global index), the least usage among ties."""
        sizes = np.diff(self.model.dom_off)
        low = np.repeat(np.minimum.reduceat(theta, self.model.dom_off[:-1]), sizes)
        tied = theta <= low + 1e-9 * np.abs(low)
        order = np.lexsort((np.where(tied, self.usage, np.inf), self.value_var))
        return order[self.model.dom_off[:-1]]

    def _load(self, x: np.ndarray) -> np.ndarray:
        """Variable load of the fractional assignment ``x`` at every point."""
        m = self.model
        per_term = np.bincount(self.entry_term, x[self.entry_value] * m.term_usage, len(m.term_var))
        return np.cumsum(m.live_changes(per_term))

    def _overloaded(self, load: np.ndarray, active: np.ndarray, one_per_stretch: bool = False):
        """The points outside ``active`` that ``load`` overloads (beyond the LP's
        tolerance); or only the most overloaded of each stretch of them."""
        over = load - self.room
        out = (over > 1e-6 * self.scale) & ~active
        if one_per_stretch and out.any():
            at = np.flatnonzero(out)
            stretch = np.concatenate([[0], np.cumsum(np.diff(at) > 1)])
            order = np.lexsort((-over[at], stretch))
            out = np.zeros_like(out)
            out[at[order[np.r_[True, np.diff(stretch[order]) > 0]]]] = True
        return out

    def _solve(self, theta, active, hull, seconds):
        """The LP on the ``active`` points and the ``hull`` values of the variables
        with a term there: (multipliers of the active points, the values'
        global indices, their weights), or None."""
        import highspy

        m = self.model
        points = np.flatnonzero(active)
        lo, hi = np.searchsorted(points, m.term_lo), np.searchsorted(points, m.term_hi)
        inside = np.zeros(m.nv, dtype=bool)
        inside[m.term_var[hi > lo]] = True
        cols = np.flatnonzero(hull & inside[self.value_var])
        index = np.full(len(theta), -1, dtype=np.int64)
        index[cols] = np.arange(len(cols))
        entry = (index[self.entry_value] >= 0) & (hi > lo)[self.entry_term]
        t = self.entry_term[entry]
        row_off, value, delta = running_rows(
            len(points), len(cols), index[self.entry_value[entry]], lo[t], hi[t],
            m.term_usage[entry],
        )  # fmt: skip
        # the variables' choice rows: their columns are consecutive
        var = self.value_var[cols]
        starts = np.flatnonzero(np.r_[True, np.diff(var) > 0])
        nval, npts = len(cols), len(points)
        h = new_highs()
        zeros = np.zeros(nval + npts)
        upper = np.concatenate([np.ones(nval), self.room[points] / self.scale])
        h.addCols(nval + npts, np.concatenate([theta[cols], np.zeros(npts)]), zeros, upper,
                  0, [], [], [])  # fmt: skip
        if nval:
            one = np.ones(len(starts))
            h.addRows(len(starts), one, one, nval, starts.astype(np.int32),
                      np.arange(nval, dtype=np.int32), np.ones(nval))  # fmt: skip
        point = np.arange(npts)
        has_prev = point > 0
        lens = 1 + has_prev + np.diff(row_off)
        at = offsets(lens)
        index_ = np.empty(int(at[-1]), dtype=np.int32)
        coef = np.empty(len(index_))
        index_[at[:-1]], coef[at[:-1]] = nval + point, 1.0
        prev = at[:-1][has_prev] + 1
        index_[prev], coef[prev] = nval + point[has_prev] - 1, -1.0
        slots = np.repeat(at[:-1] + 1 + has_prev, np.diff(row_off)) + ranks(np.diff(row_off))
        index_[slots], coef[slots] = value, -delta / self.scale
        flat = np.zeros(npts)
        h.addRows(npts, flat, flat, len(index_), at[:-1].astype(np.int32), index_, coef)
        size = nval + 2 * npts + len(starts)  # columns and rows: an iteration's work
        if work.deterministic():  # an iteration limit, no timer
            iterations = min(seconds, 1e4) * work.RATES["lp"] / size
            h.setOptionValue("simplex_iteration_limit", max(1, int(iterations)))
        else:
            h.setOptionValue("time_limit", float(min(seconds, 1e30)))
        h.run()
        info = h.getInfo()
        work.count("lp", (info.simplex_iteration_count + info.ipm_iteration_count) * size)
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        solution = h.getSolution()
        reduced = np.asarray(solution.col_dual)[nval:]
        lam = np.maximum(0.0, -reduced) / self.scale
        return lam, cols, np.asarray(solution.col_value)[:nval]


@njit(cache=True)
def lower_hull(dom_off, theta, single, term_off, term_usage, keep) -> None:
    """Mark in ``keep`` the values that can carry weight in the multiplier LP:
    for a variable with one memory term (``single[v]``), those on the lower
    hull of its (usage, ``theta``) points from the least usage to the
    cheapest; every value of the others."""
    for v in range(len(dom_off) - 1):
        lo, hi, k = dom_off[v], dom_off[v + 1], single[v]
        if k < 0:
            keep[lo:hi] = True
            continue
        n = hi - lo
        use = term_usage[term_off[k] : term_off[k] + n].astype(np.float64)
        cost = theta[lo:hi]
        by_cost = np.argsort(cost, kind="mergesort")
        order = by_cost[np.argsort(use[by_cost], kind="mergesort")]  # by usage, then cost
        hull = np.empty(n, dtype=np.int64)
        top = 0
        for i in range(n):
            b = order[i]
            if top > 0 and use[hull[top - 1]] == use[b]:
                continue  # as much usage as the last, and no cheaper
            while top >= 2:
                o, a = hull[top - 2], hull[top - 1]
                turn = (use[a] - use[o]) * (cost[b] - cost[o]) - (cost[a] - cost[o]) * (
                    use[b] - use[o]
                )
                if turn > 0:
                    break
                top -= 1
            hull[top] = b
            top += 1
        cheapest = 0
        for i in range(top):
            if cost[hull[i]] < cost[hull[cheapest]]:
                cheapest = i
        for i in range(cheapest + 1):
            keep[lo + hull[i]] = True
