"""Mixed-integer programming with HiGHS.

Variables: a binary ``x[v,k]`` per value (exactly one per variable) and a
continuous ``y[e,a,b]`` per allowed entry of each table. The tables use the
*local-polytope* linking ``sum_b y[a,b] = x[u,a]`` and ``sum_a y[a,b] =
x[v,b]``, whose LP relaxation is exact on trees and much tighter than the
textbook ``y >= x_u + x_v - 1``. Forbidden entries get no ``y``, so they are
excluded. Memory uses the running-sum form on the kept time points: one
continuous level ``L[p] = L[p-1] + usage starting at p - usage ending at p``
bounded by ``limit - base[p]``, which needs two nonzeros per term and value
instead of one per covered point.

Costs enter HiGHS as doubles: exact while below 2**53, far above real costs.
Usages are divided by their greatest common divisor first. The answer is
re-costed exactly by the caller; HiGHS's dual bound is rounded down to a safe
integer before it is reported.

Measured (this machine, one thread): G is proved in 2.7-3.3 s and every suite
cut of 100-400 nodes in at most 7.3 s. V is out of reach: after presolve it
keeps 684,253 table entries (695k columns, 31k rows), and its root LP is not
solved in 150 s by dual simplex (60k iterations) nor by IPX (36 iterations),
so HiGHS has no bound and only its feasibility-jump start. Smaller LPs did
not get there either: column generation from each table's row and column
minima took 60-165 s per restricted LP at 67k-127k columns; dropping entries
that alone cost more than the optimum keeps 378k of them, reduced-cost fixing
from 200 diffusion sweeps (bound 749,819) 303k.
"""

from __future__ import annotations

import math
import time
from functools import reduce as fold

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..instance import FORBIDDEN
from ..model import Model, ranks, running_sum, segment_argmin
from ..output import stdout_to


class Highs:
    name = "highs"
    capabilities = Capabilities(exact=True, anytime=True, memory=True, lower_bound=True)

    #: add memory rows only where a solution overflows, and solve again (see
    #: :meth:`solve`); False: every kept point's row from the start
    lazy_memory = False

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result:
        if model.nv == 0:  # HiGHS reports an empty model as such, not as solved
            x = np.zeros(0, dtype=np.int64)
            report(x)
            return Result(Status.OPTIMAL, x, model.cost(x))
        if incumbent is not None and not model.fits(incumbent):
            incumbent = None
        points = None if not self.lazy_memory else _binding(model, incumbent)
        while True:
            result, x = self._solve(model, deadline, incumbent, report, seed, points)
            if points is None or x is None or model.fits(x) or time.monotonic() >= deadline:
                return result
            # the optimum of the rows so far overflows elsewhere: add those points
            over = np.flatnonzero(model.load(x) > model.limit)
            points = np.union1d(points, over)
            if result.lower_bound is not None:
                report(lower_bound=result.lower_bound)

    def _solve(self, model, deadline, incumbent, report, seed, points):
        """One HiGHS run with memory rows at ``points`` (None: all); returns the
        result (statuses are for this relaxation when rows are missing) and the
        last solution HiGHS found (fitting or not)."""
        import highspy

        mip = MipForm(model, points)
        h = new_highs()
        h.setOptionValue("random_seed", seed)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("threads", 1)
        h.setOptionValue("time_limit", max(0.1, deadline - time.monotonic()))
        inf = highspy.kHighsInf
        ncol = len(mip.cost)
        h.addCols(ncol, mip.cost, np.zeros(ncol), mip.upper, 0, [], [], [])
        h.changeColsIntegrality(
            mip.n_x,
            np.arange(mip.n_x, dtype=np.int32),
            np.full(mip.n_x, highspy.HighsVarType.kInteger),
        )
        lower = np.where(np.isinf(mip.row_lo), -inf, mip.row_lo)
        status = h.addRows(
            len(mip.row_lo),
            lower,
            mip.row_hi,
            len(mip.a_index),
            mip.a_start,
            mip.a_index,
            mip.a_value,
        )
        if status != highspy.HighsStatus.kOk:
            raise RuntimeError(f"HiGHS rejected the model rows ({status})")
        if incumbent is not None:
            h.setSolution(ncol, np.arange(ncol, dtype=np.int32), mip.completion(incumbent))
        stream = _Stream(model, mip, report, complete=points is None)
        h.cbMipImprovingSolution.subscribe(stream.solution)
        h.cbMipInterrupt.subscribe(stream.bound)
        h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        x = stream.last
        if info.primal_solution_status == 2:  # feasible point available
            col = np.asarray(h.getSolution().col_value)[: mip.n_x]
            x = segment_argmin(-col, model.dom_off)
            stream.offer(x)
        complete = points is None or (x is not None and model.fits(x))
        if status == highspy.HighsModelStatus.kOptimal and x is not None and complete:
            return Result(Status.OPTIMAL, x, model.cost(x)), x
        if status == highspy.HighsModelStatus.kInfeasible:
            return Result(Status.INFEASIBLE), x
        lower_bound = _floor_bound(model, info.mip_dual_bound)
        if status == highspy.HighsModelStatus.kOptimal and x is not None:
            lower_bound = model.cost(x)  # optimum of a relaxation: a bound
        found = stream.best
        result = Result(
            Status.FEASIBLE if found is not None else Status.UNKNOWN, found, lower_bound
        )
        return result, x


def new_highs():
    """A silent HiGHS instance (its banner, printed when one is made, goes to
    /dev/null: stdout carries answers)."""
    import highspy

    with stdout_to():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def _floor_bound(model: Model, bound: float) -> int | None:
    """HiGHS's dual bound, rounded down to a safe integer (it is a double)."""
    if not math.isfinite(bound):
        return None
    return model.offset + math.floor(bound - 1e-6 * max(1.0, abs(bound)))


def _binding(model: Model, incumbent: np.ndarray | None) -> np.ndarray:
    """Where to start the lazy memory rows: points within 1% of the limit in the
    incumbent (or in the least-usage solution)."""
    if model.limit is None or not len(model.base):
        return np.zeros(0, dtype=np.int64)
    x = incumbent if incumbent is not None else model.min_usage_solution()
    return np.flatnonzero(model.load(x) >= 0.99 * model.limit)


class _Stream:
    """HiGHS callbacks: each improving solution that fits is reported at once,
    and the dual bound whenever it rises (at most twice a second)."""

    def __init__(self, model: Model, mip: MipForm, report: Report, complete: bool) -> None:
        self.model, self.mip, self.report, self.complete = model, mip, report, complete
        self.best: np.ndarray | None = None
        self.best_cost: int | None = None
        self.last: np.ndarray | None = None
        self.bound_sent: int | None = None
        self.bound_time = 0.0

    def offer(self, x: np.ndarray) -> None:
        self.last = x
        if not self.model.fits(x):  # (forbidden picks: never, but where unavoidable)
            return
        cost = self.model.cost(x)
        if self.best_cost is None or cost < self.best_cost:
            self.best, self.best_cost = x, cost
            self.report(x)

    def solution(self, event) -> None:
        col = np.asarray(event.data_out.mip_solution)[: self.mip.n_x]
        self.offer(segment_argmin(-col, self.model.dom_off))

    def bound(self, event) -> None:
        if not self.complete or time.monotonic() - self.bound_time < 0.5:
            return
        bound = _floor_bound(self.model, event.data_out.mip_dual_bound)
        if bound is not None and (self.bound_sent is None or bound > self.bound_sent):
            self.bound_sent, self.bound_time = bound, time.monotonic()
            self.report(lower_bound=bound)


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
