"""Pseudo-Boolean optimisation (OPB, the PB competition format, linear).

Variables ``x1 .. xN``: ``x(dom_off[v] + a + 1)`` says variable ``v`` takes
value ``a``; then one ``y`` per allowed table entry, a constant one, and the
bits of the memory levels when memory is written as running sums. Only
``=`` and ``>=`` relations are written, as in the competition's format:

* each variable takes exactly one value (``sum = 1``); a forbidden value is 0;
* pairs in the local-polytope form of the MIP (as the ``highs`` backend and
  the LP/MPS export): per table row ``sum_b y_ab - x_a = 0``, per column the
  same; a forbidden entry has no ``y``, so its two values exclude each other.
  Exact for 0/1 values, and LP-based PB solvers prune with it (SCIP proves a
  300-node cut of G in 2 s; with ``y >= x_a + x_b - 1`` it did not in 40 s);
* the objective ``sum c x + sum c y + offset * one`` (``one = 1``): the
  model's cost exactly;
* memory, usages in units of their greatest common divisor, either as one
  knapsack per point where it can bind (``-sum usage x >= -room``; while they
  hold at most :data:`KNAPSACK_ENTRIES` entries) or, beyond, as a running sum:
  a ``B``-bit level ``L_p`` per kept point with ``L_p - L_(p-1) - (usage
  starting at p) + (usage ending at p) >= 0`` and ``-L_p >= -room_p``. By
  induction ``L_p`` is at least the load at ``p``, so the rooms bound the
  loads, and a fitting assignment satisfies both with ``L_p`` its load.

An answer is a solver's ``v`` lines: ``v x1 -x2 x3 ...``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..csr import offsets, ranks
from ..instance import FORBIDDEN
from ..knapsack import knapsack_size, knapsacks
from ..model import Model, running_sum, table_slots
from . import FormatError, Header, checked_units, one_value_each, open_out, v_lines
from .text import Kinds

#: token kinds: coefficient (+c or -c), variable, ">= rhs" or "= rhs", constraint
#: end, objective start
POS, NEG, VAR, GEQ, EQ, END, OBJ = 0, 1, 2, 3, 4, 5, 6
KINDS = Kinds(
    [" +", " ", " x", " >= ", " = ", " ;\n", "min:"], [True, True, True, True, True, False, False]
)


def terms(coef: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens ``+c xv`` / ``-c xv`` for each coefficient and variable."""
    vals = np.column_stack([coef, var]).ravel()
    kinds = np.column_stack([np.where(coef >= 0, POS, NEG), np.full(len(var), VAR)]).ravel()
    return vals, kinds


class Constraints:
    """``>=`` constraints of any length, streamed and counted."""

    def __init__(self, out) -> None:
        self.out, self.count = out, 0

    def add(
        self, coef: np.ndarray, var: np.ndarray, row_off: np.ndarray, rhs: np.ndarray, rel=GEQ
    ) -> None:
        """Row ``i``: ``sum coef[k] x var[k] >= rhs[i]`` (``=`` with ``rel=EQ``) over
        ``k`` in its CSR slice."""
        n = len(row_off) - 1
        if n <= 0:
            return
        vals, kinds = terms(coef, var)
        lengths = 2 * np.diff(row_off) + 2  # the terms, then ">= rhs" and ";"
        ends = np.cumsum(lengths)
        out_v = np.zeros(int(ends[-1]), dtype=np.int64)
        out_k = np.zeros(len(out_v), dtype=np.int64)
        body = np.ones(len(out_v), dtype=bool)
        body[ends - 2] = body[ends - 1] = False
        out_v[body], out_k[body] = vals, kinds
        out_v[ends - 2], out_k[ends - 2], out_k[ends - 1] = rhs, rel, END
        self.out.write(KINDS.render(out_v, out_k))
        self.count += n

    def fixed(
        self, coefs: np.ndarray, var: np.ndarray, width: int, rhs: np.ndarray, rel=GEQ
    ) -> None:
        """Constraints of ``width`` terms each (``coefs``/``var`` row by row)."""
        n = len(rhs)
        self.add(np.ravel(coefs), np.ravel(var), np.arange(n + 1) * width, rhs, rel)


#: most knapsack entries written; past it memory is written as running sums
#: (A: 2.2 million entries, N 21.5, U 25.3, M 59.1, S 100.7)
KNAPSACK_ENTRIES = 5_000_000


