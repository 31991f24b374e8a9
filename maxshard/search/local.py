"""The local search's engine: one assignment kept memory-feasible, moved by the
compiled kernels of :mod:`.kernels` (descent, perturbation, exchange, repair).
The ``local`` backend runs it alone; ``lns``, ``lagrange``, ``rc2`` and the
dive use it to polish and repair their answers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from .. import work
from ..backend import Report
from ..model import Model
from . import kernels


class Search:
    """The state of one local search: assignment and per-point load.

    The hot loops (value costs, moves, descent, perturbation) are compiled
    kernels in :mod:`.kernels`; ``x`` and ``ld`` (a blocked
    :class:`~.kernels.Load`) are what they update in place; ``load`` is
    the exact load at every point, computed when asked.
    """

    def __init__(self, model: Model, seed: int) -> None:
        self.model = model
        self.rng = np.random.default_rng(seed)
        kernels.seed(int(self.rng.integers(2**31)))
        nv = model.nv
        self.limit = model.limit if model.limit is not None else np.iinfo(np.int64).max // 4
        self.g = kernels.graph(model, self.limit)
        self.x = np.zeros(nv, dtype=np.int64)
        self.ld = kernels.new_load(np.zeros(len(model.base), dtype=np.int64))
        # scratch space of the kernels
        width = int(model.dom_size.max()) if nv else 0
        self._cost = np.zeros(width)
        self._ok = np.zeros(width, dtype=bool)
        self._stack = np.zeros(nv, dtype=np.int64)
        self._queued = np.zeros(nv, dtype=bool)
        self._log = np.zeros(2 * (4 * nv + 16), dtype=np.int64)
        self._stamp = np.zeros(nv + 1, dtype=np.int64)
        # entries of one pass over the model in numpy (a cost, a load): counted as work
        self._pass = nv + int(model.dom_off[-1]) + len(model.edge_cost) // 8 + len(model.base)
        self._counted = 0

    def count(self, passes: int = 0) -> None:
        """Count the kernels' work since the last call, and ``passes`` numpy passes."""
        done = int(self.g.work[0])
        work.count("call", 1 + passes)
        work.count("local", done - self._counted)
        self._counted = done
        if passes:
            work.count("python", passes * self._pass)

    def reset(self, x: np.ndarray) -> bool:
        self.count(1)
        self.x = np.array(x, dtype=np.int64)
        self.ld = kernels.new_load(self.model.load(self.x))
        return self.feasible()

    @property
    def load(self) -> np.ndarray:
        return kernels.levels(self.ld)

    def peak(self) -> tuple[int, int]:
        """(point, load) of the most loaded kept point; (-1, 0) if there is none."""
        p, level = kernels.peak(self.ld)
        return int(p), int(level)

    def feasible(self) -> bool:
        p, level = self.peak()
        return p < 0 or level <= self.limit

    def _save(self) -> tuple:
        return self.x.copy(), *(a.copy() for a in self.ld)

    def _restore(self, saved: tuple) -> None:
        self.x[:] = saved[0]
        for a, b in zip(self.ld, saved[1:], strict=True):
            a[:] = b

    def options(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Cost of each value of ``v`` given its neighbours, and which values fit in memory."""
        d = kernels.options(self.g, int(v), self.x, self.ld, self._cost, self._ok)
        self.count()
        return self._cost[:d].copy(), self._ok[:d].copy()

    def repair_move(self, p: int) -> tuple[int, int]:
        """The usage-saving change at point ``p`` that the repair makes next
        (see :func:`.kernels.repair_move`); (-1, -1) if there is none."""
        v, value = kernels.repair_move(self.g, p, self.x, self.ld, self._cost, self._ok)
        self.count()
        return int(v), int(value)

    def move(self, v: int, value: int) -> None:
        kernels.move(self.g, int(v), int(value), self.x, self.ld)

    def repair(self, deadline: float, max_moves: int = 20_000) -> bool:
        """Greedy memory repair: at the most overloaded point, make the change
        that saves usage there at the smallest cost increase per unit saved,
        among the changes that overload no other point (so the total overflow
        only shrinks). True once everything fits."""
        for _ in range(max_moves):
            p, level = self.peak()
            if p < 0 or level <= self.limit:
                return True
            if work.now() > deadline:
                return False
            v, value = self.repair_move(p)
            if v < 0:
                return False  # stuck: no single change helps without harm elsewhere
            self.move(v, value)
        return False

    def descend(self, deadline: float, queue: list[int] | None = None) -> float:
        """Greedy best-improvement moves until no variable improves; returns the gain."""
        order = self.rng.permutation(self.model.nv) if queue is None else np.unique(queue)
        n = len(order)
        self._stack[:n] = order
        self._queued[:] = False
        self._queued[order] = True
        gain = 0.0
        while n and work.now() < deadline:
            step, n, _ = kernels.descend(
                self.g, self.x, self.ld, self._stack, n, self._queued, 4096,
                self._cost, self._ok, self._log, -1,
            )  # fmt: skip
            self.count()
            gain += step
        self._queued[:] = False
        return gain

    def exchanges(self, deadline: float, tries: int = 3) -> None:
        """One pass of exchange moves (:func:`.kernels.exchanges`) over the
        variables in random order, in chunks so that the deadline is kept."""
        order = self.rng.permutation(self.model.nv)
        for start in range(0, len(order), 256):
            if work.now() >= deadline:
                return
            kernels.exchanges(
                self.g, self.x, self.ld, order[start : start + 256], tries,
                self._stack, self._queued, self._cost, self._ok, self._log,
            )  # fmt: skip
            self.count()

    def iterate(
        self,
        deadline: float,
        report: Report,
        report_every: float = 0.5,
        exchange_every: float = 3.0,
        adopt: Callable[[], np.ndarray | None] | None = None,
    ) -> None:
        """Iterated local search until the deadline, with a pass of exchange
        moves first and every ``exchange_every`` seconds; reports improvements.
        Every second, ``adopt()`` may offer another worker's solution: the
        search moves there if it is cheaper than the best here.

        The perturbation kernel runs in batches of about 20 ms; after each batch
        or pass, the exact cost decides (the kernels' float sums could, with
        forbidden costs, mistake rounding for a gain: then it is undone).
        Measured on S from a solution at 1.6717e9: 60 s of perturbations alone
        reached 1.6337e9, with exchange passes 1.5934e9 (every 10 s; every 3 s,
        once passes took 0.2-0.8 s instead of about 2 s: 1.5944e9 and 1.5973e9
        at two seeds, against 1.6028e9 every 10 s).
        """
        best_cost = self.model.cost(self.x)
        saved = self._save()
        last_report = work.now()
        next_exchange = last_report if exchange_every < math.inf else math.inf  # first pass now
        pending = False
        batch = 8
        next_adopt = last_report + 1.0 if adopt else math.inf
        while (now := work.now()) < deadline:
            if now >= next_adopt:
                next_adopt = now + 1.0
                other = adopt()
                cost = math.inf if other is None else self.model.cost(other)
                if cost < best_cost and self.model.fits(other):
                    self.reset(other)
                    best_cost, pending = cost, False
                    saved = self._save()
            if now >= next_exchange:
                self.exchanges(deadline)
                next_exchange = work.now() + exchange_every
            else:
                kernels.iterate(
                    self.g, self.x, self.ld, batch, self._stack, self._queued,
                    self._cost, self._ok, self._log, self._stamp,
                )  # fmt: skip
                self.count()
                took = work.now() - now
                batch = max(1, min(batch * 2, int(batch * 0.02 / max(took, 1e-6)) + 1))
            cost = self.model.cost(self.x)
            self.count(1)
            if cost < best_cost:
                best_cost, pending = cost, True
                saved = self._save()
            elif cost > best_cost:
                self._restore(saved)
            if pending and work.now() - last_report > report_every:
                report(self.x.copy())
                pending, last_report = False, work.now()
        if pending:
            report(self.x.copy())


def warm_up() -> float:
    """Load the kernels (local search's, the diffusion bound's, TRW-S's, the dual
    ascent's multiplier LP's and presolve's compiled loops) into this process,
    compiling them if numba's cache lacks them; returns the seconds it took (0
    once loaded).

    numba caches compiled kernels on disk, so only the first call after an
    install (or a change to the kernels) compiles: measured 10-12 s, against
    0.3-0.4 s to load them once cached. A solve with a cold cache would spend
    that time in its workers, so installs and benchmarks warm up first; a run
    loads them once, before its workers fork (:meth:`LocalSearch.prepare`).
    """
    global _warm
    if _warm:
        return 0.0
    import json

    from ..ascent import Ascent  # the dual ascent's kernels (1.4 s to compile)
    from ..bound import TRWS
    from ..generate import generate
    from ..reader import parse_instance
    from ..reduce import reduce

    start = time.monotonic()
    text = json.dumps(generate(30, forbidden=0.0, tightness=0.2, seed=1))
    model = reduce(parse_instance(text.encode(), "warm-up"), passes=False)
    search = Search(model, 0)
    search.reset(model.min_usage_solution())
    search.descend(math.inf)
    search.iterate(time.monotonic() + 0.01, lambda _x: None)
    search.exchanges(math.inf)
    search.repair_move(0)
    search.move(0, int(search.x[0]))
    from .tree import Trees  # lns's tree moves

    Trees(search.g).best(search.x, np.zeros(int(model.dom_off[-1])), 0, model.nv)
    ascent = Ascent(model)
    ascent.diffusion.bound(None, None, math.inf, sweeps=1)
    ascent.step(math.inf)  # the model has memory: the multiplier LP's kernel too
    trws = TRWS(model)  # the free rounds' message passing
    trws.sweep(model.unary.astype(np.float64))
    trws.decode(model.unary.astype(np.float64))
    from ..reduce.compiled import dominated, min_through, partners, unsupported  # large models

    one = np.zeros((1, 1), dtype=np.int64)
    min_through(one, one[0], one)
    sizes, live = np.ones(1, dtype=np.int64), np.ones(1, dtype=np.bool_)
    partners(one[0], one[0], sizes, sizes, live, live, 1)
    ends, off = np.zeros(1, dtype=np.int64), np.arange(2, dtype=np.int64)
    unsupported(one[0], off, ends, ends, off, live, ends, 1)
    dominated(one[None])
    _warm = True
    return time.monotonic() - start


_warm = False  # the kernels are loaded in this process
