"""Mixed-integer programming with HiGHS.

The program is :class:`~maxshard.mip.MipForm` (a binary column per value,
the tables linked in the local polytope, memory as running sums; described
there).

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

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..mip import MipForm, new_highs
from ..model import Model, segment_argmin


class Highs:
    name = "highs"
    capabilities = Capabilities(exact=True, anytime=True, memory=True, lower_bound=True)

    #: add memory rows only where a solution overflows, and solve again (see
    #: :meth:`solve`); False: every kept point's row from the start
    lazy_memory = False

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
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
