"""Lower bounds by reparametrisation (min-sum diffusion), cheap enough for any model.

A pairwise problem ``min_x sum_v theta_v(x_v) + sum_e theta_e(x_u, x_v)`` keeps
its value for every ``x`` when an edge hands part of its cost to an endpoint:
with a *message* ``phi[e, v](a)``,

    theta_v(a)    += phi[e, v](a)
    theta_e(a, b) -= phi[e, v](a)

Whatever the messages, every term is at least its own minimum, so

    LB = sum_v min theta_v + sum_e min theta_e

is a lower bound on the optimum. *Min-sum diffusion* (Schlesinger) chooses the
messages to raise it: at a variable ``v`` with ``d`` edges, the min-marginals
``m_e(a) = min_b theta_e(a, b)`` of its edges and its own ``theta_v(a)`` are
levelled to their mean ``t(a) / (d + 1)``. Variables are levelled one after
another (Gauss-Seidel, forward and backward in turn), each seeing the messages
its neighbours just sent: compiled (numba), one sweep is two passes over every
table entry (S: 2.7 million entries, 14 ms; the colour-class numpy sweep it
replaced took 170 ms and converged more slowly). The bound never needs
convergence to be valid.

:class:`TRWS` updates the same messages as sequential tree-reweighted message
passing does (Kolmogorov, *Convergent tree-reweighted message passing*, PAMI
2006): a variable pulls every incident edge's min-marginal in, as diffusion
does, then hands its whole cost on to the edges towards variables later in
the sweep's direction, a share ``1 / max(earlier, later)`` each, and keeps the
rest. Along a chain the cost then travels the whole chain in one sweep, where
diffusion moves it one edge a sweep: on the frameworks' memory-free models
(long chains of repeated blocks) its bound meets the optimum 3-4 times sooner
(history: *TRW-S in the free rounds*). Its solutions are decoded in the same
order (:meth:`TRWS.decode`): each variable takes the value that is best given
the values of the variables before it and the min-marginals of the rest.

Memory enters through Lagrange multipliers ``lam >= 0`` per kept point: for
``x`` that fits, ``cost(x) >= cost(x) + sum_p lam_p (load_p(x) - limit)``, and
the right side is a pairwise problem with penalised unary costs (see
:func:`maxshard.backends.lagrange.penalties`) minus the constant ``sum_p lam_p
(limit - base_p)``. So the bound holds for the model with memory too, for any
multipliers; :mod:`maxshard.backends.dual` chooses them well.

Arithmetic is in float64; the bound is shrunk by a relative 1e-9 before it is
rounded down to an integer, far more than the rounding error of these sums.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from . import work
from .csr import grouped, offsets
from .instance import FORBIDDEN
from .model import Model, segment_argmin


class Diffusion:
    """Messages of one model, kept between calls (a warm start for new multipliers)."""

    #: swept as TRW-S (:class:`TRWS`), not as diffusion
    trws = False

    def __init__(self, model: Model) -> None:
        self.model = model
        self.usable = not bool((model.unary >= FORBIDDEN).any())
        dom = model.dom_size
        self.row_base = offsets(dom[model.edge_u])  # message slot of (edge, first end's value)
        self.col_base = offsets(dom[model.edge_v])
        self.phi_row = np.zeros(int(self.row_base[-1]))
        self.phi_col = np.zeros(int(self.col_base[-1]))
        self.cost = model.edge_cost.astype(np.float64)
        self.inc_off, order = grouped(np.concatenate([model.edge_u, model.edge_v]), model.nv)
        self.inc_edge = (order % max(1, model.m)).astype(np.int64)
        self.inc_side = (order >= model.m).astype(np.int64)  # 0: the row end, 1: the column end
        width = int((np.diff(self.inc_off) * dom).max()) if model.nv else 0
        self.scratch = np.zeros(max(1, width))
        self.total = np.zeros(int(dom.max()) if model.nv else 1)  # a variable's pulled-in cost
        self.forward = True

    def restore(self, state: dict) -> None:
        """Go on from the messages of ``state`` (``"phi_row"``, ``"phi_col"``: see
        :func:`maxshard.ascent.state_of`) when they are this model's."""
        row, col = state.get("phi_row", ()), state.get("phi_col", ())
        if len(row) == len(self.phi_row) and len(col) == len(self.phi_col):
            self.phi_row, self.phi_col = np.array(row), np.array(col)

    def sweep(self, unary: np.ndarray) -> None:
        """Level every variable once (TRW-S: pass it), for (penalised) unary costs
        ``unary``.

        (Soft minima in the min-marginals, the smoothed dual, were tried at the
        ascent's stall on S: from 1,511,160,841 after 200 s, 60 s of them at
        temperatures 3 and 100 ended at 1,511,164,267 and below the start,
        plain sweeps at 1,511,171,267; each sweep took ten times as long.)"""
        if not self.model.m:
            return
        m = self.model
        _sweep(
            self.forward, m.dom_off, self.inc_off, self.inc_edge, self.inc_side,
            m.edge_u, m.edge_v, m.edge_off, m.dom_size[m.edge_v], self.cost, unary,
            self.phi_row, self.row_base, self.phi_col, self.col_base, self.scratch,
            self.total, self.trws,
        )  # fmt: skip
        self.forward = not self.forward
        work.count("sweep", len(self.cost) + len(unary))
        work.count("call", 0.3)

    def decode(self, unary: np.ndarray) -> np.ndarray:
        """A solution read from the messages: each variable's cheapest value of
        :meth:`node_costs`."""
        return segment_argmin(self.node_costs(unary), self.model.dom_off)

    def node_costs(self, unary: np.ndarray) -> np.ndarray:
        """``theta_v`` for every value: ``unary`` plus the messages it received."""
        m = self.model
        work.count("python", len(unary) + len(self.phi_row) + len(self.phi_col))
        out = unary.astype(np.float64, copy=True)
        _gather(m.dom_off, m.edge_u, m.edge_v, self.phi_row, self.row_base,
                self.phi_col, self.col_base, out)  # fmt: skip
        return out

    def edge_minima(self) -> float:
        """``sum_e min theta_e`` for the current messages."""
        m = self.model
        work.count("sweep", len(self.cost))
        return _edge_minima(m.edge_off, m.dom_size[m.edge_v], self.cost,
                            self.phi_row, self.row_base, self.phi_col, self.col_base)  # fmt: skip

    def value(self, unary: np.ndarray) -> float:
        """The bound ``sum_v min theta_v + sum_e min theta_e`` for these messages."""
        m = self.model
        if not m.nv:
            return 0.0
        nodes = np.minimum.reduceat(self.node_costs(unary), m.dom_off[:-1])
        return float(nodes.sum()) + self.edge_minima()

    def bound(
        self, lam: np.ndarray | None, pen: np.ndarray | None, deadline: float, sweeps: int = 50
    ) -> int | None:
        """Sweep until ``deadline`` (at most ``sweeps`` times) and return the best
        valid integer lower bound on the model's optimum, for multipliers ``lam``
        with penalties ``pen`` (both None: memory ignored, still a bound)."""
        m = self.model
        if not self.usable or not m.nv:
            return None
        unary = m.unary.astype(np.float64) + (0.0 if pen is None else pen)
        best = self.value(unary)
        for _ in range(sweeps):
            if work.now() > deadline:
                break
            self.sweep(unary)
            best = max(best, self.value(unary))
        return integer_bound(m, best, slack(m, lam))


