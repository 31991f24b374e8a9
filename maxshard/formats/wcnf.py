"""Weighted MaxSAT (WCNF, the MaxSAT Evaluation format since 2022).

Variables: Boolean ``x`` number ``dom_off[v] + a + 1`` says variable ``v``
takes value ``a``; numbers past the last value are auxiliary. Clauses:

* hard: each variable takes at least one value (one clause) and at most one
  (the sequential "ladder" encoding, three clauses per value);
* costs, first reparametrised so that most table entries become zero
  (:func:`~maxshard.model.reparametrise`): a unary cost ``c > 0`` is a soft
  clause ``-x`` of weight ``c``, a table entry ``c > 0`` of values ``a, b``
  a soft clause ``-x_a -x_b``; forbidden values and pairs the same, hard. The
  cost of an assignment is the stated constant plus the weights of the soft
  clauses it falsifies;
* memory, exactly, as clauses: usages in units of their greatest common
  divisor, each memory term's usage a ``B``-bit number (bit ``j`` true iff
  the chosen value's usage has it), a running sum of ``B`` bits over the kept
  time points, one ripple-carry adder per term start (carry out forbidden:
  the sum has passed any room) and per term end (a subtraction), and at each
  point where memory can bind a comparison of the sum with the room. That is
  ``14 B`` clauses per term start or end: on S (21,661 terms, ``B = 28``)
  about 16 million; the header states the counts.

An answer is a solver's ``v`` line: literals (``v 1 -2 3 ...``) or the
2022+ string of 0s and 1s (``v 0110...``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..csr import offsets
from ..instance import FORBIDDEN
from ..knapsack import most_load
from ..model import Model, reparametrise, usage_values
from . import FormatError, Header, checked_units, one_value_each, open_out, v_lines
from .text import Kinds

#: token kinds: a hard clause's "h", a literal, a clause end, a soft clause's weight
HARD, LIT, END, WEIGHT = 0, 1, 2, 3
KINDS = Kinds(["h", " ", " 0\n", ""], [False, True, False, True])
#: adder steps written per block (bounds the memory the tokens take)
BLOCK = 4096


class Clauses:
    """Clauses streamed to a file as they are made, counted."""

    def __init__(self, out) -> None:
        self.out, self.hard, self.soft, self.literals = out, 0, 0, 0

    def add(self, lits: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Clauses as the rows of ``lits`` (0 entries are skipped: shorter
        clauses), hard, or soft with ``weights``."""
        lits = np.asarray(lits, dtype=np.int64)
        if not len(lits):
            return
        if lits.ndim == 1:
            lits = lits[:, None]
        n, width = lits.shape
        vals = np.zeros((n, width + 2), dtype=np.int64)
        kinds = np.full((n, width + 2), LIT, dtype=np.int64)
        vals[:, 1:-1] = lits
        kinds[:, -1] = END
        if weights is None:
            kinds[:, 0] = HARD
            self.hard += n
        else:
            kinds[:, 0] = WEIGHT
            vals[:, 0] = weights
            self.soft += n
        keep = np.ones_like(vals, dtype=bool)
        keep[:, 1:-1] = lits != 0
        self.literals += int(keep[:, 1:-1].sum())
        self.out.write(KINDS.render(vals[keep], kinds[keep]))

    def add_rows(self, lits: np.ndarray, row_off: np.ndarray) -> None:
        """Hard clauses of any lengths: ``lits[row_off[i]:row_off[i + 1]]``."""
        n = len(row_off) - 1
        if n <= 0:
            return
        lengths = np.diff(row_off) + 2
        start = offsets(lengths)[:-1]
        vals = np.zeros(int(lengths.sum()), dtype=np.int64)
        kinds = np.full(len(vals), LIT, dtype=np.int64)
        kinds[start] = HARD
        kinds[start + lengths - 1] = END
        body = kinds == LIT
        vals[body] = lits
        self.hard += n
        self.literals += len(lits)
        self.out.write(KINDS.render(vals, kinds))


class Ids:
    """Auxiliary variable numbers, handed out in blocks."""

    def __init__(self, first: int) -> None:
        self.next = first

    def take(self, n: int) -> np.ndarray:
        ids = np.arange(self.next, self.next + n, dtype=np.int64)
        self.next += n
        return ids


