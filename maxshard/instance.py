"""The contest instance as flat numpy arrays.

Strategies and edge tables are stored CSR-style: node ``i`` owns strategies
``strat_off[i]:strat_off[i+1]`` of ``cost``/``usage``; edge ``e`` owns the
row-major table ``edge_cost[edge_off[e]:edge_off[e+1]]`` of shape
``(n_strategies(u), n_strategies(v))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: The contest's marker for a forbidden choice; any cost >= this is forbidden.
FORBIDDEN = 10**18


@dataclass(frozen=True, eq=False)
class Instance:
    name: str
    strat_off: np.ndarray  # int64[n+1]
    cost: np.ndarray  # int64[S]
    usage: np.ndarray  # int64[S]
    lo: np.ndarray  # int64[n], interval start (inclusive)
    hi: np.ndarray  # int64[n], interval end (exclusive); lo >= hi means never live
    edge_u: np.ndarray  # int64[m]
    edge_v: np.ndarray  # int64[m]
    edge_off: np.ndarray  # int64[m+1]
    edge_cost: np.ndarray  # int64[sum of table sizes]
    usage_limit: int | None

    @property
    def n(self) -> int:
        return len(self.strat_off) - 1

    @property
    def m(self) -> int:
        return len(self.edge_u)

    @cached_property
    def n_strategies(self) -> np.ndarray:
        """Each node's number of strategies (computed once: the starts and the
        evaluator index it node by node)."""
        return np.diff(self.strat_off)

    @cached_property
    def events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The memory profile's fixed part, sorted once (every evaluation needs
        it; sorting each time was half of one on N): ``(live, times, order,
        starts)``, where ``live`` marks the nodes ever live, ``times`` are the
        distinct starts and ends of their intervals, and the starts then the
        ends of the live nodes, taken in ``order``, fall at ``times[k]`` from
        position ``starts[k]`` on."""
        live = self.lo < self.hi
        times, at = np.unique(np.concatenate([self.lo[live], self.hi[live]]), return_inverse=True)
        order = np.argsort(at, kind="stable")
        starts = np.searchsorted(at[order], np.arange(len(times)))
        return live, times, order, starts

    def edge_table(self, e: int) -> np.ndarray:
        """The cost table of edge ``e`` as a 2-D view (rows: strategies of u)."""
        cols = self.strat_off[self.edge_v[e] + 1] - self.strat_off[self.edge_v[e]]
        return self.edge_cost[self.edge_off[e] : self.edge_off[e + 1]].reshape(-1, cols)
