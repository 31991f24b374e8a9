"""Presolve: shrink an instance into a :class:`~maxshard.model.Model`.

The passes work on :class:`Work`, an editable per-variable form, and run to a
fixpoint; :meth:`Work.to_model` then packs the result into flat arrays. Every
pass keeps this invariant: for every solution ``x`` of the reduced model with
no forbidden pick, ``evaluate(reconstruct(x)).cost == model.cost(x)``, and the
best clean solution of the original survives.

Passes
------
* time compression (in :func:`~maxshard.model.kept_points`): memory is checked
  only where the live set is maximal;
* parallel, reversed and self edges are merged on reading (costs add);
* ``normalize_memory``: each term's minimum usage moves into the fixed load;
* ``prune_memory``: values whose extra usage cannot fit over the fixed load;
* ``prune_forbidden``: arc consistency on forbidden (10^18) costs (the first
  sweep vectorised over all table entries: :func:`forbidden_free_values`);
* ``fold_fixed``: single-value variables become constants;
* ``fold_isolated``: a variable with no edge and no memory term takes its
  cheapest value;
* ``fold_leaves``: a variable with one neighbour and no memory term is folded
  into the neighbour, taking its best value for each of the neighbour's;
* ``eliminate_degree2``: a variable with two neighbours and no memory term is
  replaced by a table between them (recorded for reconstruction);
* ``merge_functional``: where an edge's allowed pairs make ``v`` a function of
  ``u``, ``v`` is folded into ``u`` (its costs, edges and memory terms move);
* ``fold_separable``: tables that are a sum of a row and a column term become
  unary costs;

and, once those reach a fixpoint (they cost more, and profit from it):

* ``prune_points``: a time point whose check is implied by another point's
  (inside all its memory terms, at least its fixed load) is dropped;
* ``prune_dominated``: a value no better than another value of its variable
  anywhere (cost, usage, every table row) is dropped.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

import numpy as np

from .collapse import collapse, cross_tables
from .instance import FORBIDDEN, Instance
from .model import (
    Elimination,
    Model,
    kept_points,
    offsets,
    ranks,
    saturate,
    split,
    table_slots,
)

#: Largest (left x middle x right) cost cube a degree-2 elimination builds.
ELIMINATION_WORK = 4_000_000
#: Largest pairwise comparison (values^2 x features) the dominance test makes.
DOMINANCE_WORK = 4_000_000


class Infeasible(Exception):
    """No assignment satisfies the memory limit."""


class NoCleanSolution(Exception):
    """Every assignment picks a forbidden cost."""


class Work:
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
        self._kill(v)

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
        self._kill(v)

    def _kill(self, v: int) -> None:
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

    def next_round(self) -> None:
        self.active, self.dirty = self.dirty, set()
        self.round_edges = None

    def flat_terms(self):
        """All memory terms as arrays: owner, range, and usages concatenated (CSR)."""
        owners = [(v, j) for v in self.live_vars() for j in range(len(self.terms[v]))]
        terms = [self.terms[v][j] for v, j in owners]
        lo = np.array([t[0] for t in terms], dtype=np.int64)
        hi = np.array([t[1] for t in terms], dtype=np.int64)
        off = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum([len(t[2]) for t in terms], out=off[1:])
        usage = np.concatenate([t[2] for t in terms]) if terms else np.zeros(0, np.int64)
        return owners, lo, hi, off, usage

    # --- passes ----------------------------------------------------------
    def normalize_memory(self) -> int:
        """Move each term's minimum usage into the fixed load; drop constant terms."""
        owners, lo, hi, off, usage = self.flat_terms()
        if not owners:
            return 0
        low = np.minimum.reduceat(usage, off[:-1])
        usage = usage - np.repeat(low, np.diff(off))
        constant = np.maximum.reduceat(usage, off[:-1]) == 0
        diff = np.zeros(len(self.base) + 1, dtype=np.int64)
        np.add.at(diff, lo, low)
        np.add.at(diff, hi, -low)
        self.base += np.cumsum(diff[:-1])
        changed_terms = np.flatnonzero((low > 0) | constant)
        rebuilt = {owners[k][0] for k in changed_terms}
        for v in rebuilt:
            self.terms[v] = []
        for k, (v, _) in enumerate(owners):
            if v in rebuilt and not constant[k]:
                self.terms[v].append((int(lo[k]), int(hi[k]), usage[off[k] : off[k + 1]]))
        if self.limit is not None and len(self.base) and self.base.max() > self.limit:
            t = int(self.point_time[int(self.base.argmax())])
            raise Infeasible(f"the minimum possible usage exceeds the limit at time {t}")
        return len(changed_terms)

    def prune_memory(self) -> int:
        """Drop values whose extra usage exceeds the slack over the fixed load."""
        if self.limit is None or not len(self.base):
            return 0
        owners, lo, hi, off, usage = self.flat_terms()
        if not owners:
            return 0
        slack = np.append(self.limit - self.base, 0)
        tightest = np.minimum.reduceat(slack, np.column_stack([lo, hi]).ravel())[::2]
        bad = usage > np.repeat(tightest, np.diff(off))
        if not bad.any():
            return 0
        drop: dict[int, np.ndarray] = {}
        for k in np.unique(np.searchsorted(off, np.flatnonzero(bad), side="right") - 1):
            v = owners[k][0]
            none = np.zeros(len(self.unary[v]), dtype=bool)
            drop[v] = drop.get(v, none) | bad[off[k] : off[k + 1]]
        for v, mask in drop.items():
            if mask.all():
                raise Infeasible(f"no strategy of node {self.nodes_of[v][0]} fits in memory")
            self.restrict(v, ~mask)
        return int(bad.sum())

    def prune_forbidden(self) -> int:
        """Arc consistency: drop values that force a forbidden cost.

        Only tables queued since the last sweep are looked at: new or merged
        ones and those whose other side lost values."""
        removed = 0
        unary, self.ac_unary = self.ac_unary, set()
        for v in unary:
            keep = self.unary[v] < FORBIDDEN
            if self.alive[v] and not keep.all():
                removed += self._keep(v, keep)
        while self.ac_queue:
            key = self.ac_queue.pop()
            t = self.tables.get(key)
            if t is None:
                continue
            allowed = t < FORBIDDEN
            rows, cols = allowed.any(axis=1), allowed.any(axis=0)
            if not rows.all():
                removed += self._keep(key[0], rows)
            if not cols.all():
                removed += self._keep(key[1], cols)
        return removed

    def _keep(self, v: int, keep: np.ndarray) -> int:
        if not keep.any():
            node = self.nodes_of[v][0]
            raise NoCleanSolution(f"node {node} has no value without a forbidden cost")
        self.restrict(v, keep)
        return int((~keep).sum())

    def prune_dominated(self) -> int:
        """Drop value ``b`` when another value ``a`` is no worse anywhere: unary
        cost, usage in every memory term and every entry of every incident
        table. Switching ``b`` to ``a`` then never costs more nor uses more
        memory (equal values: the first is kept)."""
        removed = 0
        queue, self.unchecked = self.unchecked, set()
        for v in queue:
            d = len(self.unary[v])
            if not self.alive[v] or d < 2:
                continue
            parts = [self.unary[v][:, None]] + [use[:, None] for _, _, use in self.terms[v]]
            parts += [self.table(v, w) for w in self.nbrs[v]]
            if d * d * sum(p.shape[1] for p in parts) > DOMINANCE_WORK:
                continue
            features = np.hstack(parts)
            no_worse = (features[:, None, :] <= features[None, :, :]).all(axis=2)  # [a, b]
            first = np.arange(d)[:, None] < np.arange(d)[None, :]
            beats = no_worse & (~no_worse.T | first)
            np.fill_diagonal(beats, False)
            dominated = beats.any(axis=0)
            if dominated.any():
                removed += int(dominated.sum())
                self.restrict(v, ~dominated)
        return removed

    def prune_points(self) -> int:
        """Drop time point ``p`` when another point ``q`` lies inside every memory
        term covering ``p`` and has at least its fixed load: the check at ``q``
        implies the one at ``p``. Ties go to the later point, so every dropped
        point has a kept dominator."""
        npts = len(self.base)
        if self.limit is None or npts < 2:
            return 0
        for v in self.live_vars():  # one term per stretch of constant usage
            self.terms[v] = _profile(self.terms[v])
        owners, lo, hi, off, usage = self.flat_terms()
        first, last = _covering_range(lo, hi, npts)
        rank = np.empty(npts, dtype=np.int64)
        rank[np.lexsort((np.arange(npts), self.base))] = np.arange(npts)
        dropped = _range_max(rank, first, last) > rank
        if not dropped.any():
            return 0
        before = offsets((~dropped).astype(np.int64))  # kept points before each point
        self.point_time = self.point_time[~dropped]
        self.base = self.base[~dropped]
        new_lo, new_hi = before[lo], before[hi]
        for v, _ in owners:
            self.terms[v] = []
        for k, (v, _) in enumerate(owners):
            if new_lo[k] < new_hi[k]:
                self.terms[v].append((int(new_lo[k]), int(new_hi[k]), usage[off[k] : off[k + 1]]))
        return int(dropped.sum())

    def fold_fixed(self) -> int:
        fixed = [v for v in self.live_vars() if len(self.unary[v]) == 1]
        for v in fixed:
            self.fix(v)
        return len(fixed)

    def fold_isolated(self) -> int:
        """A variable with no edge and no memory term simply takes its cheapest value."""
        isolated = [v for v in self.live_vars() if not self.nbrs[v] and not self.terms[v]]
        for v in isolated:
            keep = np.zeros(len(self.unary[v]), dtype=bool)
            keep[int(np.argmin(self.unary[v]))] = True
            self.restrict(v, keep)
            self.fix(v)
        return len(isolated)

    def fold_leaves(self) -> int:
        """Eliminate a variable with one neighbour and no memory term: for each value
        of the neighbour its best value is known, so it is a function of it."""
        folded = 0
        for v in self.touched():
            if not self.alive[v] or self.terms[v] or len(self.nbrs[v]) != 1:
                continue
            (u,) = self.nbrs[v]
            through = self.table(u, v) + self.unary[v][None, :]  # rows: values of u
            self.fold(v, u, np.argmin(through, axis=1))
            folded += 1
        return folded

    def eliminate_degree2(self) -> int:
        """Eliminate a variable with two neighbours and no memory term: the table
        between the neighbours gets, for each pair of their values, the best
        cost through it (PBQP's R2 reduction)."""
        eliminated = 0
        for v in self.touched():
            if not self.alive[v] or self.terms[v] or len(self.nbrs[v]) != 2:
                continue
            u, w = sorted(self.nbrs[v])
            left, right = self.table(u, v), self.table(v, w)
            if left.shape[0] * left.shape[1] * right.shape[1] > ELIMINATION_WORK:
                continue
            through = left[:, :, None] + self.unary[v][None, :, None] + right[None, :, :]
            choice = through.argmin(axis=1)  # [value of u, value of w]
            best = saturate(np.take_along_axis(through, choice[:, None, :], axis=1)[:, 0, :])
            nodes = self.nodes_of[v]
            self.eliminations.append(
                Elimination(
                    nodes=np.array(nodes, dtype=np.int64),
                    maps=np.array([self.node_map[i] for i in nodes], dtype=np.int64),
                    left=self._virtual_node(u),
                    right=self._virtual_node(w),
                    choice=choice,
                )
            )
            for i in nodes:
                self.node_map[i] = None
            self.drop_edge(u, v)
            self.drop_edge(v, w)
            self.add_table(u, w, best)
            self._kill(v)
            eliminated += 1
        return eliminated

    def _virtual_node(self, v: int) -> int:
        """A new node that follows ``v``'s current value through later folds."""
        i = len(self.node_map)
        self.node_map.append(np.arange(len(self.unary[v])))
        self.node_fixed = np.append(self.node_fixed, -1)
        self.nodes_of[v].append(i)
        return i

    def merge_functional(self) -> int:
        merged = 0
        for u, v in self.touched_edges():
            if (u, v) not in self.tables:
                continue
            allowed = self.tables[(u, v)] < FORBIDDEN
            rows, cols = allowed.shape
            count = np.count_nonzero(allowed)  # a cheap filter before the exact test
            if count == rows and (allowed.sum(axis=1) == 1).all():
                self.fold(v, u, allowed.argmax(axis=1))
            elif count == cols and (allowed.sum(axis=0) == 1).all():
                self.fold(u, v, allowed.argmax(axis=0))
            else:
                continue
            merged += 1
        return merged

    def fold_separable(self) -> int:
        """Fold tables of the form row[a] + col[b] (all-zero ones included) into unaries."""
        folded = 0
        for u, v in self.touched_edges():
            t = self.tables.get((u, v))
            if t is None or (t.shape[0] > 1 and t[0, 0] + t[-1, -1] != t[0, -1] + t[-1, 0]):
                continue  # a 2x2 minor already shows it is not separable
            if t.max() >= FORBIDDEN:
                continue
            row, col = t[:, 0], t[0, :] - t[0, 0]
            if np.array_equal(t, row[:, None] + col[None, :]):
                self.unary[u] = saturate(self.unary[u] + row)
                self.unary[v] = saturate(self.unary[v] + col)
                self.drop_edge(u, v)
                folded += 1
        return folded

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
        terms = [(index[v], lo, hi, use) for v in live for lo, hi, use in _profile(self.terms[v])]
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
    """Arc consistency on forbidden costs, vectorised over all table entries.

    Returns a mask over all strategies: false where a strategy has a forbidden
    cost or, on some edge, no allowed partner among the other node's remaining
    strategies. Each sweep looks at every entry at once; sweeps repeat until
    one removes nothing (three on benchmark A).
    """
    alive = inst.cost < FORBIDDEN
    if not inst.m or inst.edge_cost.max() < FORBIDDEN:  # nothing to propagate (N, U)
        return alive
    slots = table_slots(inst.strat_off, inst.edge_u, inst.edge_v, len(inst.edge_cost))
    row_val, col_val = slots.row_val, slots.col_val
    allowed = inst.edge_cost < FORBIDDEN
    while True:
        ok = allowed & alive[row_val][slots.entry_row] & alive[col_val][slots.entry_col]
        row_ok = np.logical_or.reduceat(ok, slots.row_start)
        col_ok = np.zeros(len(col_val), dtype=bool)
        col_ok[slots.entry_col[ok]] = True
        dead = np.concatenate([row_val[~row_ok], col_val[~col_ok]])
        dead = dead[alive[dead]]
        if not len(dead):
            return alive
        alive[dead] = False


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
    from .evaluate import exact_sum

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


