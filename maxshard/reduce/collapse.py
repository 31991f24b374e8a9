"""Collapse functional edges on the flat instance, before the editable presolve.

On the contest's graphs most edges are *functional* once forbidden entries are
gone: each live strategy of one end allows exactly one strategy of the other
(an elementwise op follows its input's sharding). A node that is a function of
a neighbour can be removed, its costs, tables and memory moved onto that
neighbour. Following such edges from node to node gives a forest; each tree
collapses onto its root, whose value then fixes every node of the tree.

Here that happens in bulk, on arrays: functional edges are found for all
tables at once, the forest is grown edge by edge (a union-find keeps it one),
each node's map from its root's values is composed down the tree, and costs
are gathered onto the roots: node costs and the tables inside a tree become
costs of the root's values, tables between trees become tables between roots.
:class:`~maxshard.reduce.draft.Draft` starts from the roots. Measured on A: 34,932
nodes to 290 roots; on P: 65,335 to 201 (the same folds one at a time, in
``merge_functional``, took 1.7 and 2.2 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..csr import offsets, positions, ranks, segments, split
from ..instance import FORBIDDEN, Instance
from ..model import saturating_sum, table_slots

#: Table entries from which the functional edges are found by the compiled loop
#: (:mod:`.compiled`; numba takes 0.4 s to load; history: *A deadline for presolve*)
COMPILED_ENTRIES = 10_000_000


def compiled_for(inst: Instance) -> bool:
    """Whether presolve's compiled loops run on ``inst`` (:data:`COMPILED_ENTRIES`)."""
    return int(inst.edge_off[-1]) >= COMPILED_ENTRIES


@dataclass(frozen=True)
class Forest:
    root: np.ndarray  # int64[n]: the root of each node's tree (roots are their own)
    map_off: np.ndarray  # int64[n+1]: node i's map is strategy[map_off[i]:map_off[i+1]]
    strategy: np.ndarray  # node i's strategy for each value of its root, in order
    unary: np.ndarray  # per map entry; at a root's entries: the tree's cost for that value
    cross: np.ndarray  # edges whose ends lie in different trees

    def map_of(self, i: int) -> np.ndarray:
        return self.strategy[self.map_off[i] : self.map_off[i + 1]]

    def unary_of(self, r: int) -> np.ndarray:
        return self.unary[self.map_off[r] : self.map_off[r + 1]]


def collapse(inst: Instance, alive: np.ndarray) -> Forest:
    """The functional forest of ``inst`` over the strategies ``alive`` (which must
    be arc consistent: every live strategy has a live, allowed partner on each edge,
    see :func:`~maxshard.reduce.draft.forbidden_free_values`)."""
    funcs = _functions(inst, alive)
    parent, via = _forest(inst, funcs.edge, funcs.direction)
    root, depth = _roots(parent)
    # every node of a tree has one value per live strategy of its root
    count = np.add.reduceat(alive, inst.strat_off[:-1]).astype(np.int64)
    sizes = count[root]
    map_off = offsets(sizes)
    strategy = np.empty(int(map_off[-1]), dtype=np.int64)
    roots = np.flatnonzero(parent < 0)
    live = np.flatnonzero(alive) - np.repeat(inst.strat_off[:-1], inst.n_strategies)[alive]
    strategy[positions(map_off, roots)] = segments(live, offsets(count), roots)
    # then level by level down the trees: a child's strategy for each of its
    # root's values is its function of its parent's
    by_depth = np.argsort(depth, kind="stable")
    for nodes in split(by_depth, offsets(np.bincount(depth)))[1:]:
        size = sizes[nodes]
        k = ranks(size)
        above = strategy[np.repeat(map_off[parent[nodes]], size) + k]
        strategy[np.repeat(map_off[nodes], size) + k] = funcs.partner[
            np.repeat(funcs.off[via[nodes]], size) + above
        ]
    # where each map entry lands: the same rank among its root's values
    target = np.repeat(map_off[root], sizes) + ranks(sizes)
    unary = _gather(inst, strategy, target, map_off, root, len(strategy))
    same = root[inst.edge_u] == root[inst.edge_v]
    return Forest(root, map_off, strategy, unary, np.flatnonzero(~same))


class Functions(NamedTuple):
    """The functional edges, by edge then direction: ``direction[k]`` 0 when
    the second end of ``edge[k]`` is a function of the first, 1 the other way
    round; the function, the dependent end's strategy for each of the other's
    (-1 at a dead strategy), is ``partner[off[k]:off[k + 1]]``."""

    edge: np.ndarray
    direction: np.ndarray
    off: np.ndarray
    partner: np.ndarray


