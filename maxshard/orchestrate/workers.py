"""Worker processes: one per running backend, forked, talking to the parent
through a pipe.

A worker that hangs, crashes or ignores its deadline is killed, and whatever
it reported before stays. A worker's messages to the parent are the records
below (:data:`Message`); the parent's only message back is :class:`Go`.

``at`` is when the worker sent it: seconds, or work units in a deterministic
run (:func:`maxshard.work.stamp`). The parent shares its best solution with
the workers through :class:`Shared` memory, which each worker's
:class:`WorkerContext` reads on ``best()``; in a deterministic run only at the
barriers (:mod:`maxshard.work`).

**Why this cannot deadlock.** A worker's messages may be large (a solution,
a search state of megabytes), so its send blocks until the parent reads; the
parent reads whatever arrives whenever it waits. The parent never sends a
payload: its only message, the barrier's :class:`Go`, is a few bytes,
sent once to a worker known to be waiting for it, into an otherwise empty
pipe, so it never blocks. Two blocking sends can therefore never face each
other. A worker waiting at a barrier checks every second that its parent is
still there. Each process dumps its threads' stacks to stderr on SIGUSR1
(``kill -USR1 PID``: where is it blocked?).
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from .. import registry, work
from ..backend import BackendError, Capabilities, Context
from ..model import Model
from ..output import stdout_to

#: Workers stop this long before the deadline so their last report arrives in time.
WORKER_MARGIN = 0.15
#: Seconds between a waiting worker's checks that its parent is still there.
PARENT_CHECK = 1.0


@dataclass(frozen=True)
class Found:
    """A model solution the worker found."""

    x: np.ndarray
    at: float


@dataclass(frozen=True)
class Bounded:
    """A proven lower bound on the model cost."""

    value: int
    at: float


@dataclass(frozen=True)
class HandedOver:
    """The worker's search state, handed over (:meth:`Context.hand_over`)."""

    state: object
    at: float


@dataclass(frozen=True)
class Done:
    """The worker's :class:`~maxshard.backend.Result`: its last message."""

    status: str
    x: np.ndarray | None
    bound: int | None
    at: float


@dataclass(frozen=True)
class Failed:
    """The backend raised; ``detail`` says what. Its last message."""

    detail: str


@dataclass(frozen=True)
class AtBarrier:
    """(Deterministic runs) it reached barrier ``k`` and waits for :class:`Go`."""

    k: int


@dataclass(frozen=True)
class Busy:
    """(Deterministic runs) it starts a call charged until ``until`` units: the
    barriers before that are merged without it."""

    until: float


@dataclass(frozen=True)
class Go:
    """The parent's answer at a barrier: whether the merged best changed (the
    worker then reads it from :class:`Shared` memory)."""

    changed: bool


#: What a worker sends the parent.
Message = Found | Bounded | HandedOver | Done | Failed | AtBarrier | Busy
#: The reports a deterministic stage holds until the next barrier (they carry ``at``).
STAMPED = (Found, Bounded, HandedOver, Done)


@dataclass
class Job:
    name: str
    seed: int
    process: mp.process.BaseProcess
    conn: Connection
    state: object = None  # the last search state the backend handed over
    answered: bool = False  # sent its result (or its error) before its pipe closed
    best: int | None = None  # model cost of its best solution before the switch
    order: int = 0  # its place among the stage's workers: ties go to the first
    replies: Connection | None = None  # (deterministic) the parent's barrier answers
    arrived: int = 0  # (deterministic) the last barrier it reached
    waiting: bool = False  # (deterministic) it waits at barrier ``arrived`` for the parent's go
    finished: bool = False  # (deterministic) sent its result, its error, or died
    done_at: float = -1.0  # (deterministic) the work at which it finished
    busy_to: int = -1  # (deterministic) the first barrier it reaches after a charged call