def _covering_range(lo: np.ndarray, hi: np.ndarray, npts: int) -> tuple[np.ndarray, np.ndarray]:
    """For each point, the intersection ``[first, last)`` of the ranges covering it
    (all points when none does), by one sweep with two lazy heaps."""
    first = np.zeros(npts, dtype=np.int64)
    last = np.full(npts, npts, dtype=np.int64)
    order = np.argsort(lo, kind="stable").tolist()
    lo_list, hi_list = lo.tolist(), hi.tolist()
    starts: list[tuple[int, int]] = []  # (-lo, hi) of open ranges
    ends: list[int] = []
    k = 0
    for p in range(npts):
        while k < len(order) and lo_list[order[k]] <= p:
            t = order[k]
            heapq.heappush(starts, (-lo_list[t], hi_list[t]))
            heapq.heappush(ends, hi_list[t])
            k += 1
        while starts and starts[0][1] <= p:
            heapq.heappop(starts)
        while ends and ends[0] <= p:
            heapq.heappop(ends)
        if starts:
            first[p], last[p] = -starts[0][0], ends[0]
    return first, last


def _range_max(a: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """``max(a[first[i]:last[i]])`` for every i (non-empty ranges), by a sparse table."""
    levels = [a]
    while 2 ** len(levels) <= len(a):
        prev, step = levels[-1], 2 ** (len(levels) - 1)
        levels.append(np.maximum(prev[:-step], prev[step:]))
    k = np.floor(np.log2(last - first)).astype(np.int64)
    out = np.empty(len(first), dtype=a.dtype)
    for j in np.unique(k):
        sel = k == j
        out[sel] = np.maximum(levels[j][first[sel]], levels[j][last[sel] - 2**j])
    return out


def _profile(terms: list[tuple[int, int, np.ndarray]]) -> list[tuple[int, int, np.ndarray]]:
    """One variable's terms as non-overlapping ranges, so each point counts a value once."""
    if all(a[1] <= b[0] for a, b in zip(terms, terms[1:], strict=False)):
        return terms  # already sorted and disjoint
    cuts = sorted({c for lo, hi, _ in terms for c in (lo, hi)})
    pos = {c: i for i, c in enumerate(cuts)}
    diff = np.zeros((len(cuts), len(terms[0][2])), dtype=np.int64)
    for lo, hi, use in terms:
        diff[pos[lo]] += use
        diff[pos[hi]] -= use
    level = np.cumsum(diff, axis=0)
    out: list[tuple[int, int, np.ndarray]] = []
    for i in range(len(cuts) - 1):
        if not level[i].any():
            continue
        if out and out[-1][1] == cuts[i] and np.array_equal(out[-1][2], level[i]):
            out[-1] = (out[-1][0], cuts[i + 1], level[i])
        else:
            out.append((cuts[i], cuts[i + 1], level[i]))
    return out


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, dtype=np.int64)


