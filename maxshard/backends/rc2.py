"""Weighted MaxSAT with RC2 (python-sat): core-guided, stratified, memory by diagrams and cuts.

RC2 finds an optimum by refuting ever costlier lower bounds: each SAT call
either finds a model that falsifies no active soft clause (done) or returns an
unsatisfiable *core* of soft clauses, at least one of which must be falsified;
the core's least weight is then paid and the core relaxed with a totalizer.

Encoding of the reduced model:

* a Boolean ``b[v,k]`` per value; exactly one per variable (hard: at least one,
  and pairwise or sequential-counter at most one);
* costs first *reparametrised*: each table's row minima move into the first
  end's unary costs, then its column minima into the second's, and each
  variable's least unary cost into a constant. No assignment changes cost,
  but most table entries become 0 and need no clause, and the costs that are
  left sit on single literals, where cores find them soonest;
* unary cost ``c > 0``: soft clause ``(-b[v,k])`` of weight ``c``; a table
  entry ``c > 0`` of ``(a, b)``: soft ``(-b[u,a] | -b[v,b])``; forbidden
  values and pairs: the same clauses, hard.

*Stratification* (RC2Stratified, Boolean lexicographic levels by weight)
solves the heaviest costs first; each level's model is a complete assignment,
reported at once as an anytime solution (repaired greedily when it overflows
memory). *Hardening*: a soft clause heavier than the gap between the upper
bound and the current lower bound must hold in any better solution, so it
becomes hard. The upper bound is the cheapest solution that *fits* (the
incumbent, a level's model once repaired): a level's own model may overflow
memory, so its cost bounds nothing (see ``_Stratified.finish_level``). Each
core raises the lower bound; it is reported as it rises.

Memory is encoded twice. Up front, each kept point where memory can overflow
gets a *decision diagram* of its knapsack (one layer per live variable, each
value an edge adding its usage over the variable's least there; nodes merged by
the interval of room they stand for, after Abío et al. 2011) as hard clauses
``node & value -> child``, the root asserted. Exact diagrams are too large on
real models (a 300-node cut of G: 7 of its 9 binding points past 20,000 nodes),
so weights and room are divided by a power of two ``q`` and floored until the
diagram keeps :data:`DIAGRAM_NODES` nodes: ``sum floor(w/q) <= floor(room/q)``
follows from ``sum w <= room``, so this only relaxes memory. Then, lazily,
*cover cuts* make it exact: when the optimum of the clauses so far overflows at
a kept point, take the live terms there by decreasing current usage until they
alone exceed the room (every other term can drop to its least usage, 0 after
presolve); in any fitting assignment one of them must use less than now. One
such clause per overloaded point is added, and RC2 resumes incrementally. Each
cut removes only assignments that do not fit, so the first optimum that fits is
optimal, and every optimum before it is a lower bound.

Measured (this machine, one run each): the 300-node cut of G (``generate
--from G --nodes 300 --seed 0``: 136 variables, 1,027 values after presolve;
memory-free optimum 1,023,224, optimum 1,039,337) is proved in 3.0 s with the
diagrams; with cover cuts alone rc2 ended at a bound of 1,029,736 after 30 s
(about 400 cores), 1,032,276 after 60 s even with the optimum as incumbent, and
other RC2 settings did no better (no trimming 1,028,788, no exhaustion
1,028,688, Glucose 4 1,030,184, minz 1,027,358, BLO basic 1,026,430, full
1,029,765). The price is Python time building them: G is proved in 8.1 s
(2.0-2.2 s with cuts alone; 40 binding points); building them may take a
tenth of the time left (:data:`DIAGRAM_SHARE`), the points left after get
none. Cuts of 300 nodes from A and S are proved in 0.1 s. BLO ``cluster``
levels; ``div`` levels finished no level on G within 120 s before the
hardening fix and ``minz`` slowed a cut of G from 0.9 s to 50 s, so both are
off. Core exhaustion and trimming (5 rounds) are on.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

import numpy as np
from pysat.card import CardEnc, EncType
from pysat.examples.rc2 import RC2Stratified
from pysat.formula import WCNF, IDPool

from ..backend import Capabilities, Report, Result, Status
from ..instance import FORBIDDEN
from ..knapsack import binding_knapsacks
from ..model import Model, reparametrise, segment_argmin


class RC2:
    name = "rc2"
    capabilities = Capabilities(exact=True, anytime=True, memory=True, lower_bound=True)

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        now = time.monotonic()
        enc = Encoding(model, now + DIAGRAM_SHARE * (deadline - now))
        best: list = [None, None]  # cost, solution
        solver: _Stratified | None = None

        def offer(x: np.ndarray) -> None:
            if not model.fits(x):
                x = _repaired(model, x, deadline)
                if x is None:
                    return
            cost = model.cost(x)
            if best[0] is None or cost < best[0]:
                best[0], best[1] = cost, x
                report(x)
                if solver is not None:  # a fitting solution: a true upper bound
                    solver.ubnd = min(solver.ubnd, cost - enc.constant)

        if incumbent is not None and model.fits(incumbent):
            best[0], best[1] = model.cost(incumbent), incumbent
        solver = _Stratified(enc, offer, report)
        if best[0] is not None:  # harden against the incumbent from the start
            solver.ubnd = min(solver.ubnd, best[0] - enc.constant)
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), solver.interrupt)
        timer.start()
        try:
            while True:
                try:
                    assignment = solver.compute(expect_interrupt=True)
                except TypeError:
                    # pysat's core trimming calls the oracle without expecting an
                    # interrupt and fails on the missing core when one lands there
                    if time.monotonic() < deadline - 0.1:  # not the deadline's interrupt
                        raise
                    assignment = None
                if assignment is None:
                    if solver.interrupted or time.monotonic() >= deadline:
                        bound = solver.lower_bound()
                        status = Status.FEASIBLE if best[1] is not None else Status.UNKNOWN
                        return Result(status, best[1], bound)
                    # the hard clauses (exactly one, forbidden, cuts) cannot all hold:
                    # nothing better than a clean incumbent, or no clean solution fits
                    if best[1] is not None and not model.forbidden(best[1]):
                        return Result(Status.OPTIMAL, best[1], best[0])
                    return Result(Status.INFEASIBLE)
                x = enc.decode(assignment)
                cuts = cover_cuts(model, x)
                if not cuts:
                    cost = model.cost(x)
                    if best[0] is not None and best[0] <= cost:  # hardened past: incumbent
                        return Result(Status.OPTIMAL, best[1], best[0])
                    report(x)
                    return Result(Status.OPTIMAL, x, cost)
                report(lower_bound=enc.constant + solver.cost)  # optimum of a relaxation
                offer(x)
                for clause in cuts:
                    solver.add_clause([enc.lit(v, k) for v, k in clause])
        finally:
            timer.cancel()
            solver.delete()


def _extend(wcnf: WCNF, clauses: np.ndarray, costs: np.ndarray) -> None:
    """Soft clauses (rows of ``clauses``) weighted by ``costs``; hard where forbidden."""
    hard = costs >= FORBIDDEN
    if hard.any():
        wcnf.extend(clauses[hard].tolist())
    if (~hard).any():
        wcnf.extend(clauses[~hard].tolist(), weights=costs[~hard].tolist())


class Encoding:
    """The reduced model as a weighted CNF (see the module docstring)."""

    def __init__(self, model: Model, until: float = math.inf) -> None:
        self.model = model
        nval = int(model.dom_off[-1])
        unary, tables, self.constant = reparametrise(model)
        pool = IDPool(start_from=nval + 1)
        wcnf = WCNF()
        for v in range(model.nv):
            lits = list(range(int(model.dom_off[v]) + 1, int(model.dom_off[v + 1]) + 1))
            wcnf.append(lits)  # at least one
            if len(lits) > 1:
                how = EncType.pairwise if len(lits) <= 6 else EncType.seqcounter
                for clause in CardEnc.atmost(lits, 1, vpool=pool, encoding=how).clauses:
                    wcnf.append(clause)
        # unary costs and table entries, all at once: hard where forbidden
        lits = np.flatnonzero(unary)
        _extend(wcnf, -(lits + 1)[:, None], unary[lits])
        if tables:
            flat = np.concatenate([t.ravel() for t in tables])
            e = np.repeat(np.arange(model.m), [t.size for t in tables])
            k = np.flatnonzero(flat)
            e = e[k]
            pos = k - model.edge_off[e]
            ncols = model.dom_size[model.edge_v[e]]
            a = model.dom_off[model.edge_u[e]] + pos // ncols + 1
            b = model.dom_off[model.edge_v[e]] + pos % ncols + 1
            _extend(wcnf, np.column_stack([-a, -b]), flat[k])
        for clause in memory_diagrams(model, self.lit, pool, until):
            wcnf.append(clause)
        if not wcnf.soft:  # RC2Stratified needs one level: a clause that costs nothing
            wcnf.append([-pool.id("free")], weight=1)
        self.wcnf = wcnf

    def lit(self, v: int, k: int) -> int:
        return int(self.model.dom_off[v]) + k + 1

    def decode(self, assignment: list[int]) -> np.ndarray:
        nval = int(self.model.dom_off[-1])
        chosen = np.zeros(nval, dtype=np.int64)
        true = np.array([lit for lit in assignment if 0 < lit <= nval], dtype=np.int64)
        chosen[true - 1] = 1
        return segment_argmin(-chosen, self.model.dom_off)


#: Most diagram nodes per kept point; past it the weights are coarsened further.
DIAGRAM_NODES = 2_000
#: Share of the time to the deadline that building diagrams may take: they are
#: built in Python, and on a 2,000-node cut of S they took over 100 s in all.
DIAGRAM_SHARE = 0.1
_TRUE, _FALSE = -1, -2


def memory_diagrams(model: Model, lit, pool: IDPool, until: float) -> list[list[int]]:
    """Hard clauses of one decision diagram per binding kept point (see the
    module docstring): a relaxation of memory, exact where no coarsening was
    needed. ``lit(v, k)`` is the literal of value ``k`` of variable ``v``.
    Points still left at time ``until`` get none (the cover cuts still hold)."""
    clauses = []
    for variables, weights, room in _binding_knapsacks(model):
        if time.monotonic() >= until:
            break
        # start near the coarsening that fits (weights keep about 14 bits)
        q = 1 << max(0, (room >> 14).bit_length())
        while (nodes := _diagram([w // q for w in weights], room // q)) is None:
            q *= 2
        root, layers = nodes
        if root == _TRUE:
            continue
        if root == _FALSE:  # nothing fits at this point
            return [[]]
        ids = [pool.id() for _ in layers]
        clauses.append([ids[root]])
        for node, (layer, children) in enumerate(layers):
            v = variables[layer]
            for k, child in enumerate(children):
                if child != _TRUE:  # taking value k at this node leads to child
                    tail = [ids[child]] if child != _FALSE else []
                    clauses.append([-ids[node], -lit(v, k), *tail])
    return clauses


def _binding_knapsacks(model: Model) -> Iterator[tuple[list[int], list[np.ndarray], int]]:
    """Each binding point's knapsack (:func:`maxshard.knapsack.binding_knapsacks`),
    once, in order: its variables, the units each value adds over the
    variable's least there, and the room left."""
    seen: set[tuple] = set()
    for k in binding_knapsacks(model):
        variables = k.variables.tolist()
        room = k.room - sum(int(w.min()) for w in k.weights)
        weights = [w - w.min() for w in k.weights]
        key = (tuple(variables), room, tuple(w.tobytes() for w in weights))
        if key not in seen:
            seen.add(key)
            yield variables, weights, room


