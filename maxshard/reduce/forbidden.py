"""Arc consistency on forbidden (10^18) costs.

The first sweep runs on the flat instance, over all table entries at once
(:func:`~maxshard.reduce.work.forbidden_free_values`); this pass keeps the
consistency as other passes merge and shrink tables."""

from __future__ import annotations

import numpy as np

from ..instance import FORBIDDEN
from .work import NoCleanSolution, Work


def prune_forbidden(work: Work) -> int:
    """Arc consistency: drop values that force a forbidden cost.

    Only tables queued since the last sweep are looked at: new or merged
    ones and those whose other side lost values."""
    removed = 0
    unary, work.ac_unary = work.ac_unary, set()
    for v in unary:
        keep = work.unary[v] < FORBIDDEN
        if work.alive[v] and not keep.all():
            removed += _keep(work, v, keep)
    while work.ac_queue:
        key = work.ac_queue.pop()
        t = work.tables.get(key)
        if t is None:
            continue
        allowed = t < FORBIDDEN
        rows, cols = allowed.any(axis=1), allowed.any(axis=0)
        if not rows.all():
            removed += _keep(work, key[0], rows)
        if not cols.all():
            removed += _keep(work, key[1], cols)
    return removed


def _keep(work: Work, v: int, keep: np.ndarray) -> int:
    if not keep.any():
        node = work.nodes_of[v][0]
        raise NoCleanSolution(f"node {node} has no value without a forbidden cost")
    work.restrict(v, keep)
    return int((~keep).sum())
