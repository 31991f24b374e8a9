"""How long one toulbar2 solve may search, and what it is charged.

toulbar2's own time limit counts whole CPU seconds, so a solve is held by a
backtrack limit as well: :func:`budget` sets it from the problem's price per
search node (:func:`node_price`). In a deterministic run that limit alone
holds the search, and the solve is charged work units (``tb2-node`` in
:data:`maxshard.work.RATES`): a short solve its nodes and backtracks as
counted, a long one its limit and its :func:`preparation` up front. Every
toulbar2 solve of :mod:`maxshard.search.toulbar2` runs under :func:`budget`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .. import work
from ..model import Model

#: toulbar2's backtrack limit when none is set (its default)
NO_LIMIT = 2**63 - 1

#: What a binary table entry adds to a search node's price, in values (history:
#: *A toulbar2 node priced by its tables and knapsacks*)
ENTRY_PRICE = 0.02
#: What a knapsack's value-usage pair adds to it, per square root of the
#: knapsacks posted, in values (the same entry)
PAIR_PRICE = 0.05
#: What toulbar2's preprocessing costs per knapsack pair, per square root of
#: the knapsacks posted, in values (the same entry)
SETUP_PRICE = 100.0


def _knapsack_load(cfn) -> float:
    """``cfn``'s knapsack pairs times the square root of its knapsacks: what
    propagating them costs (more knapsacks, more revisits of each pair)."""
    return cfn.pairs * math.sqrt(cfn.knapsacks)


def node_price(cfn) -> float:
    """What a search node (or backtrack) of ``cfn`` costs, in ``tb2-node``
    counts: a pass over its values, a little of its tables, and its knapsacks'
    :func:`_knapsack_load`."""
    tables = ENTRY_PRICE * cfn.entries
    return max(1, cfn.values) + tables + PAIR_PRICE * _knapsack_load(cfn)


#: What toulbar2's preprocessing and first descent cost per table entry, in
#: ``tb2-node`` counts (history: *A reserved solve charged its preprocessing*)
PREPARE_ENTRY_PRICE = 14.0
#: The same per entry revisited for each value of its two variables (the
#: domains' size weighs: S's reach 853), in ``tb2-node`` counts (the same entry)
PREPARE_REVISIT_PRICE = 0.13


def revisits(rows: np.ndarray, cols: np.ndarray) -> int:
    """The entries of tables of ``rows`` x ``cols`` values (one table per
    pair), each once for every value of its two variables."""
    return int((rows * cols * (rows + cols)).sum())


def preparation(cfn) -> float:
    """Work units toulbar2 spends on ``cfn`` before its search counts: its
    preprocessing and first descent, which no backtrack limit holds and which
    grow with its tables and their domains. A reserved solve is charged them
    on top of its search (:func:`budget`); a short one counts its nodes, and
    the ``tb2-entry`` rate was fitted with the rest in it."""
    return _preparation(cfn.entries, cfn.revisits)


def preparation_of(model: Model) -> float:
    """:func:`preparation` of ``model``'s memory-free problem (as
    :func:`~.toulbar2.build` posts it), before it is built; 0 outside a deterministic run
    (where a solve's CPU time limit holds its preparation too)."""
    if not work.deterministic():
        return 0.0
    sizes = model.dom_size
    revisited = revisits(sizes[model.edge_u], sizes[model.edge_v])
    return _preparation(int(model.edge_off[-1]), revisited)


def _preparation(entries: int, revisited: int) -> float:
    counts = PREPARE_ENTRY_PRICE * entries + PREPARE_REVISIT_PRICE * revisited
    return counts / work.RATES["tb2-node"]


def setup(cfn) -> float:
    """Work units toulbar2's preprocessing of ``cfn``'s knapsacks may take,
    before its first node: no backtrack limit holds it."""
    return SETUP_PRICE * _knapsack_load(cfn) / work.RATES["tb2-node"]


@contextmanager
def budget(cfn, seconds: float) -> Iterator[int]:
    """Limits for one solve of ``cfn`` within the block; yields the ``timeLimit``
    to give ``Solve``: ``seconds`` of CPU time, or in a deterministic run none
    and that many work units' worth of search instead (the search is then the
    same on any machine): its knapsacks' :func:`setup`, then about three
    nodes and backtracks per backtrack allowed.
    toulbar2's time limit is whole seconds: a solve of less than one (the tail
    of a budget) is held to about that many seconds' worth of backtracks as
    well (time spent between backtracks is not held: such a solve may still
    take its whole second). A short solve's nodes and backtracks are counted
    as work at the end; a long one is charged its limit and its
    :func:`preparation` up front (:func:`maxshard.work.reserved`), so what it
    reports meanwhile counts at its end. (toulbar2's options are process-wide:
    set before every solve.)"""
    price = node_price(cfn)
    backtracks = max(1, int((seconds - setup(cfn)) * work.RATES["tb2-node"] / (3 * price)))
    try:
        if not work.deterministic():
            cfn.Option.backtrackLimit = backtracks if seconds < 1 else NO_LIMIT
            yield max(1, int(seconds))
            return
        cfn.Option.backtrackLimit = backtracks
        if seconds >= work.RESERVE_MIN:
            with work.reserved(seconds + preparation(cfn)):
                yield 0
            return
        try:
            yield 0
        finally:
            searched = (cfn.GetNbNodes() + cfn.GetNbBacktracks()) * price
            work.count("tb2-node", setup(cfn) * work.RATES["tb2-node"] + searched)
    finally:  # the option is process-wide: a later toulbar2 problem gets its default
        cfn.Option.backtrackLimit = NO_LIMIT