def _diagram(weights: list[np.ndarray], room: int) -> tuple[int, list] | None:
    """The reduced decision diagram of ``sum weights[i][x_i] <= room`` (every
    weight >= 0, each layer's least 0), built top-down with each layer's nodes
    keyed by the interval of rooms they stand for (Abío et al., "BDDs for
    pseudo-Boolean constraints - revisited", 2011). Returns the root and the
    nodes as (layer, child per value), or None past :data:`DIAGRAM_NODES`."""
    n = len(weights)
    suffix = np.zeros(n + 1, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + int(weights[i].max())
    memo: list[list[tuple[float, float, int]]] = [[] for _ in range(n)]
    nodes: list[tuple[int, list[int]]] = []

    def build(i: int, r: int) -> tuple[int, float, float]:
        if r < 0:
            return _FALSE, -np.inf, -1
        if r >= suffix[i]:
            return _TRUE, int(suffix[i]), np.inf
        for lo, hi, node in memo[i]:
            if lo <= r <= hi:
                return node, lo, hi
        if len(nodes) > DIAGRAM_NODES:
            raise OverflowError
        lo, hi, child = -np.inf, np.inf, {}
        for w in sorted(set(weights[i].tolist())):
            c, b, g = build(i + 1, r - w)
            lo, hi, child[w] = max(lo, b + w), min(hi, g + w), c
        if len(set(child.values())) == 1:  # every value leads to the same node
            node = next(iter(child.values()))
        else:
            node = len(nodes)
            nodes.append((i, [child[w] for w in weights[i].tolist()]))
        memo[i].append((lo, hi, node))
        return node, lo, hi

    try:
        return build(0, room)[0], nodes
    except OverflowError:
        return None


def cover_cuts(model: Model, x: np.ndarray) -> list[list[tuple[int, int]]]:
    """One cover cut (as (variable, value) literals) per overloaded kept point of
    ``x``, duplicates removed; empty if ``x`` fits. See the module docstring."""
    if model.limit is None or not len(model.base):
        return []
    load = model.load(x)
    least = np.minimum.reduceat(model.term_usage, model.term_off[:-1])
    now_all = model.term_usage[model.term_off[:-1] + x[model.term_var]]
    cuts: dict[tuple, list[tuple[int, int]]] = {}
    for p in np.flatnonzero(load > model.limit).tolist():
        live = np.flatnonzero((model.term_lo <= p) & (p < model.term_hi))
        extra = now_all[live] - least[live]  # what each could still give back
        room = model.limit - int(model.base[p]) - int(least[live].sum())
        cover, used = [], 0
        for j in np.argsort(-extra, kind="stable").tolist():
            cover.append(int(live[j]))
            used += int(extra[j])
            if used > room:
                break
        clause = []
        for k in cover:
            v = int(model.term_var[k])
            use = model.usage_of(k)
            clause += [(v, int(j)) for j in np.flatnonzero(use < use[x[v]])]
        key = tuple(sorted(clause))
        cuts.setdefault(key, clause)
    return list(cuts.values())


def _repaired(model: Model, x: np.ndarray, deadline: float) -> np.ndarray | None:
    """``x`` made to fit by the Lagrangian loop's greedy repair, or None."""
    from .local import Search

    search = Search(model, 0)
    search.reset(x)
    if search.repair(min(deadline, time.monotonic() + 1.0)):
        search.descend(deadline)
        return search.x.copy()
    return None


class _Stratified(RC2Stratified):
    """RC2Stratified that reports each level's model and every rise of the bound."""

    def __init__(self, enc: Encoding, offer, report: Report) -> None:
        super().__init__(enc.wcnf, solver="g3", blo="cluster", exhaust=True, trim=5)
        self.enc, self.offer, self.report_bound = enc, offer, report
        self.reported, self.last_report = -1, 0.0

    def process_core(self) -> None:
        super().process_core()
        # cores come by the hundred per second: report the rising bound twice a second
        if self.cost > self.reported and time.monotonic() - self.last_report > 0.5:
            self.reported, self.last_report = self.cost, time.monotonic()
            self.report_bound(lower_bound=self.lower_bound())

    def finish_level(self) -> None:
        """Report the level's model, then harden only against a *fitting* upper
        bound. RC2's own hardening takes the level model's cost as an upper bound,
        and hardens a clause heavier than all lighter levels together; both assume
        every model of the hard clauses is a solution. Here memory arrives later as
        cuts, so a level's model may not fit: on cuts of M and S that hardening
        excluded the optimum and RC2 "proved" costs up to 51% too high. ``ubnd``
        is kept at the cheapest fitting solution's cost (set by :meth:`RC2.solve`)."""
        model = self.oracle.get_model()
        if model is not None:
            self.offer(self.enc.decode(model))
        self.garbage = set()
        for s in self.sels + self.sums:
            if self.wght[s] > self.ubnd - self.cost:  # in every cheaper solution
                self.oracle.add_clause([s])
                self.garbage.add(s)
        self.filter_assumps()

    def lower_bound(self) -> int:
        return self.enc.constant + self.cost