PassLog = Callable[[str, dict[str, int], float], None]

#: The passes in the order they are repeated until none changes anything.
CLEAN_PASSES = ("prune_forbidden", "merge_functional")
PASSES = (
    "normalize_memory",
    "prune_memory",
    "prune_forbidden",
    "fold_fixed",
    "fold_isolated",
    "fold_leaves",
    "eliminate_degree2",
    "merge_functional",
    "fold_separable",
)
#: Slower passes, run when the others have reached a fixpoint.
LATE_PASSES = ("prune_points", "prune_dominated")


def reduce(
    inst: Instance, log: PassLog | None = None, max_rounds: int = 200, passes: bool = True
) -> Model:
    """Presolve ``inst``; ``log(pass, stats, seconds)`` is called after every pass.

    Raises :class:`Infeasible` when no assignment fits in memory. If no
    assignment that fits avoids forbidden costs, the passes that assume one
    exists are skipped and the model keeps the forbidden values. With
    ``passes=False`` only time compression and edge merging happen (one
    variable per node), for comparisons.
    """
    if not passes:
        return _run(inst, (), log, 0)
    try:
        return _run(inst, PASSES, log, max_rounds)
    except (NoCleanSolution, Infeasible):
        plain = tuple(p for p in PASSES if p not in CLEAN_PASSES)
        return _run(inst, plain, log, max_rounds)


def _run(inst: Instance, passes: tuple[str, ...], log: PassLog | None, max_rounds: int) -> Model:
    start = time.perf_counter()
    work = Work(inst, clean="prune_forbidden" in passes)
    if log:
        log("read", work.stats(), time.perf_counter() - start)
    for _ in range(max_rounds):
        work.next_round()
        late = LATE_PASSES if passes else ()
        if not _run_passes(work, passes, log) and not _run_passes(work, late, log):
            break
    return work.to_model()


def _run_passes(work: Work, passes: tuple[str, ...], log: PassLog | None) -> int:
    changed = 0
    for name in passes:
        start = time.perf_counter()
        changes = getattr(work, name)()
        changed += changes
        if log and changes:
            log(name, work.stats(), time.perf_counter() - start)
    return changed
