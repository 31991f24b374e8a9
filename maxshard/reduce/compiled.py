"""Presolve's largest loops over table entries and values, compiled; they run
on models of :data:`~.collapse.COMPILED_ENTRIES` table entries or more (and
the product after :data:`~.degree2.COMPILED_AFTER` big cubes), where numpy's
arrays over every entry cost more than loading numba.

* :func:`min_through`, the min-plus product a degree-2 elimination takes.
  Eliminating ``v`` between ``u`` and ``w`` gives each pair of their values
  the best cost through ``v``: ``best[i, k] = min_j left[i, j] + middle[j] +
  right[j, k]``, and which ``j`` (the first on ties) for reconstruction.
  numpy builds the whole cube for it: on LLaMA-3 8B at 8 layers on 2x2x2,
  1,194 eliminations of up to 3.4 M entries each took 3.8 s of a 7 s
  presolve; this loop takes a twentieth of that.
* :func:`partners`, which shows the functional edges (numpy: 7 s on
  LLaMA-3 8B at 32 layers on 2x2x2, 85 M table entries).
* :func:`unsupported`, a sweep of the forbidden values' arc consistency, and
  :func:`dominated`, the dominance test, which stops at a pair's first worse
  feature (numpy: 2.5 s and 2.1 s of that model's presolve).

History: *A deadline for presolve*, *Presolve's arc consistency and
dominance compiled*.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def min_through(
    left: np.ndarray, middle: np.ndarray, right: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(best, choice)``: for each row ``i`` of ``left`` ([a, b]) and column ``k``
    of ``right`` ([b, c]), the least ``left[i, j] + middle[j] + right[j, k]``
    and its first ``j``. Entries are at most 10^18 each: the sum fits."""
    a, b = left.shape
    c = right.shape[1]
    best = np.empty((a, c), dtype=np.int64)
    choice = np.zeros((a, c), dtype=np.int64)
    for i in range(a):
        first = left[i, 0] + middle[0]
        for k in range(c):
            best[i, k] = first + right[0, k]
        for j in range(1, b):
            through = left[i, j] + middle[j]
            for k in range(c):
                value = through + right[j, k]
                if value < best[i, k]:
                    best[i, k] = value
                    choice[i, k] = j
    return best, choice


@njit(cache=True)
def partners(
    cost: np.ndarray,
    table_off: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    row_live: np.ndarray,
    col_live: np.ndarray,
    forbidden: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For tables of ``rows[k] x cols[k]`` entries stored row-major from
    ``table_off[k]``, over the row and column slots (every table's rows, then
    every table's columns, in order): how many entries under ``forbidden``
    between live slots each slot has, and the last one's column (a row slot)
    or row (a column slot), -1 if none."""
    n_rows, n_cols = row_live.shape[0], col_live.shape[0]
    row_count = np.zeros(n_rows, dtype=np.int64)
    col_count = np.zeros(n_cols, dtype=np.int64)
    partner = np.full(n_rows + n_cols, -1, dtype=np.int64)
    r0, c0 = 0, 0
    for k in range(rows.shape[0]):
        a, b, off = rows[k], cols[k], table_off[k]
        for i in range(a):
            if not row_live[r0 + i]:
                continue
            for j in range(b):
                if col_live[c0 + j] and cost[off + i * b + j] < forbidden:
                    row_count[r0 + i] += 1
                    col_count[c0 + j] += 1
                    partner[r0 + i] = j
                    partner[n_rows + c0 + j] = i
        r0 += a
        c0 += b
    return row_count, col_count, partner


@njit(cache=True)
def unsupported(
    cost: np.ndarray,
    table_off: np.ndarray,
    edge_u: np.ndarray,
    edge_v: np.ndarray,
    val_off: np.ndarray,
    alive: np.ndarray,
    edges: np.ndarray,
    forbidden: int,
) -> np.ndarray:
    """A mask over values: those with, on one of ``edges`` (row-major tables of
    ``edge_u[k]`` x ``edge_v[k]`` values from ``table_off[k]``, values laid out
    by ``val_off``), no entry under ``forbidden`` with an ``alive`` value of
    the other end. One pass over the entries, ``alive`` as it was before it."""
    dead = np.zeros(alive.shape[0], dtype=np.bool_)
    for k in edges:
        a0, b0 = val_off[edge_u[k]], val_off[edge_v[k]]
        a, b, off = val_off[edge_u[k] + 1] - a0, val_off[edge_v[k] + 1] - b0, table_off[k]
        col_ok = np.zeros(b, dtype=np.bool_)
        for i in range(a):
            row_ok = False
            if alive[a0 + i]:
                for j in range(b):
                    if alive[b0 + j] and cost[off + i * b + j] < forbidden:
                        row_ok = True
                        col_ok[j] = True
            if not row_ok:
                dead[a0 + i] = True
        for j in range(b):
            if not col_ok[j]:
                dead[b0 + j] = True
    return dead


@njit(cache=True)
def dominated(features: np.ndarray) -> np.ndarray:
    """For ``features`` [variable, value, feature]: whether each value is
    dominated, another value of its variable no worse in every feature and
    better in one, or equal and earlier."""
    n, d, width = features.shape
    out = np.zeros((n, d), dtype=np.bool_)
    for t in range(n):
        f = features[t]
        for b in range(d):
            for a in range(d):
                if a == b:
                    continue
                worse, better = False, False  # a against b, in some feature
                for k in range(width):
                    if f[a, k] > f[b, k]:
                        worse = True
                        break
                    better = better or f[a, k] < f[b, k]
                if not worse and (better or a < b):
                    out[t, b] = True
                    break
    return out
