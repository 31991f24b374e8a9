"""Anytime local search that never leaves the memory-feasible region.

1. Start from the incumbent, or from the minimum-usage assignment (always
   within the limit when any assignment is).
2. *Descent*: visit variables from a work queue; move each to its cheapest
   value among those that keep every kept time point under the limit (the
   highest current load over each of its terms' ranges bounds what it may add).
3. *Perturbation* (iterated local search): re-draw a few connected variables at
   random among their memory-feasible values, descend again from there, and
   keep the result only if it is cheaper.
4. *Exchange* (a pass first, then every 3 s): give a variable a cheaper value
   that memory blocks, win the room back with greedy repairs of other variables
   at the overloaded points, descend around them, and keep the result only if
   it is cheaper. Only this move trades memory between variables; where memory
   binds (S), it is worth more than all the perturbations.

The loops run compiled (:mod:`maxshard.search.kernels`). Costs are compared in
float64: exact for clean costs (sums far below 2**53); forbidden costs (10^18)
are simply very large. Improvements are confirmed by the exact cost, and every
reported solution is re-costed exactly by the caller.
"""

from __future__ import annotations

import numpy as np

from ..backend import Capabilities, Improver, Report, Result, Status, context
from ..model import Model
from ..search.local import Search, warm_up


class LocalSearch(Improver):
    name = "local"
    capabilities = Capabilities(
        exact=False, anytime=True, memory=True, lower_bound=False, deterministic=True
    )

    def prepare(self) -> None:
        warm_up()

    def improve(
        self, model: Model, x: np.ndarray, deadline: float, report: Report, seed: int
    ) -> Result:
        search = Search(model, seed)
        search.reset(x)
        search.descend(deadline)
        report(search.x.copy())
        search.iterate(deadline, report, adopt=context(report).best)
        return Result(Status.FEASIBLE, search.x.copy())
