"""Arc consistency on forbidden (10^18) costs.

The first sweep runs on the flat instance, over all table entries at once
(:func:`~maxshard.reduce.draft.forbidden_free_values`); this pass keeps the
consistency as other passes merge and shrink tables."""

from __future__ import annotations

import numpy as np

from ..instance import FORBIDDEN
from .draft import Draft, NoCleanSolution, largest


def prune_forbidden(work: Draft) -> int:
    """Arc consistency: drop values that force a forbidden cost.

    Only tables queued since the last sweep are looked at: new or merged
    ones and those whose other side lost values."""
    removed = 0
    unary = [v for v in work.ac_unary if work.alive[v]]
    work.ac_unary = set()
    most = largest([work.unary[v] for v in unary])
    for v in (unary[i] for i in np.flatnonzero(most >= FORBIDDEN).tolist()):
        removed += _keep(work, v, work.unary[v] < FORBIDDEN)
    while work.ac_queue:
        queued = [key for key in work.ac_queue if key in work.tables]
        work.ac_queue = set()
        for key in work.holding_forbidden(queued):
            allowed = work.tables[key] < FORBIDDEN  # (restricting never drops a table)
            rows, cols = allowed.any(axis=1), allowed.any(axis=0)
            if not rows.all():
                removed += _keep(work, key[0], rows)
            if not cols.all():
                removed += _keep(work, key[1], cols)
    return removed


def _keep(work: Draft, v: int, keep: np.ndarray) -> int:
    if not keep.any():
        node = work.nodes_of[v][0]
        raise NoCleanSolution(f"node {node} has no value without a forbidden cost")
    work.restrict(v, keep)
    return int((~keep).sum())
