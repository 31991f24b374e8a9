"""Compiled inner loops of the memory-feasible local search (numba).

The search spends nearly all its time asking, for one variable, what each of
its values would cost given the neighbours and whether it would fit in memory
(:func:`options`), then moving. In numpy each such question is a dozen small
array operations; compiled, it is one pass over the variable's tables and
memory terms. Measured on S (6,444 variables, domains up to 853): 7.5x more
iterated-local-search steps per second than the numpy version.

All state is flat arrays; ``g`` is the :class:`Graph` tuple. Costs are float64
(exact for clean costs, whose sums stay far below 2**53); callers re-cost
every result exactly. Loads are int64 and exact.

The load per kept point lives in a :class:`Load`: points in blocks of
:data:`BLOCK`, each block with a pending addition and the maximum of its
points. A move adds its change to a term's range and the fit test asks for
the highest load over a range; both take the partial blocks at the ends point
by point and the whole blocks in between at once. Memory terms of weights
span thousands of points (on S a variable's ranges cover 3,473 points on
average): per range that is about 2 x 64 + span / 64 steps instead of span.
Measured on S: see ``local.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..csr import grouped
from ..model import Model


class Graph(NamedTuple):
    dom_off: np.ndarray  # int64[nv+1]
    unary: np.ndarray  # float64 per value
    adj_off: np.ndarray  # int64[nv+1]: slots of each variable's edges
    adj_nbr: np.ndarray  # int64 per slot: the neighbour
    adj_tab: np.ndarray  # int64 per slot: entry of (own value 0, neighbour value 0)
    adj_own: np.ndarray  # int64 per slot: stride of the own value in the table
    adj_other: np.ndarray  # int64 per slot: stride of the neighbour's value
    table: np.ndarray  # float64: all edge tables, row-major
    term_off: np.ndarray  # int64[nv+1]: memory terms of each variable
    term_lo: np.ndarray  # int64 per term: kept-point range [lo, hi)
    term_hi: np.ndarray
    term_use: np.ndarray  # int64 per term: start of its usages (one per value)
    usage: np.ndarray  # int64
    limit: int
    #: int64[1]: table entries and points read so far (the work counted in a
    #: deterministic run, :mod:`maxshard.work`)
    work: np.ndarray


def graph(model: Model, limit: int) -> Graph:
    """The flat arrays of ``model`` that the kernels read."""
    ncols = model.dom_size[model.edge_v]
    adj_off, order = grouped(np.concatenate([model.edge_u, model.edge_v]), model.nv)
    ones = np.ones(model.m, dtype=np.int64)
    term_off, terms = grouped(model.term_var, model.nv)
    return Graph(
        dom_off=model.dom_off.astype(np.int64),
        unary=model.unary.astype(np.float64),
        adj_off=adj_off,
        adj_nbr=np.concatenate([model.edge_v, model.edge_u])[order].astype(np.int64),
        adj_tab=np.concatenate([model.edge_off[:-1], model.edge_off[:-1]])[order].astype(np.int64),
        adj_own=np.concatenate([ncols, ones])[order].astype(np.int64),
        adj_other=np.concatenate([ones, ncols])[order].astype(np.int64),
        table=model.edge_cost.astype(np.float64),
        term_off=term_off,
        term_lo=model.term_lo[terms].astype(np.int64),
        term_hi=model.term_hi[terms].astype(np.int64),
        term_use=model.term_off[:-1][terms].astype(np.int64),
        usage=model.term_usage.astype(np.int64),
        limit=int(limit),
        work=np.zeros(1, dtype=np.int64),
    )


#: points per block of a :class:`Load` (a power of two: ``p >> SHIFT`` is its block)
SHIFT = 6
BLOCK = 1 << SHIFT


class Load(NamedTuple):
    raw: np.ndarray  # int64 per point: its load, less its block's pending addition
    add: np.ndarray  # int64 per block: added to every point of the block
    top: np.ndarray  # int64 per block: the largest raw value in the block


def new_load(values: np.ndarray) -> Load:
    """A :class:`Load` holding ``values`` exactly (no pending additions)."""
    n = len(values)
    blocks = (n + BLOCK - 1) >> SHIFT
    padded = np.full(blocks * BLOCK, np.iinfo(np.int64).min // 4, dtype=np.int64)
    padded[:n] = values
    top = padded.reshape(blocks, BLOCK).max(axis=1) if blocks else padded[:0]
    return Load(values.astype(np.int64).copy(), np.zeros(blocks, dtype=np.int64), top)


def levels(ld: Load) -> np.ndarray:
    """The exact load at every point."""
    return ld.raw + np.repeat(ld.add, BLOCK)[: len(ld.raw)]


@njit(cache=True)
def seed(value: int) -> None:
    np.random.seed(value)


@njit(cache=True)
def _refresh(ld, b):
    """Recompute block ``b``'s largest raw value."""
    lo = b << SHIFT
    hi = min(lo + BLOCK, len(ld.raw))
    top = ld.raw[lo]
    for p in range(lo + 1, hi):
        if ld.raw[p] > top:
            top = ld.raw[p]
    ld.top[b] = top