class Children:
    """The child processes of one run: its workers (:class:`Job`) and its other
    children (presolve's), so that the run can kill them all on its way out,
    also when a signal stops it. Owned by the run (:class:`~.pipeline.Run`)."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.helpers: list[mp.process.BaseProcess] = []

    def track(self, process: mp.process.BaseProcess) -> None:
        """Have :meth:`kill` kill ``process`` too (a child that is no worker)."""
        self.helpers.append(process)

    def untrack(self, process: mp.process.BaseProcess) -> None:
        if process in self.helpers:
            self.helpers.remove(process)

    def start(self, name: str, **given) -> Job:
        """Fork a worker (:func:`start`, ``given`` its keywords) and keep it."""
        job = start(name, **given)
        self.jobs.append(job)
        return job

    def stop(self, job: Job) -> None:
        """Kill one worker now (its pipe closed, no longer among the live ones)."""
        job.process.kill()
        job.process.join(timeout=1)
        job.conn.close()
        if job.replies is not None:
            job.replies.close()
        self.jobs.remove(job)

    def kill(self, reap: bool = True) -> None:
        """Kill every live child; ``reap=False`` leaves waiting for them to a
        later call (a run about to print its answer does not wait on a loaded
        machine)."""
        processes = [job.process for job in self.jobs] + self.helpers
        for process in processes:
            if process.is_alive():
                process.kill()
        if reap:
            for process in processes:
                process.join(timeout=1)
            self.jobs.clear()
            self.helpers.clear()


class Shared:
    """The incumbent model solution, shared by the parent with the workers it forks.

    Lives in shared memory created before the fork. A seqlock keeps reads
    whole: the parent makes ``version`` odd, writes, makes it even; a reader
    copies and retries if the version moved meanwhile.
    """

    def __init__(self, nv: int) -> None:
        buf = mp.get_context("fork").RawArray("q", nv + 1)
        self._version = np.frombuffer(buf, dtype=np.int64, count=1)
        self._x = np.frombuffer(buf, dtype=np.int64, offset=8)

    def publish(self, x: np.ndarray) -> None:
        self._version[0] += 1
        self._x[:] = x
        self._version[0] += 1

    def read(self, seen: int) -> tuple[int, np.ndarray | None]:
        """(version, solution): the solution only if it changed since ``seen``."""
        while True:
            version = int(self._version[0])
            if version == seen or version == 0:
                return seen, None
            x = self._x.copy()
            if not version % 2 and int(self._version[0]) == version:
                return version, x


class WorkerContext(Context):
    """A worker's :class:`~maxshard.backend.Context`: reports go to the parent's
    pipe, ``best()`` reads the shared incumbent (in a deterministic run: the
    best the parent merged at the last barrier)."""

    def __init__(
        self, conn: Connection | None, shared: Shared, replies: Connection | None = None, **given
    ) -> None:
        super().__init__(**given)
        self.conn, self.shared, self.seen = conn, shared, 0
        self.replies = replies
        self.merged: np.ndarray | None = None  # deterministic: new at the last barrier

    def __call__(self, solution: np.ndarray | None = None, lower_bound: int | None = None) -> None:
        if solution is not None:
            self.conn.send(Found(solution, work.stamp()))
        if lower_bound is not None:
            self.conn.send(Bounded(lower_bound, work.stamp()))

    def best(self) -> np.ndarray | None:
        if self.replies is not None:
            x, self.merged = self.merged, None
            return x
        self.seen, x = self.shared.read(self.seen)
        return x

    def busy(self, until: float) -> None:
        self.conn.send(Busy(until))

    def barrier(self, k: int) -> None:
        """Reached barrier ``k``: tell the parent, wait for its go, and read the
        merged best if it changed. A parent gone (killed) ends the worker."""
        self.conn.send(AtBarrier(k))
        parent = os.getppid()
        while not self.replies.poll(PARENT_CHECK):
            if os.getppid() != parent:
                os._exit(1)
        if self.replies.recv().changed:
            self.merged = self.shared.read(-1)[1]

    def hand_over(self, state: object) -> None:
        self.conn.send(HandedOver(state, work.stamp()))


def dump_stacks_on_request() -> None:
    """Dump every thread's stack to stderr when this process gets SIGUSR1."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


@dataclass(frozen=True)
class ByWork:
    """A deterministic worker's clock: it counts work from ``at`` units and
    stops at every multiple of ``epoch`` for the parent's merged best."""

    at: float
    epoch: float


def _worker(
    name: str, *, model: Model, deadline: float, incumbent: np.ndarray | None, seed: int,
    conn: Connection, shared: Shared, given: dict, by_work: ByWork | None,
    replies: Connection | None,
) -> None:  # fmt: skip
    dump_stacks_on_request()
    with stdout_to():
        try:
            backend = registry.load(name)
            ctx = WorkerContext(conn, shared, replies, **given)
            if by_work is not None:
                work.start_deterministic(by_work.at, by_work.epoch, ctx.barrier, ctx.busy)
            result = backend.solve(model, deadline, incumbent, ctx, seed)
            conn.send(Done(result.status.value, result.solution, result.lower_bound, work.stamp()))
        except BaseException as exc:  # reported to the parent, which keeps going
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            conn.send(Failed(detail))
        finally:
            conn.close()


def start(
    name: str,
    *,
    seed: int,
    model: Model,
    deadline: float,
    incumbent: np.ndarray | None,
    shared: Shared,
    inherited: object = None,
    previous: object = None,
    peers: frozenset[str] = frozenset(),
    by_work: ByWork | None = None,
    order: int = 0,
    multipliers: np.ndarray | None = None,
) -> Job:
    """Fork a worker running backend ``name`` until ``deadline`` (less the margin).

    ``by_work`` makes it a deterministic worker: ``deadline`` is then in work
    units (:class:`ByWork`)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    given = {"inherited": inherited, "previous": previous, "peers": peers,
             "multipliers": multipliers}  # fmt: skip
    replies = answer = None
    limit = deadline - WORKER_MARGIN
    if by_work is not None:
        replies, answer = ctx.Pipe(duplex=False)  # the child reads, the parent answers
        limit = deadline  # work units: no margin needed
    kwargs = {"model": model, "deadline": limit, "incumbent": incumbent, "seed": seed,
              "conn": child, "shared": shared, "given": given, "by_work": by_work,
              "replies": replies}  # fmt: skip
    proc = ctx.Process(target=_worker, args=(name,), kwargs=kwargs, daemon=True)
    proc.start()
    child.close()
    if replies is not None:
        replies.close()
    job = Job(name, seed, proc, parent, order=order, replies=answer)
    if by_work is not None:
        job.arrived = work.last_barrier(by_work.at, by_work.epoch)
    return job


def capabilities(name: str) -> Capabilities:
    """What backend ``name`` declares (nothing, if it cannot be loaded: its
    worker will say why)."""
    try:
        caps = registry.load(name).capabilities
        return caps if isinstance(caps, Capabilities) else NOTHING
    except (BackendError, AttributeError):
        return NOTHING


NOTHING = Capabilities(exact=False, anytime=False, memory=False, lower_bound=False)


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
