"""Tree neighbourhoods: free an induced tree of variables, solve it exactly by
dynamic programming.

With every other variable fixed, a neighbourhood whose variables and the
edges between them form a tree (an *induced* tree: no edge joins two of its
variables but the tree's own) is solved exactly in one pass from the leaves
to the root and one back: each variable's cost for each of its values is
its unary cost, its rows toward fixed neighbours and, per child, the child's
best cost under that value (dynamic programming on a tree, as in max-product
belief propagation, exact on trees). Work: the entries of the tree's
tables, microseconds to a few milliseconds, against tens of milliseconds
for toulbar2 on a general neighbourhood of a few hundred variables.

The tree grows breadth-first from a random variable, each variable's
neighbours in random order; a neighbour joins when the tree touches it
at exactly one variable (so it stays a tree), and once it touches two it
never can. On N (5,680 variables after presolve) such trees reach 2,000
variables and more.

Memory is priced, not posted (a cost per value added to the unary costs, the
caller's), so the answer may not fit: :mod:`.lns` repairs it as it does its
other priced moves. Costs are float64 here as in :mod:`.kernels`
(whose :class:`~.kernels.Graph` this reads); callers re-cost exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .kernels import Graph


class Trees:
    """Scratch space for the tree moves on one model (its kernels' graph ``g``)."""

    def __init__(self, g: Graph) -> None:
        nv = len(g.dom_off) - 1
        self.g = g
        self.inside = np.zeros(nv, dtype=np.int8)
        self.order = np.zeros(nv, dtype=np.int64)
        self.parent = np.zeros(nv, dtype=np.int64)
        self.slot = np.zeros(nv, dtype=np.int64)
        self.f = np.zeros(int(g.dom_off[-1]))
        self.f_off = np.zeros(nv + 1, dtype=np.int64)
        # a child's best value per value of its parent (a neighbour): room for
        # each variable's widest neighbour, not the widest domain times nv
        size = np.diff(g.dom_off)
        widest = np.zeros(nv, dtype=np.int64)
        if len(g.adj_nbr):
            np.maximum.at(widest, np.repeat(np.arange(nv), np.diff(g.adj_off)), size[g.adj_nbr])
        self.arg = np.zeros(int(widest.sum()), dtype=np.int64)
        self.y = np.zeros(nv, dtype=np.int64)

    def best(
        self, x: np.ndarray, pen: np.ndarray, root: int, size: int
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """Grow an induced tree of up to ``size`` variables from ``root`` and
        give it its best assignment with the rest fixed as in ``x``, unary
        costs raised by ``pen`` (float64 per value): (the tree's variables,
        their best values, that assignment's priced cost, ``x``'s on the same
        terms). Draws from numba's generator (:func:`.kernels.seed`)."""
        n = grow(self.g, root, size, self.inside, self.order, self.parent, self.slot)
        new, current = solve(
            self.g, x, pen, n, self.inside, self.order, self.parent, self.slot,
            self.f, self.f_off, self.arg, self.y,
        )  # fmt: skip
        self.inside[:] = 0
        return self.order[:n].copy(), self.y[:n].copy(), new, current


@njit(cache=True)
def grow(g, root, size, inside, order, parent, slot):
    """An induced tree of up to ``size`` variables from ``root``, breadth-first:
    ``order[:n]`` its variables (root first, each after its parent),
    ``parent[k]`` the place in ``order`` of ``order[k]``'s parent, ``slot[k]``
    the parent's adjacency slot toward it; returns ``n``. ``inside``: 1 in
    the tree, 2 touched by it twice (never joins), else 0; the caller clears it."""
    n = 1
    order[0], parent[0], slot[0] = root, -1, -1
    inside[root] = 1
    head = 0
    while head < n and n < size:
        p = order[head]
        lo, deg = g.adj_off[p], g.adj_off[p + 1] - g.adj_off[p]
        g.work[0] += deg
        start = np.random.randint(deg) if deg else 0
        for t in range(deg):
            s = lo + (start + t) % deg
            w = g.adj_nbr[s]
            if inside[w] != 0:
                continue
            touches = 0
            for s2 in range(g.adj_off[w], g.adj_off[w + 1]):
                if inside[g.adj_nbr[s2]] == 1:
                    touches += 1
                    if touches > 1:
                        break
            g.work[0] += g.adj_off[w + 1] - g.adj_off[w]
            if touches != 1:
                inside[w] = 2
                continue
            order[n], parent[n], slot[n] = w, head, s
            inside[w] = 1
            n += 1
            if n >= size:
                break
        head += 1
    return n


@njit(cache=True)
def solve(g, x, pen, n, inside, order, parent, slot, f, f_off, arg, y):
    """The tree ``order[:n]``'s best values into ``y[:n]``; returns (their
    priced cost, ``x``'s), each over the tree's unary costs, ``pen``, rows
    toward fixed neighbours and tables inside the tree."""
    current = 0.0
    at = 0
    for k in range(n):  # each variable's own costs, and rows toward fixed neighbours
        v = order[k]
        d = g.dom_off[v + 1] - g.dom_off[v]
        f_off[k] = at
        for a in range(d):
            f[at + a] = g.unary[g.dom_off[v] + a] + pen[g.dom_off[v] + a]
        for s in range(g.adj_off[v], g.adj_off[v + 1]):
            w = g.adj_nbr[s]
            if inside[w] == 1:
                continue
            base = g.adj_tab[s] + x[w] * g.adj_other[s]
            for a in range(d):
                f[at + a] += g.table[base + a * g.adj_own[s]]
            g.work[0] += d
        current += f[at + x[v]]
        if k > 0:  # the table toward its parent
            s = slot[k]
            p = order[parent[k]]
            current += g.table[g.adj_tab[s] + x[p] * g.adj_own[s] + x[v] * g.adj_other[s]]
        at += d
    arg_off = np.zeros(n + 1, dtype=np.int64)  # where each child's picks go
    for k in range(1, n):
        p = order[parent[k]]
        arg_off[k + 1] = arg_off[k] + g.dom_off[p + 1] - g.dom_off[p]
    for k in range(n - 1, 0, -1):  # leaves up: each child's best per parent value
        v, pk = order[k], parent[k]
        p, s = order[pk], slot[k]
        dv = g.dom_off[v + 1] - g.dom_off[v]
        dp = g.dom_off[p + 1] - g.dom_off[p]
        for a in range(dp):
            base = g.adj_tab[s] + a * g.adj_own[s]
            best, pick = np.inf, 0
            for b in range(dv):
                c = g.table[base + b * g.adj_other[s]] + f[f_off[k] + b]
                if c < best:
                    best, pick = c, b
            f[f_off[pk] + a] += best
            arg[arg_off[k] + a] = pick
        g.work[0] += dp * dv
    d = g.dom_off[order[0] + 1] - g.dom_off[order[0]]
    best, pick = np.inf, 0
    for a in range(d):
        if f[a] < best:
            best, pick = f[a], a
    y[0] = pick
    for k in range(1, n):  # root down: each child's best under its parent's value
        y[k] = arg[arg_off[k] + y[parent[k]]]
    return best, current
