"""One stage of a run: its backends in worker processes until the stage ends.

:func:`run_backends` starts the workers, hands each message to its handler
(:class:`StageRun`, one method per message kind), switches the workers behind
to the leader's backend at the stage's switch moment, and stops at the
stage's deadline, at a proof, or once the target gap is reached.

In a deterministic run (``span`` given: the stage's start and end in work
units) the same happens by work instead of seconds (:meth:`StageRun.run_by_work`):
the workers' reports (and handed-over states) are kept until every worker
has reached the next barrier, then taken in a fixed order (their work stamp, then the worker's
place), and only then does the parent answer with the merged best, switch,
start a queued backend or stop. What the run does is then a function of what
the workers compute, never of when their messages arrive.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import time
from multiprocessing.connection import wait

import numpy as np

from .. import work
from ..evaluate import evaluate
from ..instance import FORBIDDEN
from ..model import Model
from . import workers as procs
from .incumbent import UNPROVEN, Best
from .plan import Budget
from .workers import (
    STAMPED,
    AtBarrier,
    Bounded,
    Busy,
    ByWork,
    Children,
    Done,
    Failed,
    Found,
    Go,
    HandedOver,
    Job,
    Message,
    Shared,
)

#: A deterministic stage whose unfinished workers have sent nothing and met at
#: no barrier for this many seconds gives them up (the watchdog): far beyond
#: any wait between barriers measured (docs/determinism.md, *The watchdog*).
SILENCE_MIN = 60.0
#: ... or for this many times the stage's longest wait for a barrier so far, if longer.
SILENCE_FACTOR = 10.0
#: Seconds a silent worker is given to write its stack before it is killed.
STACK_DUMP_WAIT = 0.5


def run_backends(
    model: Model,
    best: Best,
    plan: list[str],
    deadline: float,
    seed: int = 0,
    workers: int | None = None,
    switch: float | None = None,
    carry: dict[str, object] | None = None,
    span: tuple[float, float, float] | None = None,
    children: Children | None = None,
) -> dict[str, str]:
    """Run the backends of ``plan`` (up to ``workers`` at a time, the rest as
    workers free up) until the deadline.

    With ``switch``, at that share of the time every worker whose backend is not
    the one that found the best solution so far restarts as that backend (with
    a seed of its own, from the best solution). ``carry`` holds the last
    search state each backend handed over (by name): a backend started here
    inherits it, and the states handed over here are kept in it, so a backend
    of the next stage goes on where this one stopped. Returns each backend's
    final status (or its error). Stops early when a backend proves optimality
    or infeasibility, or once the answer is proven within ``best.target_gap``.

    ``span=(start, end, epoch)`` runs the stage deterministically, from
    ``start`` to ``end`` work units with a barrier every ``epoch`` units;
    ``deadline`` is then only the clock's safety net. The workers are the
    run's ``children`` (a registry of its own if none is given), all killed
    when the stage ends.
    """
    if model.nv == 0:  # presolve fixed every node: nothing left to search
        x = np.zeros(0, dtype=np.int64)
        only = model.reconstruct(x)
        best.offer(only, "presolve", x)
        if model.exact_memory:  # the one solution left is optimal
            best.bound(evaluate(best.inst, only).cost, "presolve")
            best.proved("optimal")
        return {name: "not needed" for name in plan}
    stage = StageRun(model, best, plan, seed, carry, children or Children())
    if span is not None:
        return stage.run_by_work(span, deadline, workers or procs.available_cores(), switch)
    return stage.run(deadline, workers or procs.available_cores(), switch)


class StageRun:
    """The parent's side of one stage: its workers and what their messages do."""

    def __init__(
        self,
        model: Model,
        best: Best,
        plan: list[str],
        seed: int,
        carry: dict[str, object] | None,
        children: Children,
    ) -> None:
        self.model, self.best, self.plan, self.seed, self.carry = model, best, plan, seed, carry
        self.children = children
        # bounds are on the model's cost: the instance's only if memory was not scaled
        # and forbidden picks cost 10**18 (see Model.exact_memory, Model.forbidden_cost)
        self.proofs_hold = model.exact_memory and model.forbidden_cost == FORBIDDEN
        self.shared = Shared(model.nv)
        if best.model_x is not None:
            self.shared.publish(best.model_x)
        self.caps = {name: procs.capabilities(name) for name in set(plan)}  # each loaded once
        self.provided = [self.caps[name].provides for name in plan]
        self.running: list[Job] = []
        self.outcome: dict[str, str] = {}
        self.finished = False
        self.before_switch = False  # each worker's best is noted until the switch
        # deterministic runs: reports held until the next barrier, keyed by (stamp,
        # worker place, arrival): arrival orders one worker's reports as it sent them
        self.pending: list[tuple[float, int, int, Job, Message]] = []
        self.arrivals = itertools.count()
        self.by_work = False
        self.handlers = {
            Found: self.on_found, Bounded: self.on_bounded, HandedOver: self.on_handed_over,
            Failed: self.on_failed, Done: self.on_done, AtBarrier: self.on_barrier,
            Busy: self.on_busy,
        }  # fmt: skip

    def peers(self, k: int) -> frozenset[str]:
        """What the workers of this stage other than the ``k``-th provide."""
        return frozenset().union(*(p for j, p in enumerate(self.provided) if j != k))

    def start(
        self, k: int, name: str, deadline: float, *, seed: int, by_work: ByWork | None,
        inherited: object = None, previous: object = None, order: int | None = None,
    ) -> None:  # fmt: skip
        """Start backend ``name`` as the plan's ``k``-th (its peers are the
        others; its place ``order``, by default ``k``), from the best answer so
        far and the multipliers last handed over."""
        job = self.children.start(
            name, seed=seed, model=self.model, deadline=deadline, incumbent=self.best.model_x,
            shared=self.shared, inherited=inherited, previous=previous, peers=self.peers(k),
            by_work=by_work, order=k if order is None else order,
            multipliers=self.multipliers(),
        )  # fmt: skip
        self.running.append(job)

    def close(self, why: str) -> None:
        """The stage's end: each unfinished worker's outcome is ``why`` (or what
        stopped the stage early), and every worker is killed."""
        if self.finished:
            proved = self.best.status in ("optimal", "infeasible")
            why = "stopped: " + ("proved" if proved else "gap reached")
        for job in self.running:
            if not job.finished:
                self.outcome.setdefault(job.name, why)
        self.children.kill()

    def run(self, deadline: float, workers: int, switch: float | None) -> dict[str, str]:
        queue = list(enumerate(self.plan))
        switch_at = Budget(time.monotonic(), deadline).at(switch) if switch else None
        self.before_switch = switch_at is not None
        try:
            while (queue or self.running) and not self.finished:
                while queue and len(self.running) < workers and time.monotonic() < deadline:
                    k, name = queue.pop(0)
                    inherited = (self.carry or {}).get(name)
                    self.start(k, name, deadline, seed=self.seed + k, by_work=None,
                               inherited=inherited)  # fmt: skip
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.running:
                    break
                if switch_at is not None and time.monotonic() >= switch_at:
                    switch_at, self.before_switch = None, False
                    self.follow_the_leader(len(self.plan) + self.seed, deadline)
                wake = remaining if switch_at is None else switch_at - time.monotonic()
                ready = wait([j.conn for j in self.running], timeout=max(0.0, min(remaining, wake)))
                for conn in ready:
                    self.receive(next(j for j in self.running if j.conn is conn))
        finally:
            # a worker still running was stopped: by a proof, the gap reached, or the clock
            self.close("stopped at deadline")
        return self.outcome

    # -- messages ------------------------------------------------------------------

    def receive(self, job: Job) -> None:
        try:
            msg = job.conn.recv()
        except (EOFError, OSError):
            self.on_closed(job)
            return
        handler = self.handlers.get(type(msg))
        if handler is None:
            self.best.log(f"backend {job.name} sent a message that means nothing; ignored")
            return
        if self.by_work and isinstance(msg, STAMPED):
            self.hold(job, msg)
        else:
            self.dispatch(job, msg)

    def dispatch(self, job: Job, msg: Message) -> None:
        try:
            self.handlers[type(msg)](job, msg)
        except (TypeError, ValueError, IndexError) as exc:
            kind = type(msg).__name__
            self.best.log(f"backend {job.name} sent a malformed {kind} message ({exc}); ignored")

    def on_closed(self, job: Job) -> None:
        if not job.answered:  # died without a word: say so
            self.best.log(f"backend {job.name} crashed (its process ended without a result)")
        self.outcome.setdefault(job.name, "crashed")
        job.finished = True
        if self.by_work:  # kept among the stage's workers, no longer listened to
            job.conn.close()
        else:
            self.running.remove(job)

    def on_found(self, job: Job, msg: Found) -> None:
        self.offer(job, msg.x)
        self.finished = self.finished or self.best.done()

    def on_bounded(self, job: Job, msg: Bounded) -> None:
        if not self.proofs_hold:
            return  # a bound on this model's scale says nothing of the instance's
        self.best.bound(int(msg.value), job.name)
        if self.best.closed():
            self.best.proved("optimal")
        self.finished = self.finished or self.best.done()

    def on_handed_over(self, job: Job, msg: HandedOver) -> None:
        job.state = msg.state
        if self.carry is not None:  # kept in the order last handed over (see multipliers)
            self.carry.pop(job.name, None)
            self.carry[job.name] = msg.state

    def multipliers(self) -> np.ndarray | None:
        """The memory multipliers last handed over in the run by a backend that
        provides them (:attr:`~maxshard.backend.Context.multipliers`), or None."""
        for name, state in reversed((self.carry or {}).items()):
            if name not in self.caps:  # an earlier stage's backend
                self.caps[name] = procs.capabilities(name)
            caps = self.caps[name]
            if "multipliers" in caps.provides and isinstance(state, dict) and "lam" in state:
                return np.asarray(state["lam"], dtype=np.float64)
        return None

    def on_failed(self, job: Job, msg: Failed) -> None:
        job.answered = job.finished = True
        self.outcome[job.name] = f"error: {msg.detail}"
        self.best.log(f"backend {job.name} failed: {msg.detail}")

    def on_done(self, job: Job, msg: Done) -> None:
        job.answered = True
        best, status, x, bound = self.best, msg.status, msg.x, msg.bound
        if not self.model.exact_memory:  # proofs about the scaled model only
            status = UNPROVEN.get(status, status)
        self.outcome[job.name] = status
        if x is not None:
            self.offer(job, x)
        if bound is not None and self.proofs_hold:
            best.bound(int(bound), job.name)
        self.finished = self.finished or best.done()
        # a claimed optimum whose bound the answer refutes proves nothing (best.bound)
        refuted = bound is not None and self.proofs_hold and not best.closed()
        if status == "optimal" and best.evaluation is not None and not refuted:
            if not self.proofs_hold:  # the optimum is the solution itself
                best.bound(best.evaluation.cost, job.name)
            best.proved("optimal")
            self.finished = True
        elif status == "infeasible":
            # no clean solution fits; a solution with forbidden picks may still stand
            self.finished = True
            if best.evaluation is None:
                best.proved("infeasible")

    def offer(self, job: Job, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.int64)
        if x.shape != (self.model.nv,) or (x < 0).any() or (x >= self.model.dom_size).any():
            self.best.log(f"backend {job.name} reported a solution out of the model's domains; "
                          "ignored")  # fmt: skip
            return
        if self.before_switch:  # each worker's best is read only at the switch
            cost = self.model.cost(x)
            if job.best is None or cost < job.best:
                job.best = cost
        if self.best.offer(self.model.reconstruct(x), job.name, x):
            self.shared.publish(x)

    # -- deterministic stages ------------------------------------------------------

    def run_by_work(
        self, span: tuple[float, float, float], deadline: float, workers: int,
        switch: float | None,
    ) -> dict[str, str]:  # fmt: skip
        """The stage from ``span[0]`` to ``span[1]`` work units, a barrier every
        ``span[2]``: each worker stops at its work budget; the parent merges at
        each barrier once every worker still going has reached it. ``deadline``
        (seconds) is the clock's safety net: reached first, the stage takes what
        it has and the run says it was cut short."""
        start, self.end, self.epoch = span
        self.by_work, self.workers = True, workers
        self.k = work.last_barrier(start, self.epoch)  # the last barrier merged
        self.queue = list(enumerate(self.plan))
        self.switch_at = Budget(start, self.end).at(switch) if switch else None
        self.before_switch = self.switch_at is not None
        self.sent = self.best.model_x  # the merged best the workers have
        for name in sorted(n for n, caps in self.caps.items() if not caps.deterministic):
            self.best.cut_short(f"backend {name} does not count its work")
        self.launch(start)
        why = "stopped at its work budget"
        self.merged_at = self.heard_at = time.monotonic()
        self.longest_wait = 0.0
        try:
            while not self.finished:
                if all(self.passed(j, self.k + 1) for j in self.running):
                    self.longest_wait = max(self.longest_wait, time.monotonic() - self.merged_at)
                    if not self.merge():
                        break
                    continue
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    self.take_pending()
                    why = "stopped by the clock"
                    self.best.cut_short(f"the clock ran out at work {self.best.work:.2f}")
                    break
                silent = now - max(self.merged_at, self.heard_at)
                if silent >= self.silence_limit():
                    self.give_up_silent(silent)
                    continue
                listening = {j.conn: j for j in self.running if not j.conn.closed}
                timeout = min(remaining, self.silence_limit() - silent)
                for conn in wait(list(listening), timeout=timeout):
                    self.heard_at = time.monotonic()
                    self.receive(listening[conn])
        finally:
            self.close(why)
        return self.outcome

    def passed(self, job: Job, k: int) -> bool:
        """Whether ``job`` is past barrier ``k``: there, ended, or in a call
        charged beyond it (it reports nothing before then)."""
        return job.finished or job.arrived >= k or job.busy_to > k

    def launch(self, at: float) -> None:
        """Start queued backends on the free workers, from ``at`` work units."""
        while self.queue and sum(not (j.finished and j.done_at < at) for j in self.running) < (
            self.workers
        ):
            k, name = self.queue.pop(0)
            self.start(k, name, self.end, seed=self.seed + k, by_work=ByWork(at, self.epoch),
                       inherited=(self.carry or {}).get(name))  # fmt: skip

    def hold(self, job: Job, msg: Message) -> None:
        """Keep a report until the next barrier; a result ends the worker now."""
        try:
            at = float(msg.at)
        except (TypeError, ValueError):
            at = None
        if isinstance(msg, Done):
            job.answered = job.finished = True
            job.done_at = at if at is not None else -1.0
        if at is None:
            kind = type(msg).__name__
            self.best.log(f"backend {job.name} sent a {kind} message without its work; ignored")
            return
        self.pending.append((at, job.order, next(self.arrivals), job, msg))

    def take_pending(self, before: float = math.inf) -> None:
        """The held reports stamped before ``before`` units, in the order of
        their stamps (then the workers' places): those later stay held."""
        now = sorted((p for p in self.pending if p[0] < before), key=lambda p: p[:3])
        self.pending = [p for p in self.pending if p[0] >= before]
        for at, _, _, job, msg in now:
            self.best.work = max(self.best.work or 0.0, at)
            self.dispatch(job, msg)

    def merge(self) -> bool:
        """Every worker still going has reached the next barrier (or all ended):
        take their reports, then switch, start queued backends and answer the
        waiting ones with the merged best. False: the stage is over."""
        k = self.k + 1
        if all(j.finished for j in self.running) and (not self.queue or k * self.epoch >= self.end):
            self.take_pending()
            return False
        self.take_pending(k * self.epoch)
        if self.finished:
            return False
        self.k, at = k, k * self.epoch
        self.best.work = max(self.best.work or 0.0, at)
        if self.switch_at is not None and at >= self.switch_at:
            self.switch_at, self.before_switch = None, False
            self.follow_the_leader(len(self.plan) + self.seed, self.end, at)
        self.launch(at)
        changed = self.best.model_x is not self.sent  # the workers read it from Shared
        self.sent = self.best.model_x
        self.merged_at = time.monotonic()
        for job in self.running:
            if job.waiting and not job.finished and job.arrived == k:
                # a few bytes into a pipe its worker is reading: never blocks (workers.py)
                job.waiting = False
                with contextlib.suppress(OSError):  # it died meanwhile: its pipe says so
                    job.replies.send(Go(changed))
        return True

    def on_barrier(self, job: Job, msg: AtBarrier) -> None:
        job.arrived, job.waiting = int(msg.k), True

    def silence_limit(self) -> float:
        """Seconds without a message or a merged barrier after which the silent
        workers are given up: :data:`SILENCE_MIN`, or :data:`SILENCE_FACTOR`
        times the longest wait for a barrier so far if that is longer."""
        return max(SILENCE_MIN, SILENCE_FACTOR * self.longest_wait)

    def give_up_silent(self, silent: float) -> None:
        """The watchdog: every worker not yet at the next barrier has said
        nothing for ``silent`` seconds. Dump its stack (to stderr), log which it
        is and where it was, stop it, and go on without it: the run is then
        cut short, never said to be deterministic."""
        for job in self.running:
            if self.passed(job, self.k + 1):
                continue
            with contextlib.suppress(OSError):
                os.kill(job.process.pid, signal.SIGUSR1)  # its stack, on stderr
                job.process.join(STACK_DUMP_WAIT)
            where = f"after barrier {job.arrived} (work {job.arrived * self.epoch:g})"
            self.best.log(f"worker {job.order + 1} ({job.name}) silent for {silent:.0f}s {where}; "
                          "the stage goes on without it")  # fmt: skip
            self.best.cut_short(f"worker {job.order + 1} ({job.name}) fell silent")
            self.outcome[job.name] = "stopped: silent"
            job.finished = job.answered = True
            job.process.kill()
            job.conn.close()

    def on_busy(self, job: Job, msg: Busy) -> None:
        # the worker skips the barriers before this one (work.reserved)
        job.busy_to = work.first_barrier(float(msg.until), self.epoch)

    # -- the leader switch ---------------------------------------------------------

    def follow_the_leader(self, seed: int, deadline: float, at: float | None = None) -> None:
        """Restart every running worker that is not running the best solution's
        backend as that backend, each with a new seed from ``seed`` on, and from
        the leader's last search state (its prices, for the Lagrangian loops)
        and its own (what of its work carries over: the Lagrangian loops' lower
        bound)."""
        best, leader = self.best, self.best.method
        going = [job for job in self.running if not job.finished]
        leading = [job for job in going if job.name == leader]
        if not leading:
            return
        state = leading[0].state
        best.log(
            "at the switch, each worker's best: "
            + ", ".join(f"{j.name} {j.best:.6g}" for j in going if j.best is not None)
        )
        k = self.plan.index(leader) if leader in self.plan else 0
        by_work = None if at is None else ByWork(at, self.epoch)
        for n, job in enumerate([job for job in going if job.name != leader]):
            self.children.stop(job)
            self.running.remove(job)
            # (deterministic) what it sent past the switch may or may not have come
            self.pending = [p for p in self.pending if p[3] is not job]
            best.log(f"{job.name} restarts as {leader}, which found the best so far")
            self.start(k, leader, deadline, seed=seed + n, by_work=by_work, inherited=state,
                       previous=job.state, order=job.order)  # fmt: skip
