"""A forbidden-free start, before presolve: follow the matching tables.

The run's first answer, each node's least-using strategy (``all_min_usage``),
fits in memory whenever anything does, but on most contest models it picks
forbidden pairs: thousands on A, M, P and S. Almost every table that holds a
forbidden cost is a *matching*: each strategy of one end allows exactly one of
the other's (34,696 of A's 34,710 such tables, all of M's and P's), and the
two ends break their ties in usage differently.

So the nodes joined by such tables form components whose strategies all
follow from one node's (its *root*). Each component takes the root strategy
that makes the fewest forbidden picks (its nodes' costs, its tables and, where
it has others, its tables to the rest of the answer), then uses the least
memory summed over its nodes, then costs least; a node on no such table is a
component of its own. A few repair passes then re-choose the components
around the forbidden picks left (tables that are no matching: a node of one
strategy that allows one of its neighbour's, a map that is not one-to-one).

On every shared benchmark and framework instance the answer is free of
forbidden picks and fits in memory, within 0.7 s of reading on the largest
(docs/history.md, *A start before presolve*). It costs far more than the
optimum (4x on A): it is the run's floor while presolve runs beside it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from .csr import grouped, offsets, ranks, segments, split
from .evaluate import all_min_usage
from .instance import FORBIDDEN, Instance
from .model import segment_argmin

#: Passes that re-choose the components around the forbidden picks left (the
#: shared benchmarks need none; history: *A start before presolve*)
REPAIR_PASSES = 3


def consistent_start(inst: Instance) -> np.ndarray:
    """One strategy per node: each component of matching tables at the root
    strategy its nodes use least memory at, the other nodes at their
    least-using allowed strategy (see the module's docstring)."""
    start = _Start(inst)
    for c in range(len(start.members)):
        start.choose(c)
    for _ in range(REPAIR_PASSES):
        broken = start.broken()
        if not len(broken):
            break
        ends = np.concatenate([inst.edge_u[broken], inst.edge_v[broken]])
        for c in np.unique(start.owner_of(ends)).tolist():
            start.choose(c, strict=True)
    return start.x


class _Start:
    """The components of matching tables (a node on none is one of its own),
    each member's strategy for each of its root's (``picks``), and the
    current answer ``x``."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.bad_value = inst.cost >= FORBIDDEN
        self.x = all_min_usage(inst, avoid=self.bad_value)
        follows, heads, self.held = _tables(inst)
        self.members, self.picks = _components(inst, follows, heads)
        self.owner = np.full(inst.n, -1, dtype=np.int64)
        self.row = np.zeros(inst.n, dtype=np.int64)
        for c, members in enumerate(self.members):
            self.owner[members] = c
            self.row[members] = np.arange(len(members))
        ends = np.concatenate([inst.edge_u[self.held], inst.edge_v[self.held]])
        self.held_off, items = grouped(ends, inst.n)
        self.held_at = self.held[items % len(self.held)] if len(self.held) else items
        # a component whose held tables are all its own matchings needs no check
        degree = np.diff(self.held_off)
        self.checked = [int(degree[m].sum()) != 2 * (len(m) - 1) for m in self.members]

    def owner_of(self, nodes: np.ndarray) -> np.ndarray:
        """Each node's component, one of its own made for a node on none."""
        for v in nodes[self.owner[nodes] < 0].tolist():
            self.owner[v], self.row[v] = len(self.members), 0
            self.members.append(np.array([v]))
            self.picks.append(np.arange(self.inst.n_strategies[v])[None, :])
            self.checked.append(True)
        return self.owner[nodes]

    def choose(self, c: int, strict: bool = False) -> None:
        """Component ``c`` at its best root strategy: fewest forbidden picks
        (its held tables counted against the answer so far where ``checked`` or
        ``strict``), then least memory, then least cost."""
        inst, members, picks = self.inst, self.members[c], self.picks[c]
        where = inst.strat_off[members][:, None] + picks
        forbidden = self.bad_value[where].sum(axis=0)
        if strict or self.checked[c]:
            forbidden = forbidden + self._broken_by(c)
        usage, cost = inst.usage[where].sum(axis=0), inst.cost[where].sum(axis=0)
        self.x[members] = picks[:, np.lexsort((cost, usage, forbidden))[0]]

    def _broken_by(self, c: int) -> np.ndarray:
        """For each root strategy of ``c``, the held tables around it that its
        members' strategies (and the others' in the answer) make forbidden."""
        inst, members, picks = self.inst, self.members[c], self.picks[c]
        edges = np.unique(segments(self.held_at, self.held_off, members))
        ends = []
        for side in (inst.edge_u[edges], inst.edge_v[edges]):
            mine = self.owner[side] == c
            pick = np.repeat(self.x[side][:, None], picks.shape[1], axis=1)
            pick[mine] = picks[self.row[side[mine]]]
            ends.append(pick)
        cols = inst.n_strategies[inst.edge_v[edges]][:, None]
        entry = inst.edge_off[edges][:, None] + ends[0] * cols + ends[1]
        return (inst.edge_cost[entry] >= FORBIDDEN).sum(axis=0)

    def broken(self) -> np.ndarray:
        """The held tables at a forbidden entry in the answer."""
        inst, e = self.inst, self.held
        cols = inst.n_strategies[inst.edge_v[e]]
        entry = inst.edge_off[e] + self.x[inst.edge_u[e]] * cols + self.x[inst.edge_v[e]]
        return e[inst.edge_cost[entry] >= FORBIDDEN]


def _components(inst: Instance, follows: np.ndarray, heads: list[np.ndarray]):
    """The components of the matching tables ``follows`` (maps ``heads``):
    their members, and each member's strategy for each of its root's."""
    if not len(follows):
        return [], []
    ends = np.concatenate([inst.edge_u[follows], inst.edge_v[follows]])
    off, items = grouped(ends, inst.n)
    k = len(follows)
    edge_of, forward = (items % k).tolist(), (items < k).tolist()
    other = np.concatenate([inst.edge_v[follows], inst.edge_u[follows]])[items].tolist()
    bounds = off.tolist()
    maps: dict[int, np.ndarray] = {}  # node -> its strategy for each of its root's
    members, picks = [], []
    for root in np.unique(ends).tolist():
        if root in maps:
            continue
        maps[root] = np.arange(inst.n_strategies[root])
        group, queue = [root], deque([root])
        while queue:
            u = queue.popleft()
            for slot in range(bounds[u], bounds[u + 1]):
                v = other[slot]
                if v in maps:
                    continue
                e = edge_of[slot]
                step = heads[e] if forward[slot] else np.argsort(heads[e])  # or its inverse
                maps[v] = step[maps[u]]
                group.append(v)
                queue.append(v)
        members.append(np.array(group))
        picks.append(np.stack([maps[v] for v in group]))
    return members, picks


def _tables(inst: Instance) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The edges whose tables are matchings on their allowed entries (square,
    one allowed entry in every row and every column, some entry forbidden),
    for each the map from its u end's strategies to its v end's, and the
    edges whose tables hold a forbidden entry (*held* tables)."""
    none = np.zeros(0, dtype=np.int64), [], np.zeros(0, dtype=np.int64)
    if not inst.m:
        return none
    # as many allowed entries as rows, fewer than all (one pass over the entries)
    d, lens = inst.n_strategies[inst.edge_u], np.diff(inst.edge_off)
    allowed = inst.edge_cost < FORBIDDEN
    count = np.add.reduceat(allowed, inst.edge_off[:-1], dtype=np.int64)
    holds = count < lens
    held = np.flatnonzero(holds)
    square = (d == inst.n_strategies[inst.edge_v]) & (count == d) & holds
    hit = np.flatnonzero(allowed & np.repeat(square, lens))
    cand = np.flatnonzero(square)
    if not len(cand):
        return cand, [], held
    # ... one in each row (in order) and one in each column
    d = d[cand]
    first = offsets(d)
    edge = np.repeat(np.arange(len(cand)), d)
    rank = hit - inst.edge_off[cand][edge]
    row, col = rank // d[edge], rank % d[edge]
    rows_ok = row == np.arange(len(row)) - first[:-1][edge]
    key = first[:-1][edge] + col
    cols_ok = np.bincount(key, minlength=len(key))[key] == 1
    ok = np.logical_and.reduceat(rows_ok & cols_ok, first[:-1])
    heads = split(col, first)
    return cand[ok], [h for h, good in zip(heads, ok.tolist(), strict=True) if good], held


def descend(inst: Instance, x: np.ndarray, done: Callable[[], bool]) -> np.ndarray:
    """Iterated conditional modes from ``x`` on the instance itself, for a model
    whose memory is unlimited, until no node's strategy alone can cost less or
    ``done()``; what a run answers when presolve does not end in its time.

    Each round prices every strategy against the neighbours' current ones (a
    pass over one row or column of each table) and moves every node that
    gains, except one of any two neighbours that both would (the smaller gain
    waits). The movers are then independent, each gains exactly what it was
    priced, and the cost falls every round."""
    x = np.asarray(x, dtype=np.int64).copy()
    u, v, off = inst.edge_u, inst.edge_v, inst.edge_off[:-1]
    sizes = inst.n_strategies
    base = np.minimum(inst.cost, FORBIDDEN).astype(np.float64)
    loop = u == v  # a node's table with itself: its diagonal is its own cost
    if loop.any():
        d = sizes[u[loop]]
        diagonal = np.repeat(off[loop], d) + ranks(d) * (np.repeat(d, d) + 1)
        base += np.bincount(
            inst.strat_off[np.repeat(u[loop], d)] + ranks(d),
            weights=np.minimum(inst.edge_cost[diagonal], FORBIDDEN), minlength=len(base),
        )  # fmt: skip
    u, v, off = u[~loop], v[~loop], off[~loop]
    rows, cols = sizes[u], sizes[v]
    row_to = inst.strat_off[np.repeat(u, rows)] + ranks(rows)  # u's strategies, edge by edge
    col_to = inst.strat_off[np.repeat(v, cols)] + ranks(cols)
    row_step = np.repeat(cols, rows) * ranks(rows)
    while not done():
        # each strategy's cost beside the neighbours' current strategies
        at_row = np.repeat(off + x[v], rows) + row_step  # column x[v] of each table
        at_col = np.repeat(off + x[u] * cols, cols) + ranks(cols)  # row x[u]
        entries = np.minimum(inst.edge_cost[np.concatenate([at_row, at_col])], FORBIDDEN)
        price = base + np.bincount(
            np.concatenate([row_to, col_to]), weights=entries, minlength=len(base)
        )
        best = segment_argmin(price, inst.strat_off)
        gain = price[inst.strat_off[:-1] + x] - price[inst.strat_off[:-1] + best]
        moving = gain > 0
        both = moving[u] & moving[v]
        smaller = (gain[u] < gain[v]) | ((gain[u] == gain[v]) & (u < v))
        moving[u[both & smaller]] = False
        moving[v[both & ~smaller]] = False
        if not moving.any():
            break
        x[moving] = best[moving]
    return x
