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
through ``node_map[map_off[i] + value]``, or was eliminated by a degree-2
elimination (an :class:`Elimination`, undone last-eliminated first). Nodes from
``n_nodes`` on are *virtual*: they track the value an eliminated variable's two
neighbours had when it was eliminated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .csr import offsets, ranks
from .evaluate import exact_sum
from .instance import FORBIDDEN, Instance


class Elimination(NamedTuple):
    """A variable removed between two neighbours: its best value for each pair of
    theirs is ``choice[left value, right value]``; node ``nodes[k]`` then takes
    strategy ``maps[k, choice]``. ``left``/``right`` are (virtual) node ids."""

    nodes: np.ndarray
    maps: np.ndarray
    left: int
    right: int
    choice: np.ndarray


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
    #: memory terms: term k adds usage_of(k)[x[term_var[k]]] at kept points
    #: [term_lo[k], term_hi[k]). A variable may own several terms live at one
    #: point (their usages add: every knapsack merges them, maxshard.knapsack)
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
    n_nodes: int = -1  # real contest nodes; -1: all of node_var
    eliminations: list[Elimination] = field(default_factory=list)
    #: False when usages had to be scaled down (see ``reduce.memory_units``): every
    #: solution that fits here fits the instance, but optima and bounds prove nothing
    exact_memory: bool = True
    #: the cost of a forbidden pick here: 10**18, or, when every solution has one,
    #: a smaller price that keeps the contest's order exactly (see
    #: ``reduce.lexicographic_cost``)
    forbidden_cost: int = FORBIDDEN

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
        """Forbidden picks of ``x`` (at least; merged ones count once)."""
        ncols = self.dom_size[self.edge_v]
        edge = self.edge_cost[self.edge_off[:-1] + x[self.edge_u] * ncols + x[self.edge_v]]
        worst = self.forbidden_cost
        return int((self.unary[self.dom_off[:-1] + x] >= worst).sum() + (edge >= worst).sum())

    def load(self, x: np.ndarray) -> np.ndarray:
        """Total usage at every kept point."""
        return self.base + self.live_sum(self.term_usage[self.term_off[:-1] + x[self.term_var]])

    def live_sum(self, per_term: np.ndarray) -> np.ndarray:
        """Per kept point, the sum of ``per_term`` (one integer per memory
        term, at most its largest usage) over the terms live there. The terms
        starting (ending) at a point are summed in doubles, exactly: their sum
        is at most a load, and presolve keeps every load below 2**52
        (``reduce.work.SAFE_LOAD``). (S: 0.2 ms; ``np.add.at`` in integers
        took 2.6.)"""
        return np.cumsum(self.live_changes(per_term).astype(np.int64))

    def live_changes(self, per_term: np.ndarray) -> np.ndarray:
        """Per kept point, in doubles, ``per_term`` of the terms starting there
        minus that of the terms ending there: the running sum of these is the
        sum over the live terms (:meth:`live_sum` sums them exactly)."""
        weight = per_term.astype(np.float64)
        n = len(self.base) + 1
        return (np.bincount(self.term_lo, weight, n) - np.bincount(self.term_hi, weight, n))[:-1]

    def fits(self, x: np.ndarray) -> bool:
        return self.limit is None or not len(self.base) or int(self.load(x).max()) <= self.limit

    def reconstruct(self, x: np.ndarray) -> np.ndarray:
        """The full contest solution for model solution ``x``."""
        sol = self.node_fixed.copy()
        free = np.flatnonzero(self.node_var >= 0)
        sol[free] = self.node_map[self.map_off[free] + x[self.node_var[free]]]
        for e in reversed(self.eliminations):
            sol[e.nodes] = e.maps[:, e.choice[sol[e.left], sol[e.right]]]
        return sol if self.n_nodes < 0 else sol[: self.n_nodes]

    def min_usage_solution(self) -> np.ndarray:
        """Per variable, the value with the smallest total usage over its terms."""
        total = np.zeros(int(self.dom_off[-1]), dtype=np.int64)
        for k in range(len(self.term_var)):
            start = self.dom_off[self.term_var[k]]
            total[start : start + self.term_off[k + 1] - self.term_off[k]] += self.usage_of(k)
        key = total.astype(np.float64) * 4.0 + (self.unary >= FORBIDDEN)
        return segment_argmin(key, self.dom_off)


