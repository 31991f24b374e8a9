"""Fast text output of integer-heavy files (clauses, constraints, knapsacks).

The exported files run to tens of millions of numbers (S's memory as clauses:
about 20 million clauses); Python's ``str`` of each would take minutes. Here a
file is a stream of *tokens*: a number of a *kind*, where each kind has a
fixed text written before the number (a separator, a sign, a variable
prefix) and may print no number at all (a line end, a closing bracket). A
compiled kernel renders a block of tokens into bytes at once.

    kinds = Kinds([" ", " x", " 0\\n"], numbers=[True, True, False])
    out.write(kinds.render(values, kind_ids))
"""

from __future__ import annotations

import numpy as np
from numba import njit


class Kinds:
    """The token kinds of one format: their texts and whether they print a number."""

    def __init__(self, texts: list[str], numbers: list[bool]) -> None:
        raw = [t.encode() for t in texts]
        self.table = np.zeros((len(raw), max(1, max(len(r) for r in raw))), dtype=np.uint8)
        for k, r in enumerate(raw):
            self.table[k, : len(r)] = np.frombuffer(r, dtype=np.uint8)
        self.length = np.array([len(r) for r in raw], dtype=np.int64)
        self.number = np.array(numbers, dtype=np.bool_)

    def render(self, values: np.ndarray, kinds: np.ndarray) -> bytes:
        """The text of tokens ``(values[i], kinds[i])`` in order."""
        values = np.ascontiguousarray(values, dtype=np.int64)
        kinds = np.ascontiguousarray(kinds, dtype=np.int64)
        size = int(self.length[kinds].sum()) + 20 * int(self.number[kinds].sum())
        out = np.empty(size, dtype=np.uint8)
        end = _render(values, kinds, self.table, self.length, self.number, out)
        return out[:end].tobytes()


def rows(values: np.ndarray, row_off: np.ndarray, kind: int, end: int) -> tuple[np.ndarray, ...]:
    """Tokens of CSR rows: each row's values as ``kind``, then one ``end`` token."""
    lengths = np.diff(row_off) + 1
    out_v = np.zeros(int(lengths.sum()), dtype=np.int64)
    out_k = np.full(len(out_v), kind, dtype=np.int64)
    ends = np.cumsum(lengths) - 1
    body = np.ones(len(out_v), dtype=bool)
    body[ends] = False
    out_v[body] = values
    out_k[ends] = end
    return out_v, out_k


@njit(cache=True)
def _render(values, kinds, table, length, number, out):
    pos = 0
    digits = np.empty(20, dtype=np.uint8)
    for i in range(len(values)):
        k = kinds[i]
        for j in range(length[k]):
            out[pos] = table[k, j]
            pos += 1
        if number[k]:
            v = values[i]
            if v < 0:
                out[pos] = 45  # '-'
                pos += 1
                v = -v
            n = 0
            while True:
                digits[n] = 48 + v % 10
                v //= 10
                n += 1
                if v == 0:
                    break
            for j in range(n - 1, -1, -1):
                out[pos] = digits[j]
                pos += 1
    return pos
