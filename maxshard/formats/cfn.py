"""Cost function networks (toulbar2's CFN format).

One variable ``x<v>`` per model variable (values by index), a function per
unary cost vector and per table (dense, row-major, as in the model), a
constant function for the offset, and memory as one hard ``knapsackv``
constraint per kept time point where memory can bind: ``sum of -usage >=
-room`` over the values of the variables live there (usages in units of their
greatest common divisor, a variable's terms merged). Forbidden costs are the
problem's upper bound (``mustbe``), one more than the largest total any
assignment without them can reach, so they are infeasible exactly as in the
contest model.

Memory listed point by point is large: on S 101 million (variable, value,
usage) triples, 2 GB of text (write ``.cfn.gz`` or ``.cfn.xz``, which toulbar2
reads as they are). An answer is toulbar2's solution: the values of ``x0 x1
...`` space-separated on one line (as ``-w`` writes them), or ``x<v>=<value>``
pairs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..csr import offsets, ranks
from ..instance import FORBIDDEN
from ..knapsack import knapsacks
from ..model import Model
from . import FormatError, Header, checked_units, open_out
from .text import Kinds

# token kinds (each: a fixed text, then maybe a number)
TEXTS = [
    ('"f', True),  # 0 function name (then its number)
    ('":{"scope":[', False),  # 1
    ("", True),  # 2 first item of a list
    (" ", True),  # 3 next item
    ('],"costs":[', False),  # 4
    ("]},\n", False),  # 5 end of a table function
    ('],"type":"knapsackv","params":{"capacity":', True),  # 6
    (',"weightedvalues":[', False),  # 7
    (" [", True),  # 8 a triple's variable
    ("]", False),  # 9 end of a triple
    ("]}},\n", False),  # 10 end of a knapsack
]
KINDS = Kinds([t for t, _ in TEXTS], [n for _, n in TEXTS])


def write(model: Model, path: Path, header: Header) -> dict:
    forbidden = model.unary >= FORBIDDEN
    clean_u = np.where(forbidden, 0, model.unary)
    clean_e = np.where(model.edge_cost >= FORBIDDEN, 0, model.edge_cost)
    top = model.offset + 1
    if model.nv:
        top += sum(int(c) for c in np.maximum.reduceat(clean_u, model.dom_off[:-1]))
    if model.m:
        top += sum(int(c) for c in np.maximum.reduceat(clean_e, model.edge_off[:-1]))
    with open_out(path) as out:
        out.write(f"# {header.line()}\n".encode())
        out.write(b"# costs at or above the bound (mustbe) are forbidden picks\n")
        name = re.sub(r"[^A-Za-z0-9_]", "_", header.problem) or "model"
        out.write(f'{{"problem":{{"name":"{name}","mustbe":"<{top}"}},\n"variables":{{'.encode())
        out.write(" ".join(f'"x{v}":{int(d)}' for v, d in enumerate(model.dom_size)).encode())
        out.write(b'},\n"functions":{\n')
        if model.offset:
            out.write(f'"offset":{{"scope":[],"costs":[{int(model.offset)}]}},\n'.encode())
        unary = np.where(forbidden, top, model.unary)
        out.write(_tables(np.arange(model.nv)[:, None], model.dom_off, unary, 0))
        if model.m:
            table = np.where(model.edge_cost >= FORBIDDEN, top, model.edge_cost)
            scopes = np.column_stack([model.edge_u, model.edge_v])
            out.write(_tables(scopes, model.edge_off, table, model.nv))
        n_knapsacks, entries = _knapsacks(model, out, model.nv + model.m)
        out.write(b'"end":{"scope":[],"costs":[0]}}}\n')
    return {"functions": model.nv + model.m + n_knapsacks, "knapsacks": n_knapsacks,
            "knapsack entries": entries, "upper bound": top}  # fmt: skip


def _tables(scopes: np.ndarray, off: np.ndarray, costs: np.ndarray, first: int) -> bytes:
    """Dense table functions ``f<first + i>`` over ``scopes[i]`` with costs
    ``costs[off[i]:off[i + 1]]``."""
    n, arity = scopes.shape
    size = np.diff(off)
    lengths = 2 + arity + 1 + size + 1  # name, "scope", vars, "costs", costs, end
    start = offsets(lengths)[:-1]
    vals = np.zeros(int(lengths.sum()), dtype=np.int64)
    kinds = np.full(len(vals), 3, dtype=np.int64)
    vals[start], kinds[start] = first + np.arange(n), 0
    kinds[start + 1] = 1
    vals[start + 2], kinds[start + 2] = scopes[:, 0], 2
    for j in range(1, arity):
        vals[start + 2 + j] = scopes[:, j]
    kinds[start + 2 + arity] = 4
    body = np.repeat(start + 3 + arity, size) + (np.arange(len(costs)) - np.repeat(off[:-1], size))
    vals[body] = costs
    kinds[start + 3 + arity] = 2  # the first cost has no separator
    kinds[start + lengths - 1] = 5
    return KINDS.render(vals, kinds)


def _knapsacks(model: Model, out, first: int) -> tuple[int, int]:
    """One knapsack per point where memory can bind; returns (knapsacks, triples)."""
    mem = checked_units(model)
    if mem is None:
        return 0, 0
    count, triples = 0, 0
    for k in knapsacks(model, mem):
        out.write(_knapsack_text(k.point, k.var, k.val, k.weight, mem.room, first + count))
        count += len(np.unique(k.point))
        triples += len(k.point)
    return count, triples


def _knapsack_text(point, var, val, weight, room, first: int) -> bytes:
    """Tokens of the knapsacks of sorted (point, var, val, weight) entries."""
    cut = np.flatnonzero(np.diff(point)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(point)]])
    first_var = np.ones(len(point), dtype=bool)
    first_var[1:] = (var[1:] != var[:-1]) | (point[1:] != point[:-1])
    scope_var = var[first_var]
    scope_off = np.searchsorted(np.flatnonzero(first_var), starts)
    scope_end = np.searchsorted(np.flatnonzero(first_var), ends)
    n = len(starts)
    n_scope = scope_end - scope_off
    n_tri = ends - starts
    lengths = 2 + n_scope + 2 + 4 * n_tri + 1
    start = offsets(lengths)[:-1]
    vals = np.zeros(int(lengths.sum()), dtype=np.int64)
    kinds = np.zeros(len(vals), dtype=np.int64)
    vals[start], kinds[start] = first + np.arange(n), 0
    kinds[start + 1] = 1
    s_at = np.repeat(start + 2, n_scope) + ranks(n_scope)
    vals[s_at], kinds[s_at] = scope_var, 3
    kinds[start + 2] = 2  # the first variable has no separator
    cap = start + 2 + n_scope
    vals[cap], kinds[cap] = -room[point[starts]], 6
    kinds[cap + 1] = 7
    t0 = np.repeat(cap + 2, n_tri) + 4 * (np.arange(len(point)) - np.repeat(starts, n_tri))
    vals[t0], kinds[t0] = var, 8
    vals[t0 + 1], kinds[t0 + 1] = val, 3
    vals[t0 + 2], kinds[t0 + 2] = -weight, 3
    kinds[t0 + 3] = 9
    kinds[start + lengths - 1] = 10
    return KINDS.render(vals, kinds)


_PAIR = re.compile(r"^x(\d+)=(-?\d+)$")


def read_answer(model: Model, text: str) -> np.ndarray:
    found = None
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) == model.nv and all(t.lstrip("-").isdigit() for t in tokens):
            found = np.array([int(t) for t in tokens], dtype=np.int64)
        elif tokens and all(_PAIR.match(t) for t in tokens):
            x = np.full(model.nv, -1, dtype=np.int64)
            for t in tokens:
                v, a = (int(z) for z in _PAIR.match(t).groups())
                if not 0 <= v < model.nv:
                    raise FormatError(f"the answer names variable x{v}; the model has {model.nv}")
                x[v] = a
            found = x
    if found is None:
        raise FormatError(
            f"no line of {model.nv} values (or x<v>=<value> pairs) in the answer: "
            "incomplete, or the solver found no solution"
        )
    missing = np.flatnonzero(found < 0)
    if len(missing):
        raise FormatError(f"the answer gives variable {int(missing[0])} no value (incomplete)")
    over = np.flatnonzero(found >= model.dom_size)
    if len(over):
        v = int(over[0])
        size = int(model.dom_size[v])
        raise FormatError(f"x{v}={int(found[v])} is not a value (its domain has {size})")
    return found
