"""The editable form presolve works on, and what every pass shares.

:class:`Draft` holds the model being reduced as per-variable arrays (values'
unary costs, memory terms, the nodes folded into each variable and how they
follow its value) and a dict of edge tables. Passes (the other modules of this
package) change it only through its primitive edits (``restrict``, ``fold``,
``fix``, ``add_table``, ``drop_edge``, ``kill``), which keep the bookkeeping
right: which variables changed (the next round looks only at those), which
tables arc consistency must look at again, and how each original node's
strategy follows. :meth:`Draft.to_model` packs the result into flat arrays.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from ..csr import offsets, ranks, split
from ..instance import FORBIDDEN, Instance
from ..model import Elimination, Model, kept_points, saturate, table_slots
from .collapse import collapse, compiled_for, cross_tables


class Infeasible(Exception):
    """No assignment satisfies the memory limit."""


class NoCleanSolution(Exception):
    """Every assignment picks a forbidden cost."""


class Draft:
    """Editable model: lists of per-variable arrays and a dict of edge tables."""

    def __init__(self, inst: Instance, clean: bool = False) -> None:
        n = inst.n
        # Variables whose costs, tables or domains changed: the consistency and
        # merging passes look only at these (and their edges) in the next round.
        self.dirty: set[int] = set(range(n))
        # Variables changed since their last dominance test.
        self.unchecked: set[int] = set(range(n))
        self.active: set[int] = set()
        self.round_edges: list[tuple[int, int]] | None = None
        # Variables whose forbidden supports may have changed since the last
        # arc-consistency sweep: new or merged tables, shrunk neighbours.
        self.ac_queue: set[tuple[int, int]] = set()
        self.ac_unary: set[int] = set()
        self.building = False  # true while the first tables go in (no merges expected)
        self.forbidden_cost = FORBIDDEN
        # presolve's largest loops run compiled (:mod:`.compiled`) on a model this large
        self.compiled = compiled_for(inst)
        self.alive = np.ones(n, dtype=bool)
        self.nbrs: list[set[int]] = [set() for _ in range(n)]
        self.tables: dict[tuple[int, int], np.ndarray] = {}
        self.offset = 0
        self.node_fixed = np.full(n, -1, dtype=np.int64)
        self.eliminations: list[Elimination] = []
        usage, self.limit, self.exact_memory = memory_units(inst)
        # without a limit memory never binds: no points, no terms
        self.point_time = kept_points(inst) if self.limit is not None else inst.lo[:0]
        self.base = np.zeros(len(self.point_time), dtype=np.int64)
        self.terms: list[list[tuple[int, int, np.ndarray]]] = [[] for _ in range(n)]
        if clean:
            self._start_collapsed(inst, usage)
        else:
            self._start_plain(inst, usage)

    def _start_plain(self, inst: Instance, usage: np.ndarray) -> None:
        """One variable per node, every strategy a value."""
        n, off = inst.n, inst.strat_off
        # Tables start as views into one saturated copy; edits always replace
        # an array, never write into it.
        cost, edge_cost = _saturated(inst.cost), _saturated(inst.edge_cost)
        self.forbidden_cost = lexicographic_cost(inst)
        if self.forbidden_cost < FORBIDDEN:  # see lexicographic_cost
            cost = np.where(cost >= FORBIDDEN, self.forbidden_cost, cost)
            edge_cost = np.where(edge_cost >= FORBIDDEN, self.forbidden_cost, edge_cost)
        self.unary = [cost[off[i] : off[i + 1]] for i in range(n)]
        self.building = True
        ncols = np.diff(off)[inst.edge_v].tolist()
        starts = inst.edge_off.tolist()
        edges = zip(inst.edge_u.tolist(), inst.edge_v.tolist(), strict=True)
        for e, (u, v) in enumerate(edges):
            t = edge_cost[starts[e] : starts[e + 1]].reshape(-1, ncols[e])
            if u < v and (u, v) not in self.tables:  # the common case, kept fast
                self.tables[(u, v)] = t
                self.nbrs[u].add(v)
                self.nbrs[v].add(u)
            else:
                self.add_table(u, v, t)
        self.building = False
        lo = np.searchsorted(self.point_time, inst.lo)
        hi = np.searchsorted(self.point_time, inst.hi)
        for i in np.flatnonzero(lo < hi):
            self.terms[i].append((int(lo[i]), int(hi[i]), usage[off[i] : off[i + 1]].copy()))
        self.nodes_of: list[list[int]] = [[i] for i in range(n)]
        identity = {int(d): np.arange(d) for d in np.unique(np.diff(off))}  # shared: read-only
        self.node_map: list[np.ndarray | None] = [identity[d] for d in np.diff(off).tolist()]
        self.ac_queue, self.ac_unary = set(self.tables), set(range(n))

    def _start_collapsed(self, inst: Instance, usage: np.ndarray) -> None:
        """Values without forbidden costs (arc consistency over all tables at once),
        then one variable per tree of functional edges (:mod:`.collapse`)."""
        alive = forbidden_free_values(inst)
        off = inst.strat_off
        dead = np.flatnonzero(np.logical_or.reduceat(alive, off[:-1]) == 0)
        if len(dead):
            raise NoCleanSolution(f"node {dead[0]} has no value without a forbidden cost")
        forest = collapse(inst, alive)
        root = forest.root
        roots = np.flatnonzero(root == np.arange(inst.n))
        self.alive[:] = False
        self.alive[roots] = True
        self.unary = [forest.unary[:0]] * inst.n
        for r in roots.tolist():
            self.unary[r] = forest.unary_of(r)
        self.node_map = split(forest.strategy, forest.map_off)
        self.nodes_of = [[] for _ in range(inst.n)]
        for i, r in enumerate(root.tolist()):
            self.nodes_of[r].append(i)
        for (u, v), t in cross_tables(inst, forest).items():
            self.tables[(u, v)] = t
            self.nbrs[u].add(v)
            self.nbrs[v].add(u)
        lo = np.searchsorted(self.point_time, inst.lo)
        hi = np.searchsorted(self.point_time, inst.hi)
        live = np.flatnonzero(lo < hi)
        sizes = np.diff(forest.map_off)[live]
        picked = (
            np.repeat(off[live], sizes)
            + forest.strategy[np.repeat(forest.map_off[live], sizes) + ranks(sizes)]
        )
        uses = split(usage[picked], offsets(sizes))
        for i, a, b, use in zip(
            live.tolist(), lo[live].tolist(), hi[live].tolist(), uses, strict=True
        ):
            self.terms[int(root[i])].append((a, b, use))
        self.dirty = set(roots.tolist())
        self.unchecked = set(roots.tolist())
        self.ac_queue, self.ac_unary = set(self.tables), set(roots.tolist())

    # --- primitive edits -------------------------------------------------
    def _touch(self, *vs: int) -> None:
        self.dirty.update(vs)
        self.unchecked.update(vs)

    def table(self, u: int, v: int) -> np.ndarray:
        """Table of edge (u, v) with rows indexed by u's values."""
        return self.tables[(u, v)] if u < v else self.tables[(v, u)].T

    def add_table(self, u: int, v: int, t: np.ndarray) -> None:
        if u == v:
            self.unary[u] = saturate(self.unary[u] + np.diagonal(t))
            self.ac_unary.add(u)
            return
        if u > v:
            u, v, t = v, u, t.T
        key = (u, v)
        self._touch(u, v)
        old = self.tables.get(key)
        if old is not None or not self.building:
            self.ac_queue.add(key)
        # arrays are never written in place, so a (transposed) view may be kept
        self.tables[key] = t if old is None else saturate(old + t)
        self.nbrs[u].add(v)
        self.nbrs[v].add(u)

    def drop_edge(self, u: int, v: int) -> None:
        del self.tables[(min(u, v), max(u, v))]
        self.nbrs[u].discard(v)
        self.nbrs[v].discard(u)

    def restrict(self, v: int, keep: np.ndarray) -> None:
        """Keep only the values of ``v`` where ``keep`` is true."""
        self._touch(v, *self.nbrs[v])
        self.ac_queue.update((min(v, w), max(v, w)) for w in self.nbrs[v])
        self.unary[v] = self.unary[v][keep]
        for w in self.nbrs[v]:
            key = (min(v, w), max(v, w))
            self.tables[key] = self.tables[key][keep] if v < w else self.tables[key][:, keep]
        self.terms[v] = [(lo, hi, u[keep]) for lo, hi, u in self.terms[v]]
        for i in self.nodes_of[v]:
            self.node_map[i] = self.node_map[i][keep]

    def fold(self, v: int, u: int, f: np.ndarray) -> None:
        """Remove ``v``, whose value is ``f[value of u]``, folding it into ``u``."""
        self._touch(u)
        self.unary[u] = saturate(self.unary[u] + self.unary[v][f])
        if self.unary[u].max() >= FORBIDDEN:
            self.ac_unary.add(u)
        for w in self.nbrs[v]:
            t = self.tables.pop((v, w)) if v < w else self.tables.pop((w, v)).T
            self.nbrs[w].discard(v)
            self.add_table(u, w, t[f])  # rows: values of u
        self.nbrs[v] = set()
        self.terms[u].extend((lo, hi, use[f]) for lo, hi, use in self.terms[v])
        for i in self.nodes_of[v]:
            self.node_map[i] = self.node_map[i][f]
        self.nodes_of[u].extend(self.nodes_of[v])
        self.kill(v)

    def fix(self, v: int) -> None:
        """Remove single-value variable ``v``: its costs become constants."""
        self.offset += int(self.unary[v][0])
        self._touch(*self.nbrs[v])
        self.ac_unary.update(self.nbrs[v])
        for w in list(self.nbrs[v]):
            row = self.table(v, w)[0]
            self.drop_edge(v, w)
            self.unary[w] = saturate(self.unary[w] + row)
        for lo, hi, use in self.terms[v]:
            self.base[lo:hi] += use[0]
        for i in self.nodes_of[v]:
            self.node_fixed[i] = self.node_map[i][0]
            self.node_map[i] = None
        self.kill(v)

    def kill(self, v: int) -> None:
        self.alive[v] = False
        self.terms[v] = []
        self.nodes_of[v] = []
        self.unary[v] = self.unary[v][:0]

    def live_vars(self) -> list[int]:
        return np.flatnonzero(self.alive).tolist()

    def touched(self) -> list[int]:
        """Live variables changed in the previous round or so far in this one."""
        return [v for v in self.active | self.dirty if self.alive[v]]

    def touched_edges(self) -> list[tuple[int, int]]:
        """Edges at variables touched in the previous round, listed once per round
        (edges made during the round are looked at in the next one)."""
        if self.round_edges is None:
            keys = {(min(v, w), max(v, w)) for v in self.touched() for w in self.nbrs[v]}
            self.round_edges = sorted(keys)
        return self.round_edges

    def holding_forbidden(self, keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The keys among ``keys`` whose tables hold a forbidden entry, found by one
        reduction over all of them (most tables hold none: on N and U not one)."""
        most = largest([self.tables[k].ravel() for k in keys])
        return [keys[i] for i in np.flatnonzero(most >= FORBIDDEN).tolist()]

    def next_round(self) -> None:
        self.active, self.dirty = self.dirty, set()
        self.round_edges = None

    def flat_terms(self) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All memory terms as arrays: each one's variable, its range, and the
        usages concatenated (CSR), in the order of the variables' term lists."""
        live = self.live_vars()
        lists = [self.terms[v] for v in live]
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(live))
        terms = list(chain.from_iterable(lists))
        if not terms:
            empty = np.zeros(0, dtype=np.int64)
            return [], empty, empty, np.zeros(1, dtype=np.int64), empty
        owners = np.repeat(np.array(live, dtype=np.int64), counts).tolist()
        lo, hi, uses = zip(*terms, strict=True)
        sizes = np.fromiter(map(len, uses), dtype=np.int64, count=len(uses))
        return (
            owners,
            np.array(lo, dtype=np.int64),
            np.array(hi, dtype=np.int64),
            offsets(sizes),
            np.concatenate(uses),
        )

    # --- packing -----------------------------------------------------------
    def stats(self) -> dict[str, int]:
        live = self.live_vars()
        return {
            "variables": len(live),
            "edges": len(self.tables),
            "values": sum(len(self.unary[v]) for v in live),
            "table entries": sum(t.size for t in self.tables.values()),
            "time points": len(self.base),
            "memory terms": sum(len(self.terms[v]) for v in live),
        }

    def to_model(self) -> Model:
        live = self.live_vars()
        index = np.full(len(self.alive), -1, dtype=np.int64)
        index[live] = np.arange(len(live))
        dom = np.array([len(self.unary[v]) for v in live], dtype=np.int64)
        keys = sorted(self.tables, key=lambda k: (index[k[0]], index[k[1]]))
        tables = [self.tables[k] for k in keys]
        terms = [(index[v], lo, hi, use) for v in live for lo, hi, use in profile(self.terms[v])]
        n = len(self.node_fixed)
        node_var = np.full(n, -1, dtype=np.int64)
        maps = []
        for v in live:
            node_var[self.nodes_of[v]] = index[v]
        for i in range(n):
            maps.append(self.node_map[i] if node_var[i] >= 0 else np.zeros(0, dtype=np.int64))
        return Model(
            dom_off=offsets(dom),
            unary=_concat([self.unary[v] for v in live]),
            edge_u=np.array([index[k[0]] for k in keys], dtype=np.int64),
            edge_v=np.array([index[k[1]] for k in keys], dtype=np.int64),
            edge_off=offsets(np.array([t.size for t in tables], dtype=np.int64)),
            edge_cost=_concat([t.ravel() for t in tables]),
            point_time=self.point_time,
            base=self.base.copy(),
            limit=self.limit,
            term_var=np.array([t[0] for t in terms], dtype=np.int64),
            term_lo=np.array([t[1] for t in terms], dtype=np.int64),
            term_hi=np.array([t[2] for t in terms], dtype=np.int64),
            term_off=offsets(np.array([len(t[3]) for t in terms], dtype=np.int64)),
            term_usage=_concat([t[3] for t in terms]),
            offset=self.offset,
            node_var=node_var,
            node_fixed=self.node_fixed.copy(),
            map_off=offsets(np.array([len(a) for a in maps], dtype=np.int64)),
            node_map=_concat(maps),
            n_nodes=len(self.alive),
            eliminations=list(self.eliminations),
            exact_memory=self.exact_memory,
            forbidden_cost=self.forbidden_cost,
        )


