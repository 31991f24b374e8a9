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
   (:class:`MultiplierLP`; HiGHS solves it in a fraction of a second,
   warm-started from its last basis). Neither step lowers ``D``.

Every value of ``D`` is a proven bound whatever the LP returned (it is
computed here, in float64 with a safety margin, from the multipliers as they
are), so numerical trouble in the LP can cost quality, never validity.

Measured (one worker, the other core busy, sweeps for half the LP's time):
S reaches 1.4830e9 in 30 s and 1.51116e9 in 180 s (published bound
1.51124e9 after a 25.7 h MILP run; the optimum is near 1.5114e9), M 4.970e10
in 180 s (published 4.941e10), U 2.096e9 in 300 s (2.019e9), N 1.908e11 in
180 s (1.729e11), A 6.518e9 in 11 s (6.514e9). On the 2,000-node cuts of S
and M of the standard suite it reaches the LP optimum (checked with HiGHS's
interior point solver). It can stall below it: on V at 1,245,926 (LP optimum
1,319,613), where the Lagrangian loop's proven relaxed solves bound higher.
"""

from __future__ import annotations

import numpy as np

from . import work
from .bound import Diffusion, floor_bound, slack
from .mip import new_highs
from .model import Model, offsets, penalties, running_sum


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
        #: P's first took 2-8 s, the warm-started ones after it a fraction)
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
        return floor_bound(self.model, value, slack(self.model, self.lam))

    def state(self) -> dict:
        d = self.diffusion
        return {"lam": self.lam, "phi_row": d.phi_row, "phi_col": d.phi_col}

    def restore(self, state: dict) -> None:
        """Go on from :meth:`state` of an ascent on the same model."""
        d = self.diffusion
        if len(state.get("phi_row", ())) == len(d.phi_row) and len(state.get("phi_col", ())) == len(
            d.phi_col
        ):
            d.phi_row, d.phi_col = np.array(state["phi_row"]), np.array(state["phi_col"])
        if len(state.get("lam", ())) == len(self.lam):
            self.lam = np.array(state["lam"], dtype=np.float64)


class MultiplierLP:
    """``min sum theta . x`` over one value per variable under the memory rows.

    Columns are the values, then one memory level per kept point (``0 <=
    level_p <= limit - base_p``, in units of :attr:`scale`); row ``p`` of the
    memory says ``level_p - level_(p-1) - (usage of the values starting at p -
    usage of those ending at p) = 0`` (the running-sum form,
    :func:`~maxshard.model.running_sum`: two entries per term value instead of
    one per covered point; S's LP has 76,000 value columns and 20,000 rows).
    A level at its upper bound has reduced cost ``-lam_p``, the multiplier.
    """

    def __init__(self, model: Model) -> None:
        nval, npts = int(model.dom_off[-1]), len(model.base)
        self.nval = nval
        room = np.maximum(model.limit - model.base, 0).astype(np.float64)
        # memory in units of the largest room: coefficients of order one
        self.scale = float(max(1.0, room.max()))
        row_off, value, delta = running_sum(model)
        point = np.arange(npts)
        has_prev = point > 0
        lens = 1 + has_prev + np.diff(row_off)
        starts = offsets(lens)
        index = np.empty(int(starts[-1]), dtype=np.int32)
        coef = np.empty(len(index))
        index[starts[:-1]], coef[starts[:-1]] = nval + point, 1.0
        prev = starts[:-1][has_prev] + 1
        index[prev], coef[prev] = nval + point[has_prev] - 1, -1.0
        slots = np.repeat(starts[:-1] + 1 + has_prev, np.diff(row_off)) + (
            np.arange(len(value)) - np.repeat(row_off[:-1], np.diff(row_off))
        )
        index[slots], coef[slots] = value, -delta / self.scale

        h = new_highs()
        zeros = np.zeros(nval + npts)
        upper = np.concatenate([np.ones(nval), room / self.scale])
        h.addCols(nval + npts, zeros, zeros, upper, 0, [], [], [])
        one = np.ones(model.nv)
        choose = model.dom_off[:-1].astype(np.int32)
        h.addRows(model.nv, one, one, nval, choose, np.arange(nval, dtype=np.int32), np.ones(nval))
        flat = np.zeros(npts)
        h.addRows(npts, flat, flat, len(index), starts[:-1].astype(np.int32), index, coef)
        self.h = h
        self.cols = np.arange(nval, dtype=np.int32)
        self.size = nval + 2 * npts + model.nv  # columns and rows: an iteration's work

    def best(self, theta: np.ndarray, seconds: float = np.inf) -> np.ndarray | None:
        """The LP's multipliers for value costs ``theta``; None if it failed or
        was cut short after ``seconds`` (a later call goes on from its basis)."""
        import highspy

        if work.deterministic():  # an iteration limit, no timer
            iterations = min(seconds, 1e4) * work.RATES["lp"] / self.size
            self.h.setOptionValue("simplex_iteration_limit", max(1, int(iterations)))
        else:
            # HiGHS counts its time limit over all runs of this object
            limit = self.h.getRunTime() + max(0.01, seconds)
            self.h.setOptionValue("time_limit", float(min(limit, 1e30)))
        self.h.changeColsCost(self.nval, self.cols, theta)
        self.h.run()
        info = self.h.getInfo()
        work.count("lp", (info.simplex_iteration_count + info.ipm_iteration_count) * self.size)
        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        reduced = np.asarray(self.h.getSolution().col_dual)[self.nval :]
        return np.maximum(0.0, -reduced) / self.scale