class TRWS(Diffusion):
    """:class:`Diffusion`'s messages, swept and decoded as TRW-S does (the module
    docstring)."""

    trws = True

    def decode(self, unary: np.ndarray) -> np.ndarray:
        """A solution read in sweep order: each variable's value minimising its
        reparametrised cost, the edges to the variables before it at their
        chosen values, and the min-marginals of the edges to the rest."""
        m = self.model
        x = np.empty(m.nv, dtype=np.int64)
        work.count("sweep", len(self.cost))
        _decode(
            m.dom_off, self.inc_off, self.inc_edge, self.inc_side, m.edge_u, m.edge_v,
            m.edge_off, m.dom_size[m.edge_v], self.cost, unary,
            self.phi_row, self.row_base, self.phi_col, self.col_base, x, self.total,
        )  # fmt: skip
        return x


def slack(model: Model, lam: np.ndarray | None) -> float:
    """``sum_p lam_p (limit - base_p)``: what the multipliers promise back."""
    if lam is None or model.limit is None or not len(lam):
        return 0.0
    return dot(lam, (model.limit - model.base).astype(np.float64))


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """``sum(a * b)`` of float arrays, without BLAS. Not ``a @ b``: numpy hands
    a float dot of 10,000 terms or more (M's and S's kept points) to
    OpenBLAS's threads, whose helper then spins on the other core, the one
    another worker runs on (`lagrange` alone on S: 12.5 s of CPU in 8.2 s;
    8.1 s with one thread)."""
    return float(np.sum(a * b))


