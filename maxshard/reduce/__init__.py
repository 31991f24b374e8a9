"""Presolve: shrink an instance into a :class:`~maxshard.model.Model`.

Like SCIP's presolvers, each pass is its own small function, in its own module,
behind one interface: ``pass(work) -> number of changes``, on :class:`Draft`
(``work.py``), an editable per-variable form. The passes run to a fixpoint;
:meth:`Draft.to_model` then packs the result into flat arrays. Every pass keeps
this invariant: for every solution ``x`` of the reduced model with no
forbidden pick, ``evaluate(reconstruct(x)).cost == model.cost(x)``, and the
best clean solution of the original survives.

On reading (``work.py``, ``collapse.py``)
------------------------------------------
* time compression (:func:`~maxshard.model.kept_points`): memory is checked
  only where the live set is maximal;
* parallel, reversed and self edges are merged (costs add);
* when a clean solution may exist: arc consistency over all table entries at
  once, then every tree of functional edges collapsed onto its root.

Passes, repeated until none changes anything
--------------------------------------------
* ``memory.normalize_memory``: each term's minimum usage moves into the fixed load;
* ``memory.prune_memory``: values whose extra usage cannot fit over the fixed load;
* ``forbidden.prune_forbidden``: arc consistency on forbidden (10^18) costs;
* ``fold.fold_fixed``: single-value variables become constants;
* ``fold.fold_isolated``: a variable with no edge and no memory term takes its
  cheapest value;
* ``fold.fold_leaves``: a variable with one neighbour and no memory term is
  folded into the neighbour, taking its best value for each of the neighbour's;
* ``degree2.eliminate_degree2``: a variable with two neighbours and no memory
  term is replaced by a table between them (recorded for reconstruction);
* ``fold.merge_functional``: where an edge's allowed pairs make ``v`` a function
  of ``u``, ``v`` is folded into ``u`` (its costs, edges and memory terms move);
* ``fold.fold_separable``: tables that are a sum of a row and a column term
  become unary costs;

and, once those reach a fixpoint (they cost more, and profit from it):

* ``points.prune_points``: a time point whose check is implied by another
  point's (inside all its memory terms, at least its fixed load) is dropped;
* ``dominated.prune_dominated``: a value no better than another value of its
  variable anywhere (cost, usage, every table row) is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..instance import Instance
from ..model import Model
from ..nogc import paused
from .degree2 import eliminate_degree2
from .dominated import prune_dominated
from .draft import (
    Draft,
    Infeasible,
    NoCleanSolution,
    forbidden_free_values,
    lexicographic_cost,
    memory_units,
)
from .fold import fold_fixed, fold_isolated, fold_leaves, fold_separable, merge_functional
from .forbidden import prune_forbidden
from .memory import normalize_memory, prune_memory
from .points import prune_points

__all__ = [
    "Infeasible",
    "NoCleanSolution",
    "Draft",
    "forbidden_free_values",
    "lexicographic_cost",
    "memory_units",
    "reduce",
]


PassLog = Callable[[str, dict[str, int], float], None]
#: A pass changes the work in place and returns how many changes it made.
Pass = Callable[[Draft], int]

#: The passes in the order they are repeated until none changes anything.
PASSES: tuple[Pass, ...] = (
    normalize_memory,
    prune_memory,
    prune_forbidden,
    fold_fixed,
    fold_isolated,
    fold_leaves,
    eliminate_degree2,
    merge_functional,
    fold_separable,
)
#: Passes that assume a clean solution exists (skipped when none does).
CLEAN_PASSES = (prune_forbidden, merge_functional)
#: Slower passes, run when the others have reached a fixpoint.
LATE_PASSES: tuple[Pass, ...] = (prune_points, prune_dominated)


def reduce(
    inst: Instance, log: PassLog | None = None, max_rounds: int = 200, passes: bool = True
) -> Model:
    """Presolve ``inst``; ``log(pass, stats, seconds)`` is called after every pass.

    Raises :class:`Infeasible` when no assignment fits in memory. If no
    assignment that fits avoids forbidden costs, the passes that assume one
    exists are skipped and the model keeps the forbidden values. With
    ``passes=False`` only time compression and edge merging happen (one
    variable per node), for comparisons.
    """
    with paused():  # its per-variable lists hold no cycles (see nogc.py)
        if not passes:
            return _run(inst, (), log, 0)
        try:
            return _run(inst, PASSES, log, max_rounds)
        except (NoCleanSolution, Infeasible):
            plain = tuple(p for p in PASSES if p not in CLEAN_PASSES)
            return _run(inst, plain, log, max_rounds)


def _run(inst: Instance, passes: tuple[Pass, ...], log: PassLog | None, max_rounds: int) -> Model:
    start = time.perf_counter()
    work = Draft(inst, clean=prune_forbidden in passes)
    if log:
        log("read", work.stats(), time.perf_counter() - start)
    for _ in range(max_rounds):
        work.next_round()
        late = LATE_PASSES if passes else ()
        if not _run_passes(work, passes, log) and not _run_passes(work, late, log):
            break
    return work.to_model()


def _run_passes(work: Draft, passes: tuple[Pass, ...], log: PassLog | None) -> int:
    changed = 0
    for run in passes:
        start = time.perf_counter()
        changes = run(work)
        changed += changes
        if log and changes:
            log(run.__name__, work.stats(), time.perf_counter() - start)
    return changed
