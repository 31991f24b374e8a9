"""Random instances in the contest format, with the data's awkward features.

Generated instances have forbidden (10^18) costs, parallel and reversed edges,
empty intervals, single-strategy nodes and a usage limit set between the
minimum-usage peak and the maximum one (``tightness`` 0 = as tight as
possible, 1 = never binding, below 0 = infeasible). A ``functional`` share of
the edges allow, for each value of one end, a single value of the other.
"""

from __future__ import annotations

import numpy as np

from .instance import FORBIDDEN


def generate(
    nodes: int,
    edges: int | None = None,
    max_strategies: int = 3,
    forbidden: float = 0.1,
    tightness: float = 0.3,
    functional: float = 0.2,
    horizon: int = 20,
    idle: float = 0.1,
    seed: int = 0,
) -> dict:
    rng = np.random.default_rng(seed)
    edges = nodes + nodes // 2 if edges is None else edges
    sizes = rng.integers(1, max_strategies + 1, size=nodes)
    costs, usages, intervals = [], [], []
    for s in sizes:
        c = rng.integers(0, 100, size=s)
        c[rng.random(s) < forbidden / 2] = FORBIDDEN
        costs.append(c.tolist())
        usages.append(rng.integers(0, 20, size=s).tolist())
        if rng.random() < idle:  # never live: no memory
            intervals.append([0, 0])
        else:
            lo = int(rng.integers(0, horizon))
            intervals.append([lo, lo + int(rng.integers(1, horizon // 2 + 2))])
    pairs, tables = [], []
    for _ in range(edges if nodes > 1 else 0):
        u, v = rng.choice(nodes, size=2, replace=False).tolist()
        t = rng.integers(0, 100, size=int(sizes[u] * sizes[v]))
        t[rng.random(len(t)) < forbidden] = FORBIDDEN
        if rng.random() < functional:  # each value of u allows one value of v
            t = t.reshape(sizes[u], sizes[v])
            keep = rng.integers(0, sizes[v], size=sizes[u])
            mask = np.ones_like(t, dtype=bool)
            mask[np.arange(sizes[u]), keep] = False
            t[mask] = FORBIDDEN
            t[~mask] = rng.integers(0, 100, size=sizes[u])
            t = t.ravel()
        pairs.append([u, v])
        tables.append(t.tolist())
    lo_peak, hi_peak = _peaks(intervals, usages)
    limit = int(lo_peak + tightness * (hi_peak - lo_peak))
    return {
        "problem": {
            "name": f"generated-{nodes}-{seed}",
            "nodes": {"intervals": intervals, "costs": costs, "usages": usages},
            "edges": {"nodes": pairs, "costs": tables},
            "usage_limit": limit,
        }
    }


def _peaks(intervals: list[list[int]], usages: list[list[int]]) -> tuple[int, int]:
    """Peak load with every node at its smallest and at its largest usage."""
    horizon = max((hi for _, hi in intervals), default=0) + 1
    low, high = np.zeros(horizon, dtype=np.int64), np.zeros(horizon, dtype=np.int64)
    for (lo, hi), u in zip(intervals, usages, strict=True):
        low[lo:hi] += min(u)
        high[lo:hi] += max(u)
    return int(low.max()), int(high.max())