def integer_bound(model: Model, value: float, promised: float) -> int:
    """The integer bound that the real bound ``value - promised + offset``
    implies: costs are integers, so the optimum is at least its ceiling, taken
    after a margin far larger than the float rounding of the sums behind it
    (a floor here left a tight bound short of the optimum by 1-2)."""
    margin = 1e-9 * (abs(value) + abs(promised)) + 1e-6
    return model.offset + math.ceil(value - promised - margin)


@njit(cache=True, inline="always")
def _pull(
    v, dom_off, inc_off, inc_edge, inc_side, edge_off, ncols, cost, unary,
    phi_row, row_base, phi_col, col_base, m_e, total,
):  # fmt: skip
    """The min-marginal of every edge at ``v`` (``m_e[j * d + a]``, strided through
    its table), and ``v``'s cost with all of them pulled in (``total[a]``)."""
    first, d = dom_off[v], dom_off[v + 1] - dom_off[v]
    k0, deg = inc_off[v], inc_off[v + 1] - inc_off[v]
    for j in range(deg):
        e, nc = inc_edge[k0 + j], ncols[inc_edge[k0 + j]]
        base = edge_off[e]
        if inc_side[k0 + j] == 0:  # v is the row end: a row per value, the columns' messages
            for a in range(d):
                m = _marginal(cost, base + a * nc, 1, nc, phi_col, col_base[e])
                m_e[j * d + a] = m - phi_row[row_base[e] + a]
        else:  # v is the column end
            nr = (edge_off[e + 1] - base) // nc
            for b in range(d):
                m = _marginal(cost, base + b, nc, nr, phi_row, row_base[e])
                m_e[j * d + b] = m - phi_col[col_base[e] + b]
    for a in range(d):
        t = unary[first + a]
        for j in range(deg):
            e = inc_edge[k0 + j]
            if inc_side[k0 + j] == 0:
                t += phi_row[row_base[e] + a] + m_e[j * d + a]
            else:
                t += phi_col[col_base[e] + a] + m_e[j * d + a]
        total[a] = t