#: Largest total usage the model may reach at a point: sums stay exact in int64
#: and in the doubles that HiGHS and toulbar2 take.
SAFE_LOAD = 2**52


def memory_units(inst: Instance) -> tuple[np.ndarray, int | None, bool]:
    """Usages and limit for the model, and whether they are exact.

    Contest values may be any 64-bit integer. A usage above the limit can never
    be live, so it is clipped to ``limit + 1`` (still over). If the largest
    possible load at some time could then still exceed :data:`SAFE_LOAD`,
    usages are divided by a power of two rounding up, and the limit rounding
    down: every model solution still fits the real limit, but the model is no
    longer exact (its optimum and bounds say nothing about the instance's).
    On the shared benchmarks every limit is below 2**38: always exact.
    """
    limit = inst.usage_limit
    if limit is None:
        return inst.usage, None, True
    usage = np.minimum(inst.usage, limit + 1) if limit < 2**63 - 1 else inst.usage
    live = inst.lo < inst.hi
    peak = np.maximum.reduceat(usage, inst.strat_off[:-1])[live].astype(np.float64)
    times = np.concatenate([inst.lo[live], inst.hi[live]])
    steps = np.concatenate([peak, -peak])
    order = np.lexsort((steps, times))  # at equal times the ends (negative) come first
    worst = float(np.cumsum(steps[order]).max()) if len(steps) else 0.0
    if worst < SAFE_LOAD:
        return usage, limit, True
    shift = int(np.ceil(np.log2(worst / SAFE_LOAD))) + 1
    scaled = (usage >> shift) + ((usage & ((1 << shift) - 1)) != 0)
    return scaled, limit >> shift, False


