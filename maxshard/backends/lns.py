"""Large neighbourhood search: free a few hundred variables, solve them exactly.

Local search moves one variable at a time (or trades memory greedily between
a few); where a better solution needs many variables to change together it
stalls. This backend keeps every variable but a *neighbourhood* fixed and lets
toulbar2 find the best assignment of the neighbourhood, in one of two ways:

* *exact*: under the memory the fixed variables leave it (one knapsack per
  stretch of time where the free variables' live set is constant, with the
  room at its most loaded point), its initial upper bound the neighbourhood's
  current cost, so only strictly better assignments count;
* *priced*: with memory left out and paid for instead, at a price per unit of
  usage (:class:`Price`); the whole solution is then repaired greedily until it
  fits (the repair may change any variable, inside the neighbourhood or not)
  and descended around the changes. This is the move that trades memory
  between the neighbourhood and the rest of the model: on S, one connected
  change of 464 variables, repaired, takes a solution from 1.591e9 to 1.533e9,
  and its variables alone overflow memory, so no exact neighbourhood that
  holds them can make it. Half the priced moves free an induced tree of up
  to a few thousand variables instead and solve it by dynamic programming
  (:mod:`.tree`), in a fraction of a toulbar2 solve's time.

The loop:

1. start from the incumbent (or the minimum-usage assignment) and adopt a
   better solution of another worker whenever one appears;
2. pick a neighbourhood: a breadth-first walk over the edges from a random
   variable, an induced tree grown from one (priced moves), or the variables
   live at one of the most loaded points;
3. solve it, priced (:attr:`LNS.priced_share` of the moves, where memory
   binds) or exact, and keep the result if it is cheaper and fits;
4. exact moves: grow the neighbourhood while toulbar2 finishes quickly, shrink
   it when it runs into its time limit; priced moves: draw the size, the
   price and how near the limit a point is priced at random around a centre
   that follows the moves that gained.

Every solution it reports fits in memory and is re-costed exactly here and by
the caller.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from .. import work
from ..backend import Capabilities, Report, Result, Status, context
from ..evaluate import exact_sum
from ..instance import FORBIDDEN
from ..knapsack import merge_terms
from ..model import (
    Model,
    grouped,
    offsets,
    penalties,
    ranks,
    saturate,
    saturating_sum,
    term_penalties,
)
from . import toulbar2
from .lagrange import whole
from .local import Search, warm_up
from .tree import Trees

#: MAXSHARD_DEBUG=1 prints per kind of move its count, mean size and time, successes and gains.
DEBUG = bool(os.environ.get("MAXSHARD_DEBUG"))


class LNS:
    name = "lns"
    capabilities = Capabilities(
        exact=False, anytime=True, memory=True, lower_bound=False, deterministic=True
    )

    #: variables freed by an exact move at the start; adapted between ``smallest`` and ``largest``
    size, smallest, largest = 30, 8, 2000
    #: an exact solve that ends within this share of its limit counts as quick: grow
    quick = 0.05
    #: one that takes this share of its one-second limit counts as slow: shrink
    slow = 0.9
    #: share of the moves that price memory instead of posting it (where memory
    #: binds). Since tree moves the exact ones gain least for their time: `lns`
    #: alone for 8 s from the multiplier loop's best, at 0.75 they took about
    #: half the time and brought 0.3-6% of the gains (MAXSHARD_DEBUG). At 0.95,
    #: seeds 0-3: N 2.014e11 on average against 2.044e11 at 0.75, U 2.248e9
    #: against 2.299e9, S 1.541e9 against 1.548e9, M alike; for 25 s (seeds
    #: 0-1) S and U gained 0.6-3%, N lost 0.2-0.4%, within its spread
    #: (history: *Fewer exact moves in `lns`*).
    priced_share = 0.95
    #: variables freed by a priced move: log-uniform within a factor 2 of this.
    #: Measured on S from the same start, 25 s: 150 found nothing, 400 reached
    #: 1.544e9, 1000 1.566e9 (U: 2.320e9, 2.293e9, 2.308e9).
    priced_size = 400
    #: where a Lagrangian loop handed its memory multipliers to the run
    #: (:attr:`~maxshard.backend.Context.multipliers`), a priced move may price
    #: memory with them, times ``2**u`` for ``u`` uniform within this spread,
    #: instead of :class:`Price`'s; :class:`Choice` decides which, move by move.
    #: Measured alone for 8-9 s from the loop's best and multipliers after its
    #: dive: S 1.5536e9 on average over seeds 0-11 against 1.5763e9 with its own
    #: price alone, M, N and U alike or better; spreads 0.35-2.5 tried (history:
    #: *`lns` prices memory with the multiplier loop's multipliers*).
    multiplier_spread = 0.75

    #: share of the priced moves that free an induced tree and solve it by
    #: dynamic programming (:mod:`.tree`) instead of freeing a walk for
    #: toulbar2. A tree move takes 7-12 ms on N with trees of 2,000 variables,
    #: a walk's 50-70 ms. ``lns`` alone for 8 s from the multiplier loop's best,
    #: seeds 0-3, two processes side by side: N 2.043e11 on average at 0.5,
    #: 2.065e11 at 0.8, 2.126e11 without; U 2.297e9 against 2.332e9; S and M
    #: alike (history: *Tree moves in `lns`*).
    tree_share = 0.5
    #: variables of a tree move: log-uniform within a factor 2 of this (N at
    #: share 0.5: 2.058e11 at 800, 2.043e11 at 2,000 and 4,000)
    tree_size = 2000

    def prepare(self) -> None:
        warm_up()
        toulbar2.load()

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
        binds = model.limit is not None and len(model.base) > 0
        search = Search(model, seed) if binds else None
        trees = Trees(search.g) if search is not None and self.tree_share > 0 else None
        price = Price(model, cost) if binds else None
        lam = context(report).multipliers if binds else None
        choice = Choice() if lam is not None and len(lam) == len(model.base) else None
        # penalties are linear in the multipliers: priced once, scaled per move
        # (S: 9 ms a move priced anew, 0.2 ms scaled)
        by_lam = penalties(model, lam) if choice is not None else None
        self._size = self.size
        stats: list = []
        # moves go on to the deadline, the last ones shorter (:data:`TAIL`):
        # a margin of a whole solve was 10-30% of a 6-30 s budget's last stage.
        # A last solve whose backtracks do not bind (toulbar2 busy between
        # them) can pass the deadline by up to its one-second limit: in a run
        # the stage's end cuts it (its reports so far are kept).
        while work.now() + TAIL < deadline:
            other = context(report).best()
            if other is not None and (theirs := model.cost(other)) < cost:
                x, cost, load = other.copy(), theirs, model.load(other)
            work.count("call", 10)  # drawing a neighbourhood (a walk in Python)
            started = work.now()
            step, way, tree = None, None, False  # the own price's draw; the way priced (see Choice)
            if search is not None and price is not None and rng.random() < self.priced_share:
                tree = trees is not None and rng.random() < self.tree_share
                size = int((self.tree_size if tree else self.priced_size) * 2 ** rng.uniform(-1, 1))
                way = choice.draw(rng) if choice is not None else Choice.OWN
                if way == Choice.OWN:
                    at, slack, step = price.draw(rng, size)
                    pen = price.penalties(at, load, slack)
                else:
                    spread = self.multiplier_spread
                    pen = whole(by_lam * 2 ** rng.uniform(-spread, spread))
                if tree:
                    assert trees is not None
                    free, trial = tree_priced(
                        model, graph, search, trees, x, pen, rng, size, deadline
                    )
                else:
                    free = graph.walk(rng, size)
                    trial = priced(model, graph, search, x, free, pen, rng, deadline)
            else:
                free, trial = self._exact_move(model, graph, rng, x, load, deadline)
            new = model.cost(trial) if trial is not None else cost
            better = new < cost and model.fits(trial)  # (forbidden picks: priced in the cost)
            if choice is not None and way is not None:
                choice.learn(way, better)
            if DEBUG:
                kind = 2 if tree else way is not None  # tree, priced, exact
                gain = cost - new if better else 0
                stats.append((kind, len(free), work.now() - started, better, gain))
            if better:
                if step is not None and price is not None:
                    price.learn(step, cost - new)
                x, cost, load = trial, new, model.load(trial)
                report(x.copy())
        if DEBUG and stats:
            a = np.array(stats, dtype=float)
            for flag, kind in ((0.0, "exact"), (1.0, "priced"), (2.0, "tree")):
                b = a[a[:, 0] == flag]
                if len(b):
                    print(
                        f"lns {kind}: {len(b)} solves, size {b[:, 1].mean():.0f}, "
                        f"{b[:, 2].mean():.3f} s, {int(b[:, 3].sum())} better, "
                        f"gained {b[:, 4].sum():.4g} in all",
                        file=sys.stderr,
                    )
            if price is not None:
                centre, slack = price.centre()
                print(f"lns price centre {centre:.4g}, slack {slack:.3g}", file=sys.stderr)
            if choice is not None:
                print(f"lns {choice}", file=sys.stderr)
        return Result(Status.FEASIBLE, x)

    def _exact_move(
        self,
        model: Model,
        graph: Graph,
        rng: np.random.Generator,
        x: np.ndarray,
        load: np.ndarray,
        deadline: float,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(the neighbourhood, x with its cheaper fitting assignment, or None);
        the neighbourhood grows after a quick solve, shrinks after a slow one."""
        size = self._size
        if rng.random() < 0.5 or model.limit is None or not len(model.base):
            free = graph.walk(rng, size)
        else:
            free = graph.window(rng, load, size)
        started = work.now()
        y = improve(model, graph, x, load, free, int(rng.integers(2**31)), deadline)
        took = work.now() - started
        if took >= self.slow:
            self._size = max(self.smallest, size * 3 // 4)
        elif took < self.quick:
            self._size = min(self.largest, size + max(2, size // 10))
        if y is None:
            return free, None
        trial = x.copy()
        trial[free] = y
        return free, trial


class Price:
    """The price per unit of memory usage of the priced moves, learned online.

    Memory is paid for only where it is scarce: at the kept points whose load
    (in the current solution) comes within ``slack`` (a share of the limit) of
    the limit. A value pays ``lam`` times its usage times the share of all
    kept points that are such points in its term's span; memory used where the
    load is far below the limit is free (with ``slack`` 1 every point counts:
    a uniform price). Too low a price and the neighbourhood takes cheap values
    that overflow, which the repair then pays dearly to undo; too high and it
    keeps what it has; a uniform price also charges a change that fills the
    idle points, which the limit does not. Each move draws ``log2 lam`` and
    ``log2 slack`` uniformly around a centre; a move that gained pulls the
    centre toward its draw, in proportion to its gain relative to the recent
    gains (a smoothed-gradient step on the expected gain). The price starts at
    twice the cost per unit of the usage limit, the slack at a quarter.

    Measured with priced moves alone, from the best solutions of the first
    stage at half the limits, one worker, 25-36 s, uniform price: the best
    fixed prices differ by model (U about 3, N 3-10, S 10-20; M barely gains
    at any), and the learned one (two seeds, 36 s) reached S 1.541-1.553e9, N
    1.988-1.989e11, U 2.268-2.302e9, as good as the best fixed price or better.
    The slack: on N, the gain from a 18 s run's answer to a 180 s run's is one
    change of 56 variables (1.1%) that overflows only at 7 of 36,023 points
    and raises the load by up to 38% of the limit at others, with 3,074 more
    variables changed around it. From the same start (the multiplier loop's
    best after 7-8 s), 10 s of this backend alone, seeds 0-5 (M, S, U 0-3):
    N 2.133e11 uniform, 2.100e11 learned from 2^-3.5, 2.116e11 from 2^-2;
    M 5.010e10 uniform, 4.995e10 learned (M's loads stay below 90% of the
    limit there: memory nearly free pays); S 1.5364e9 uniform, 1.5359e9 from
    2^-2, 1.5428e9 from 2^-5; U within its noise (2.36-2.41e9 each way). On V
    (333 variables: a priced move frees nearly all of them, and only 2 of its
    407 points are loaded above half the limit) pricing the tight points alone
    lost (3 of 6 seeds worse, none better), so a neighbourhood of most of the
    model is priced at every point.
    """

    #: log2 of the price: drawn within SPREAD of the centre; log2 of the slack:
    #: within SLACK_SPREAD of its centre, which starts at SLACK_START (at most 0)
    SPREAD, SLACK_SPREAD, SLACK_START = 1.5, 3.5, -2.0
    RATE = 0.25

    def __init__(self, model: Model, cost: int) -> None:
        self.model = model
        assert model.limit is not None
        start = math.log2(max(cost, 1) / max(model.limit, 1)) + 1
        self.at = np.array([start, self.SLACK_START])  # log2 of (price, slack)
        self.gains: list[int] = []

    def centre(self) -> tuple[float, float]:
        return 2.0 ** self.at[0], 2.0 ** min(self.at[1], 0.0)

    def draw(self, rng: np.random.Generator, size: int) -> tuple[float, float, np.ndarray]:
        """(a price, a slack, their offsets from the centre in log2 units) for a
        neighbourhood of ``size`` variables; one of most of the model is priced
        at every point (slack 1, its offset 0: nothing learned about the slack)."""
        step = rng.uniform(-1, 1, 2) * (self.SPREAD, self.SLACK_SPREAD)
        lam, slack = 2.0 ** (self.at + step)
        if 2 * size > self.model.nv:
            slack, step[1] = 1.0, 0.0
        return float(lam), min(float(slack), 1.0), step

    def learn(self, step: np.ndarray, gain: int) -> None:
        self.gains.append(gain)
        recent = float(np.mean(self.gains[-20:]))
        self.at += self.RATE * step * min(gain / recent, 4.0)
        self.at[1] = min(self.at[1], 0.0)

    def penalties(self, lam: float, load: np.ndarray, slack: float = 1.0) -> np.ndarray:
        """Per value (int64): its price at ``lam`` on the points loaded within
        ``slack`` (a share of the limit) of the limit; elsewhere memory is free."""
        model = self.model
        assert model.limit is not None
        tight = np.concatenate([[0], np.cumsum(load >= (1 - slack) * model.limit)])
        share = (tight[model.term_hi] - tight[model.term_lo]) / max(1, len(model.base))
        return whole(term_penalties(model, lam * share))


class Choice:
    """Which price a priced move takes: its own (:class:`Price`) or the
    multipliers a Lagrangian loop handed over. Each way is drawn in proportion
    to the cube of its success rate so far (moves that gained over moves
    tried, one of two counted at the start), and each at least ``floor`` of the
    time: the multipliers gained in about twice the share of their moves on S
    and a third of it on M (see :attr:`LNS.multiplier_spread`), so each model
    soon runs mostly the way that gains there."""

    OWN, MULTIPLIERS = 0, 1
    floor = 0.1

    def __init__(self) -> None:
        self.tries, self.gains = np.zeros(2), np.zeros(2)

    def draw(self, rng: np.random.Generator) -> int:
        rate = ((self.gains + 1) / (self.tries + 2)) ** 3
        share = min(1 - self.floor, max(self.floor, rate[1] / rate.sum()))
        return self.MULTIPLIERS if rng.random() < share else self.OWN

    def learn(self, way: int, gained: bool) -> None:
        self.tries[way] += 1
        self.gains[way] += gained

    def __str__(self) -> str:
        return "priced by own price / multipliers: " + " / ".join(
            f"{int(g)} of {int(t)} gained" for g, t in zip(self.gains, self.tries, strict=True)
        )


class Graph:
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
        return _segments(self.terms, self.term_off, free)

    def neighbours(self, vs: np.ndarray) -> np.ndarray:
        """The variables adjacent to any of ``vs`` (with repeats)."""
        return _segments(self.adj_other, self.adj_off, vs)

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
                at = _positions(self.adj_off, level)
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


def _segments(values: np.ndarray, off: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The CSR segments ``rows`` of ``values``, one after another."""
    return values[_positions(off, rows)]


def _positions(off: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where the CSR segments ``rows`` lie (by ``off``), one after another."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = off[rows + 1] - off[rows]
    return np.repeat(off[rows], lens) + ranks(lens)


class Neighbourhood:
    """The sub-problem of the variables ``free`` with all others fixed as in
    ``x``: each free variable's unary costs plus the rows of its tables toward
    fixed neighbours (flat, CSR by ``dom_off``; sums saturated at the forbidden
    cost, exact below it), the tables between free variables (``pair_i``,
    ``pair_j``: their places in ``free``; ``pair_edge``: the model's edge), and
    the current assignment's cost on it. Built for all of them at once: a
    neighbourhood of 400 variables is built about once per toulbar2 solve."""

    def __init__(self, model: Model, graph: Graph, x: np.ndarray, free: np.ndarray) -> None:
        self.model, self.free = model, free
        index = np.full(model.nv, -1, dtype=np.int64)
        index[free] = np.arange(len(free))
        self.index = index
        sizes = model.dom_size[free]
        self.dom_off = offsets(sizes)
        # every (free variable, incident edge) pair, in adjacency order
        at = _positions(graph.adj_off, free)
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
            np.concatenate([_segments(model.unary, model.dom_off, free), model.edge_cost[entry]]),
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
            more = _segments(extra, model.dom_off, self.free)
            unary = saturate(saturate(unary) + saturate(more))  # no int64 overflow
        toulbar2.post(cfn, self.dom_off, unary, self.pair_i, self.pair_j, *self.tables())
        return cfn

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The tables between free variables, flat (CSR offsets, entries)."""
        model, e = self.model, self.pair_edge
        lens = model.edge_off[e + 1] - model.edge_off[e]
        return offsets(lens), _segments(model.edge_cost, model.edge_off, e)


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
                cfn.CFN.wcsp.postKnapsackConstraint(scope, params, False, True)
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
    graph: Graph,
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
    graph: Graph,
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
    graph: Graph, search: Search, x: np.ndarray, trial: np.ndarray, deadline: float
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


#: toulbar2's search in a neighbourhood: depth-first (0), not its default
#: hybrid best-first (1). Measured at a tenth of the limits, the whole default
#: plan, seeds 0-2: N 1.0011 / 0.9937 / 0.9865 depth-first against 0.9906 /
#: 0.9712 / 0.9663, S 1.0005 / 0.9934 / 0.9899 against 0.9805 / 0.9843 /
#: 0.9905; M alike, U within its noise. (Until toulbar2's options were set for
#: each problem, a worker's solves turned depth-first after its first few
#: anyway: see :func:`~maxshard.backends.toulbar2.new_problem`.)
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
                variables, uses = merge_terms(model, key)
                yield index[variables].tolist(), toulbar2.knapsack_params(cap, uses)
            else:
                yield scope.tolist(), f"{-cap} " + " ".join(graph.term_text(int(k)) for k in key)