@njit(cache=True)
def range_add(ld, lo, hi, change):
    """Add ``change`` to the load at points ``lo:hi``."""
    if hi <= lo or change == 0:
        return
    b0, b1 = lo >> SHIFT, (hi - 1) >> SHIFT
    if b0 == b1:
        for p in range(lo, hi):
            ld.raw[p] += change
        _refresh(ld, b0)
        return
    for p in range(lo, (b0 + 1) << SHIFT):
        ld.raw[p] += change
    _refresh(ld, b0)
    for b in range(b0 + 1, b1):
        ld.add[b] += change
    for p in range(b1 << SHIFT, hi):
        ld.raw[p] += change
    _refresh(ld, b1)


@njit(cache=True)
def range_reads(lo, hi):
    """The entries :func:`range_max` reads for points ``lo:hi`` (its work)."""
    b0, b1 = lo >> SHIFT, (hi - 1) >> SHIFT
    if b0 == b1:
        return hi - lo
    return ((b0 + 1) << SHIFT) - lo + (b1 - b0 - 1) + hi - (b1 << SHIFT)


@njit(cache=True)
def range_max(ld, lo, hi):
    """The highest load at points ``lo:hi`` (non-empty)."""
    b0, b1 = lo >> SHIFT, (hi - 1) >> SHIFT
    high = ld.raw[lo] + ld.add[b0]
    if b0 == b1:
        for p in range(lo + 1, hi):
            if ld.raw[p] + ld.add[b0] > high:
                high = ld.raw[p] + ld.add[b0]
        return high
    for p in range(lo + 1, (b0 + 1) << SHIFT):
        if ld.raw[p] + ld.add[b0] > high:
            high = ld.raw[p] + ld.add[b0]
    for b in range(b0 + 1, b1):
        if ld.top[b] + ld.add[b] > high:
            high = ld.top[b] + ld.add[b]
    for p in range(b1 << SHIFT, hi):
        if ld.raw[p] + ld.add[b1] > high:
            high = ld.raw[p] + ld.add[b1]
    return high


@njit(cache=True)
def peak(ld):
    """(point, load) of the most loaded point; (-1, 0) when there are none."""
    best_b = -1
    for b in range(len(ld.top)):
        if best_b < 0 or ld.top[b] + ld.add[b] > ld.top[best_b] + ld.add[best_b]:
            best_b = b
    if best_b < 0:
        return -1, 0
    lo = best_b << SHIFT
    hi = min(lo + BLOCK, len(ld.raw))
    best_p = lo
    for p in range(lo + 1, hi):
        if ld.raw[p] > ld.raw[best_p]:
            best_p = p
    return best_p, ld.raw[best_p] + ld.add[best_b]


@njit(cache=True)
def value_costs(g, v, x, cost):
    """Fill ``cost[:d]`` with the cost of each value of ``v`` given its
    neighbours; returns ``d``."""
    a0 = g.dom_off[v]
    d = g.dom_off[v + 1] - a0
    g.work[0] += d * (1 + g.adj_off[v + 1] - g.adj_off[v])
    for a in range(d):
        cost[a] = g.unary[a0 + a]
    for j in range(g.adj_off[v], g.adj_off[v + 1]):
        start = g.adj_tab[j] + x[g.adj_nbr[j]] * g.adj_other[j]
        stride = g.adj_own[j]
        for a in range(d):
            cost[a] += g.table[start + a * stride]
    return d


@njit(cache=True)
def value_fits(g, v, x, ld, ok, d, decrease_ok):
    """Fill ``ok[:d]``: the value keeps every point of ``v``'s terms within the
    limit (with ``decrease_ok``, a value that adds nothing anywhere passes too,
    even where the point is already over)."""
    for a in range(d):
        ok[a] = True
    xv = x[v]
    g.work[0] += (g.term_off[v + 1] - g.term_off[v]) * d
    for k in range(g.term_off[v], g.term_off[v + 1]):
        lo, hi = g.term_lo[k], g.term_hi[k]
        if hi <= lo:
            continue
        g.work[0] += range_reads(lo, hi)
        room = g.limit - range_max(ld, lo, hi)
        u0 = g.term_use[k]
        now = g.usage[u0 + xv]
        for a in range(d):
            extra = g.usage[u0 + a] - now
            if extra > room and not (decrease_ok and extra <= 0):
                ok[a] = False