def forbidden_free_values(inst: Instance) -> np.ndarray:
    """Arc consistency on forbidden costs, vectorised over table entries.

    Returns a mask over all strategies: false where a strategy has a forbidden
    cost or, on some edge, no allowed partner among the other node's remaining
    strategies. Only a table with a forbidden entry, or at a node with no
    value left, can remove a value; the first sweep looks at all such tables
    at once, each later one only at those around a value the sweep before
    removed (A: 4.2 million entries, then a few thousand; three sweeps).
    """
    alive = inst.cost < FORBIDDEN
    if not inst.m:
        return alive
    allowed = inst.edge_cost < FORBIDDEN
    lengths = np.diff(inst.edge_off)
    held = np.add.reduceat(allowed, inst.edge_off[:-1], dtype=np.int64) < lengths
    node_of = np.repeat(np.arange(inst.n), inst.n_strategies)
    around = np.ones(inst.n, dtype=bool)  # the nodes whose values changed
    u, v = inst.edge_u, inst.edge_v
    compiled = compiled_for(inst)
    while True:
        empty = ~np.logical_or.reduceat(alive, inst.strat_off[:-1])
        edges = np.flatnonzero((held | empty[u] | empty[v]) & (around[u] | around[v]))
        if not len(edges):
            return alive
        dead = _unsupported(inst, edges, alive, allowed, compiled)
        dead = dead[alive[dead]]
        if not len(dead):
            return alive
        alive[dead] = False
        around[:] = False
        around[node_of[dead]] = True


