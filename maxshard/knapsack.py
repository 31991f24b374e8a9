"""Memory as knapsacks: one constraint per kept time point where it can bind.

At kept point ``p`` the model's memory says ``sum of usage_of(k)[x[term_var[k]]]
over the terms k live at p (term_lo <= p < term_hi) <= limit - base[p]``. A
variable may own several terms live at one point (see :class:`Model`): their
usages add up value by value, so each knapsack holds one weight vector per
variable, merged here. This module is the one builder of those knapsacks:
toulbar2 and rc2 post them, the file formats write them, large neighbourhood
search merges its rows' terms with :func:`merge_terms`.

Usages are in units of their greatest common divisor (exact: every load is a
multiple of it, so ``load <= limit - base`` iff ``load / g <= floor((limit -
base) / g)``). A point is *binding* when its live terms could pass its room;
elsewhere nothing needs stating.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import reduce as fold
from typing import NamedTuple

import numpy as np

from .csr import offsets, ranks
from .model import Model


class Units(NamedTuple):
    unit: int  # the usages' greatest common divisor
    room: np.ndarray  # per kept point, in units
    usage: np.ndarray  # per term value, in units (like model.term_usage)


def units(model: Model) -> Units | None:
    """The model's memory in units, or None when it has no memory to state."""
    if model.limit is None or not len(model.base) or not len(model.term_var):
        return None
    g = fold(math.gcd, [int(u) for u in np.unique(model.term_usage) if u], 0) or 1
    return Units(g, (model.limit - model.base) // g, model.term_usage // g)


def most_load(model: Model, usage: np.ndarray) -> np.ndarray:
    """Per point, the largest load its live terms could reach (in units)."""
    top = np.maximum.reduceat(usage, model.term_off[:-1]) if len(usage) else usage
    return model.live_sum(top)


def binding(model: Model, mem: Units) -> np.ndarray:
    """The points where memory can bind."""
    return np.flatnonzero(most_load(model, mem.usage) > mem.room)


def knapsack_size(model: Model, mem: Units) -> int:
    """How many (point, value) entries the knapsacks of all binding points hold
    (counted per term: an upper bound when a variable has several terms)."""
    nz = np.add.reduceat((mem.usage > 0).astype(np.int64), model.term_off[:-1])
    binds = np.zeros(len(model.base) + 1, dtype=np.int64)
    binds[1:] = np.cumsum(np.isin(np.arange(len(model.base)), binding(model, mem)))
    return int((nz * (binds[model.term_hi] - binds[model.term_lo])).sum())


class Knapsacks(NamedTuple):
    """Entries of consecutive knapsacks, sorted by point, variable, value: the
    value ``val`` of variable ``var`` uses ``weight`` units at ``point``."""

    point: np.ndarray
    var: np.ndarray
    val: np.ndarray
    weight: np.ndarray


def knapsacks(model: Model, mem: Units, block: int = 64) -> Iterator[Knapsacks]:
    """The knapsacks of the binding points, ``block`` points at a time (a
    variable's terms live at the same point merged into one entry per value)."""
    sizes = np.diff(model.term_off)
    value = ranks(sizes)
    nz = mem.usage > 0
    nz_term = np.repeat(np.arange(len(sizes)), sizes)[nz]
    nz_off = offsets(np.bincount(nz_term, minlength=len(sizes)))
    nz_value, nz_units = value[nz], mem.usage[nz]
    has = np.diff(nz_off) > 0
    width = int(model.dom_size.max())
    points = binding(model, mem)
    for lo in range(0, len(points), block):
        chunk = points[lo : lo + block]
        p0, p1 = int(chunk[0]), int(chunk[-1]) + 1
        live = np.flatnonzero((model.term_lo < p1) & (model.term_hi > p0) & has)
        a = np.maximum(model.term_lo[live], p0)
        span = np.minimum(model.term_hi[live], p1) - a
        pair_term = np.repeat(live, span)
        pair_point = np.repeat(a, span) + ranks(span)
        keep = np.isin(pair_point, chunk)
        pair_term, pair_point = pair_term[keep], pair_point[keep]
        n_nz = np.diff(nz_off)[pair_term]
        at = np.repeat(nz_off[pair_term], n_nz) + ranks(n_nz)
        point = np.repeat(pair_point, n_nz)
        var = model.term_var[np.repeat(pair_term, n_nz)]
        key = (point * model.nv + var) * width + nz_value[at]
        keys, inverse = np.unique(key, return_inverse=True)
        weight = np.zeros(len(keys), dtype=np.int64)
        np.add.at(weight, inverse, nz_units[at])
        pv = keys // width
        yield Knapsacks(pv // model.nv, pv % model.nv, keys % width, weight)


class Knapsack(NamedTuple):
    """``sum of weights[i][x[variables[i]]] <= room`` at kept point ``point``."""

    point: int
    variables: np.ndarray  # sorted
    weights: list[np.ndarray]  # per variable, the units each of its values uses
    room: int  # in units (negative: nothing fits)


class SparseKnapsack(NamedTuple):
    """The same knapsack, only its nonzero weights: variable ``variables[i]``'s
    values ``values[off[i]:off[i + 1]]`` (ascending) use ``weights[...]`` units."""

    point: int
    variables: np.ndarray  # sorted
    off: np.ndarray
    values: np.ndarray
    weights: np.ndarray
    room: int


def sparse_knapsacks(model: Model) -> Iterator[SparseKnapsack]:
    """The knapsack of each binding point, in order (none without memory), as
    flat arrays: what toulbar2's knapsack parameters list."""
    mem = units(model)
    if mem is None:
        return
    for block in knapsacks(model, mem):
        starts = np.flatnonzero(np.r_[True, block.point[1:] != block.point[:-1]])
        ends = np.r_[starts[1:], len(block.point)]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            var = block.var[a:b]
            firsts = np.flatnonzero(np.r_[True, var[1:] != var[:-1]])
            point = int(block.point[a])
            yield SparseKnapsack(
                point, var[firsts], np.r_[firsts, b - a], block.val[a:b], block.weight[a:b],
                int(mem.room[point]),
            )  # fmt: skip


def binding_knapsacks(model: Model) -> Iterator[Knapsack]:
    """The knapsack of each binding point, in order (none without memory)."""
    for k in sparse_knapsacks(model):
        weights = []
        bounds = k.off.tolist()
        for v, i, j in zip(k.variables.tolist(), bounds[:-1], bounds[1:], strict=True):
            w = np.zeros(int(model.dom_size[v]), dtype=np.int64)
            w[k.values[i:j]] = k.weights[i:j]
            weights.append(w)
        yield Knapsack(k.point, k.variables, weights, k.room)


def merge_terms(model: Model, terms: np.ndarray) -> tuple[list[int], list[np.ndarray]]:
    """The variables of ``terms`` (first-seen order) and each one's usage per
    value, its terms' usages added (raw usages, not units)."""
    per_var: dict[int, np.ndarray] = {}
    for k in terms.tolist():
        v, use = int(model.term_var[k]), model.usage_of(k)
        per_var[v] = per_var[v] + use if v in per_var else use
    return list(per_var), list(per_var.values())
