"""Degree-2 elimination (PBQP's R2 rule), undone exactly on reconstruction."""

from __future__ import annotations

import numpy as np

from ..model import Elimination, saturate
from .draft import Draft

#: Largest (left x middle x right) cost cube a degree-2 elimination builds.
ELIMINATION_WORK = 4_000_000


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
        if left.shape[0] * left.shape[1] * right.shape[1] > ELIMINATION_WORK:
            continue
        through = left[:, :, None] + work.unary[v][None, :, None] + right[None, :, :]
        choice = through.argmin(axis=1)  # [value of u, value of w]
        best = saturate(np.take_along_axis(through, choice[:, None, :], axis=1)[:, 0, :])
        nodes = work.nodes_of[v]
        work.eliminations.append(
            Elimination(
                nodes=np.array(nodes, dtype=np.int64),
                maps=np.array([work.node_map[i] for i in nodes], dtype=np.int64),
                left=_virtual_node(work, u),
                right=_virtual_node(work, w),
                choice=choice,
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


def _virtual_node(work: Draft, v: int) -> int:
    """A new node that follows ``v``'s current value through later folds."""
    i = len(work.node_map)
    work.node_map.append(np.arange(len(work.unary[v])))
    work.node_fixed = np.append(work.node_fixed, -1)
    work.nodes_of[v].append(i)
    return i
