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
levelled to their mean ``t(a) / (d + 1)``. Variables of one colour of a proper
colouring share no edge, so a whole colour class is levelled at once; a sweep
goes through all classes. The bound never needs convergence to be valid.

Memory enters through Lagrange multipliers ``lam >= 0`` per kept point: for
``x`` that fits, ``cost(x) >= cost(x) + sum_p lam_p (load_p(x) - limit)``, and
the right side is a pairwise problem with penalised unary costs (see
:func:`maxshard.backends.lagrange.penalties`) minus the constant ``sum_p lam_p
(limit - base_p)``. So the bound holds for the model with memory too.

Arithmetic is in float64; the bound is shrunk by a relative 1e-9 before it is
rounded down to an integer, far more than the rounding error of these sums.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .instance import FORBIDDEN
from .model import Model, offsets, table_slots


class Diffusion:
    """Messages of one model, kept between calls (a warm start for new multipliers)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.usable = not bool((model.unary >= FORBIDDEN).any())
        dom = model.dom_size
        slots = table_slots(model.dom_off, model.edge_u, model.edge_v, len(model.edge_cost))
        self.row_val, self.col_val = slots.row_val, slots.col_val
        self.row_start = slots.row_start
        self.entry_row, self.entry_col = slots.entry_row, slots.entry_col
        self.col_order = np.argsort(self.entry_col, kind="stable")
        self.col_start = offsets(np.bincount(self.entry_col, minlength=len(self.col_val)))[:-1]
        self.cost = model.edge_cost.astype(np.float64)
        self.phi_row = np.zeros(len(self.row_val))
        self.phi_col = np.zeros(len(self.col_val))
        colour = _colouring(model)
        var_of = np.repeat(np.arange(model.nv), dom)
        self.value_share = (
            1.0
            / (1 + np.bincount(np.concatenate([model.edge_u, model.edge_v]), minlength=model.nv))[
                var_of
            ]
        )
        row_colour = colour[model.edge_u][slots.row_edge]
        col_colour = colour[model.edge_v][slots.col_edge]
        self.classes = [
            (np.flatnonzero(row_colour == c), np.flatnonzero(col_colour == c))
            for c in range(int(colour.max()) + 1 if model.nv else 0)
        ]

    def _edge_costs(self) -> np.ndarray:
        return self.cost - self.phi_row[self.entry_row] - self.phi_col[self.entry_col]

    def _node_costs(self, unary: np.ndarray) -> np.ndarray:
        n = len(unary)
        return (
            unary
            + np.bincount(self.row_val, self.phi_row, minlength=n)
            + np.bincount(self.col_val, self.phi_col, minlength=n)
        )

    def sweep(self, unary: np.ndarray) -> None:
        """Level every colour class once, for (penalised) unary costs ``unary``."""
        if not self.model.m:
            return
        for rows, cols in self.classes:
            theta_e = self._edge_costs()
            m_row = np.minimum.reduceat(theta_e, self.row_start)[rows]
            m_col = np.minimum.reduceat(theta_e[self.col_order], self.col_start)[cols]
            n = len(unary)
            total = (
                self._node_costs(unary)
                + np.bincount(self.row_val[rows], m_row, minlength=n)
                + np.bincount(self.col_val[cols], m_col, minlength=n)
            )
            level = total * self.value_share
            self.phi_row[rows] += m_row - level[self.row_val[rows]]
            self.phi_col[cols] += m_col - level[self.col_val[cols]]

    def value(self, unary: np.ndarray) -> float:
        """The bound ``sum_v min theta_v + sum_e min theta_e`` for these messages."""
        m = self.model
        nodes = np.minimum.reduceat(self._node_costs(unary), m.dom_off[:-1]) if m.nv else []
        edges = np.minimum.reduceat(self._edge_costs(), m.edge_off[:-1]) if m.m else []
        return float(np.sum(nodes) + np.sum(edges))

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
        slack = 0.0
        if lam is not None and m.limit is not None:
            slack = float(lam @ (m.limit - m.base).astype(np.float64))
        best = self.value(unary)
        for _ in range(sweeps):
            if time.monotonic() > deadline:
                break
            self.sweep(unary)
            best = max(best, self.value(unary))
        value = best - slack
        margin = 1e-9 * (abs(best) + abs(slack)) + 1
        return m.offset + math.floor(value - margin)


def _colouring(model: Model) -> np.ndarray:
    """A greedy proper colouring of the variables (largest degree first)."""
    nbrs: list[list[int]] = [[] for _ in range(model.nv)]
    for u, v in zip(model.edge_u.tolist(), model.edge_v.tolist(), strict=True):
        nbrs[u].append(v)
        nbrs[v].append(u)
    colour = np.full(model.nv, -1, dtype=np.int64)
    for v in sorted(range(model.nv), key=lambda v: -len(nbrs[v])):
        used = {int(colour[w]) for w in nbrs[v]}
        colour[v] = next(c for c in range(len(used) + 1) if c not in used)
    return colour
