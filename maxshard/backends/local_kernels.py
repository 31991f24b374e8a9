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
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..model import Model, offsets


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


def graph(model: Model, limit: int) -> Graph:
    """The flat arrays of ``model`` that the kernels read."""
    ncols = model.dom_size[model.edge_v]
    owner = np.concatenate([model.edge_u, model.edge_v])
    order = np.argsort(owner, kind="stable")
    ones = np.ones(model.m, dtype=np.int64)
    terms = np.argsort(model.term_var, kind="stable")
    return Graph(
        dom_off=model.dom_off.astype(np.int64),
        unary=model.unary.astype(np.float64),
        adj_off=offsets(np.bincount(owner, minlength=model.nv)),
        adj_nbr=np.concatenate([model.edge_v, model.edge_u])[order].astype(np.int64),
        adj_tab=np.concatenate([model.edge_off[:-1], model.edge_off[:-1]])[order].astype(np.int64),
        adj_own=np.concatenate([ncols, ones])[order].astype(np.int64),
        adj_other=np.concatenate([ones, ncols])[order].astype(np.int64),
        table=model.edge_cost.astype(np.float64),
        term_off=offsets(np.bincount(model.term_var, minlength=model.nv)),
        term_lo=model.term_lo[terms].astype(np.int64),
        term_hi=model.term_hi[terms].astype(np.int64),
        term_use=model.term_off[:-1][terms].astype(np.int64),
        usage=model.term_usage.astype(np.int64),
        limit=int(limit),
    )


NO_TABLE = np.zeros((0, 0), dtype=np.int64)  # range maxima by scanning


@njit(cache=True)
def seed(value: int) -> None:
    np.random.seed(value)


@njit(cache=True)
def value_costs(g, v, x, cost):
    """Fill ``cost[:d]`` with the cost of each value of ``v`` given its
    neighbours; returns ``d``."""
    a0 = g.dom_off[v]
    d = g.dom_off[v + 1] - a0
    for a in range(d):
        cost[a] = g.unary[a0 + a]
    for j in range(g.adj_off[v], g.adj_off[v + 1]):
        start = g.adj_tab[j] + x[g.adj_nbr[j]] * g.adj_other[j]
        stride = g.adj_own[j]
        for a in range(d):
            cost[a] += g.table[start + a * stride]
    return d


@njit(cache=True)
def range_max(load, peaks, lo, hi):
    """max(load[lo:hi]), from the sparse table ``peaks`` if it has rows, else by a scan."""
    if len(peaks):
        j = 0
        while 2 << j <= hi - lo:
            j += 1
        return max(peaks[j, lo], peaks[j, hi - (1 << j)])
    peak = load[lo]
    for p in range(lo + 1, hi):
        if load[p] > peak:
            peak = load[p]
    return peak


@njit(cache=True)
def sparse_table(load):
    """Row j holds the maxima of load over windows of 2**j points."""
    n = len(load)
    rows = 1
    while 1 << rows <= n:
        rows += 1
    peaks = np.empty((rows, n), dtype=load.dtype)
    peaks[0] = load
    for j in range(1, rows):
        half = 1 << (j - 1)
        for i in range(n - (1 << j) + 1):
            peaks[j, i] = max(peaks[j - 1, i], peaks[j - 1, i + half])
    return peaks


@njit(cache=True)
def value_fits(g, v, x, load, peaks, ok, d, decrease_ok):
    """Fill ``ok[:d]``: the value keeps every point of ``v``'s terms within the
    limit (with ``decrease_ok``, a value that adds nothing anywhere passes too,
    even where the point is already over). ``peaks``: see :func:`range_max`."""
    for a in range(d):
        ok[a] = True
    xv = x[v]
    for k in range(g.term_off[v], g.term_off[v + 1]):
        lo, hi = g.term_lo[k], g.term_hi[k]
        if hi <= lo:
            continue
        room = g.limit - range_max(load, peaks, lo, hi)
        u0 = g.term_use[k]
        now = g.usage[u0 + xv]
        for a in range(d):
            extra = g.usage[u0 + a] - now
            if extra > room and not (decrease_ok and extra <= 0):
                ok[a] = False


@njit(cache=True)
def options(g, v, x, load, cost, ok):
    """Fill ``cost[:d]`` (value costs given the neighbours) and ``ok[:d]`` (the
    value keeps every point of ``v``'s terms within the limit); returns ``d``."""
    d = value_costs(g, v, x, cost)
    value_fits(g, v, x, load, NO_TABLE, ok, d, False)
    return d


