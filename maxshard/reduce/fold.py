"""Folds: variables that are constants or functions of a neighbour disappear.

Each folded node keeps a map from its new owner's values to its strategies, so
reconstruction follows it exactly; tables that are a row plus a column term
become unary costs."""

from __future__ import annotations

import numpy as np

from ..instance import FORBIDDEN
from ..model import saturate
from .draft import Draft


def fold_fixed(work: Draft) -> int:
    """Single-value variables become constants."""
    fixed = [v for v in work.live_vars() if len(work.unary[v]) == 1]
    for v in fixed:
        work.fix(v)
    return len(fixed)


def fold_isolated(work: Draft) -> int:
    """A variable with no edge and no memory term simply takes its cheapest value."""
    isolated = [v for v in work.live_vars() if not work.nbrs[v] and not work.terms[v]]
    for v in isolated:
        keep = np.zeros(len(work.unary[v]), dtype=bool)
        keep[int(np.argmin(work.unary[v]))] = True
        work.restrict(v, keep)
        work.fix(v)
    return len(isolated)


def fold_leaves(work: Draft) -> int:
    """Eliminate a variable with one neighbour and no memory term: for each value
    of the neighbour its best value is known, so it is a function of it."""
    folded = 0
    for v in work.touched():
        if not work.alive[v] or work.terms[v] or len(work.nbrs[v]) != 1:
            continue
        (u,) = work.nbrs[v]
        through = work.table(u, v) + work.unary[v][None, :]  # rows: values of u
        work.fold(v, u, np.argmin(through, axis=1))
        folded += 1
    return folded


def merge_functional(work: Draft) -> int:
    """Where an edge's allowed pairs give ``v`` one value per value of ``u``, fold
    ``v`` into ``u`` (or the other way round); ``collapse.py`` did the same in
    bulk on reading, this catches the edges later passes make functional."""
    merged = 0
    edges = [k for k in work.touched_edges() if k in work.tables]
    # a functional table forbids all but one entry per row (or column), unless
    # one side has a single value
    thin = [k for k in edges if min(work.tables[k].shape) == 1]
    for u, v in sorted(set(work.holding_forbidden(edges)).union(thin)):
        if (u, v) not in work.tables:
            continue
        allowed = work.tables[(u, v)] < FORBIDDEN
        rows, cols = allowed.shape
        count = np.count_nonzero(allowed)  # a cheap filter before the exact test
        if count == rows and (allowed.sum(axis=1) == 1).all():
            work.fold(v, u, allowed.argmax(axis=1))
        elif count == cols and (allowed.sum(axis=0) == 1).all():
            work.fold(u, v, allowed.argmax(axis=0))
        else:
            continue
        merged += 1
    return merged


def fold_separable(work: Draft) -> int:
    """Fold tables of the form row[a] + col[b] (all-zero ones included) into unaries."""
    folded = 0
    for u, v in work.touched_edges():
        t = work.tables.get((u, v))
        if t is None or (t.shape[0] > 1 and t[0, 0] + t[-1, -1] != t[0, -1] + t[-1, 0]):
            continue  # a 2x2 minor already shows it is not separable
        if t.max() >= FORBIDDEN:
            continue
        row, col = t[:, 0], t[0, :] - t[0, 0]
        if np.array_equal(t, row[:, None] + col[None, :]):
            work.unary[u] = saturate(work.unary[u] + row)
            work.unary[v] = saturate(work.unary[v] + col)
            work.drop_edge(u, v)
            folded += 1
    return folded
