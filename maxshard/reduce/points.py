"""Dominated time points: a point whose memory check another point implies."""

from __future__ import annotations

import heapq

import numpy as np

from ..model import offsets
from .work import Work, profile


def prune_points(work: Work) -> int:
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
    for v, _ in owners:
        work.terms[v] = []
    for k, (v, _) in enumerate(owners):
        if new_lo[k] < new_hi[k]:
            work.terms[v].append((int(new_lo[k]), int(new_hi[k]), usage[off[k] : off[k + 1]]))
    return int(dropped.sum())


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
