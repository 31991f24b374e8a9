"""Exact evaluation of a solution, with the contest evaluator's semantics.

Cost is the sum of the chosen node costs and edge table entries, summed
exactly (the 10^18 sentinels overflow int64 once a few are added). Memory is
checked at every time point: a node is live on ``[lo, hi)``, so a node ending
at ``t`` and one starting at ``t`` never overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .instance import FORBIDDEN, Instance


def exact_sum(values: np.ndarray) -> int:
    """Sum non-negative int64 values exactly (split into 31-bit halves, add as ints)."""
    values = np.asarray(values, dtype=np.int64)
    high = int((values >> 31).sum())
    low = int((values & (2**31 - 1)).sum())
    return (high << 31) + low


@dataclass(frozen=True)
class Evaluation:
    cost: int
    peak: int  # highest total usage at any time point
    first_violation: int | None  # first time point over the limit, if any
    forbidden: int  # number of node or edge costs >= 10^18 in the sum
    usage_limit: int | None

    @property
    def feasible(self) -> bool:
        """Accepted by the contest evaluator (memory within the limit)."""
        return self.first_violation is None

    @property
    def clean(self) -> bool:
        """Feasible and free of forbidden choices: a solution worth printing."""
        return self.feasible and self.forbidden == 0


def check_solution(inst: Instance, solution: Sequence[int] | np.ndarray) -> np.ndarray:
    """Return the solution as int64 array, or raise ValueError naming what is wrong."""
    try:
        sol = np.asarray(solution, dtype=np.int64).reshape(-1)
    except (ValueError, TypeError, OverflowError):
        raise ValueError("solution must be a list of integers") from None
    if len(sol) != inst.n:
        raise ValueError(f"solution has {len(sol)} entries but the instance has {inst.n} nodes")
    bad = np.flatnonzero((sol < 0) | (sol >= inst.n_strategies))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"node {i}: strategy {sol[i]} out of range 0..{inst.n_strategies[i] - 1}")
    return sol


def usage_profile(inst: Instance, sol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct event times and the total usage from each of them to the next.

    Levels are int64 while the chosen usages cannot add up past 2**62, else
    Python ints (usages may be any 64-bit value)."""
    live, times, order, starts = inst.events
    u = inst.usage[inst.strat_off[:-1] + sol][live]
    if not len(times):
        return times, np.zeros(0, dtype=np.int64)
    exact = u if exact_sum(u) < 2**62 else u.astype(object)
    level = np.add.reduceat(np.concatenate([exact, -exact])[order], starts)
    return times, np.cumsum(level)


def evaluate(inst: Instance, solution: Sequence[int] | np.ndarray) -> Evaluation:
    sol = check_solution(inst, solution)
    node_costs = inst.cost[inst.strat_off[:-1] + sol]
    ncols = inst.n_strategies[inst.edge_v]
    edge_costs = inst.edge_cost[inst.edge_off[:-1] + sol[inst.edge_u] * ncols + sol[inst.edge_v]]
    cost = exact_sum(node_costs) + exact_sum(edge_costs)
    forbidden = int((node_costs >= FORBIDDEN).sum() + (edge_costs >= FORBIDDEN).sum())

    times, level = usage_profile(inst, sol)
    peak = int(level.max()) if len(level) else 0
    first = None
    if inst.usage_limit is not None:
        over = np.flatnonzero(level > inst.usage_limit)
        if over.size:
            first = int(times[over[0]])
    return Evaluation(cost, peak, first, forbidden, inst.usage_limit)


def all_min_usage(inst: Instance, avoid: np.ndarray | None = None) -> np.ndarray:
    """The per-node minimum-usage strategy (then the cheapest): in the limit
    whenever anything is. ``avoid``: a mask over all strategies, taken only
    where a node has nothing else."""
    seg = np.repeat(np.arange(inst.n), inst.n_strategies)
    keys = (inst.cost, inst.usage, seg) if avoid is None else (inst.cost, inst.usage, avoid, seg)
    order = np.lexsort(keys)
    return order[inst.strat_off[:-1]] - inst.strat_off[:-1]
