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
"""

from __future__ import annotations

import math
import time
from functools import reduce as fold

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..instance import FORBIDDEN
from ..model import Model, running_sum, segment_argmin


class Highs:
    name = "highs"
    capabilities = Capabilities(exact=True, anytime=False, memory=True, lower_bound=True)

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result:
        import highspy

        if model.nv == 0:  # HiGHS reports an empty model as such, not as solved
            x = np.zeros(0, dtype=np.int64)
            report(x)
            return Result(Status.OPTIMAL, x, model.cost(x))
        mip = MipForm(model)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
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
            start = mip.completion(incumbent)
            h.setSolution(ncol, np.arange(ncol, dtype=np.int32), start)
        h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        x = None
        if info.primal_solution_status == 2:  # feasible point available
            col = np.asarray(h.getSolution().col_value)[: mip.n_x]
            x = segment_argmin(-col, model.dom_off)
            report(x)
        if status == highspy.HighsModelStatus.kOptimal and x is not None:
            return Result(Status.OPTIMAL, x, model.cost(x))
        if status == highspy.HighsModelStatus.kInfeasible:
            return Result(Status.INFEASIBLE)
        bound = info.mip_dual_bound
        lower_bound = None
        if math.isfinite(bound):
            lower_bound = model.offset + math.floor(bound - 1e-6 * max(1.0, abs(bound)))
        return Result(Status.FEASIBLE if x is not None else Status.UNKNOWN, x, lower_bound)


class MipForm:
    """The MIP as arrays: columns are x (one per value), then y (allowed table entries)."""

    def __init__(self, model: Model) -> None:
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
        if model.limit is not None and len(model.base) and len(model.term_var):
            next_col = self._memory(rows, bounds, costs, upper, next_col)
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
        if off < len(col):
            col[off:] = (m.load(x) - m.base) // self.scale
        return col
