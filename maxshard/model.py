"""The reduced model every backend solves.

A model has *variables* (domains of values with unary costs), pairwise cost
tables between variables, a constant cost ``offset`` and *memory terms*: a term
says "while variable ``var`` is live on kept time points ``lo:hi`` it uses
``usage[value]``". Keeping memory as terms (not one interval per node) lets
presolve fold one variable into another and simply move its terms along.

Memory is checked only on the kept (compressed) time points: ``base`` is the
fixed load there and every point must satisfy ``base + sum of live terms <=
limit``. Costs are saturated at :data:`FORBIDDEN`, so a model cost is exact for
every solution without forbidden picks; the evaluator re-costs every answer.

``reconstruct`` maps a model solution back to a full contest solution: node
``i`` is either fixed (``node_fixed[i]``) or follows variable ``node_var[i]``
through ``node_map[map_off[i] + value]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .evaluate import exact_sum
from .instance import FORBIDDEN, Instance


@dataclass(eq=False)
class Model:
    dom_off: np.ndarray  # int64[nv+1]
    unary: np.ndarray  # int64[dom_off[-1]]
    edge_u: np.ndarray  # int64[m], edge_u < edge_v, one edge per pair
    edge_v: np.ndarray
    edge_off: np.ndarray  # int64[m+1]; table rows: values of edge_u
    edge_cost: np.ndarray
    point_time: np.ndarray  # int64[P], original time of each kept point
    base: np.ndarray  # int64[P], fixed load
    limit: int | None
    term_var: np.ndarray  # int64[K]
    term_lo: np.ndarray  # int64[K], kept-point range [lo, hi)
    term_hi: np.ndarray
    term_off: np.ndarray  # int64[K+1], usage per value of term_var
    term_usage: np.ndarray
    offset: int
    node_var: np.ndarray  # int64[n], -1 where the node is fixed
    node_fixed: np.ndarray  # int64[n], the strategy of a fixed node, else -1
    map_off: np.ndarray  # int64[n+1]
    node_map: np.ndarray  # int64

    # --- sizes -----------------------------------------------------------
    @property
    def nv(self) -> int:
        return len(self.dom_off) - 1

    @property
    def m(self) -> int:
        return len(self.edge_u)

    @property
    def dom_size(self) -> np.ndarray:
        return np.diff(self.dom_off)

    def table(self, e: int) -> np.ndarray:
        cols = self.dom_off[self.edge_v[e] + 1] - self.dom_off[self.edge_v[e]]
        return self.edge_cost[self.edge_off[e] : self.edge_off[e + 1]].reshape(-1, cols)

    def unary_of(self, v: int) -> np.ndarray:
        return self.unary[self.dom_off[v] : self.dom_off[v + 1]]

    def usage_of(self, k: int) -> np.ndarray:
        return self.term_usage[self.term_off[k] : self.term_off[k + 1]]

    def stats(self) -> dict[str, int]:
        return {
            "variables": self.nv,
            "edges": self.m,
            "values": int(self.dom_off[-1]),
            "table entries": len(self.edge_cost),
            "time points": len(self.point_time),
            "memory terms": len(self.term_var),
        }

    # --- evaluating model solutions --------------------------------------
    def cost(self, x: np.ndarray) -> int:
        """Exact cost of a model solution (exact whenever it has no forbidden pick)."""
        ncols = self.dom_size[self.edge_v]
        edge = self.edge_cost[self.edge_off[:-1] + x[self.edge_u] * ncols + x[self.edge_v]]
        return self.offset + exact_sum(self.unary[self.dom_off[:-1] + x]) + exact_sum(edge)

    def forbidden(self, x: np.ndarray) -> int:
        ncols = self.dom_size[self.edge_v]
        edge = self.edge_cost[self.edge_off[:-1] + x[self.edge_u] * ncols + x[self.edge_v]]
        return int(
            (self.unary[self.dom_off[:-1] + x] >= FORBIDDEN).sum() + (edge >= FORBIDDEN).sum()
        )

    def load(self, x: np.ndarray) -> np.ndarray:
        """Total usage at every kept point."""
        used = self.term_usage[self.term_off[:-1] + x[self.term_var]]
        diff = np.zeros(len(self.base) + 1, dtype=np.int64)
        np.add.at(diff, self.term_lo, used)
        np.add.at(diff, self.term_hi, -used)
        return self.base + np.cumsum(diff[:-1])

    def fits(self, x: np.ndarray) -> bool:
        return self.limit is None or not len(self.base) or int(self.load(x).max()) <= self.limit

    def reconstruct(self, x: np.ndarray) -> np.ndarray:
        """The full contest solution for model solution ``x``."""
        sol = self.node_fixed.copy()
        free = np.flatnonzero(self.node_var >= 0)
        sol[free] = self.node_map[self.map_off[free] + x[self.node_var[free]]]
        return sol

    def min_usage_solution(self) -> np.ndarray:
        """Per variable, the value with the smallest total usage over its terms."""
        total = np.zeros(int(self.dom_off[-1]), dtype=np.int64)
        for k in range(len(self.term_var)):
            start = self.dom_off[self.term_var[k]]
            total[start : start + self.term_off[k + 1] - self.term_off[k]] += self.usage_of(k)
        key = total.astype(np.float64) * 4.0 + (self.unary >= FORBIDDEN)
        return segment_argmin(key, self.dom_off)


def segment_argmin(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Index within each CSR segment of its smallest value (first on ties)."""
    seg = np.repeat(np.arange(len(off) - 1), np.diff(off))
    order = np.lexsort((np.arange(len(values)), values, seg))
    return order[off[:-1]] - off[:-1]


def kept_points(inst: Instance) -> np.ndarray:
    """The time points where memory can bind: where the set of live nodes is maximal.

    Between consecutive event times the live set is constant; the segment
    starting at ``t_k`` is a maximal set exactly when a node starts at ``t_k``
    and a node ends at ``t_{k+1}`` (otherwise a neighbouring segment holds a
    superset of its nodes).
    """
    live = inst.lo < inst.hi
    starts, ends = inst.lo[live], inst.hi[live]
    times = np.unique(np.concatenate([starts, ends]))
    if len(times) < 2:
        return times[:0]
    is_start = np.isin(times, starts)
    is_end = np.isin(times, ends)
    return times[:-1][is_start[:-1] & is_end[1:]]


def saturate(a: np.ndarray) -> np.ndarray:
    return np.minimum(a, FORBIDDEN)
