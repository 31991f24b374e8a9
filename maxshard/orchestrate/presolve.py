"""Presolve in a process of its own while the run prepares its backends.

Presolve keeps one core busy for 2-3 s on the large benchmarks, and the
other core idle. Then, on the way to the first answer, the run imports the
backends (numba among them: 0.4 s) and every worker of every stage loads the
compiled kernels it needs (0.4-0.5 s), at each stage and at each restart.
Here presolve runs in a forked child, and meanwhile the run loads the plan's
backends and calls ``prepare()`` on those that are
:class:`~maxshard.backend.Preparable`: the workers forked afterwards inherit
what was loaded. Preparing stops once the model is back: on a small model
presolve ends first, and the workers load what they need themselves, as
they would without this. The child sends the model back pickled (N: 32 MB,
0.08 s to pickle, 0.04 s to load); a model whose tables hold
:data:`SHARED_BYTES` or more comes back through a file in memory
(:func:`_send`). Should it die without an answer,
presolve runs here after all. The run waits for it no longer than its
deadline: a model too large to presolve in the time given (LLaMA-3 8B at
32 layers on 2x2x2, 85 M table entries: 26 s) leaves the run its starts.
"""

from __future__ import annotations

import gc
import mmap
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection

from .. import registry
from ..backend import BackendError, Preparable
from ..instance import Instance
from ..model import Model
from .workers import Children


def presolve(
    inst: Instance,
    passes: bool,
    backends: Iterable[str],
    children: Children | None = None,
    meanwhile: Callable[[], None] = lambda: None,
    deadline: float | None = None,
    idle: Callable[[Callable[[], bool]], None] = lambda done: None,
) -> Model | None:
    """``reduce(inst, passes=passes)``, computed in a child process (one of the
    run's ``children``) while this one calls ``meanwhile()`` (the start before
    presolve), then loads and prepares the backends named in ``backends``, then
    calls ``idle(done)``, which should return once ``done()`` (the model is
    back, or the deadline passed). None if the model is not back by
    ``deadline`` (a ``time.monotonic()`` moment; the child is killed). Raises
    what ``reduce`` raises (:class:`~maxshard.reduce.Infeasible`)."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    shared = _memory_file()  # the child writes a large model's arrays here
    args = (inst, passes, send, receive, shared)
    child = ctx.Process(target=_reduce_in_child, args=args, daemon=True)
    child.start()
    send.close()
    children = children if children is not None else Children()
    children.track(child)  # and reaped with the workers
    reader: threading.Thread | None = None
    try:
        meanwhile()
        prepare(backends, until=receive.poll)
        late = (lambda: False) if deadline is None else (lambda: time.monotonic() >= deadline)
        idle(lambda: receive.poll() or late())
        # read in a thread: a model may take seconds to come through the pipe
        # (where there is no memory file), and the deadline holds then too
        got: list[tuple[str, object]] = []
        reader = threading.Thread(target=lambda: got.append(_received(receive, shared)))
        reader.daemon = True
        reader.start()
        reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        kind, value = got[0] if got else ("late", None)
    except BaseException:  # a signal or the deadline: the answer goes out now
        child.kill()
        raise
    finally:
        if reader is not None and reader.is_alive():
            child.kill()  # the reader meets the pipe's end
            reader.join(timeout=1)
        receive.close()
        if shared is not None:
            os.close(shared)  # a model read from it keeps its own mapping
    child.join(timeout=1)  # it has sent the model, or died
    children.untrack(child)
    if kind == "error":
        raise value
    if kind == "model":
        return value
    if kind == "late":
        return None
    from ..reduce import reduce

    return reduce(inst, passes=passes)


#: Bytes of tables from which a model comes back through a file in memory, not
#: the pipe: LLaMA-3 8B at 32 layers on 2x2x2 (tables 359 MB, the model 451 MB)
#: took 1.5 s to pickle and 1.9 s through the pipe (history: *Presolve's arc
#: consistency and dominance compiled*)
SHARED_BYTES = 64 << 20


def _memory_file() -> int | None:
    """An anonymous file in memory (Linux), or None where there is none."""
    try:
        return os.memfd_create("maxshard-model", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None


def _send(conn: Connection, message: tuple[str, object], shared: int | None) -> None:
    """Send ``message``; a model whose tables hold :data:`SHARED_BYTES` or more
    has its arrays written to the file ``shared`` instead, each at a 64-byte
    boundary (pickle's out-of-band buffers), and only where they are goes
    through the pipe."""
    kind, value = message
    if shared is None or kind != "model" or value.edge_cost.nbytes < SHARED_BYTES:
        conn.send(message)
        return
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    spans, at = [], 0
    with open(shared, "wb", closefd=False) as f:
        for raw in (b.raw() for b in buffers):
            f.write(bytes(-at % 64))
            at += -at % 64
            f.write(raw)
            spans.append((at, raw.nbytes))
            at += raw.nbytes
    conn.send(("shared", (data, spans)))


def _received(conn: Connection, shared: int | None = None) -> tuple[str, object]:
    """The child's message, or ``died`` if it ended without one (killed, out
    of memory). A model sent through ``shared`` is read in place: its arrays
    are views of a private (copy-on-write) mapping of the file."""
    try:
        kind, value = conn.recv()
    except (EOFError, OSError):
        return "died", None
    if kind != "shared" or shared is None:
        return kind, value
    data, spans = value
    view = memoryview(mmap.mmap(shared, 0, access=mmap.ACCESS_COPY))
    return pickle.loads(data, buffers=[view[a : a + n] for a, n in spans])


def prepare(backends: Iterable[str], until: Callable[[], bool] = lambda: False) -> None:
    """Load each named backend and prepare it, one after another until
    ``until()`` holds (a backend that cannot be loaded is left to its worker,
    which reports why)."""
    for name in sorted(set(backends)):
        if until():
            return
        try:
            backend = registry.load(name)
        except BackendError:
            continue
        if isinstance(backend, Preparable) and not until():
            try:
                backend.prepare()
            except Exception:  # its worker meets the fault again and reports it
                continue


def _reduce_in_child(
    inst: Instance, passes: bool, conn: Connection, theirs: Connection, shared: int | None
) -> None:
    from ..reduce import reduce

    gc.disable()  # it ends once it has sent: nothing to collect, no page to copy
    theirs.close()  # so that a send to a run gone fails instead of blocking
    # the run's handlers answer a signal; the child just goes (the run kills it)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    try:
        message = ("model", reduce(inst, passes=passes))
    except Exception as exc:  # raised again in the run
        message = ("error", exc)
    _send(conn, message, shared)
    conn.close()
