"""Dominated time points: a point whose memory check another point implies."""

from __future__ import annotations

import numpy as np

from ..csr import offsets
from .draft import Draft, profile


def prune_points(work: Draft) -> int:
    """Drop time point ``p`` when another point ``q`` lies inside every memory
    term covering ``p`` and has at least its fixed load: the check at ``q``
    implies the one at ``p``. Ties go to the later point, so every dropped
    point has a kept dominator."""
    npts = len(work.base)
    if work.limit is None or npts < 2:
        return 0
    for v in work.live_vars():  # one term per stretch of constant usage
        work.terms[v] = profile(work.terms[v])
    owners, lo, hi, off, usage = work.flat_terms()
    first, last = _covering_range(lo, hi, npts)
    rank = np.empty(npts, dtype=np.int64)
    rank[np.lexsort((np.arange(npts), work.base))] = np.arange(npts)
    dropped = _range_max(rank, first, last) > rank
    if not dropped.any():
        return 0
    before = offsets((~dropped).astype(np.int64))  # kept points before each point
    work.point_time = work.point_time[~dropped]
    work.base = work.base[~dropped]
    new_lo, new_hi = before[lo], before[hi]
    for v in owners:
        work.terms[v] = []
    for k, v in enumerate(owners):
        if new_lo[k] < new_hi[k]:
            work.terms[v].append((int(new_lo[k]), int(new_hi[k]), usage[off[k] : off[k + 1]]))
    return int(dropped.sum())


def _covering_range(lo: np.ndarray, hi: np.ndarray, npts: int) -> tuple[np.ndarray, np.ndarray]:
    """For each point, the intersection ``[first, last)`` of the ranges covering it
    (all points when none does): the largest ``lo`` and the smallest ``hi`` over
    the ranges that hold the point."""
    first = _cover(lo, hi, lo, np.maximum, 0, npts)
    last = _cover(lo, hi, hi, np.minimum, npts, npts)
    return first, last


def _cover(lo, hi, values, better: np.ufunc, none: int, npts: int) -> np.ndarray:
    """``better`` (max or min) of ``values[k]`` over the ranges ``[lo[k], hi[k])``
    that hold each point, ``none`` where none does: every range is cut into the
    aligned blocks of a segment tree (all ranges at once, level by level), each
    block keeps the best value put on it, and the blocks pass it down to the
    points they hold."""
    size = 1 << max(0, int(npts - 1).bit_length())
    tree = np.full(2 * size, none, dtype=np.int64)
    left, right, vals = lo + size, hi + size, values.astype(np.int64)
    while len(left):
        odd = (left & 1) == 1  # a left end that is a right child: its block is whole
        better.at(tree, left[odd], vals[odd])
        left = left + odd
        odd = (right & 1) == 1
        better.at(tree, right[odd] - 1, vals[odd])
        right = right - odd
        left, right = left >> 1, right >> 1
        going = left < right
        left, right, vals = left[going], right[going], vals[going]
    for level in range(1, size.bit_length()):  # from the root's children down
        nodes = np.arange(1 << level, 2 << level)
        tree[nodes] = better(tree[nodes], tree[nodes >> 1])
    return tree[size : size + npts]


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
