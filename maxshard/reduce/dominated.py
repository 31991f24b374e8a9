"""Dominated values: a value no better than another of its variable anywhere."""

from __future__ import annotations

import numpy as np

from .work import Work

#: Largest pairwise comparison (values^2 x features) the dominance test makes.
DOMINANCE_WORK = 4_000_000


def prune_dominated(work: Work) -> int:
    """Drop value ``b`` when another value ``a`` is no worse anywhere: unary
    cost, usage in every memory term and every entry of every incident
    table. Switching ``b`` to ``a`` then never costs more nor uses more
    memory (equal values: the first is kept)."""
    removed = 0
    queue, work.unchecked = work.unchecked, set()
    for v in queue:
        d = len(work.unary[v])
        if not work.alive[v] or d < 2:
            continue
        parts = [work.unary[v][:, None]] + [use[:, None] for _, _, use in work.terms[v]]
        parts += [work.table(v, w) for w in work.nbrs[v]]
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
            work.restrict(v, ~dominated)
    return removed
