"""Weighted MaxSAT with RC2 (python-sat), memory by lazy cuts.

Encoding of the reduced model:

* a Boolean ``b[v,k]`` per value; exactly one per variable (hard clauses,
  sequential-counter at-most-one);
* unary cost ``c`` of ``b[v,k]``: soft clause ``(-b[v,k])`` with weight ``c``;
  a forbidden value: hard clause ``(-b[v,k])``;
* table entry ``c`` of ``(a, b)`` on edge ``(u, v)``: soft clause
  ``(-b[u,a] | -b[v,b])`` weight ``c``; forbidden pairs are hard clauses.

Memory is enforced lazily: solve, find a kept time point over the limit, and
add the hard cut "some variable live there takes a value that uses less at
this point than it does now" (if none did, the load could not drop). Repeat
until the optimum fits; each cut removes only over-limit assignments, so the
first optimum that fits is optimal. RC2 is exact but not anytime: it reports
once, at the end, and is meant for small models.
"""

from __future__ import annotations

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..instance import FORBIDDEN
from ..model import Model, segment_argmin


class RC2:
    name = "rc2"
    capabilities = Capabilities(exact=True, anytime=False, memory=True, lower_bound=True)

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result:
        from pysat.card import CardEnc, EncType
        from pysat.examples.rc2 import RC2 as Solver
        from pysat.formula import WCNF, IDPool

        nval = int(model.dom_off[-1])
        lit = np.arange(1, nval + 1)  # b[v,k] is literal dom_off[v] + k + 1
        pool = IDPool(start_from=nval + 1)
        wcnf = WCNF()
        for v in range(model.nv):
            lits = lit[model.dom_off[v] : model.dom_off[v + 1]].tolist()
            for clause in CardEnc.equals(lits, 1, vpool=pool, encoding=EncType.seqcounter):
                wcnf.append(clause)
        for i in range(nval):
            c = int(model.unary[i])
            if c >= FORBIDDEN:
                wcnf.append([-int(lit[i])])
            elif c > 0:
                wcnf.append([-int(lit[i])], weight=c)
        for e in range(model.m):
            t = model.table(e)
            ou, ov = int(model.dom_off[model.edge_u[e]]), int(model.dom_off[model.edge_v[e]])
            for a, b in zip(*np.nonzero(t), strict=True):
                clause = [-(ou + int(a) + 1), -(ov + int(b) + 1)]
                c = int(t[a, b])
                if c >= FORBIDDEN:
                    wcnf.append(clause)
                else:
                    wcnf.append(clause, weight=c)

        with Solver(wcnf) as solver:
            while True:
                assignment = solver.compute()
                if assignment is None:
                    return Result(Status.INFEASIBLE)
                chosen = (np.array(assignment[:nval]) > 0).astype(np.int64)
                x = segment_argmin(-chosen, model.dom_off)  # the true literal of each variable
                cut = _memory_cut(model, x)
                if cut is None:
                    report(x)
                    return Result(Status.OPTIMAL, x, model.cost(x))
                if not cut:
                    return Result(Status.INFEASIBLE)
                solver.add_clause(cut)


def _memory_cut(model: Model, x: np.ndarray) -> list[int] | None:
    """None if ``x`` fits; else a clause every fitting assignment satisfies."""
    if model.limit is None or not len(model.base):
        return None
    load = model.load(x)
    p = int(np.argmax(load))
    if load[p] <= model.limit:
        return None
    live = np.flatnonzero((model.term_lo <= p) & (p < model.term_hi))
    cut = []
    for k in live:
        v = int(model.term_var[k])
        use = model.usage_of(int(k))
        smaller = np.flatnonzero(use < use[x[v]])
        cut.extend(int(model.dom_off[v] + j + 1) for j in smaller)
    return cut
