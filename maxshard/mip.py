"""The model as a mixed-integer program, and HiGHS made silent: what the
``highs`` backend solves, the LP/MPS files write (:mod:`maxshard.formats.lp`)
and the ascent's multiplier LP (:mod:`maxshard.ascent`) is built on.

The program (:class:`MipForm`): a binary ``x[v,k]`` per value (exactly one
per variable) and a continuous ``y[e,a,b]`` per allowed entry of each table.
The tables use the *local-polytope* linking ``sum_b y[a,b] = x[u,a]`` and
``sum_a y[a,b] = x[v,b]``, whose LP relaxation is exact on trees and much
tighter than the textbook ``y >= x_u + x_v - 1``. Forbidden entries get no
``y``, so they are excluded. Memory uses the running-sum form on the kept
time points: one continuous level ``L[p] = L[p-1] + usage starting at p -
usage ending at p`` bounded by ``limit - base[p]``, which needs two nonzeros
per term and value instead of one per covered point (the ``highs`` backend's
lazy variant posts plain rows at chosen points instead).
"""

from __future__ import annotations

import math
from functools import reduce as fold

import numpy as np

from .csr import ranks
from .instance import FORBIDDEN
from .model import Model, running_sum
from .output import stdout_to


def new_highs(threads: int | None = 1):
    """A silent HiGHS instance (its banner, printed when one is made, goes to
    /dev/null: stdout carries answers), on ``threads`` threads (None: HiGHS's
    own choice; a file writer runs nothing).

    HiGHS's thread scheduler is global to the process, set up by its first
    run: once a run with another thread count has happened here (a test, a
    user's session before ``maxshard.solve``), a run on one thread fails
    with an error and no answer, which the ascent took for a failed LP. So
    the scheduler is reset for the count asked for."""
    import highspy

    with stdout_to():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if threads is not None:
        highspy.Highs.resetGlobalScheduler(True)
        h.setOptionValue("threads", threads)
    return h


class MipForm:
    """The MIP as arrays: columns are x (one per value), then y (allowed table
    entries), then the memory levels (only at ``points`` if given)."""

    def __init__(self, model: Model, points: np.ndarray | None = None) -> None:
        self.model = model
        # memory rows count usage in units of the usages' greatest common divisor
        self.scale = fold(math.gcd, [int(u) for u in np.unique(model.term_usage) if u], 0) or 1
        nval = int(model.dom_off[-1])
        self.n_x = nval
        costs = [model.unary.astype(np.float64)]
        upper = [np.where(model.unary >= FORBIDDEN, 0.0, 1.0)]
        rows: list[tuple[np.ndarray, np.ndarray]] = []  # (column indices, coefficients)
        bounds: list[tuple[float, float]] = []
        for v in range(model.nv):  # exactly one value per variable
            cols = np.arange(model.dom_off[v], model.dom_off[v + 1])
            rows.append((cols, np.ones(len(cols))))
            bounds.append((1.0, 1.0))
        self.y_entries: list[tuple[int, np.ndarray, np.ndarray]] = []
        next_col = nval
        for e in range(model.m):
            t = model.table(e)
            a, b = np.nonzero(t < FORBIDDEN)
            ycols = next_col + np.arange(len(a))
            next_col += len(a)
            self.y_entries.append((e, a, b))
            costs.append(t[a, b].astype(np.float64))
            upper.append(np.ones(len(a)))
            u, v = int(model.edge_u[e]), int(model.edge_v[e])
            for var, idx in ((u, a), (v, b)):
                for k in range(int(model.dom_off[var + 1] - model.dom_off[var])):
                    sel = ycols[idx == k]
                    cols = np.append(sel, model.dom_off[var] + k)
                    rows.append((cols, np.append(np.ones(len(sel)), -1.0)))
                    bounds.append((0.0, 0.0))
        self.n_y = next_col - nval
        self.points = points
        if model.limit is not None and len(model.base) and len(model.term_var):
            if points is None:
                next_col = self._memory(rows, bounds, costs, upper, next_col)
            else:
                self._memory_at(rows, bounds, points)
        self.cost = np.concatenate(costs)
        self.upper = np.concatenate(upper)
        lengths = np.array([len(c) for c, _ in rows], dtype=np.int64)
        self.a_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
        self.a_index = np.concatenate([c for c, _ in rows] + [[]]).astype(np.int32)
        self.a_value = np.concatenate([w for _, w in rows] + [[]]).astype(np.float64)
        self.row_lo = np.array([lo for lo, _ in bounds], dtype=np.float64)
        self.row_hi = np.array([hi for _, hi in bounds], dtype=np.float64)

    def _memory(self, rows, bounds, costs, upper, next_col: int) -> int:
        """Running-sum memory levels: L[p] - L[p-1] - (usage change at p) = 0."""
        m, scale = self.model, self.scale
        npts = len(m.base)
        level0 = next_col
        costs.append(np.zeros(npts))
        cap = np.maximum(m.limit - m.base, 0) // scale
        upper.append(cap.astype(np.float64))
        row_off, value, delta = running_sum(m)
        for p in range(npts):
            lo, hi = row_off[p], row_off[p + 1]
            cols = [level0 + p] + ([level0 + p - 1] if p else [])
            vals = [1.0] + ([-1.0] if p else [])
            rows.append((np.append(cols, value[lo:hi]), np.append(vals, -delta[lo:hi] / scale)))
            bounds.append((0.0, 0.0))
        return next_col + npts

    def _memory_at(self, rows, bounds, points: np.ndarray) -> None:
        """One row per point of ``points``: its live terms' usage within the room."""
        m, scale = self.model, self.scale
        for p in points.tolist():
            live = np.flatnonzero((m.term_lo <= p) & (p < m.term_hi))
            if not len(live):
                continue
            sizes = np.diff(m.term_off)[live]
            cols = np.repeat(m.dom_off[m.term_var[live]], sizes) + ranks(sizes)
            use = np.concatenate([m.usage_of(int(k)) for k in live]) / scale
            rows.append((cols, use))
            bounds.append((-np.inf, float((m.limit - m.base[p]) // scale)))

    def completion(self, x: np.ndarray) -> np.ndarray:
        """A full column vector (x, y, levels) for warm-starting from model solution x."""
        m = self.model
        col = np.zeros(len(self.cost))
        col[m.dom_off[:-1] + x] = 1.0
        off = self.n_x
        for e, a, b in self.y_entries:
            hit = (a == x[m.edge_u[e]]) & (b == x[m.edge_v[e]])
            col[off : off + len(a)] = hit
            off += len(a)
        if off < len(col):  # the running-sum levels (all points only)
            col[off:] = (m.load(x) - m.base) // self.scale
        return col
