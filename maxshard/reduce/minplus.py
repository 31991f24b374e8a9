"""The min-plus product a degree-2 elimination takes, compiled.

Eliminating ``v`` between ``u`` and ``w`` gives each pair of their values the
best cost through ``v``: ``best[i, k] = min_j left[i, j] + middle[j] +
right[j, k]``, and which ``j`` (the first on ties) for reconstruction. numpy
builds the whole cube for it: on LLaMA-3 8B at 8 layers on 2x2x2, 1,194
eliminations of up to 3.4 M entries each took 3.8 s of a 7 s presolve; this
loop over the cube's rows takes a twentieth of numpy's time on the same
cubes (history: *A deadline for presolve*).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def min_through(
    left: np.ndarray, middle: np.ndarray, right: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(best, choice)``: for each row ``i`` of ``left`` ([a, b]) and column ``k``
    of ``right`` ([b, c]), the least ``left[i, j] + middle[j] + right[j, k]``
    and its first ``j``. Entries are at most 10^18 each: the sum fits."""
    a, b = left.shape
    c = right.shape[1]
    best = np.empty((a, c), dtype=np.int64)
    choice = np.zeros((a, c), dtype=np.int64)
    for i in range(a):
        first = left[i, 0] + middle[0]
        for k in range(c):
            best[i, k] = first + right[0, k]
        for j in range(1, b):
            through = left[i, j] + middle[j]
            for k in range(c):
                value = through + right[j, k]
                if value < best[i, k]:
                    best[i, k] = value
                    choice[i, k] = j
    return best, choice