@njit(cache=True)
def repair_move(g, p, x, load, cost, ok):
    """The change that saves usage at point ``p`` at the smallest cost increase
    per unit saved, among the changes that add usage to no point already at
    (or that would go over) the limit. Returns (variable, value), or (-1, -1)."""
    best_ratio, best_v, best_a = np.inf, -1, -1
    peaks = sparse_table(load)  # hundreds of variables ask for range maxima here
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
        value_fits(g, v, x, load, peaks, ok, d, True)
        for a in range(d):
            saved = now - g.usage[u0 + a]
            if ok[a] and saved > 0:
                ratio = (cost[a] - cost[x[v]]) / saved
                if ratio < best_ratio:
                    best_ratio, best_v, best_a = ratio, v, a
    return best_v, best_a


@njit(cache=True)
def move(g, v, value, x, load):
    """Give ``v`` the value ``value``, updating the load of its terms' points."""
    xv = x[v]
    for k in range(g.term_off[v], g.term_off[v + 1]):
        change = g.usage[g.term_use[k] + value] - g.usage[g.term_use[k] + xv]
        if change != 0:
            for p in range(g.term_lo[k], g.term_hi[k]):
                load[p] += change
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
def descend(g, x, load, stack, n, queued, max_steps, cost, ok, log, n_log):
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
        d = options(g, v, x, load, cost, ok)
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
        move(g, v, best, x, load)
        n = push_neighbours(g, v, stack, n, queued)
    return gain, n, n_log


@njit(cache=True)
def iterate(g, x, load, n_iter, stack, queued, cost, ok, log, stamp):
    """``n_iter`` steps of iterated local search: re-draw a random connected set
    of 2-8 variables among their fitting values, descend from there, and keep
    the result only if it is cheaper (else undo it). (Sets of up to 32 were
    tried on S from a stalled solution: no better in 60 s.)"""
    nv = len(x)
    region = np.empty(8, dtype=np.int64)
    for it in range(n_iter):
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
            d = options(g, v, x, load, cost, ok)
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
            move(g, v, a, x, load)
        settle(g, x, load, region[:got], stack, queued, cost, ok, log, n_log, delta)
    stamp[nv] += n_iter


@njit(cache=True)
def undo(g, x, load, log, n_log):
    """Take back the moves logged in ``log[:2 * n_log]``, last first."""
    for i in range(n_log - 1, -1, -1):
        move(g, log[2 * i], log[2 * i + 1], x, load)


@njit(cache=True)
def settle(g, x, load, members, stack, queued, cost, ok, log, n_log, delta):
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
    gain, n, n_log = descend(g, x, load, stack, n, queued, 1 << 30, cost, ok, log, n_log)
    for i in range(n):  # a full log left some queued
        queued[stack[i]] = False
    if delta - gain < -0.5:  # costs are integers: anything smaller is rounding
        return gain - delta
    undo(g, x, load, log, n_log)
    return 0.0


@njit(cache=True)
def exchange(g, v, a, x, load, stack, queued, cost, ok, log, max_repairs):
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
    move(g, v, a, x, load)
    fixed = False
    for _ in range(max_repairs):
        p = np.argmax(load)
        if load[p] <= g.limit:
            fixed = True
            break
        u, b = repair_move(g, p, x, load, cost, ok)
        if u < 0 or u == v:  # stuck, or undoing the move itself
            break
        value_costs(g, u, x, cost)
        delta += cost[b] - cost[x[u]]
        log[2 * n_log], log[2 * n_log + 1] = u, x[u]
        n_log += 1
        move(g, u, b, x, load)
    if fixed:  # the changed variables are the logged ones
        return settle(g, x, load, log[: 2 * n_log : 2], stack, queued, cost, ok, log, n_log, delta)
    undo(g, x, load, log, n_log)
    return 0.0


@njit(cache=True)
def exchanges(g, x, load, order, tries, stack, queued, cost, ok, log):
    """For each variable of ``order``: try :func:`exchange` toward its ``tries``
    cheapest values that memory blocks and that beat its current value, until one
    is kept."""
    blocked = np.empty(len(cost))
    values = np.empty(len(cost), dtype=np.int64)
    for v in order:
        d = options(g, v, x, load, cost, ok)
        now = cost[x[v]]
        k = 0
        for a in range(d):
            if not ok[a] and cost[a] < now - 0.5:
                blocked[k], values[k] = cost[a], a
                k += 1
        ranked = values[:k][np.argsort(blocked[:k])]
        for i in range(min(k, tries)):
            if exchange(g, v, ranked[i], x, load, stack, queued, cost, ok, log, 200) > 0:
                break
