"""Python's cyclic garbage collector paused while large acyclic data are built.

Reading a benchmark builds hundreds of thousands of lists (the decoded JSON)
and presolve keeps tens of thousands of per-variable lists, tuples and dicts
alive while it allocates more. The collector's passes traverse all of them
and free nothing: the data hold no reference cycles. Measured with
``gc.callbacks`` on the 2-core machine (N, A, S, U, M): collections took
0.28-0.48 s of reading and 0.19-0.42 s of presolve, time that a short budget
(6-30 s) misses at its start. Reference counting frees everything as before;
the cycles made meanwhile, if any, are collected once the collector is back.

A run that forks (presolve's child, the workers) in a process holding many
objects (the PyTorch front-end's traced graph) freezes them for its length
(:func:`frozen`): a collection in a child would otherwise touch every one
and copy the pages they sit on, and one in the run would traverse them all.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (as it was, after it)."""
    if not gc.isenabled():  # paused further out: leave it to that caller
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def frozen() -> Iterator[None]:
    """The objects alive now out of the collector's reach inside the block
    (``gc.freeze``), back after it; as it was if some were frozen already."""
    if gc.get_freeze_count():  # frozen further out: leave it to that caller
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