def fingerprint(model: Model) -> str:
    """A short hash of everything a model's solutions mean: its variables, costs,
    memory and the map back to the instance. Presolve is deterministic, so the
    same instance and passes give the same fingerprint on any machine."""
    import hashlib

    h = hashlib.sha256()
    for a in (
        model.dom_off, model.unary, model.edge_u, model.edge_v, model.edge_off,
        model.edge_cost, model.base, model.term_var, model.term_lo, model.term_hi,
        model.term_off, model.term_usage, model.node_var, model.node_fixed, model.node_map,
    ):  # fmt: skip
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        h.update(b"|")
    h.update(f"{model.limit}|{model.offset}|{len(model.eliminations)}".encode())
    return h.hexdigest()[:16]


def running_sum(model: Model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The memory constraints in running-sum form, as CSR rows over the kept points.

    With ``L[-1] = 0`` and ``L[p] = L[p-1] + sum(delta[k] * x[value[k]])`` over
    row ``p``'s entries ``k`` (``x`` the 0/1 indicator of a value, indexed
    globally as ``dom_off[var] + j``), ``L[p]`` is the variable load at point
    ``p``, and memory holds iff ``L[p] <= limit - base[p]`` everywhere. A term
    enters with ``+usage`` where it starts and ``-usage`` where it ends, so
    the form has two entries per term value instead of one per covered point.
    Returns ``(row_off, value, delta)``.
    """
    sizes = np.diff(model.term_off)
    lo, hi = np.repeat(model.term_lo, sizes), np.repeat(model.term_hi, sizes)
    nval = int(model.dom_off[-1])
    return running_rows(len(model.base), nval, usage_values(model), lo, hi, model.term_usage)


def running_rows(
    npts: int, nval: int, value: np.ndarray, lo: np.ndarray, hi: np.ndarray, use: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`running_sum` of usage entries: value ``value[k]`` (of ``nval``) uses
    ``use[k]`` over the points ``[lo[k], hi[k])`` (of ``npts``)."""
    at_end = hi < npts  # a term reaching past the last point never ends
    point = np.concatenate([lo, hi[at_end]])
    value = np.concatenate([value, value[at_end]])
    delta = np.concatenate([use, -use[at_end]])
    width = max(1, nval)
    keys, where = np.unique(point * width + value, return_inverse=True)
    total = np.zeros(len(keys), dtype=np.int64)
    np.add.at(total, where, delta)
    nonzero = total != 0
    keys, total = keys[nonzero], total[nonzero]
    row_off = np.searchsorted(keys // width, np.arange(npts + 1))
    return row_off, keys % width, total


def usage_values(model: Model) -> np.ndarray:
    """Per usage entry (laid out as ``term_usage``), the global index of its
    value (``dom_off[var] + j``)."""
    sizes = np.diff(model.term_off)
    return np.repeat(model.dom_off[model.term_var], sizes) + ranks(sizes)


def penalties(model: Model, lam: np.ndarray) -> np.ndarray:
    """Per value: sum over its memory terms of usage times the multipliers it spans."""
    prefix = np.concatenate([[0.0], np.cumsum(lam)])
    return term_penalties(model, prefix[model.term_hi] - prefix[model.term_lo])


def term_penalties(model: Model, weight: np.ndarray) -> np.ndarray:
    """Per value: sum over its memory terms of usage times the term's weight."""
    pen = np.zeros(int(model.dom_off[-1]))
    per_value = np.repeat(weight, np.diff(model.term_off)) * model.term_usage
    np.add.at(pen, usage_values(model), per_value)
    return pen


def reparametrise(model: Model) -> tuple[np.ndarray, list[np.ndarray], int]:
    """Unary costs, tables and a constant with the same total for every
    assignment: table row minima moved into the first end, column minima into
    the second, each variable's least cost into the constant. Forbidden entries
    stay forbidden (and are never moved)."""
    unary = [int(c) for c in model.unary]  # Python ints: exact however sums grow
    tables = []
    for e in range(model.m):
        t = model.table(e).copy()
        clean = t < FORBIDDEN
        ou, ov = int(model.dom_off[model.edge_u[e]]), int(model.dom_off[model.edge_v[e]])
        for axis, first in ((1, ou), (0, ov)):
            low = np.where(clean, t, FORBIDDEN).min(axis=axis)
            low[low >= FORBIDDEN] = 0  # a row (column) with no clean entry
            t = np.where(clean, t - (low[:, None] if axis == 1 else low[None, :]), t)
            for j in np.flatnonzero(low).tolist():
                unary[first + j] += int(low[j])
        tables.append(t)
    constant = model.offset
    for v in range(model.nv):
        lo, hi = int(model.dom_off[v]), int(model.dom_off[v + 1])
        finite = [c for c in unary[lo:hi] if c < FORBIDDEN]
        low = min(finite, default=0)
        constant += low
        unary[lo:hi] = [c - low if c < FORBIDDEN else c for c in unary[lo:hi]]
    return np.array([min(c, FORBIDDEN) for c in unary], dtype=np.int64), tables, constant


def segment_argmin(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Index within each CSR segment (none empty) of its smallest value (first
    on ties). By each segment's minimum, not a sort: S's 76,000 values in
    0.5 ms instead of 15 (the multiplier loop takes it every round)."""
    lens = np.diff(off)
    if not len(lens):
        return np.zeros(0, dtype=np.int64)
    seg = np.repeat(np.arange(len(lens)), lens)
    hit = np.flatnonzero(values == np.repeat(np.minimum.reduceat(values, off[:-1]), lens))
    first = hit[np.flatnonzero(np.diff(seg[hit], prepend=-1))]
    if len(first) != len(lens):  # a NaN makes its segment's minimum NaN: sort, NaN last
        first = np.lexsort((np.arange(len(values)), values, seg))[off[:-1]]
    return first - off[:-1]


def kept_points(inst: Instance) -> np.ndarray:
    """The time points where memory can bind: where the set of live nodes is maximal.

    Between consecutive event times the live set is constant; the segment
    starting at ``t_k`` is a maximal set exactly when a node starts at ``t_k``
    and a node ends at ``t_{k+1}`` (otherwise a neighbouring segment holds a
    superset of its nodes).
    """
    live, times, order, first = inst.events  # the event times, sorted once per instance
    if len(times) < 2:
        return times[:0]
    starting = order < np.count_nonzero(live)  # events in time order: starts, then ends
    is_start = np.logical_or.reduceat(starting, first)
    is_end = np.logical_or.reduceat(~starting, first)
    return times[:-1][is_start[:-1] & is_end[1:]]


class TableSlots(NamedTuple):
    """Where every pair-table entry sits, for vectorised passes over all tables.

    A *row slot* is (edge, value of its first end): row slot ``r`` belongs to
    edge ``row_edge[r]`` and global value ``row_val[r]``; its entries are
    ``row_start[r]`` onwards, contiguous. *Column slots* are the same for the
    second end. ``entry_row[k]``/``entry_col[k]`` are the slots of entry ``k``.
    """

    row_edge: np.ndarray
    col_edge: np.ndarray
    row_val: np.ndarray
    col_val: np.ndarray
    row_start: np.ndarray
    entry_row: np.ndarray
    entry_col: np.ndarray


def table_slots(
    val_off: np.ndarray, edge_u: np.ndarray, edge_v: np.ndarray, n_entries: int
) -> TableSlots:
    """The slots of row-major tables of ``edge_u x edge_v`` values, stored one after
    another; ``val_off`` is the CSR offset of each node's (variable's) values."""
    dom = np.diff(val_off)
    du, dv = dom[edge_u], dom[edge_v]
    row_edge = np.repeat(np.arange(len(edge_u)), du)
    col_edge = np.repeat(np.arange(len(edge_u)), dv)
    row_len = dv[row_edge]
    row_start = offsets(row_len)[:-1]
    idx = np.int32 if n_entries < 2**31 else np.int64
    col_first = offsets(dv)[:-1][row_edge]  # first column slot of each row's edge
    return TableSlots(
        row_edge=row_edge,
        col_edge=col_edge,
        row_val=val_off[edge_u][row_edge] + ranks(du),
        col_val=val_off[edge_v][col_edge] + ranks(dv),
        row_start=row_start,
        entry_row=np.repeat(np.arange(len(row_edge), dtype=idx), row_len),
        entry_col=np.arange(n_entries, dtype=idx)
        - np.repeat((row_start - col_first).astype(idx), row_len),
    )


def saturate(a: np.ndarray) -> np.ndarray:
    return np.minimum(a, FORBIDDEN)


def saturating_sum(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """``out[index[k]] += values[k]``, saturated at the forbidden cost. The int64
    sum wraps modulo 2**64, so it comes out exact whenever the true total is in
    range; a float sum beside it detects the totals that are not."""
    values = np.minimum(values, FORBIDDEN)
    total = np.bincount(index, values.astype(np.float64), minlength=size)
    exact = np.zeros(size, dtype=np.int64)
    np.add.at(exact, index, values)
    return np.where(total >= 2.0**62, FORBIDDEN, np.minimum(exact, FORBIDDEN))