def write(model: Model, path: Path, header: Header) -> dict:
    unary, tables, constant = reparametrise(model)
    nval = int(model.dom_off[-1])
    ids = Ids(nval + 1)
    with open_out(path) as out:
        out.write(f"c {header.line()}\n".encode())
        out.write(
            b"c cost = constant + weights of the falsified soft clauses; "
            b"x[v,a] = dom_off[v] + a + 1\n"
        )
        out.write(f"c constant {constant}\n".encode())
        clauses = Clauses(out)
        false = int(ids.take(1)[0])
        clauses.add(np.array([-false]))  # a constant: false
        _one_value(model, clauses, ids)
        _costs(model, unary, tables, clauses)
        adders = _memory(model, clauses, ids, false)
        out.write(
            f"c variables {ids.next - 1} hard {clauses.hard} soft {clauses.soft} "
            f"literals {clauses.literals} memory adders {adders}\n".encode()
        )
    return {
        "variables": ids.next - 1,
        "hard clauses": clauses.hard,
        "soft clauses": clauses.soft,
        "memory adders": adders,
    }


def _one_value(model: Model, clauses: Clauses, ids: Ids) -> None:
    """At least one value per variable, and at most one (ladder encoding)."""
    dom = model.dom_size
    clauses.add_rows(np.arange(1, int(model.dom_off[-1]) + 1), model.dom_off)  # at least one
    # ladder: s[i] says "one of the first i+1 values is taken"
    many = np.flatnonzero(dom >= 2)
    steps = dom[many] - 1
    if not len(many):
        return
    s = ids.take(int(steps.sum()))
    var = np.repeat(many, steps)
    i = np.arange(len(s)) - np.repeat(np.cumsum(steps) - steps, steps)
    x_i = model.dom_off[var] + i + 1
    clauses.add(np.column_stack([-x_i, s]))  # x_i -> s_i
    clauses.add(np.column_stack([-s, -(x_i + 1)]))  # s_i -> not x_(i+1)
    chain = i < np.repeat(steps, steps) - 1
    clauses.add(np.column_stack([-s[chain], s[np.flatnonzero(chain) + 1]]))  # s_i -> s_(i+1)


def _costs(model: Model, unary: np.ndarray, tables: list[np.ndarray], clauses: Clauses) -> None:
    lits = np.flatnonzero(unary)
    _weighted(clauses, -(lits + 1)[:, None], unary[lits])
    if not tables:
        return
    flat = np.concatenate([t.ravel() for t in tables])
    k = np.flatnonzero(flat)
    e = np.repeat(np.arange(model.m), [t.size for t in tables])[k]
    pos = k - model.edge_off[e]
    ncols = model.dom_size[model.edge_v[e]]
    a = model.dom_off[model.edge_u[e]] + pos // ncols + 1
    b = model.dom_off[model.edge_v[e]] + pos % ncols + 1
    _weighted(clauses, np.column_stack([-a, -b]), flat[k])


def _weighted(clauses: Clauses, lits: np.ndarray, costs: np.ndarray) -> None:
    hard = costs >= FORBIDDEN
    clauses.add(lits[hard])
    clauses.add(lits[~hard], costs[~hard])


def _memory(model: Model, clauses: Clauses, ids: Ids, false: int) -> int:
    """The running sum of memory as adders, and the room checks; returns the
    number of adders."""
    mem = checked_units(model)
    if mem is None:
        return 0
    room = mem.room
    width = max(1, int(room.max()).bit_length())
    npts = len(model.base)
    usage = mem.usage
    # a value whose usage alone passes every room cannot be chosen
    too_big = np.flatnonzero(usage >= 2**width)
    if len(too_big):
        clauses.add(-(usage_values(model)[too_big] + 1))
    bits = _term_bits(model, usage, width, clauses, ids, false)
    # steps in point order: at point p the terms ending there leave, then those
    # starting there join; the sum after the last step at p is checked
    live = np.flatnonzero(model.term_lo < model.term_hi)  # (a term over no kept point: none)
    ends = live[model.term_hi[live] < npts]
    step_term = np.concatenate([ends, live])
    step_point = np.concatenate([model.term_hi[ends], model.term_lo[live]])
    step_add = np.concatenate([np.zeros(len(ends), bool), np.ones(len(live), bool)])
    order = np.lexsort((step_add, step_point))  # subtractions first at each point
    step_term, step_point, step_add = step_term[order], step_point[order], step_add[order]
    total = len(step_term)
    state = ids.take(total * width).reshape(total, width)  # the sum after each step
    carry = ids.take(total * width).reshape(total, width)  # carry out of each bit
    for lo in range(0, total, BLOCK):
        t = np.arange(lo, min(total, lo + BLOCK))
        before = state[t - 1] if lo else np.vstack([np.full((1, width), false), state[t[1:] - 1]])
        operand = bits[step_term[t]]
        operand = np.where(step_add[t][:, None], operand, -operand)  # subtract: add the complement
        carry_in = np.where(step_add[t], false, -false)  # ... plus one
        c = np.column_stack([carry_in, carry[t, :-1]])
        _adder(clauses, before, operand, c, state[t], carry[t])
        clauses.add(-carry[t[step_add[t]], -1])  # no overflow when adding
    # the check at each point where memory can bind, after its last step
    last = np.searchsorted(step_point, np.arange(npts), side="right") - 1
    most = most_load(model, usage)
    checks = [
        clause
        for p in np.flatnonzero((most > room) & (last >= 0)).tolist()
        for clause in _at_most(state[last[p]], int(room[p]))
    ]
    if checks:
        lengths = np.array([len(c) for c in checks])
        flat = np.array([lit for c in checks for lit in c], dtype=np.int64)
        clauses.add_rows(flat, offsets(lengths))
    return total


