"""Anytime local search that never leaves the memory-feasible region.

1. Start from the incumbent, or from the minimum-usage assignment (always
   within the limit when any assignment is).
2. *Descent*: visit variables from a work queue; move each to its cheapest
   value among those that keep every kept time point under the limit. The
   memory check of one variable is a single ``np.maximum.reduceat`` over the
   current load on its terms' ranges.
3. *Perturbation* (iterated local search): re-draw a few connected variables at
   random among their memory-feasible values, descend again from there, and
   keep the result only if it is cheaper.

Costs are compared in float64: exact for clean costs (sums far below 2**53);
forbidden costs (10^18) are simply very large. Every reported solution is
re-costed exactly by the caller.
"""

from __future__ import annotations

import time

import numpy as np

from ..backend import Capabilities, Report, Result, Status
from ..model import Model


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
    """The state of one local search: assignment, per-point load and cost."""

    def __init__(self, model: Model, seed: int) -> None:
        self.model = model
        self.rng = np.random.default_rng(seed)
        nv = model.nv
        self.unary = [model.unary_of(v).astype(np.float64) for v in range(nv)]
        # adj[v]: (neighbour, table with rows indexed by v's values)
        self.adj: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(nv)]
        for e in range(model.m):
            u, v, t = int(model.edge_u[e]), int(model.edge_v[e]), model.table(e).astype(np.float64)
            self.adj[u].append((v, t))
            self.adj[v].append((u, t.T))
        self.nbrs = [np.array([w for w, _ in a], dtype=np.int64) for a in self.adj]
        # Memory terms per variable: interleaved [lo, hi] for reduceat, usages (terms x values).
        self.limit = model.limit if model.limit is not None else np.iinfo(np.int64).max // 4
        self.ranges: list[np.ndarray | None] = [None] * nv
        self.usage: list[np.ndarray | None] = [None] * nv
        by_var = np.argsort(model.term_var, kind="stable")
        bounds = np.searchsorted(model.term_var[by_var], np.arange(nv + 1))
        for v in range(nv):
            ks = by_var[bounds[v] : bounds[v + 1]]
            if len(ks):
                self.ranges[v] = np.column_stack([model.term_lo[ks], model.term_hi[ks]]).ravel()
                self.usage[v] = np.stack([model.usage_of(k) for k in ks])
        self.x = np.zeros(nv, dtype=np.int64)
        self.load = np.zeros(len(model.base) + 1, dtype=np.int64)  # one pad cell for reduceat

    def reset(self, x: np.ndarray) -> bool:
        self.x = np.array(x, dtype=np.int64)
        self.load[:-1] = self.model.load(self.x)
        return self.feasible()

    def feasible(self) -> bool:
        return len(self.load) == 1 or int(self.load[:-1].max()) <= self.limit

    def options(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Cost of each value of ``v`` given its neighbours, and which values fit in memory."""
        cost = self.unary[v].copy()
        for w, t in self.adj[v]:
            cost += t[:, self.x[w]]
        if self.ranges[v] is None:
            return cost, np.ones(len(cost), dtype=bool)
        extra = self.extra(v)
        return cost, (extra <= (self.limit - self.peaks(v))[:, None]).all(axis=0)

    def peaks(self, v: int) -> np.ndarray:
        """Highest current load over each of ``v``'s term ranges (one ``reduceat``
        over the interleaved [lo, hi] bounds; the odd slots are the gaps between)."""
        return np.maximum.reduceat(self.load, self.ranges[v])[::2]

    def extra(self, v: int) -> np.ndarray:
        """Usage change per term (rows) if ``v`` took each value (columns)."""
        use = self.usage[v]
        return use - use[:, self.x[v], None]

    def move(self, v: int, value: int) -> None:
        rng = self.ranges[v]
        if rng is not None:
            change = self.usage[v][:, value] - self.usage[v][:, self.x[v]]
            for j in np.flatnonzero(change):
                self.load[rng[2 * j] : rng[2 * j + 1]] += change[j]
        self.x[v] = value

    def descend(self, deadline: float, queue: list[int] | None = None) -> float:
        """Greedy best-improvement moves until no variable improves; returns the gain."""
        if queue is None:
            queue = list(self.rng.permutation(self.model.nv))
        queued = np.zeros(self.model.nv, dtype=bool)
        queued[queue] = True
        gain = 0.0
        steps = 0
        while queue:
            steps += 1
            if steps % 256 == 0 and time.monotonic() > deadline:
                break
            v = queue.pop()
            queued[v] = False
            cost, ok = self.options(v)
            cur = cost[self.x[v]]
            cost[~ok] = np.inf
            best = int(cost.argmin())
            if cost[best] < cur:
                gain += cur - cost[best]
                self.move(v, best)
                for w in self.nbrs[v]:
                    if not queued[w]:
                        queued[w] = True
                        queue.append(int(w))
        return gain

    def region(self, size: int) -> list[int]:
        """A random connected set of up to ``size`` variables."""
        seed = int(self.rng.integers(self.model.nv))
        picked = {seed}
        frontier = [seed]
        while frontier and len(picked) < size:
            v = frontier.pop(int(self.rng.integers(len(frontier))))
            for w in self.nbrs[v]:
                if len(picked) < size and int(w) not in picked:
                    picked.add(int(w))
                    frontier.append(int(w))
        return [int(v) for v in self.rng.permutation(list(picked))]

    def iterate(self, deadline: float, report: Report, report_every: float = 0.5) -> None:
        """Iterated local search until the deadline; reports improvements."""
        best_cost = self.model.cost(self.x)
        last_report = time.monotonic()
        pending = False
        while time.monotonic() < deadline:
            saved_x, saved_load = self.x.copy(), self.load.copy()
            region = self.region(int(self.rng.integers(2, 9)))
            delta = 0.0
            for v in region:
                cost, ok = self.options(v)
                value = int(self.rng.choice(np.flatnonzero(ok)))
                delta += cost[value] - cost[self.x[v]]
                self.move(v, value)
            touched = set(region)
            for v in region:
                touched.update(int(w) for w in self.nbrs[v])
            delta -= self.descend(deadline, list(touched))
            if delta < 0:
                cost = self.model.cost(self.x)
                if cost < best_cost:
                    best_cost, pending = cost, True
                    continue
            self.x, self.load = saved_x, saved_load
            if pending and time.monotonic() - last_report > report_every:
                report(self.x.copy())
                pending, last_report = False, time.monotonic()
        if pending:
            report(self.x.copy())