def _unsupported(
    inst: Instance, edges: np.ndarray, alive: np.ndarray, allowed: np.ndarray, compiled: bool
) -> np.ndarray:
    """The values with, on one of ``edges``, no ``allowed`` entry with an
    ``alive`` value of the other end (some more than once, dead ones too)."""
    if compiled:  # one pass over the entries, no slot arrays
        from .compiled import unsupported

        found = (inst.edge_cost, inst.edge_off, inst.edge_u, inst.edge_v, inst.strat_off)
        return np.flatnonzero(unsupported(*found, alive, edges, FORBIDDEN))
    chosen = np.zeros(inst.m, dtype=bool)
    chosen[edges] = True
    ok = allowed[np.repeat(chosen, np.diff(inst.edge_off))]
    slots = table_slots(inst.strat_off, inst.edge_u[edges], inst.edge_v[edges], len(ok))
    row_val, col_val = slots.row_val, slots.col_val
    ok &= alive[row_val][slots.entry_row] & alive[col_val][slots.entry_col]
    row_ok = np.logical_or.reduceat(ok, slots.row_start)
    col_ok = np.zeros(len(col_val), dtype=bool)
    col_ok[slots.entry_col[ok]] = True
    return np.concatenate([row_val[~row_ok], col_val[~col_ok]])