@njit(cache=True)
def options(g, v, x, ld, cost, ok):
    """Fill ``cost[:d]`` (value costs given the neighbours) and ``ok[:d]`` (the
    value keeps every point of ``v``'s terms within the limit); returns ``d``."""
    d = value_costs(g, v, x, cost)
    value_fits(g, v, x, ld, ok, d, False)
    return d


@njit(cache=True)
def repair_move(g, p, x, ld, cost, ok):
    """The change that saves usage at point ``p`` at the smallest cost increase
    per unit saved, among the changes that add usage to no point already at
    (or that would go over) the limit. Returns (variable, value), or (-1, -1)."""
    best_ratio, best_v, best_a = np.inf, -1, -1
    g.work[0] += len(g.term_lo)
    for v in range(len(x)):
        covering = -1
        for k in range(g.term_off[v], g.term_off[v + 1]):
            if g.term_lo[k] <= p < g.term_hi[k]:
                covering = k
                break
        if covering < 0:
            continue
        u0 = g.term_use[covering]
        now = g.usage[u0 + x[v]]
        d = g.dom_off[v + 1] - g.dom_off[v]
        saves = False
        for a in range(d):
            if g.usage[u0 + a] < now:
                saves = True
                break
        if not saves:  # already at its least usage here: common at the peak, and
            # skipping it made a call on S 6x faster (1.76 ms to 0.30 ms)
            continue
        value_costs(g, v, x, cost)
        value_fits(g, v, x, ld, ok, d, True)
        for a in range(d):
            saved = now - g.usage[u0 + a]
            if ok[a] and saved > 0:
                ratio = (cost[a] - cost[x[v]]) / saved
                if ratio < best_ratio:
                    best_ratio, best_v, best_a = ratio, v, a
    return best_v, best_a


@njit(cache=True)
def move(g, v, value, x, ld):
    """Give ``v`` the value ``value``, updating the load of its terms' points."""
    xv = x[v]
    for k in range(g.term_off[v], g.term_off[v + 1]):
        change = g.usage[g.term_use[k] + value] - g.usage[g.term_use[k] + xv]
        range_add(ld, g.term_lo[k], g.term_hi[k], change)
    x[v] = value


@njit(cache=True)
def push_neighbours(g, v, stack, n, queued):
    """Queue ``v``'s neighbours that are not queued yet; returns the new stack size."""
    for j in range(g.adj_off[v], g.adj_off[v + 1]):
        w = g.adj_nbr[j]
        if not queued[w]:
            queued[w] = True
            stack[n] = w
            n += 1
    return n


@njit(cache=True)
def descend(g, x, ld, stack, n, queued, max_steps, cost, ok, log, n_log):
    """Best-improvement moves for the variables on ``stack[:n]`` (re-queueing the
    neighbours of each moved one) until it empties or ``max_steps`` pass.

    With ``n_log >= 0`` every move is appended to ``log`` as (variable, old
    value) so the caller can undo it; a full log ends the descent.
    Returns (gain, variables left on the stack, log length)."""
    gain = 0.0
    steps = 0
    while n > 0 and steps < max_steps:
        steps += 1
        n -= 1
        v = stack[n]
        queued[v] = False
        d = options(g, v, x, ld, cost, ok)
        now = cost[x[v]]
        best, best_cost = -1, now
        for a in range(d):
            if ok[a] and cost[a] < best_cost:
                best, best_cost = a, cost[a]
        if best < 0:
            continue
        if n_log >= 0:
            if 2 * n_log + 2 > len(log):
                break
            log[2 * n_log] = v
            log[2 * n_log + 1] = x[v]
            n_log += 1
        gain += now - best_cost
        move(g, v, best, x, ld)
        n = push_neighbours(g, v, stack, n, queued)
    return gain, n, n_log