def _term_bits(model, units, width, clauses, ids, false) -> np.ndarray:
    """Per term, ``width`` literals: bit j of the chosen value's usage (the
    constant ``false`` where no value of the term has it)."""
    nterm = len(model.term_var)
    sizes = np.diff(model.term_off)
    term_of = np.repeat(np.arange(nterm), sizes)
    value = usage_values(model)
    bits = np.full((nterm, width), false, dtype=np.int64)
    for j in range(width):
        has = ((units >> j) & 1).astype(bool) & (units < 2**width)
        terms = np.unique(term_of[has])
        if not len(terms):
            continue
        fresh = ids.take(len(terms))
        bits[terms, j] = fresh
        owner = np.searchsorted(terms, term_of[has])  # values grouped by term, in order
        x = value[has] + 1
        clauses.add(np.column_stack([-x, fresh[owner]]))  # the value sets the bit
        # the bit needs such a value: -bit, then the term's values with the bit
        count = np.bincount(owner, minlength=len(terms))
        row_off = offsets(count + 1)
        lits = np.empty(int(row_off[-1]), dtype=np.int64)
        lits[row_off[:-1]] = -fresh
        rest = np.ones(len(lits), dtype=bool)
        rest[row_off[:-1]] = False
        lits[rest] = x
        clauses.add_rows(lits, row_off)
    return bits


def _adder(clauses, a, b, c, s, co) -> None:
    """``s = a + b + c`` bit by bit (``c`` the carries in, ``co`` out): the 8
    clauses of a three-way exclusive or and the 6 of a majority, per bit."""
    a, b, c, s, co = (np.ravel(z) for z in (a, b, c, s, co))
    for sa, sb, sc in ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1)):
        # a clause per case (a, b, c) = (sa > 0, sb > 0, sc > 0) of odd parity
        clauses.add(np.column_stack([-sa * a, -sb * b, -sc * c, s]))  # odd: s
        clauses.add(np.column_stack([sa * a, sb * b, sc * c, -s]))  # the even complement: not s
    for x, y in ((a, b), (a, c), (b, c)):
        clauses.add(np.column_stack([-x, -y, co]))
        clauses.add(np.column_stack([x, y, -co]))


def _at_most(bits: np.ndarray, room: int) -> list[list[int]]:
    """Clauses saying the number with these bits (lowest first) is at most
    ``room``: for each bit where the room has 0, that bit is 0 unless a higher
    bit where the room has 1 is 0."""
    width = len(bits)
    ones = [i for i in range(width) if room >> i & 1]
    return [
        [-int(bits[j]), *(-int(bits[i]) for i in ones if i > j)]
        for j in range(width)
        if not room >> j & 1
    ]


def read_answer(model: Model, text: str) -> np.ndarray:
    nval = int(model.dom_off[-1])
    chosen = np.zeros(nval, dtype=np.int64)
    for body in v_lines(text):
        if body and set(body) <= {"0", "1"} and len(body) >= nval:  # the 2022+ string
            chosen |= np.frombuffer(body[:nval].encode(), dtype=np.uint8) == ord("1")
            continue
        try:
            lits = np.array([int(t) for t in body.split()], dtype=np.int64)
        except ValueError:
            bad = body[:60]
            raise FormatError(f"a v line of neither literals nor 0s and 1s: {bad!r}") from None
        chosen[lits[(lits > 0) & (lits <= nval)] - 1] = 1
    return one_value_each(model, chosen, "answer")
