"""Memory passes: fixed load out of the terms, values that cannot fit dropped."""

from __future__ import annotations

import numpy as np

from .draft import Draft, Infeasible


def normalize_memory(work: Draft) -> int:
    """Move each term's minimum usage into the fixed load; drop constant terms."""
    owners, lo, hi, off, usage = work.flat_terms()
    if not owners:
        return 0
    low = np.minimum.reduceat(usage, off[:-1])
    usage = usage - np.repeat(low, np.diff(off))
    constant = np.maximum.reduceat(usage, off[:-1]) == 0
    diff = np.zeros(len(work.base) + 1, dtype=np.int64)
    np.add.at(diff, lo, low)
    np.add.at(diff, hi, -low)
    work.base += np.cumsum(diff[:-1])
    changed_terms = np.flatnonzero((low > 0) | constant)
    rebuilt = {owners[k] for k in changed_terms.tolist()}
    for v in rebuilt:
        work.terms[v] = []
    for k, v in enumerate(owners):
        if v in rebuilt and not constant[k]:
            work.terms[v].append((int(lo[k]), int(hi[k]), usage[off[k] : off[k + 1]]))
    if work.limit is not None and len(work.base) and work.base.max() > work.limit:
        t = int(work.point_time[int(work.base.argmax())])
        raise Infeasible(f"the minimum possible usage exceeds the limit at time {t}")
    return len(changed_terms)


def prune_memory(work: Draft) -> int:
    """Drop values whose extra usage exceeds the slack over the fixed load."""
    if work.limit is None or not len(work.base):
        return 0
    owners, lo, hi, off, usage = work.flat_terms()
    if not owners:
        return 0
    slack = np.append(work.limit - work.base, 0)
    tightest = np.minimum.reduceat(slack, np.column_stack([lo, hi]).ravel())[::2]
    bad = usage > np.repeat(tightest, np.diff(off))
    if not bad.any():
        return 0
    drop: dict[int, np.ndarray] = {}
    for k in np.unique(np.searchsorted(off, np.flatnonzero(bad), side="right") - 1):
        v = owners[k]
        none = np.zeros(len(work.unary[v]), dtype=bool)
        drop[v] = drop.get(v, none) | bad[off[k] : off[k + 1]]
    for v, mask in drop.items():
        if mask.all():
            raise Infeasible(f"no strategy of node {work.nodes_of[v][0]} fits in memory")
        work.restrict(v, ~mask)
    return int(bad.sum())