@njit(cache=True)
def _sweep(
    forward, dom_off, inc_off, inc_edge, inc_side, edge_u, edge_v, edge_off, ncols, cost,
    unary, phi_row, row_base, phi_col, col_base, m_e, total, trws,
):  # fmt: skip
    """One sweep of diffusion (``trws`` false: every edge's min-marginal and
    the variable levelled to their mean) or of TRW-S (each edge ahead gets
    ``1 / max(behind, ahead)`` of the variable's cost, those behind nothing)."""
    nv = len(dom_off) - 1
    for step in range(nv):
        v = step if forward else nv - 1 - step
        d = dom_off[v + 1] - dom_off[v]
        k0, deg = inc_off[v], inc_off[v + 1] - inc_off[v]
        if deg == 0:
            continue
        _pull(v, dom_off, inc_off, inc_edge, inc_side, edge_off, ncols, cost, unary,
              phi_row, row_base, phi_col, col_base, m_e, total)  # fmt: skip
        if trws:
            ahead = 0  # edges towards variables later in this sweep
            for j in range(deg):
                e = inc_edge[k0 + j]
                ahead += ((edge_v[e] if inc_side[k0 + j] == 0 else edge_u[e]) > v) == forward
            share = 1.0 / max(ahead, deg - ahead)
            for a in range(d):  # what an edge ahead is left with
                total[a] *= share
        else:
            for a in range(d):  # the level every edge is left with
                total[a] /= deg + 1
        for j in range(deg):
            e = inc_edge[k0 + j]
            row = inc_side[k0 + j] == 0
            gets = not trws or ((edge_v[e] if row else edge_u[e]) > v) == forward
            for a in range(d):
                give = m_e[j * d + a] - (total[a] if gets else 0.0)
                if row:
                    phi_row[row_base[e] + a] += give
                else:
                    phi_col[col_base[e] + a] += give


@njit(cache=True)
def _decode(
    dom_off, inc_off, inc_edge, inc_side, edge_u, edge_v, edge_off, ncols, cost, unary,
    phi_row, row_base, phi_col, col_base, x, score,
):  # fmt: skip
    # theta_v(a) + theta_e(a, b) = unary(a) + cost_e(a, b) - phi[e, w](b): v's own
    # messages cancel, only its neighbours' count
    x[:] = -1
    for v in range(len(dom_off) - 1):
        first, d = dom_off[v], dom_off[v + 1] - dom_off[v]
        k0, deg = inc_off[v], inc_off[v + 1] - inc_off[v]
        for a in range(d):
            score[a] = unary[first + a]
        for j in range(deg):
            e, nc = inc_edge[k0 + j], ncols[inc_edge[k0 + j]]
            base = edge_off[e]
            if inc_side[k0 + j] == 0:  # v is the row end
                w = x[edge_v[e]]
                for a in range(d):
                    if w >= 0:
                        score[a] += cost[base + a * nc + w] - phi_col[col_base[e] + w]
                    else:
                        score[a] += _marginal(cost, base + a * nc, 1, nc, phi_col, col_base[e])
            else:
                w = x[edge_u[e]]
                nr = (edge_off[e + 1] - base) // nc
                for b in range(d):
                    if w >= 0:
                        score[b] += cost[base + w * nc + b] - phi_row[row_base[e] + w]
                    else:
                        score[b] += _marginal(cost, base + b, nc, nr, phi_row, row_base[e])
        best, arg = np.inf, 0
        for a in range(d):
            if score[a] < best:
                best, arg = score[a], a
        x[v] = arg


@njit(cache=True)
def _marginal(cost, start, step, count, phi, phi0):
    """``min_k cost[start + k step] - phi[phi0 + k]`` over ``k < count``."""
    best = np.inf
    for k in range(count):
        t = cost[start + k * step] - phi[phi0 + k]
        if t < best:
            best = t
    return best


@njit(cache=True)
def _gather(dom_off, edge_u, edge_v, phi_row, row_base, phi_col, col_base, out):
    for e in range(len(edge_u)):
        u0, v0 = dom_off[edge_u[e]], dom_off[edge_v[e]]
        for a in range(row_base[e + 1] - row_base[e]):
            out[u0 + a] += phi_row[row_base[e] + a]
        for b in range(col_base[e + 1] - col_base[e]):
            out[v0 + b] += phi_col[col_base[e] + b]


@njit(cache=True)
def _edge_minima(edge_off, ncols, cost, phi_row, row_base, phi_col, col_base):
    total = 0.0
    for e in range(len(ncols)):
        nc, base = ncols[e], edge_off[e]
        best = np.inf
        for a in range((edge_off[e + 1] - base) // nc):
            pa = phi_row[row_base[e] + a]
            for b in range(nc):
                t = cost[base + a * nc + b] - pa - phi_col[col_base[e] + b]
                if t < best:
                    best = t
        total += best
    return total
