"""Neighbourhoods of an assignment and their exact or priced solves: the moves of
the ``lns`` backend. A neighbourhood frees some variables and fixes the rest;
:class:`Neighbourhood` is its sub-problem, :class:`Room` the memory the fixed
variables leave it, and :func:`improve` (memory posted as knapsacks),
:func:`priced` and :func:`tree_priced` (memory priced, then repaired) solve it.
"""

from __future__ import annotations

import numpy as np

from .. import work
from ..csr import grouped, offsets, positions, ranks, segments
from ..evaluate import exact_sum
from ..instance import FORBIDDEN
from ..knapsack import merge_terms
from ..model import Model, saturate, saturating_sum
from . import toulbar2
from .local import Search
from .tree import Trees


class Adjacency:
    """Per variable, in CSR form: its incident edges (and the variable at the
    other end), and its memory terms."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.adj_off, order = grouped(np.concatenate([model.edge_u, model.edge_v]), model.nv)
        self.adj_edge = np.concatenate([np.arange(model.m)] * 2)[order]
        self.adj_other = np.concatenate([model.edge_v, model.edge_u])[order]
        self.term_off, self.terms = grouped(model.term_var, model.nv)
        self.term_max = np.maximum.reduceat(model.term_usage, model.term_off[:-1])
        self._text: dict[int, str] = {}

    def terms_of(self, free: np.ndarray) -> np.ndarray:
        """The memory terms of the variables ``free``."""
        return segments(self.terms, self.term_off, free)

    def neighbours(self, vs: np.ndarray) -> np.ndarray:
        """The variables adjacent to any of ``vs`` (with repeats)."""
        return segments(self.adj_other, self.adj_off, vs)

    def term_text(self, k: int) -> str:
        """Term ``k``'s part of a toulbar2 knapsack (see toulbar2.knapsack_params)."""
        text = self._text.get(k)
        if text is None:
            text = self._text[k] = toulbar2.knapsack_params(0, [self.model.usage_of(k)])[2:]
        return text

    def walk(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Up to ``size`` variables reached breadth-first over the edges from a
        random one (each variable's neighbours in random order; a new random
        root when the component runs out). Level by level, in arrays: a walk
        of 400 variables one at a time took 4% of ``lns``'s time on N."""
        nv = self.model.nv
        size = min(size, nv)
        seen = np.zeros(nv, dtype=bool)
        picked: list[np.ndarray] = []
        count = 0
        while count < size:
            root = int(rng.integers(nv))
            if seen[root]:
                continue
            seen[root] = True
            level = np.array([root], dtype=np.int64)
            while len(level) and count < size:
                picked.append(level[: size - count])
                count += len(picked[-1])
                # the queue's next stretch: each one's unseen neighbours, shuffled,
                # in the order of the variables they were reached from
                at = positions(self.adj_off, level)
                degree = self.adj_off[level + 1] - self.adj_off[level]
                parent = np.repeat(np.arange(len(level)), degree)
                order = np.lexsort((rng.random(len(at)), parent))
                nb = self.adj_other[at[order]]
                nb = nb[~seen[nb]]
                _, first = np.unique(nb, return_index=True)
                level = nb[np.sort(first)]
                seen[level] = True
        return np.sort(np.concatenate(picked)).astype(np.int64)

    def window(self, rng: np.random.Generator, load: np.ndarray, size: int) -> np.ndarray:
        """The ``size`` variables whose memory terms come nearest in time to a
        point (one of the most loaded half the time, else any), ties at random."""
        model = self.model
        if rng.random() < 0.5:
            p = int(rng.choice(np.flatnonzero(load >= np.quantile(load, 0.95))))
        else:
            p = int(rng.integers(len(load)))
        gap = np.maximum(model.term_lo - p, p - (model.term_hi - 1)).clip(0)
        far = np.full(model.nv, np.iinfo(np.int64).max)
        np.minimum.at(far, model.term_var, gap)
        key = far + rng.random(model.nv)
        return np.sort(np.argpartition(key, min(size, model.nv) - 1)[:size]).astype(np.int64)


class Neighbourhood:
    """The sub-problem of the variables ``free`` with all others fixed as in
    ``x``: each free variable's unary costs plus the rows of its tables toward
    fixed neighbours (flat, CSR by ``dom_off``; sums saturated at the forbidden
    cost, exact below it), the tables between free variables (``pair_i``,
    ``pair_j``: their places in ``free``; ``pair_edge``: the model's edge), and
    the current assignment's cost on it. Built for all of them at once: a
    neighbourhood of 400 variables is built about once per toulbar2 solve."""

    def __init__(self, model: Model, graph: Adjacency, x: np.ndarray, free: np.ndarray) -> None:
        self.model, self.free = model, free
        index = np.full(model.nv, -1, dtype=np.int64)
        index[free] = np.arange(len(free))
        self.index = index
        sizes = model.dom_size[free]
        self.dom_off = offsets(sizes)
        # every (free variable, incident edge) pair, in adjacency order
        at = positions(graph.adj_off, free)
        i = np.repeat(np.arange(len(free)), graph.adj_off[free + 1] - graph.adj_off[free])
        e, w = graph.adj_edge[at], graph.adj_other[at]
        first = model.edge_u[e] == free[i]
        fixed = index[w] < 0
        # toward a fixed neighbour: its row (or column) joins the unary costs
        fi, fe, xw, ff = i[fixed], e[fixed], x[w[fixed]], first[fixed]
        d = sizes[fi]
        a = ranks(d)
        ncols = np.repeat(model.dom_size[model.edge_v[fe]], d)
        xw, ff = np.repeat(xw, d), np.repeat(ff, d)
        entry = np.repeat(model.edge_off[fe], d) + np.where(ff, a * ncols + xw, xw * ncols + a)
        values = np.arange(int(self.dom_off[-1]))
        self.unary = saturating_sum(
            np.concatenate([values, np.repeat(self.dom_off[fi], d) + a]),
            np.concatenate([segments(model.unary, model.dom_off, free), model.edge_cost[entry]]),
            len(values),
        )  # fmt: skip
        # between free variables: each table once, from its first end
        inside = ~fixed & first
        self.pair_i, self.pair_edge = i[inside], e[inside]
        self.pair_j = index[w[inside]]
        xi, xj = x[free[self.pair_i]], x[free[self.pair_j]]
        here = model.edge_off[self.pair_edge] + xi * sizes[self.pair_j] + xj
        self.current = exact_sum(self.unary[self.dom_off[:-1] + x[free]]) + exact_sum(
            model.edge_cost[here]
        )

    def cfn(self, ub: int, seed: int, extra: np.ndarray | None = None):
        """A toulbar2 problem of the neighbourhood (``extra``: int64 costs added to
        the free variables' values, laid out as the model's) that only accepts
        assignments cheaper than ``ub``."""
        model = self.model
        cfn = toulbar2.new_problem(float(ub), seed, hbfs=HBFS)
        unary = self.unary
        if extra is not None:
            more = segments(extra, model.dom_off, self.free)
            unary = saturate(saturate(unary) + saturate(more))  # no int64 overflow
        toulbar2.post(cfn, self.dom_off, unary, self.pair_i, self.pair_j, *self.tables())
        return cfn

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The tables between free variables, flat (CSR offsets, entries)."""
        model, e = self.model, self.pair_edge
        lens = model.edge_off[e + 1] - model.edge_off[e]
        return offsets(lens), segments(model.edge_cost, model.edge_off, e)


def improve(
    model: Model,
    graph: Adjacency,
    x: np.ndarray,
    load: np.ndarray,
    free: np.ndarray,
    seed: int,
    deadline: float,
) -> np.ndarray | None:
    """A strictly cheaper assignment of ``free`` (the rest fixed as in ``x``)
    that fits in memory, or None if toulbar2 finds none (each solve stops
    after a CPU second, or at ``deadline``; none starts in its last
    :data:`TAIL`)."""
    from pytoulbar2.pytb2 import Contradiction

    hood = Neighbourhood(model, graph, x, free)
    if hood.current >= FORBIDDEN:
        return None
    room = Room(model, graph, x, load, free) if model.limit is not None else None
    # Knapsacks come lazily: the tightest first, then any the answer overflows.
    rows = room.tightest(TIGHTEST) if room is not None else np.zeros(0, dtype=np.int64)
    for _ in range(LAZY_ROUNDS):
        left = deadline - work.now()
        if left < TAIL:
            return None
        try:
            cfn = hood.cfn(hood.current, seed)
            for scope, params in room.knapsacks(rows, hood.index) if room is not None else ():
                toulbar2.post_knapsack(cfn, scope, params)
            y = toulbar2.solve_quietly(cfn, min(1.0, left))
        except Contradiction:
            return None
        if y is None:  # none better even under fewer knapsacks: none at all
            return None
        over = room.overflowed(y) if room is not None else rows[:0]
        if not len(over):
            return y
        rows = np.union1d(rows, over)
    return None


def priced(
    model: Model,
    graph: Adjacency,
    search: Search,
    x: np.ndarray,
    free: np.ndarray,
    pen: np.ndarray,
    rng: np.random.Generator,
    deadline: float,
) -> np.ndarray | None:
    """A solution that fits in memory, from the best assignment of ``free`` with
    memory priced by ``pen`` (int64 per value) instead of posted, repaired
    greedily (any variable may change) and descended around the changes; None
    when toulbar2 finds nothing better at that price or the repair is stuck.
    It may cost more than ``x``: the caller decides."""
    from pytoulbar2.pytb2 import Contradiction

    left = deadline - work.now()
    if left < TAIL:
        return None
    hood = Neighbourhood(model, graph, x, free)
    current = hood.current + int(pen[model.dom_off[free] + x[free]].sum())
    if hood.current >= FORBIDDEN or current >= 2**53:  # beyond doubles' exact integers
        return None
    try:
        cfn = hood.cfn(current, int(rng.integers(2**31)), pen)
        y = toulbar2.solve_quietly(cfn, min(1.0, left))
    except Contradiction:
        return None
    if y is None:  # nothing cheaper at this price
        return None
    trial = x.copy()
    trial[free] = y
    return repaired(graph, search, x, trial, deadline)


def tree_priced(
    model: Model,
    graph: Adjacency,
    search: Search,
    trees: Trees,
    x: np.ndarray,
    pen: np.ndarray,
    rng: np.random.Generator,
    size: int,
    deadline: float,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(the tree freed, a solution as :func:`priced` gives): the best assignment
    of an induced tree of up to ``size`` variables from a random one, memory
    priced by ``pen``, solved by dynamic programming (:mod:`.tree`), then
    repaired and descended; None when it is no cheaper at that price."""
    free, y, new, current = trees.best(x, pen.astype(np.float64), int(rng.integers(model.nv)), size)
    if not new < current - 0.5:  # nothing cheaper at this price
        return free, None
    trial = x.copy()
    trial[free] = y
    return free, repaired(graph, search, x, trial, deadline)


def repaired(
    graph: Adjacency, search: Search, x: np.ndarray, trial: np.ndarray, deadline: float
) -> np.ndarray | None:
    """``trial`` (``x`` changed by a priced move) repaired greedily until it fits
    (any variable may change) and descended around what changed from ``x``;
    None when the repair is stuck or takes back every change."""
    search.reset(trial)
    if not search.repair(min(deadline, work.now() + 2.0)):
        return None
    changed = np.flatnonzero(search.x != x)
    if not len(changed):  # the repair took back every change
        return None
    around = np.concatenate([changed, graph.neighbours(changed)])
    search.descend(deadline, around.tolist())
    return search.x.copy()


#: toulbar2's search in a neighbourhood: depth-first (0), not hybrid best-first (1) (history:
#: *Tuning notes*, neighbourhood HBFS)
HBFS = 0

#: no move starts in the last this many seconds (units) before the deadline;
#: one that starts before gets what is left (at most a second) for its solve
TAIL = 0.1

#: knapsacks posted at first (those with the least room); the rest come when
#: an answer overflows them, for at most ``LAZY_ROUNDS`` solves
TIGHTEST, LAZY_ROUNDS = 16, 4


class Room:
    """The memory the fixed variables leave to a neighbourhood: one row per
    stretch of time where the set of live free terms is constant (identical
    sets once, at their smallest room; sets that cannot overflow not at all).
    Row ``r``: the terms ``live[r]`` may use at most ``cap[r]``."""

    def __init__(self, model: Model, graph: Adjacency, x: np.ndarray, load: np.ndarray, free):
        self.model, self.graph, self.free = model, graph, free
        terms = graph.terms_of(free)
        self.terms = terms
        self.live = np.zeros((0, len(terms)), dtype=bool)
        self.cap = self.slack = np.zeros(0, dtype=np.int64)
        if not len(terms):
            return
        lo, hi = model.term_lo[terms], model.term_hi[terms]
        used = model.term_usage[model.term_off[terms] + x[model.term_var[terms]]]
        start, end = int(lo.min()), int(hi.max())
        diff = np.zeros(end - start + 1, dtype=np.int64)
        np.add.at(diff, lo - start, used)
        np.add.at(diff, hi - start, -used)
        fixed = load[start:end] - np.cumsum(diff[:-1])
        cuts = np.unique(np.concatenate([lo, hi]))
        cap = model.limit - np.maximum.reduceat(fixed, cuts[:-1] - start)
        live = (lo[None, :] <= cuts[:-1, None]) & (cuts[:-1, None] < hi[None, :])
        can = live @ graph.term_max[terms] > cap  # else no choice overflows it
        live, cap = live[can], cap[can]
        # identical live sets: keep the smallest room
        order = np.lexsort((cap, *np.packbits(live, axis=1).T[::-1]))
        live, cap = live[order], cap[order]
        first = np.ones(len(live), dtype=bool)
        first[1:] = (live[1:] != live[:-1]).any(axis=1)
        self.live, self.cap = live[first], cap[first]
        self.slack = self.cap - self.live @ used

    def tightest(self, k: int) -> np.ndarray:
        return np.sort(np.argsort(self.slack, kind="stable")[:k])

    def overflowed(self, y: np.ndarray) -> np.ndarray:
        """Rows that the neighbourhood's answer ``y`` (by position in it) overflows."""
        model, terms = self.model, self.terms
        index = np.searchsorted(self.free, model.term_var[terms])
        used = model.term_usage[model.term_off[terms] + y[index]]
        return np.flatnonzero(self.live @ used > self.cap)

    def knapsacks(self, rows: np.ndarray, index: np.ndarray):
        """(scope, toulbar2 parameters) of each row's knapsack."""
        model, graph = self.model, self.graph
        for r in rows:
            key = self.terms[self.live[r]]
            cap = int(self.cap[r])
            scope = index[model.term_var[key]]
            if len(np.unique(scope)) < len(key):  # a variable with two live terms: merge
                variables, uses = merge_terms(model, key)
                yield index[variables].tolist(), toulbar2.knapsack_params(cap, uses)
            else:
                yield scope.tolist(), f"{-cap} " + " ".join(graph.term_text(int(k)) for k in key)
