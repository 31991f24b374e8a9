"""Large neighbourhood search: free a few dozen variables, solve them exactly.

Local search moves one variable at a time (or trades memory greedily between
a few); where a better solution needs many variables to change together it
stalls. This backend keeps every variable but a *neighbourhood* fixed and lets
toulbar2 find the best assignment of the neighbourhood under the memory left
to it:

1. start from the incumbent (or the minimum-usage assignment) and adopt a
   better solution of another worker whenever one appears;
2. pick a neighbourhood: a breadth-first walk over the edges from a random
   variable, or the variables live at one of the most loaded points;
3. build the sub-problem: each free variable's unary costs plus the edge costs
   to its fixed neighbours; edge tables between free variables; one knapsack
   per stretch of time where the free variables' live set is constant, with
   the room the fixed variables leave at its most loaded point;
4. solve it with toulbar2, its initial upper bound the neighbourhood's current
   cost (so only strictly better assignments count), and keep what it finds;
5. grow the neighbourhood while toulbar2 finishes quickly, shrink it when it
   runs into its time limit.

Every solution it reports fits in memory (the knapsacks hold exactly the
room the fixed variables leave), and is re-costed exactly here and by the
caller.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from ..backend import Capabilities, Report, Result, Status, shared_best
from ..instance import FORBIDDEN
from ..model import Model, offsets
from . import toulbar2

#: MAXSHARD_DEBUG=1 prints the solves' count, mean size and time, and successes.
DEBUG = bool(os.environ.get("MAXSHARD_DEBUG"))


class LNS:
    name = "lns"
    capabilities = Capabilities(exact=False, anytime=True, memory=True, lower_bound=False)

    #: variables freed at the start; adapted between ``smallest`` and ``largest``
    size, smallest, largest = 30, 8, 2000
    #: a solve that ends within this share of its limit counts as quick: grow
    quick = 0.05

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
        rng = np.random.default_rng(seed)
        x = incumbent if incumbent is not None else model.min_usage_solution()
        if not model.fits(x):
            x = model.min_usage_solution()
            if not model.fits(x):
                return Result(Status.UNKNOWN)
        x = np.array(x, dtype=np.int64)
        cost, load = model.cost(x), model.load(x)
        graph = Graph(model)
        size = self.size
        stats: list = []
        while time.monotonic() + 1.5 < deadline:
            other = shared_best(report)
            if other is not None and (theirs := model.cost(other)) < cost:
                x, cost, load = other.copy(), theirs, model.load(other)
            if rng.random() < 0.5 or model.limit is None:
                free = graph.walk(rng, size)
            else:
                free = graph.window(rng, load, size)
            started = time.monotonic()
            y = improve(model, graph, x, load, free, int(rng.integers(2**31)), deadline)
            took = time.monotonic() - started
            if took >= 0.9:
                size = max(self.smallest, size * 3 // 4)
            elif took < self.quick:
                size = min(self.largest, size + max(2, size // 10))
            if DEBUG:
                stats.append((len(free), took, y is not None))
            if y is None:
                continue
            trial = x.copy()
            trial[free] = y
            new = model.cost(trial)
            if new < cost and model.fits(trial):  # (forbidden picks: priced in the cost)
                x, cost, load = trial, new, model.load(trial)
                report(x.copy())
        if DEBUG and stats:
            a = np.array(stats, dtype=float)
            print(
                f"lns: {len(a)} solves, size {a[:, 0].mean():.0f}, {a[:, 1].mean():.3f} s, "
                f"{int(a[:, 2].sum())} better",
                file=sys.stderr,
            )
        return Result(Status.FEASIBLE, x)


class Graph:
    """Per variable, in CSR form: its incident edges (and the variable at the
    other end), and its memory terms."""

    def __init__(self, model: Model) -> None:
        self.model = model
        ends = np.concatenate([model.edge_u, model.edge_v])
        order = np.argsort(ends, kind="stable")
        self.adj_off = offsets(np.bincount(ends, minlength=model.nv))
        self.adj_edge = np.concatenate([np.arange(model.m)] * 2)[order]
        self.adj_other = np.concatenate([model.edge_v, model.edge_u])[order]
        order = np.argsort(model.term_var, kind="stable")
        self.term_off = offsets(np.bincount(model.term_var, minlength=model.nv))
        self.terms = order
        self.term_max = np.maximum.reduceat(model.term_usage, model.term_off[:-1])
        self._text: dict[int, str] = {}

    def terms_of(self, free: np.ndarray) -> np.ndarray:
        """The memory terms of the variables ``free``."""
        parts = [self.terms[self.term_off[v] : self.term_off[v + 1]] for v in free]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def term_text(self, k: int) -> str:
        """Term ``k``'s part of a toulbar2 knapsack (see toulbar2.knapsack_params)."""
        text = self._text.get(k)
        if text is None:
            text = self._text[k] = toulbar2.knapsack_params(0, [self.model.usage_of(k)])[2:]
        return text

    def walk(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Up to ``size`` variables reached breadth-first over the edges from a
        random one (neighbours in random order; a new random root when the
        component runs out)."""
        nv = self.model.nv
        seen = np.zeros(nv, dtype=bool)
        picked: list[int] = []
        while len(picked) < min(size, nv):
            root = int(rng.integers(nv))
            if seen[root]:
                continue
            seen[root] = True
            queue = [root]
            while queue and len(picked) < size:
                v = queue.pop(0)
                picked.append(v)
                nb = self.adj_other[self.adj_off[v] : self.adj_off[v + 1]]
                nb = nb[~seen[nb]]
                seen[nb] = True
                queue.extend(rng.permutation(nb).tolist())
        return np.array(sorted(picked), dtype=np.int64)

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


def improve(
    model: Model,
    graph: Graph,
    x: np.ndarray,
    load: np.ndarray,
    free: np.ndarray,
    seed: int,
    deadline: float,
) -> np.ndarray | None:
    """A strictly cheaper assignment of ``free`` (the rest fixed as in ``x``)
    that fits in memory, or None if toulbar2 finds none (each solve stops
    after a CPU second; none starts within a second of ``deadline``)."""
    import pytoulbar2
    from pytoulbar2.pytb2 import Contradiction

    index = np.full(model.nv, -1, dtype=np.int64)
    index[free] = np.arange(len(free))
    unary: list[np.ndarray] = [model.unary_of(int(v)).astype(object) for v in free]
    binary: list[tuple[int, int, np.ndarray]] = []
    for i, v in enumerate(free):
        for e, w in zip(
            graph.adj_edge[graph.adj_off[v] : graph.adj_off[v + 1]],
            graph.adj_other[graph.adj_off[v] : graph.adj_off[v + 1]],
            strict=True,
        ):
            table = model.table(int(e))
            first = model.edge_u[e] == v
            if index[w] < 0:  # fixed neighbour: a row (or column) joins the unary costs
                unary[i] = unary[i] + (table[:, x[w]] if first else table[x[w], :]).astype(object)
            elif first:
                binary.append((i, int(index[w]), table))
    current = sum(int(unary[i][x[v]]) for i, v in enumerate(free)) + sum(
        int(t[x[free[i]], x[free[j]]]) for i, j, t in binary
    )
    if current >= FORBIDDEN:
        return None
    room = Room(model, graph, x, load, free) if model.limit is not None else None
    # Knapsacks come lazily: the tightest first, then any the answer overflows.
    rows = room.tightest(TIGHTEST) if room is not None else np.zeros(0, dtype=np.int64)
    for _ in range(LAZY_ROUNDS):
        if time.monotonic() + 1 > deadline:
            return None
        cfn = pytoulbar2.CFN(ubinit=float(current), verbose=-1, seed=seed)
        wcsp = cfn.CFN.wcsp
        try:
            for i, v in enumerate(free):
                wcsp.makeEnumeratedVariable(f"x{i}", 0, int(model.dom_size[v]) - 1)
            for i in range(len(free)):
                wcsp.postUnaryConstraint(i, toulbar2.float_costs(unary[i]), False)
            for i, j, t in binary:
                wcsp.postBinaryConstraint(i, j, toulbar2.float_costs(t.ravel()), False)
            for scope, params in room.knapsacks(rows, index) if room is not None else ():
                wcsp.postKnapsackConstraint(scope, params, False, True)
            with quiet():
                result = cfn.Solve(timeLimit=1)
        except Contradiction:
            return None
        if not result:  # none better even under fewer knapsacks: none at all
            return None
        y = np.asarray(result[0], dtype=np.int64)
        over = room.overflowed(y) if room is not None else rows[:0]
        if not len(over):
            return y
        rows = np.union1d(rows, over)
    return None


#: knapsacks posted at first (those with the least room); the rest come when
#: an answer overflows them, for at most ``LAZY_ROUNDS`` solves
TIGHTEST, LAZY_ROUNDS = 16, 4


class Room:
    """The memory the fixed variables leave to a neighbourhood: one row per
    stretch of time where the set of live free terms is constant (identical
    sets once, at their smallest room; sets that cannot overflow not at all).
    Row ``r``: the terms ``live[r]`` may use at most ``cap[r]``."""

    def __init__(self, model: Model, graph: Graph, x: np.ndarray, load: np.ndarray, free):
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
                per_var: dict[int, np.ndarray] = {}
                for k in key:
                    v, use = int(index[model.term_var[k]]), model.usage_of(int(k))
                    per_var[v] = per_var[v] + use if v in per_var else use
                yield list(per_var), toulbar2.knapsack_params(cap, list(per_var.values()))
            else:
                yield scope.tolist(), f"{-cap} " + " ".join(graph.term_text(int(k)) for k in key)


class quiet:
    """Silence file descriptor 1 (toulbar2 prints there) for a block."""

    def __enter__(self) -> None:
        self.saved = os.dup(1)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)

    def __exit__(self, *exc) -> None:
        os.dup2(self.saved, 1)
        os.close(self.saved)
