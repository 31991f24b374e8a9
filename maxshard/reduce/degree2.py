"""Degree-2 elimination (PBQP's R2 rule), undone exactly on reconstruction."""

from __future__ import annotations

import numpy as np

from ..model import Elimination, saturate
from .draft import Draft

#: Largest (left x middle x right) cost cube a degree-2 elimination builds.
ELIMINATION_WORK = 4_000_000
#: A cube this large takes numpy about 4 ms (history: *A deadline for presolve*)
BIG_CUBE = 1_000_000
#: After this many big cubes in numpy, the compiled product (:mod:`.compiled`,
#: 0.4 s to load) takes every cube (the same entry)
COMPILED_AFTER = 32


def eliminate_degree2(work: Draft) -> int:
    """Eliminate a variable with two neighbours and no memory term: the table
    between the neighbours gets, for each pair of their values, the best
    cost through it (PBQP's R2 reduction)."""
    eliminated = 0
    for v in work.touched():
        if not work.alive[v] or work.terms[v] or len(work.nbrs[v]) != 2:
            continue
        u, w = sorted(work.nbrs[v])
        left, right = work.table(u, v), work.table(v, w)
        cube = left.shape[0] * left.shape[1] * right.shape[1]
        if cube > ELIMINATION_WORK:
            continue
        best, choice = _through(left, work.unary[v], right, cube)  # [value of u, value of w]
        best = saturate(best)
        nodes = work.nodes_of[v]
        work.eliminations.append(
            Elimination(
                nodes=np.array(nodes, dtype=np.int64),
                maps=np.array([work.node_map[i] for i in nodes], dtype=np.int64),
                left=_virtual_node(work, u),
                right=_virtual_node(work, w),
                choice=choice.astype(np.int16 if len(work.unary[v]) <= 2**15 else np.int64),
            )
        )
        for i in nodes:
            work.node_map[i] = None
        work.drop_edge(u, v)
        work.drop_edge(v, w)
        work.add_table(u, w, best)
        work.kill(v)
        eliminated += 1
    return eliminated


def _through(
    left: np.ndarray, middle: np.ndarray, right: np.ndarray, cube: int
) -> tuple[np.ndarray, np.ndarray]:
    """The least cost through the middle variable for each pair of its
    neighbours' values, and its value there (the first on ties)."""
    global _compiled, _big
    _big += cube >= BIG_CUBE
    if _compiled is None and _big > COMPILED_AFTER:
        from .compiled import min_through

        _compiled = min_through
    if _compiled is not None:
        return _compiled(np.ascontiguousarray(left), middle, np.ascontiguousarray(right))
    through = left[:, :, None] + middle[None, :, None] + right[None, :, :]
    choice = through.argmin(axis=1)
    return np.take_along_axis(through, choice[:, None, :], axis=1)[:, 0, :], choice


_compiled = None  # the compiled product, once enough big cubes have needed it
_big = 0  # big cubes met in this process


def _virtual_node(work: Draft, v: int) -> int:
    """A new node that follows ``v``'s current value through later folds."""
    i = len(work.node_map)
    work.node_map.append(np.arange(len(work.unary[v])))
    work.node_fixed = np.append(work.node_fixed, -1)
    work.nodes_of[v].append(i)
    return i
