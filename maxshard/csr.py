"""Compressed sparse rows: the one layout of every per-node and per-edge list.

A CSR array is a flat ``values`` array and ``off``, one more entry than rows:
row ``r`` is ``values[off[r]:off[r + 1]]``. These helpers build and slice it
without a Python loop per row; every module that needs them imports them here.
"""

from __future__ import annotations

import numpy as np


def offsets(lengths: np.ndarray) -> np.ndarray:
    """CSR offsets (a leading 0, then the running sum) of segment lengths."""
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


def grouped(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Items grouped by their key in ``0..n-1``, in CSR form: the offsets per
    key, and the items' indices, each key's in their own order. With the edge
    ends ``concatenate([edge_u, edge_v])`` as keys, item ``k`` is edge ``k % m``
    seen from its row end (``k < m``) or its column end: every variable's edges."""
    return offsets(np.bincount(keys, minlength=n)), np.argsort(keys, kind="stable")


def split(values: np.ndarray, off: np.ndarray) -> list[np.ndarray]:
    """The CSR segments of ``values`` as a list of views (np.split, 10x faster)."""
    bounds = off.tolist()
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def ranks(lengths: np.ndarray) -> np.ndarray:
    """0, 1, ..., k-1 for each segment length k, concatenated."""
    return np.arange(int(lengths.sum())) - np.repeat(offsets(lengths)[:-1], lengths)


def positions(off: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where the CSR segments ``rows`` lie (by ``off``), one after another."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = off[rows + 1] - off[rows]
    return np.repeat(off[rows], lens) + ranks(lens)


def segments(values: np.ndarray, off: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The CSR segments ``rows`` of ``values``, one after another."""
    return values[positions(off, rows)]


def groups(keys: np.ndarray) -> list[np.ndarray]:
    """For each distinct key, the positions holding it (ascending)."""
    order = np.argsort(keys, kind="stable")
    bounds = np.flatnonzero(np.diff(keys[order])) + 1
    return [part for part in np.split(order, bounds) if len(part)]