def lexicographic_cost(inst: Instance) -> int:
    """What a forbidden pick costs in a model where one cannot be avoided.

    The contest's cost of a solution with ``k`` forbidden picks is ``k * 10**18``
    plus the rest, so its optimum has the fewest forbidden picks, then the least
    rest. Priced at ``M``, one more than the largest possible rest, a forbidden
    pick keeps that order exactly, and, while every sum stays below 2**53, so do
    the doubles that toulbar2 and HiGHS take: the exact backends then return the
    contest's optimum. Otherwise (huge instances) forbidden picks stay saturated
    at 10**18: still avoided first, but the rest is no longer ranked exactly.
    """
    from ..evaluate import exact_sum

    def most(values: np.ndarray, off: np.ndarray) -> np.ndarray:
        clean = np.where(values < FORBIDDEN, values, 0)
        return np.maximum.reduceat(clean, off[:-1]) if len(values) else clean[:0]

    m = 1 + exact_sum(most(inst.cost, inst.strat_off))
    if inst.m:
        m += exact_sum(most(inst.edge_cost, inst.edge_off))
    return m if m * (inst.n + inst.m + 1) < 2**53 else FORBIDDEN


def _saturated(a: np.ndarray) -> np.ndarray:
    """``saturate(a)``, without the copy when nothing is above the sentinel (the norm)."""
    return a if not len(a) or a.max() <= FORBIDDEN else saturate(a)


def largest(arrays: list[np.ndarray]) -> np.ndarray:
    """The largest entry of each of ``arrays`` (none empty), by one reduction."""
    if not arrays:
        return np.zeros(0, dtype=np.int64)
    sizes = np.array([len(a) for a in arrays], dtype=np.int64)
    return np.maximum.reduceat(np.concatenate(arrays), offsets(sizes)[:-1])


def profile(terms: list[tuple[int, int, np.ndarray]]) -> list[tuple[int, int, np.ndarray]]:
    """One variable's terms as non-overlapping ranges, so each point counts a value once."""
    if len(terms) < 2 or all(a[1] <= b[0] for a, b in zip(terms, terms[1:], strict=False)):
        return terms  # already sorted and disjoint
    cuts = sorted({c for lo, hi, _ in terms for c in (lo, hi)})
    pos = {c: i for i, c in enumerate(cuts)}
    diff = np.zeros((len(cuts), len(terms[0][2])), dtype=np.int64)
    for lo, hi, use in terms:
        diff[pos[lo]] += use
        diff[pos[hi]] -= use
    level = np.cumsum(diff, axis=0)
    used = level.any(axis=1).tolist()
    same = [False] + (level[1:] == level[:-1]).all(axis=1).tolist()  # as the stretch before
    out: list[tuple[int, int, np.ndarray]] = []
    for i in range(len(cuts) - 1):
        if not used[i]:
            continue
        if out and out[-1][1] == cuts[i] and same[i]:
            out[-1] = (out[-1][0], cuts[i + 1], level[i])
        else:
            out.append((cuts[i], cuts[i + 1], level[i]))
    return out


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, dtype=np.int64)
