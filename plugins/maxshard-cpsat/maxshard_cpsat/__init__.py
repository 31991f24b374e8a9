"""CP-SAT backend for maxshard: Boolean per value, pair indicators, linear memory.

* ``x[v,k]``: exactly one per variable; forbidden values fixed to 0;
* a table entry with cost ``c > 0`` gets an indicator ``y >= x[u,a] + x[v,b] - 1``
  (``y`` costs ``c``); forbidden pairs become the clause ``!x[u,a] | !x[v,b]``;
* memory: one linear constraint per kept time point, over the terms live there.

CP-SAT is anytime (every improving solution is reported through a callback)
and proves bounds; it runs single-threaded to share the machine.
"""

from __future__ import annotations

import math
import time

import numpy as np

from maxshard.backend import Capabilities, Result, Status
from maxshard.instance import FORBIDDEN

__version__ = "0.1.0"


class CpSat:
    name = "cpsat"
    capabilities = Capabilities(exact=True, anytime=True, memory=True, lower_bound=True)

    def solve(self, model, deadline, incumbent, report, seed=0):
        from ortools.sat.python import cp_model

        cp = cp_model.CpModel()
        nval = int(model.dom_off[-1])
        x = [cp.NewBoolVar(f"x{i}") for i in range(nval)]
        objective = []
        pairs = []  # (indicator, value of u, value of v): a complete hint sets each
        for v in range(model.nv):
            cp.AddExactlyOne(x[model.dom_off[v] : model.dom_off[v + 1]])
        for i in range(nval):
            c = int(model.unary[i])
            if c >= FORBIDDEN:
                cp.Add(x[i] == 0)
            elif c:
                objective.append(c * x[i])
        for e in range(model.m):
            t = model.table(e)
            ou, ov = int(model.dom_off[model.edge_u[e]]), int(model.dom_off[model.edge_v[e]])
            for a, b in zip(*np.nonzero(t), strict=True):
                xa, xb, c = x[ou + int(a)], x[ov + int(b)], int(t[a, b])
                if c >= FORBIDDEN:
                    cp.AddBoolOr([xa.Not(), xb.Not()])
                else:
                    y = cp.NewBoolVar("")
                    cp.AddBoolOr([xa.Not(), xb.Not(), y])
                    objective.append(c * y)
                    pairs.append((y, ou + int(a), ov + int(b)))
        if model.limit is not None:
            for p in range(len(model.base)):
                live = np.flatnonzero((model.term_lo <= p) & (p < model.term_hi))
                terms = []
                for k in live:
                    off = int(model.dom_off[model.term_var[k]])
                    use = model.usage_of(int(k))
                    terms += [int(u) * x[off + j] for j, u in enumerate(use) if u]
                if terms:
                    cp.Add(sum(terms) <= int(model.limit - model.base[p]))
        cp.Minimize(sum(objective))
        if incumbent is not None:
            # a complete hint (every x and every indicator) is one CP-SAT can
            # take as its first solution; with the x alone it found none
            chosen = np.zeros(nval, dtype=bool)
            chosen[model.dom_off[:-1] + np.asarray(incumbent)] = True
            for i in range(nval):
                cp.AddHint(x[i], bool(chosen[i]))
            for y, i, j in pairs:
                cp.AddHint(y, bool(chosen[i] and chosen[j]))

        def decode(value) -> np.ndarray:
            return np.array(
                [
                    next(
                        k
                        for k in range(model.dom_off[v + 1] - model.dom_off[v])
                        if value(x[model.dom_off[v] + k])
                    )
                    for v in range(model.nv)
                ],
                dtype=np.int64,
            )

        class Reporter(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self) -> None:
                report(decode(self.BooleanValue))

        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.1, deadline - time.monotonic())
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = seed
        status = solver.Solve(cp, Reporter())
        if status == cp_model.INFEASIBLE:
            return Result(Status.INFEASIBLE)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Result(Status.UNKNOWN)
        sol = decode(solver.BooleanValue)
        if status == cp_model.OPTIMAL:
            return Result(Status.OPTIMAL, sol, model.cost(sol))
        bound = model.offset + math.ceil(solver.BestObjectiveBound() - 1e-6)
        return Result(Status.FEASIBLE, sol, bound)