@njit(cache=True)
def iterate(g, x, ld, n_iter, stack, queued, cost, ok, log, stamp):
    """``n_iter`` steps of iterated local search: re-draw a random connected set
    of 2-8 variables among their fitting values, descend from there, and keep
    the result only if it is cheaper (else undo it). (Sets of up to 32 were
    tried on S from a stalled solution: no better in 60 s.)"""
    nv = len(x)
    region = np.empty(8, dtype=np.int64)
    for it in range(n_iter):
        g.work[0] += 1000  # drawing and undoing a region: its fixed cost
        size = np.random.randint(2, 9)
        mark = it + 1 + stamp[nv]  # stamp[nv] keeps the marks unique across calls
        # a random connected region: neighbours of random members, added if new
        region[0] = np.random.randint(nv)
        stamp[region[0]] = mark
        got, tries = 1, 0
        while got < size and tries < 64:
            tries += 1
            v = region[np.random.randint(got)]
            deg = g.adj_off[v + 1] - g.adj_off[v]
            if deg == 0:
                continue
            w = g.adj_nbr[g.adj_off[v] + np.random.randint(deg)]
            if stamp[w] != mark:
                stamp[w] = mark
                region[got] = w
                got += 1
        delta = 0.0
        n_log = 0
        for i in range(got):
            v = region[i]
            d = options(g, v, x, ld, cost, ok)
            count = 0
            for a in range(d):
                if ok[a]:
                    count += 1
            if count == 0:
                continue
            pick = np.random.randint(count)
            for a in range(d):
                if ok[a]:
                    if pick == 0:
                        break
                    pick -= 1
            delta += cost[a] - cost[x[v]]
            log[2 * n_log] = v
            log[2 * n_log + 1] = x[v]
            n_log += 1
            move(g, v, a, x, ld)
        settle(g, x, ld, region[:got], stack, queued, cost, ok, log, n_log, delta)
    stamp[nv] += n_iter


@njit(cache=True)
def undo(g, x, ld, log, n_log):
    """Take back the moves logged in ``log[:2 * n_log]``, last first."""
    for i in range(n_log - 1, -1, -1):
        move(g, log[2 * i], log[2 * i + 1], x, ld)


@njit(cache=True)
def settle(g, x, ld, members, stack, queued, cost, ok, log, n_log, delta):
    """End a compound change (logged in ``log[:2 * n_log]``, costing ``delta``):
    descend around ``members`` and their neighbours, then keep it all if the
    total is cheaper (returns the gain) or undo it all (returns 0.0)."""
    n = 0
    for v in members:
        if not queued[v]:
            queued[v] = True
            stack[n] = v
            n += 1
        n = push_neighbours(g, v, stack, n, queued)
    gain, n, n_log = descend(g, x, ld, stack, n, queued, 1 << 30, cost, ok, log, n_log)
    for i in range(n):  # a full log left some queued
        queued[stack[i]] = False
    if delta - gain < -0.5:  # costs are integers: anything smaller is rounding
        return gain - delta
    undo(g, x, ld, log, n_log)
    return 0.0


@njit(cache=True)
def exchange(g, v, a, x, ld, stack, queued, cost, ok, log, max_repairs):
    """Give ``v`` the value ``a`` although it overflows memory, win the room back
    with greedy repairs elsewhere (:func:`repair_move` at the most overloaded
    point), descend around every changed variable, and keep it all only if the
    total is cheaper; else undo. Returns the gain (0.0 when undone).

    This is the move a memory-feasible descent cannot make: on S, 201 variables
    of a good solution had a cheaper value that memory alone blocked."""
    value_costs(g, v, x, cost)
    delta = cost[a] - cost[x[v]]
    log[0], log[1] = v, x[v]
    n_log = 1
    move(g, v, a, x, ld)
    fixed = False
    for _ in range(max_repairs):
        p, level = peak(ld)
        if level <= g.limit:
            fixed = True
            break
        u, b = repair_move(g, p, x, ld, cost, ok)
        if u < 0 or u == v:  # stuck, or undoing the move itself
            break
        value_costs(g, u, x, cost)
        delta += cost[b] - cost[x[u]]
        log[2 * n_log], log[2 * n_log + 1] = u, x[u]
        n_log += 1
        move(g, u, b, x, ld)
    if fixed:  # the changed variables are the logged ones
        return settle(g, x, ld, log[: 2 * n_log : 2], stack, queued, cost, ok, log, n_log, delta)
    undo(g, x, ld, log, n_log)
    return 0.0


@njit(cache=True)
def exchanges(g, x, ld, order, tries, stack, queued, cost, ok, log):
    """For each variable of ``order``: try :func:`exchange` toward its ``tries``
    cheapest values that memory blocks and that beat its current value, until one
    is kept."""
    blocked = np.empty(len(cost))
    values = np.empty(len(cost), dtype=np.int64)
    for v in order:
        d = options(g, v, x, ld, cost, ok)
        now = cost[x[v]]
        k = 0
        for a in range(d):
            if not ok[a] and cost[a] < now - 0.5:
                blocked[k], values[k] = cost[a], a
                k += 1
        ranked = values[:k][np.argsort(blocked[:k])]
        for i in range(min(k, tries)):
            if exchange(g, v, ranked[i], x, ld, stack, queued, cost, ok, log, 200) > 0:
                break