def _functions(inst: Instance, alive: np.ndarray) -> Functions:
    """The functional edges of ``inst`` over the strategies ``alive``.

    Only tables with a forbidden entry can be functional, or those at a node left
    with one live strategy: in a table without forbidden entries every live row
    allows every live column. So only those are looked at (on N and U, which
    have no forbidden costs, that skips almost all of 4 million entries)."""
    none = np.zeros(0, dtype=np.int64)
    lengths = np.diff(inst.edge_off)
    forbidden = np.logical_or.reduceat(inst.edge_cost >= FORBIDDEN, inst.edge_off[:-1])
    single = np.add.reduceat(alive, inst.strat_off[:-1]) == 1
    edges = np.flatnonzero((forbidden & (lengths > 0)) | single[inst.edge_u] | single[inst.edge_v])
    if not len(edges):
        return Functions(none, none, np.zeros(1, dtype=np.int64), none)
    lengths = lengths[edges]
    eu, ev = inst.edge_u[edges], inst.edge_v[edges]
    du, dv = inst.n_strategies[eu], inst.n_strategies[ev]
    k = len(edges)
    row_edge, col_edge = np.repeat(np.arange(k), du), np.repeat(np.arange(k), dv)
    row_live = alive[inst.strat_off[eu][row_edge] + ranks(du)]  # each table's row slots
    col_live = alive[inst.strat_off[ev][col_edge] + ranks(dv)]
    # each row (column) slot's allowed entries, and its partner where it has one
    if lengths.sum() >= COMPILED_ENTRIES:
        from .compiled import partners

        counted = (inst.edge_cost, inst.edge_off[edges], du, dv, row_live, col_live)
        row_count, col_count, partner = partners(*counted, FORBIDDEN)
    else:
        row_count, col_count, partner = _partners(inst, edges, lengths, row_live, col_live)
    partner[~np.concatenate([row_live, col_live])] = -1  # a dead strategy has none
    # an edge is a function of its rows' end when every live row has one partner
    rows = np.flatnonzero(np.bincount(row_edge, row_live & (row_count != 1), minlength=k) == 0)
    cols = np.flatnonzero(np.bincount(col_edge, col_live & (col_count != 1), minlength=k) == 0)
    row_first = offsets(du)
    col_first = offsets(dv) + len(row_live)
    edge = np.concatenate([edges[rows], edges[cols]])
    direction = np.repeat(np.array([0, 1], dtype=np.int64), [len(rows), len(cols)])
    first = np.concatenate([row_first[rows], col_first[cols]])
    size = np.concatenate([np.diff(row_first)[rows], np.diff(col_first)[cols]])
    order = np.lexsort((direction, edge))
    size = size[order]
    return Functions(
        edge[order],
        direction[order],
        offsets(size),
        partner[np.repeat(first[order], size) + ranks(size)],
    )