def write(model: Model, path: Path, header: Header) -> dict:
    nval = int(model.dom_off[-1])
    allowed = np.flatnonzero(model.edge_cost < FORBIDDEN)
    y = nval + 1 + np.arange(len(allowed))
    one = nval + len(allowed) + 1
    mem = checked_units(model)
    knapsack = mem is not None and knapsack_size(model, mem) <= KNAPSACK_ENTRIES
    width = max(1, int(mem.room.max()).bit_length()) if mem is not None else 0
    levels = 0 if mem is None or knapsack else len(model.base) * width
    slots = table_slots(model.dom_off, model.edge_u, model.edge_v, len(model.edge_cost))
    banned_unary = np.flatnonzero(model.unary >= FORBIDDEN)
    with open_out(path) as out, tempfile.TemporaryFile() as body:
        rows = Constraints(body)  # the constraints, counted as they are written
        ones = np.ones(nval, dtype=np.int64)
        rows.add(ones, np.arange(1, nval + 1), model.dom_off, np.ones(model.nv, np.int64), EQ)
        rows.fixed(-np.ones(len(banned_unary), np.int64), banned_unary + 1, 1,
                   np.zeros(len(banned_unary), np.int64))  # fmt: skip
        rows.fixed(np.array([1]), np.array([one]), 1, np.array([1]), EQ)
        _pairs(model, rows, slots, allowed, y)
        if mem is not None:
            if knapsack:
                for k in knapsacks(model, mem):
                    _knapsack_rows(rows, k, model, mem)
            else:
                _running_sum(model, rows, mem, width, one + 1)
        count = rows.count
        out.write(f"* #variable= {one + levels} #constraint= {count}\n".encode())
        out.write(f"* {header.line()}\n".encode())
        memory = "none" if mem is None else ("knapsacks" if knapsack else "running sums")
        out.write(
            f"* objective = the model's cost exactly; x(dom_off[v] + a + 1): v takes a; "
            f"memory: {memory}\n".encode()
        )
        paid = np.flatnonzero(model.unary[:nval] < FORBIDDEN)
        paid = paid[model.unary[paid] != 0]
        cost = model.edge_cost[allowed]
        coef = np.concatenate([model.unary[paid], cost[cost != 0], [model.offset]])
        var = np.concatenate([paid + 1, y[cost != 0], [one]])
        vals, kinds = terms(coef, var)
        objective = np.concatenate([[0], vals, [0]]), np.concatenate([[OBJ], kinds, [END]])
        out.write(KINDS.render(*objective))
        body.seek(0)
        shutil.copyfileobj(body, out, 1 << 20)
    return {
        "variables": one + levels,
        "constraints": count,
        "pair variables": len(allowed),
        "memory": memory,
    }


def _pairs(model: Model, rows: Constraints, slots, allowed: np.ndarray, y: np.ndarray) -> None:
    """Per table row and column: its allowed entries' y sum to the value's x."""
    for slot_of, val_of in ((slots.entry_row, slots.row_val), (slots.entry_col, slots.col_val)):
        slot = slot_of[allowed]
        order = np.argsort(slot, kind="stable")
        count = np.bincount(slot, minlength=len(val_of))
        off = offsets(count + 1)  # each row: its y's, then -x
        coef = np.ones(int(off[-1]), dtype=np.int64)
        var = np.empty(len(coef), dtype=np.int64)
        last = off[1:] - 1
        coef[last], var[last] = -1, val_of + 1
        body = np.ones(len(coef), dtype=bool)
        body[last] = False
        var[body] = y[order]
        rows.add(coef, var, off, np.zeros(len(val_of), np.int64), EQ)


def _knapsack_rows(rows: Constraints, k, model: Model, mem) -> None:
    cut = np.flatnonzero(np.diff(k.point)) + 1
    off = np.concatenate([[0], cut, [len(k.point)]])
    rows.add(-k.weight, model.dom_off[k.var] + k.val + 1, off, -mem.room[k.point[off[:-1]]])


def _running_sum(model: Model, rows: Constraints, mem, width: int, first: int) -> None:
    npts = len(model.base)
    levels = first + np.arange(npts * width).reshape(npts, width)
    powers = 2 ** np.arange(width, dtype=np.int64)
    row_off, value, delta = running_sum(model)
    # L_p - L_(p-1) - delta . x >= 0
    n_delta = np.diff(row_off)
    lengths = width + np.where(np.arange(npts) > 0, width, 0) + n_delta
    coef = np.zeros(int(lengths.sum()), dtype=np.int64)
    var = np.zeros(len(coef), dtype=np.int64)
    start = offsets(lengths)[:-1]
    own = start[:, None] + np.arange(width)
    coef[own], var[own] = powers, levels
    prev = (start[1:, None] + width + np.arange(width)) if npts > 1 else np.zeros((0, width), int)
    coef[prev], var[prev] = -powers, levels[:-1]
    body = np.repeat(start + lengths - n_delta, n_delta) + ranks(n_delta)
    coef[body], var[body] = -delta // mem.unit, value + 1
    rows.add(coef, var, offsets(lengths), np.zeros(npts, np.int64))
    # -L_p >= -room_p
    rows.fixed(np.tile(-powers, (npts, 1)), levels, width, -mem.room)


_LIT = re.compile(r"^(-?)x(\d+)$")


def read_answer(model: Model, text: str) -> np.ndarray:
    chosen = np.zeros(int(model.dom_off[-1]), dtype=np.int64)
    for body in v_lines(text):
        for token in body.split():
            lit = _LIT.match(token)
            if lit is None:
                raise FormatError(f"a v line with {token!r}, not a literal like x3 or -x3")
            i = int(lit.group(2))
            if not lit.group(1) and 1 <= i <= len(chosen):
                chosen[i - 1] = 1
    return one_value_each(model, chosen, "answer")
