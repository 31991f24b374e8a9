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
  (:mod:`maxshard.search.tree`), in a fraction of a toulbar2 solve's time.

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
from ..backend import Capabilities, Improver, Report, Result, Status, context
from ..model import (
    Model,
    penalties,
    term_penalties,
)
from ..search import Searching
from ..search.local import Search
from ..search.multipliers import whole
from ..search.neighbourhood import TAIL, Adjacency, improve, priced, tree_priced
from ..search.tree import Trees

#: MAXSHARD_DEBUG=1 prints per kind of move its count, mean size and time, successes and gains.
DEBUG = bool(os.environ.get("MAXSHARD_DEBUG"))


class LNS(Searching, Improver):
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
    #: share of the moves that price memory instead of posting it (where memory binds) (history:
    #: *Tuning notes*, lns priced_share)
    priced_share = 0.95
    #: variables freed by a priced move: log-uniform within a factor 2 of this (history: *Tuning
    #: notes*, lns priced_size)
    priced_size = 400
    #: a priced move may price memory with a Lagrangian loop's multipliers times ``2**u``, ``u``
    #: uniform within this spread (:class:`Choice` picks that or :class:`Price`) (history: *Tuning
    #: notes*, lns multiplier_spread)
    multiplier_spread = 0.75

    #: share of the priced moves that free an induced tree, solved by dynamic programming
    #: (:mod:`maxshard.search.tree`), instead of a walk for toulbar2 (history: *Tuning notes*, lns
    #: tree_share)
    tree_share = 0.5
    #: variables of a tree move: log-uniform within a factor 2 of this (history: *Tuning notes*, lns
    #: tree_size)
    tree_size = 2000

    def improve(
        self, model: Model, x: np.ndarray, deadline: float, report: Report, seed: int
    ) -> Result:
        rng = np.random.default_rng(seed)
        cost, load = model.cost(x), model.load(x)
        graph = Adjacency(model)
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
                free, trial, step, way = self._priced_move(
                    model, graph, search, trees if tree else None, price, choice, by_lam,
                    rng, x, load, deadline,
                )  # fmt: skip
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
            _print_stats(stats, price, choice)
        return Result(Status.FEASIBLE, x)

    def _priced_move(
        self, model: Model, graph: Adjacency, search: Search, trees: Trees | None, price: Price,
        choice: Choice | None, by_lam: np.ndarray | None, rng: np.random.Generator,
        x: np.ndarray, load: np.ndarray, deadline: float,
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]:  # fmt: skip
        """A move with memory priced, not posted: an induced tree (``trees``
        given) or a walk, priced by the own :class:`Price` or by the multipliers
        (``choice`` draws which). Returns (the variables freed, the repaired
        answer or None, the own price's draw or None, the way priced)."""
        size = int((self.tree_size if trees else self.priced_size) * 2 ** rng.uniform(-1, 1))
        way = choice.draw(rng) if choice is not None else Choice.OWN
        step = None
        if way == Choice.OWN:
            at, slack, step = price.draw(rng, size)
            pen = price.penalties(at, load, slack)
        else:
            spread = self.multiplier_spread
            pen = whole(by_lam * 2 ** rng.uniform(-spread, spread))
        if trees is not None:
            free, trial = tree_priced(model, graph, search, trees, x, pen, rng, size, deadline)
        else:
            free = graph.walk(rng, size)
            trial = priced(model, graph, search, x, free, pen, rng, deadline)
        return free, trial, step, way

    def _exact_move(
        self,
        model: Model,
        graph: Adjacency,
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


def _print_stats(stats: list, price: Price | None, choice: Choice | None) -> None:
    """MAXSHARD_DEBUG's summary: per kind of move its count, mean size and time,
    successes and gains; the own price's centre; the multipliers' share."""
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
