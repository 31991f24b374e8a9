"""Anytime local search that never leaves the memory-feasible region.

1. Start from the incumbent, or from the minimum-usage assignment (always
   within the limit when any assignment is).
2. *Descent*: visit variables from a work queue; move each to its cheapest
   value among those that keep every kept time point under the limit (the
   highest current load over each of its terms' ranges bounds what it may add).
3. *Perturbation* (iterated local search): re-draw a few connected variables at
   random among their memory-feasible values, descend again from there, and
   keep the result only if it is cheaper.

The loops run compiled (:mod:`.local_kernels`). Costs are compared in
float64: exact for clean costs (sums far below 2**53); forbidden costs (10^18)
are simply very large. Improvements are confirmed by the exact cost, and every
reported solution is re-costed exactly by the caller.
"""

from __future__ import annotations

import time

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..model import Model
from . import local_kernels as kernels


class LocalSearch:
    name = "local"
    capabilities = Capabilities(exact=False, anytime=True, memory=True, lower_bound=False)

    def solve(
        self,
        model: Model,
        deadline: float,
        incumbent: np.ndarray | None,
        report: Report,
        seed: int = 0,
    ) -> Result:
        if model.nv == 0:  # nothing to search (the orchestrator never asks, direct callers may)
            return Result(Status.OPTIMAL, np.zeros(0, dtype=np.int64), model.offset)
        search = Search(model, seed)
        start = incumbent if incumbent is not None else model.min_usage_solution()
        if not search.reset(start):
            search.reset(model.min_usage_solution())
        if not search.feasible():
            return Result(Status.UNKNOWN)
        search.descend(deadline)
        report(search.x.copy())
        search.iterate(deadline, report)
        return Result(Status.FEASIBLE, search.x.copy())


class Search:
    """The state of one local search: assignment and per-point load.

    The hot loops (value costs, moves, descent, perturbation) are compiled
    kernels in :mod:`.local_kernels`; ``x`` and ``load`` are the arrays they
    update in place.
    """

    def __init__(self, model: Model, seed: int) -> None:
        self.model = model
        self.rng = np.random.default_rng(seed)
        kernels.seed(int(self.rng.integers(2**31)))
        nv = model.nv
        self.limit = model.limit if model.limit is not None else np.iinfo(np.int64).max // 4
        self.g = kernels.graph(model, self.limit)
        # Memory terms per variable, for the repair's usage questions:
        # interleaved [lo, hi] for reduceat, and usages (terms x values).
        self.ranges: list[np.ndarray | None] = [None] * nv
        self.usage: list[np.ndarray | None] = [None] * nv
        by_var = np.argsort(model.term_var, kind="stable")
        for v in range(nv):
            ks = by_var[self.g.term_off[v] : self.g.term_off[v + 1]]
            if len(ks):
                self.ranges[v] = np.column_stack([model.term_lo[ks], model.term_hi[ks]]).ravel()
                self.usage[v] = np.stack([model.usage_of(k) for k in ks])
        self.x = np.zeros(nv, dtype=np.int64)
        self.load = np.zeros(len(model.base) + 1, dtype=np.int64)  # one pad cell for reduceat
        # scratch space of the kernels
        width = int(model.dom_size.max()) if nv else 0
        self._cost = np.zeros(width)
        self._ok = np.zeros(width, dtype=bool)
        self._stack = np.zeros(nv, dtype=np.int64)
        self._queued = np.zeros(nv, dtype=bool)
        self._log = np.zeros(2 * (4 * nv + 16), dtype=np.int64)
        self._stamp = np.zeros(nv + 1, dtype=np.int64)

    def reset(self, x: np.ndarray) -> bool:
        self.x = np.array(x, dtype=np.int64)
        self.load[:-1] = self.model.load(self.x)
        return self.feasible()

    def feasible(self) -> bool:
        return len(self.load) == 1 or int(self.load[:-1].max()) <= self.limit

    def options(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Cost of each value of ``v`` given its neighbours, and which values fit in memory."""
        d = kernels.options(self.g, v, self.x, self.load, self._cost, self._ok)
        return self._cost[:d].copy(), self._ok[:d].copy()

    def peaks(self, v: int) -> np.ndarray:
        """Highest current load over each of ``v``'s term ranges (one ``reduceat``
        over the interleaved [lo, hi] bounds; the odd slots are the gaps between)."""
        return np.maximum.reduceat(self.load, self.ranges[v])[::2]

    def extra(self, v: int) -> np.ndarray:
        """Usage change per term (rows) if ``v`` took each value (columns)."""
        use = self.usage[v]
        return use - use[:, self.x[v], None]

    def move(self, v: int, value: int) -> None:
        kernels.move(self.g, v, value, self.x, self.load)

    def descend(self, deadline: float, queue: list[int] | None = None) -> float:
        """Greedy best-improvement moves until no variable improves; returns the gain."""
        order = self.rng.permutation(self.model.nv) if queue is None else np.unique(queue)
        n = len(order)
        self._stack[:n] = order
        self._queued[:] = False
        self._queued[order] = True
        gain = 0.0
        while n and time.monotonic() < deadline:
            step, n, _ = kernels.descend(
                self.g, self.x, self.load, self._stack, n, self._queued, 4096,
                self._cost, self._ok, self._log, -1,
            )  # fmt: skip
            gain += step
        self._queued[:] = False
        return gain

    def iterate(self, deadline: float, report: Report, report_every: float = 0.5) -> None:
        """Iterated local search until the deadline; reports improvements.

        The kernel runs in batches of about 20 ms; after each, the exact cost
        decides (the kernel's float sums could, with forbidden costs, mistake
        rounding for a gain: then the batch is undone).
        """
        best_cost = self.model.cost(self.x)
        saved_x, saved_load = self.x.copy(), self.load.copy()
        last_report = time.monotonic()
        pending = False
        batch = 8
        while (now := time.monotonic()) < deadline:
            kernels.iterate(
                self.g, self.x, self.load, batch, self._stack, self._queued,
                self._cost, self._ok, self._log, self._stamp,
            )  # fmt: skip
            took = time.monotonic() - now
            batch = max(1, min(batch * 2, int(batch * 0.02 / max(took, 1e-6)) + 1))
            cost = self.model.cost(self.x)
            if cost < best_cost:
                best_cost, pending = cost, True
                saved_x[:], saved_load[:] = self.x, self.load
            elif cost > best_cost:
                self.x[:], self.load[:] = saved_x, saved_load
            if pending and time.monotonic() - last_report > report_every:
                report(self.x.copy())
                pending, last_report = False, time.monotonic()
        if pending:
            report(self.x.copy())