def _partners(
    inst: Instance, edges: np.ndarray, lengths: np.ndarray, row_live: np.ndarray,
    col_live: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`.compiled.partners` in numpy, on the tables of ``edges``."""
    s = table_slots(inst.strat_off, inst.edge_u[edges], inst.edge_v[edges], int(lengths.sum()))
    cost = inst.edge_cost[np.repeat(inst.edge_off[edges], lengths) + ranks(lengths)]
    ok = (cost < FORBIDDEN) & row_live[s.entry_row] & col_live[s.entry_col]
    hits = np.flatnonzero(ok)
    row_count = np.bincount(s.entry_row[hits], minlength=len(s.row_val))
    col_count = np.bincount(s.entry_col[hits], minlength=len(s.col_val))
    partner = np.full(len(s.row_val) + len(s.col_val), -1, dtype=np.int64)
    hit_edge = s.row_edge[s.entry_row[hits]]
    ncols = inst.n_strategies[inst.edge_v[edges]][hit_edge]
    within = hits - offsets(lengths)[hit_edge]
    partner[s.entry_row[hits]] = within % ncols
    partner[len(s.row_val) + s.entry_col[hits]] = within // ncols
    return row_count, col_count, partner


def _forest(
    inst: Instance, edge: np.ndarray, direction: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Parent of each node (-1 for roots) and the functional edge ``k`` it follows
    (-1 for roots): a child is attached only while it is a root and its parent
    lies in another tree."""
    n = inst.n
    parent = [-1] * n
    via = [-1] * n
    tree = list(range(n))  # union-find over trees

    def find(a: int) -> int:
        while tree[a] != a:
            tree[a] = tree[tree[a]]
            a = tree[a]
        return a

    ends_u, ends_v = inst.edge_u[edge].tolist(), inst.edge_v[edge].tolist()
    for k, (u, v, d) in enumerate(zip(ends_u, ends_v, direction.tolist(), strict=True)):
        child, par = (v, u) if d == 0 else (u, v)
        if parent[child] >= 0 or child == par:
            continue
        rc, rp = find(child), find(par)
        if rc == rp:
            continue
        parent[child], via[child] = par, k
        tree[rc] = rp
    return np.array(parent, dtype=np.int64), np.array(via, dtype=np.int64)


def _roots(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The root of each node and its depth below it."""
    n = len(parent)
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parent.tolist()):
        if p >= 0:
            children[p].append(i)
    root, depth = list(range(n)), [0] * n
    order = np.flatnonzero(parent < 0).tolist()
    for i in order:  # grows as it goes: every parent before its children
        for c in children[i]:
            root[c], depth[c] = root[i], depth[i] + 1
            order.append(c)
    return np.array(root, dtype=np.int64), np.array(depth, dtype=np.int64)


def _gather(
    inst: Instance,
    strategy: np.ndarray,
    target: np.ndarray,
    map_off: np.ndarray,
    root: np.ndarray,
    size: int,
) -> np.ndarray:
    """Costs onto the roots' values: every node's cost at its mapped strategy, and
    every table inside a tree at its two ends' mapped strategies."""
    sizes = np.diff(map_off)
    node_cost = inst.cost[np.repeat(inst.strat_off[:-1], sizes) + strategy]
    inside = np.flatnonzero(root[inst.edge_u] == root[inst.edge_v])
    u, v = inst.edge_u[inside], inst.edge_v[inside]
    d = sizes[u]  # both ends have their root's number of values
    ncols = np.diff(inst.strat_off)[v]
    k = ranks(d)
    entry = (
        np.repeat(inst.edge_off[inside], d)
        + strategy[np.repeat(map_off[u], d) + k] * np.repeat(ncols, d)
        + strategy[np.repeat(map_off[v], d) + k]
    )
    edge_target = np.repeat(map_off[root[u]], d) + k
    return saturating_sum(
        np.concatenate([target, edge_target]),
        np.concatenate([node_cost, inst.edge_cost[entry]]),
        size,
    )


def cross_tables(inst: Instance, forest: Forest) -> dict[tuple[int, int], np.ndarray]:
    """The tables between trees, moved onto their roots (rows: the smaller root's
    values) and summed where several join the same two trees."""
    tables: dict[tuple[int, int], np.ndarray] = {}
    e = forest.cross
    # the common case on models with few functional edges: an edge between two
    # roots that keep all their strategies, alone between them, stays as it is
    u, v = inst.edge_u[e], inst.edge_v[e]
    whole = np.diff(forest.map_off) == inst.n_strategies
    plain = (forest.root[u] == u) & (forest.root[v] == v) & whole[u] & whole[v] & (u != v)
    ru, rv = forest.root[u], forest.root[v]
    pair = np.minimum(ru, rv) * inst.n + np.maximum(ru, rv)  # alone between the two trees
    _, first_at, seen = np.unique(pair, return_index=True, return_counts=True)
    alone = np.zeros(len(e), dtype=bool)
    alone[first_at[seen == 1]] = True
    keep = plain & alone
    ks = np.flatnonzero(keep)
    if len(ks):  # one loop over plain lists (N: 13,000 tables)
        top = np.maximum.reduceat(inst.edge_cost, inst.edge_off[:-1])  # no table is empty
        begin, end = inst.edge_off[e[ks]], inst.edge_off[e[ks] + 1]
        uk, vk = u[ks], v[ks]
        for p, q, lo, hi, nc, swap, big in zip(
            np.minimum(uk, vk).tolist(),
            np.maximum(uk, vk).tolist(),
            begin.tolist(),
            end.tolist(),
            np.diff(inst.strat_off)[vk].tolist(),
            (uk > vk).tolist(),
            (top[e[ks]] > FORBIDDEN).tolist(),
            strict=True,
        ):
            t = inst.edge_cost[lo:hi].reshape(-1, nc)
            t = np.minimum(t, FORBIDDEN) if big else t
            tables[(p, q)] = t.T if swap else t
    e = e[~keep]
    if not len(e):
        return tables
    ru, rv = forest.root[inst.edge_u[e]], forest.root[inst.edge_v[e]]
    flip = ru > rv  # store each pair once, smaller root first
    first, second = np.where(flip, rv, ru), np.where(flip, ru, rv)
    sizes = np.diff(forest.map_off)
    pairs, pair_of = np.unique(np.column_stack([first, second]), axis=0, return_inverse=True)
    pair_of = pair_of.reshape(-1)
    rows, cols = sizes[pairs[:, 0]], sizes[pairs[:, 1]]
    pair_off = offsets(rows * cols)
    # every entry of every cross table: (value of u's root a, value of v's root b)
    du, dv = sizes[inst.edge_u[e]], sizes[inst.edge_v[e]]
    n_entries = du * dv
    k = ranks(n_entries)
    a, b = k // np.repeat(dv, n_entries), k % np.repeat(dv, n_entries)
    src_u = forest.strategy[np.repeat(forest.map_off[inst.edge_u[e]], n_entries) + a]
    src_v = forest.strategy[np.repeat(forest.map_off[inst.edge_v[e]], n_entries) + b]
    ncols = np.diff(inst.strat_off)[inst.edge_v[e]]
    entry = np.repeat(inst.edge_off[e], n_entries) + src_u * np.repeat(ncols, n_entries) + src_v
    # a flipped edge's entry (a, b) lands at row b, column a of its pair's table
    fl = np.repeat(flip, n_entries)
    row, col = np.where(fl, b, a), np.where(fl, a, b)
    target = (
        np.repeat(pair_off[pair_of], n_entries) + row * np.repeat(cols[pair_of], n_entries) + col
    )
    flat = saturating_sum(target, inst.edge_cost[entry], int(pair_off[-1]))
    for j, (p, q) in enumerate(pairs.tolist()):
        tables[(p, q)] = flat[pair_off[j] : pair_off[j + 1]].reshape(rows[j], cols[j])
    return tables
