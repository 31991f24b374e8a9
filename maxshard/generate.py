"""Instances for tests and comparisons: random ones, cuts of real ones, tilings.

:func:`generate` makes random instances; :func:`cut` takes a connected region
of a real benchmark with its memory as tight as in the source; :func:`tile`
lays copies of an instance one after another in time (a larger instance whose
optimum is known from the source's).

Random instances in the contest format have the data's awkward features.

Generated instances have forbidden (10^18) costs, parallel and reversed edges,
empty intervals, single-strategy nodes and a usage limit set between the
minimum-usage peak and the maximum one (``tightness`` 0 = as tight as
possible, 1 = never binding, below 0 = infeasible). A ``functional`` share of
the edges allow, for each value of one end, a single value of the other.
"""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import msgspec
import numpy as np

from .csr import grouped, offsets, ranks
from .instance import FORBIDDEN, Instance


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


def write_problem(problem: dict, path: Path) -> None:
    """Write a contest JSON problem, gzipped when ``path`` ends in ``.gz``."""
    data = msgspec.json.encode(problem)
    path.write_bytes(gzip.compress(data, 6) if path.suffix == ".gz" else data)


def to_problem(inst: Instance, name: str) -> dict:
    """The contest JSON form of an instance (the inverse of the reader)."""
    off, eoff = inst.strat_off.tolist(), inst.edge_off.tolist()
    cost, usage, table = inst.cost.tolist(), inst.usage.tolist(), inst.edge_cost.tolist()
    problem = {
        "name": name,
        "nodes": {
            "intervals": np.column_stack([inst.lo, inst.hi]).tolist(),
            "costs": [cost[off[i] : off[i + 1]] for i in range(inst.n)],
            "usages": [usage[off[i] : off[i + 1]] for i in range(inst.n)],
        },
        "edges": {
            "nodes": np.column_stack([inst.edge_u, inst.edge_v]).tolist(),
            "costs": [table[eoff[e] : eoff[e + 1]] for e in range(inst.m)],
        },
    }
    if inst.usage_limit is not None:
        problem["usage_limit"] = int(inst.usage_limit)
    return {"problem": problem}


def subinstance(inst: Instance, keep: np.ndarray, usage_limit: int | None) -> Instance:
    """The nodes ``keep`` (in this order) with the edges between them."""
    index = np.full(inst.n, -1, dtype=np.int64)
    index[keep] = np.arange(len(keep))
    sizes = inst.n_strategies[keep]
    values = np.repeat(inst.strat_off[keep], sizes) + ranks(sizes)
    inside = np.flatnonzero((index[inst.edge_u] >= 0) & (index[inst.edge_v] >= 0))
    lengths = np.diff(inst.edge_off)[inside]
    entries = np.repeat(inst.edge_off[inside], lengths) + ranks(lengths)
    return Instance(
        name=inst.name,
        strat_off=offsets(sizes),
        cost=inst.cost[values],
        usage=inst.usage[values],
        lo=inst.lo[keep],
        hi=inst.hi[keep],
        edge_u=index[inst.edge_u[inside]],
        edge_v=index[inst.edge_v[inside]],
        edge_off=offsets(lengths),
        edge_cost=inst.edge_cost[entries],
        usage_limit=usage_limit,
    )


def min_usage_peak(inst: Instance) -> int:
    from .evaluate import all_min_usage, evaluate

    return evaluate(inst, all_min_usage(inst)).peak


def cut(inst: Instance, nodes: int, seed: int = 0) -> Instance:
    """A connected region of ``nodes`` nodes grown from a random node (breadth
    first, neighbours in random order; another random start if the component
    runs out), with its strategies, tables and intervals. The usage limit keeps
    the source's tightness: the same ratio to the all-minimum-usage peak."""
    if not 1 <= nodes <= inst.n:
        raise ValueError(f"cannot cut {nodes} nodes from an instance of {inst.n}")
    rng = np.random.default_rng(seed)
    adj_off, order = grouped(np.concatenate([inst.edge_u, inst.edge_v]), inst.n)
    adj = np.concatenate([inst.edge_v, inst.edge_u])[order]
    taken = np.zeros(inst.n, dtype=bool)
    region: list[int] = []
    while len(region) < nodes:
        start = int(rng.choice(np.flatnonzero(~taken)))
        taken[start] = True
        region.append(start)
        frontier = [start]
        while frontier and len(region) < nodes:
            v = frontier.pop(0)
            for w in rng.permutation(adj[adj_off[v] : adj_off[v + 1]]).tolist():
                if not taken[w] and len(region) < nodes:
                    taken[w] = True
                    region.append(w)
                    frontier.append(w)
    keep = np.sort(np.array(region, dtype=np.int64))
    part = subinstance(inst, keep, None)
    limit = None
    if inst.usage_limit is not None:
        ratio = inst.usage_limit / max(1, min_usage_peak(inst))
        limit = int(ratio * min_usage_peak(part))
    return replace(part, usage_limit=limit)


def tile(inst: Instance, copies: int) -> Instance:
    """``copies`` copies of ``inst`` one after another in time, each joined to
    the next by a zero-cost edge between their nodes with fewest strategies. No
    two copies are ever live together, so the optimum is exactly ``copies``
    times the source's (and so is every bound)."""
    if copies < 1:
        raise ValueError("need at least one copy")
    span = int(inst.hi.max(initial=0))
    if (copies - 1) * span > 2**63 - 1 - span:
        raise ValueError("the tiled time axis would pass 2**63")
    k = np.arange(copies)
    n, m = inst.n, inst.m
    link = int(np.argmin(inst.n_strategies))
    d = int(inst.n_strategies[link])
    shift = np.repeat(k * span, n)
    return Instance(
        name=f"{inst.name}-x{copies}",
        strat_off=offsets(np.tile(inst.n_strategies, copies)),
        cost=np.tile(inst.cost, copies),
        usage=np.tile(inst.usage, copies),
        lo=np.tile(inst.lo, copies) + shift,
        hi=np.tile(inst.hi, copies) + shift,
        edge_u=np.concatenate(
            [np.tile(inst.edge_u, copies) + np.repeat(k * n, m), k[:-1] * n + link]
        ),
        edge_v=np.concatenate(
            [np.tile(inst.edge_v, copies) + np.repeat(k * n, m), k[1:] * n + link]
        ),
        edge_off=offsets(
            np.concatenate([np.tile(np.diff(inst.edge_off), copies), np.full(copies - 1, d * d)])
        ),
        edge_cost=np.concatenate(
            [np.tile(inst.edge_cost, copies), np.zeros((copies - 1) * d * d, dtype=np.int64)]
        ),
        usage_limit=inst.usage_limit,
    )
