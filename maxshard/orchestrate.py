"""Run backends under a deadline and keep the best verified solution.

Each backend runs in a forked worker process: a backend that hangs, crashes or
ignores its deadline is killed, and whatever it reported before stays. The
parent re-costs every reported solution with the exact evaluator on the full
instance, so only solutions that the contest would accept are ever kept.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import NamedTuple

import numpy as np

from . import backend as backends
from .evaluate import Evaluation, all_min_usage, evaluate
from .instance import FORBIDDEN, Instance
from .model import Model

Log = Callable[[str], None]

#: Workers stop this long before the deadline so their last report arrives in time.
WORKER_MARGIN = 0.15


@dataclass
class Best:
    """The best evaluator-checked solution seen so far."""

    inst: Instance
    log: Log
    start: float = field(default_factory=time.monotonic)
    solution: np.ndarray | None = None
    model_x: np.ndarray | None = None
    evaluation: Evaluation | None = None
    method: str = ""
    lower_bound: int | None = None
    status: str = "unknown"
    #: (seconds since start, best cost, best bound) at every improvement of either
    trace: list[tuple[float, int | None, int | None]] = field(default_factory=list)
    #: seconds since start when optimality (or infeasibility) was proved
    proved_at: float | None = None
    #: stop once the proven gap (see :meth:`gap`) is at most this
    target_gap: float | None = None
    #: seconds since start when the target gap was reached
    gap_reached_at: float | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def _record(self) -> None:
        cost = self.evaluation.cost if self.evaluation is not None else None
        self.trace.append((round(self.elapsed(), 4), cost, self.lower_bound))

    def proved(self, status: str) -> None:
        """Mark the answer proved: ``optimal`` or ``infeasible``."""
        self.status = status
        if self.proved_at is None:
            self.proved_at = round(self.elapsed(), 4)

    def offer(self, solution: np.ndarray, method: str, model_x: np.ndarray | None = None) -> bool:
        ev = evaluate(self.inst, solution)
        if not ev.feasible:
            return False
        # the contest's order: fewest forbidden picks, then least cost
        key = (ev.forbidden, ev.cost)
        if self.evaluation is not None and key >= (self.evaluation.forbidden, self.evaluation.cost):
            return False
        self.solution, self.evaluation, self.method, self.model_x = solution, ev, method, model_x
        self.status = "feasible"
        cost = self.clean_cost()
        if cost is not None and self.lower_bound is not None and self.lower_bound > cost:
            self.log(f"warning: the lower bound {self.lower_bound} exceeds the checked cost "
                     f"{cost}; dropped")  # fmt: skip
            self.lower_bound = None
        self._record()
        self.log(self.describe())
        return True

    def bound(self, value: int, method: str) -> None:
        cost = self.clean_cost()
        if cost is not None and value > cost:
            # no valid bound exceeds the cost of an answer that fits: a backend
            # bug, which must not end the run as a proof
            self.log(f"warning: {method} claimed the lower bound {value}, above the checked "
                     f"cost {cost}; ignored")  # fmt: skip
            return
        if self.lower_bound is None or value > self.lower_bound:
            self.lower_bound = value
            self._record()
            if self.evaluation is not None:
                self.log(self.describe(f"bound by {method}"))

    def clean_cost(self) -> int | None:
        """The checked cost of the answer if it has no forbidden pick (the only
        answers a bound can prove optimal or be checked against), else None."""
        ev = self.evaluation
        return ev.cost if ev is not None and not ev.forbidden else None

    def closed(self) -> bool:
        """A clean answer whose cost the proven bound reaches: it is optimal."""
        cost, bound = self.clean_cost(), self.lower_bound
        return cost is not None and bound is not None and bound >= cost

    def done(self) -> bool:
        """Nothing left to do: proved optimal or infeasible, or within the target
        gap (a clean answer whose cost the proven bound is that close to)."""
        gap = self.gap()
        reached = (
            self.target_gap is not None
            and gap is not None
            and self.clean_cost() is not None
            and gap <= self.target_gap
        )
        if reached and self.gap_reached_at is None:
            self.gap_reached_at = round(self.elapsed(), 4)
            self.log(self.describe(f"proven within the target gap {100 * self.target_gap:g}%"))
        return reached or self.status in ("optimal", "infeasible")

    def gap(self) -> float | None:
        if self.evaluation is None or self.lower_bound is None or not self.evaluation.cost:
            return None
        return max(0.0, (self.evaluation.cost - self.lower_bound) / self.evaluation.cost)

    def describe(self, event: str = "") -> str:
        ev = self.evaluation
        assert ev is not None
        parts = [f"Found solution with cost {ev.cost}"]
        if ev.forbidden:
            parts.append(f"({ev.forbidden} forbidden picks)")
        if self.lower_bound is not None:
            parts.append(f"bound {self.lower_bound} gap {100 * (self.gap() or 0.0):.3f}%")
        parts.append(f"by {self.method} at {self.elapsed():.1f}s")
        if event:
            parts.append(f"[{event}]")
        return " ".join(parts)


#: What a backend's proof means when memory was scaled down: nothing.
UNPROVEN = {"optimal": "feasible", "infeasible": "unknown"}


@dataclass
class Job:
    name: str
    seed: int
    process: mp.process.BaseProcess
    conn: Connection
    state: object = None  # the last search state the backend handed over
    answered: bool = False  # sent its result (or its error) before its pipe closed
    best: int | None = None  # model cost of its best solution before the switch


_LIVE: list[Job] = []  # workers to kill if the parent is interrupted


def kill_workers() -> None:
    for job in _LIVE:
        if job.process.is_alive():
            job.process.kill()
    for job in _LIVE:
        job.process.join(timeout=1)
    _LIVE.clear()


def _stop(job: Job) -> None:
    """Kill one worker now (its pipe closed, no longer among the live ones)."""
    job.process.kill()
    job.process.join(timeout=1)
    job.conn.close()
    _LIVE.remove(job)


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


class WorkerReport:
    """A worker's ``report`` callback: sends to the parent; ``best()`` returns the
    best solution of all workers when it changed since the last call (else None);
    ``state(s)`` hands the backend's search state to the parent; ``inherited`` is
    the state of the worker this one continues, ``previous`` this worker's own
    last state before it restarted as another backend (see
    :func:`backend.share_state`); ``ascent_elsewhere``: another worker climbs
    the dual ascent (see :func:`backend.ascent_elsewhere`)."""

    def __init__(
        self,
        conn: Connection,
        shared: Shared,
        inherited: object = None,
        previous: object = None,
        ascent_elsewhere: bool = False,
    ) -> None:
        self.conn, self.shared, self.seen = conn, shared, 0
        self.inherited, self.previous = inherited, previous
        self.ascent_elsewhere = ascent_elsewhere

    def __call__(self, solution: np.ndarray | None = None, lower_bound: int | None = None) -> None:
        if solution is not None:
            self.conn.send(("solution", solution))
        if lower_bound is not None:
            self.conn.send(("bound", lower_bound))

    def best(self) -> np.ndarray | None:
        self.seen, x = self.shared.read(self.seen)
        return x

    def state(self, state: object) -> None:
        self.conn.send(("state", state))


def _worker(
    name: str,
    model: Model,
    deadline: float,
    incumbent,
    seed: int,
    conn,
    shared: Shared,
    inherited: object = None,
    previous: object = None,
    ascent_elsewhere: bool = False,
) -> None:
    # stdout carries the answer: a backend (or the library under it) must not write there
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        backend = backends.load(name)
        report = WorkerReport(conn, shared, inherited, previous, ascent_elsewhere)
        result = backend.solve(model, deadline, incumbent, report, seed)
        conn.send(("done", result.status.value, result.solution, result.lower_bound))
    except BaseException as exc:  # reported to the parent, which keeps going
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        conn.send(("error", detail))
    finally:
        conn.close()


def _start(
    name: str,
    seed: int,
    model: Model,
    deadline: float,
    best: Best,
    shared: Shared,
    inherited: object = None,
    previous: object = None,
    ascent_elsewhere: bool = False,
) -> Job:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    args = (name, model, deadline - WORKER_MARGIN, best.model_x, seed, child, shared)
    extra = (inherited, previous, ascent_elsewhere)
    proc = ctx.Process(target=_worker, args=(*args, *extra), daemon=True)
    proc.start()
    child.close()
    job = Job(name, seed, proc, parent)
    _LIVE.append(job)
    return job


def run_backends(
    model: Model,
    best: Best,
    plan: list[str],
    deadline: float,
    seed: int = 0,
    workers: int | None = None,
    switch: float | None = None,
    carry: dict[str, object] | None = None,
) -> dict[str, str]:
    """Run the backends of ``plan`` (up to ``workers`` at a time) until the deadline.

    With ``switch``, at that share of the time every worker whose backend is not
    the one that found the best solution so far restarts as that backend (with
    a seed of its own, from the best solution). ``carry`` holds the last
    search state each backend handed over (by name): a backend started here
    inherits it, and the states handed over here are kept in it, so a backend
    of the next stage goes on where this one stopped. Returns each backend's
    final status (or its error). Stops early when a backend proves optimality
    or infeasibility, or once the answer is proven within ``best.target_gap``.
    """
    if model.nv == 0:  # presolve fixed every node: nothing left to search
        x = np.zeros(0, dtype=np.int64)
        only = model.reconstruct(x)
        best.offer(only, "presolve", x)
        if model.exact_memory:  # the one solution left is optimal
            best.bound(evaluate(best.inst, only).cost, "presolve")
            best.proved("optimal")
        return {name: "not needed" for name in plan}
    workers = workers or available_cores()
    # bounds are on the model's cost: the instance's only if memory was not scaled
    # and forbidden picks cost 10**18 (see Model.exact_memory, Model.forbidden_cost)
    proofs_hold = model.exact_memory and model.forbidden_cost == FORBIDDEN
    shared = Shared(model.nv)
    if best.model_x is not None:
        shared.publish(best.model_x)

    def offer(x: np.ndarray, name: str) -> None:
        if best.offer(model.reconstruct(x), name, x):
            shared.publish(x)

    queue = list(enumerate(plan))
    running: list[Job] = []
    now = time.monotonic()
    switch_at = now + switch * (deadline - now) if switch else None
    outcome: dict[str, str] = {}
    finished = False
    try:
        while (queue or running) and not finished:
            while queue and len(running) < workers and time.monotonic() < deadline:
                k, name = queue.pop(0)
                inherited = (carry or {}).get(name)
                elsewhere = name != "dual" and "dual" in plan  # see backend.ascent_elsewhere
                args = (model, deadline, best, shared, inherited)
                running.append(_start(name, seed + k, *args, ascent_elsewhere=elsewhere))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not running:
                break
            if switch_at is not None and time.monotonic() >= switch_at:
                switch_at = None
                _follow_the_leader(running, best, len(plan) + seed, model, deadline, shared)
            wake = remaining if switch_at is None else switch_at - time.monotonic()
            for conn in wait([j.conn for j in running], timeout=max(0.0, min(remaining, wake))):
                job = next(j for j in running if j.conn is conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    if not job.answered:  # died without a word: say so
                        best.log(f"backend {job.name} crashed (its process ended without a result)")
                    outcome.setdefault(job.name, "crashed")
                    running.remove(job)
                    continue
                if msg[0] == "solution":
                    if switch_at is not None:  # read only at the switch
                        _note(job, model, msg[1])
                    offer(msg[1], job.name)
                    finished = finished or best.done()
                elif msg[0] == "bound":
                    if not proofs_hold:
                        continue  # a bound on this model's scale says nothing of the instance's
                    best.bound(msg[1], job.name)
                    if best.closed():
                        best.proved("optimal")
                    finished = finished or best.done()
                elif msg[0] == "state":
                    job.state = msg[1]
                    if carry is not None:
                        carry[job.name] = msg[1]
                elif msg[0] == "error":
                    job.answered = True
                    outcome[job.name] = f"error: {msg[1]}"
                    best.log(f"backend {job.name} failed: {msg[1]}")
                else:
                    job.answered = True
                    _, status, x, bound = msg
                    if not model.exact_memory:  # proofs about the scaled model only
                        status = UNPROVEN.get(status, status)
                    outcome[job.name] = status
                    if x is not None:
                        if switch_at is not None:
                            _note(job, model, x)
                        offer(x, job.name)
                    if bound is not None and proofs_hold:
                        best.bound(bound, job.name)
                    finished = finished or best.done()
                    if status == "optimal" and best.evaluation is not None:
                        if not proofs_hold:  # the optimum is the solution itself
                            best.bound(best.evaluation.cost, job.name)
                        best.proved("optimal")
                        finished = True
                    elif status == "infeasible":
                        # no clean solution fits; a solution with forbidden picks may still stand
                        finished = True
                        if best.evaluation is None:
                            best.proved("infeasible")
    finally:
        # a worker still running was stopped: by a proof, the gap reached, or the clock
        why = "stopped at deadline"
        if finished:
            proved = best.status in ("optimal", "infeasible")
            why = "stopped: " + ("proved" if proved else "gap reached")
        for job in running:
            outcome.setdefault(job.name, why)
        kill_workers()
    return outcome


def _note(job: Job, model: Model, x: np.ndarray) -> None:
    """Keep the cost of the best solution ``job`` reported (logged at the switch;
    not kept after it, where each report would cost one more model.cost)."""
    cost = model.cost(x)
    if job.best is None or cost < job.best:
        job.best = cost


def _follow_the_leader(
    running: list[Job], best: Best, seed: int, model: Model, deadline: float, shared: Shared
) -> None:
    """Restart every running worker that is not running the best solution's
    backend as that backend, each with a new seed from ``seed`` on, and from the
    leader's last search state (its prices, for the Lagrangian loops) and its
    own (what of its work carries over: the Lagrangian loops' lower bound)."""
    leader = best.method
    leading = [job for job in running if job.name == leader]
    if not leading:
        return
    state = leading[0].state
    best.log(
        "at the switch, each worker's best: "
        + ", ".join(f"{job.name} {job.best:.6g}" for job in running if job.best is not None)
    )
    for k, job in enumerate([job for job in running if job.name != leader]):
        _stop(job)
        running.remove(job)
        best.log(f"{job.name} restarts as {leader}, which found the best so far")
        running.append(_start(leader, seed + k, model, deadline, best, shared, state, job.state))


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


#: Most kept time points (= knapsack constraints) for which toulbar2 runs by
#: default. Measured: G and V (482 points) are solved to optimality in 1-22 s;
#: A (19,779 points) and P (40,875) got no toulbar2 answer within 60 s, while
#: local search beats the contest's best there.
TOULBAR2_MAX_POINTS = 2_000
LAGRANGE_ONLY_VARIABLES = 1_000


def default_plan(model: Model, workers: int = 2) -> list[str]:
    """Backends to run when the user names none, one per worker.

    The first two are what was measured best on 2 cores; further workers add
    the next backends of the same cycle (each with a seed of its own).
    """
    if len(model.base) <= TOULBAR2_MAX_POINTS:
        # lagrange beside it for the lower bound (local search added nothing on
        # G and V, where toulbar2 finds the best solutions)
        cycle = ["toulbar2", "lagrange", "lagrange-terms", "local"]
    # Measured at equal time: lagrange wins by far where many variables share the
    # memory (M, N, S, U: 5k-34k variables), local search where few do (A: 285
    # variables, P: 198). Its two workers price memory two ways: multipliers
    # per point (with the bounds) and weights per term (the better S solutions).
    elif model.nv >= LAGRANGE_ONLY_VARIABLES:
        # beyond two workers: a local search that keeps polishing the best of all
        # (it adopts what the others find), then more term-priced loops, which
        # found the better basins on S (their relaxed solutions differ by seed)
        cycle = ["lagrange", "lagrange-terms", "local", "lagrange-terms"]
    else:
        cycle = ["lagrange", "local", "lagrange-terms", "local"]
    return [cycle[k % len(cycle)] for k in range(max(1, workers))]


class Stage(NamedTuple):
    backends: list[str]
    share: float  # of the whole time
    #: share of the stage after which the backends not leading restart as the leader
    switch: float | None = None


#: Large models: halfway through the Lagrangian stage, the worker whose loop did
#: not find the best solution restarts as a second copy of the one that did.
#: Which loop leads depends on the model (S: the term weights, N: the
#: multipliers), and on S one term-priced run in three stalls in a worse basin;
#: a second ticket of the leader makes that rarer. Measured on 2 cores, full
#: limits (README: three seeds with it; docs/history.md: without): S
#: 0.9925-0.9930 in six runs (0.9654-0.9926 without), U 1.0535-1.1170 (1.0282-
#: 1.0748), M 0.9995-1.0001 (1.0000-1.0002), N 0.9832-1.0086 (0.9945-1.0106).
#: Where the multiplier loop restarts, its bound stops rising (S's gap
#: 17.5-27.4%, 15.5-18.5% without); where it leads, two of them bound. Only
#: the term-priced loop taking over (one way) was measured and not kept: N
#: 1.0056, 0.9750, 0.9792 at seeds 0-2 (reverted in the commit after 8d04c8d).
#: The copy starts from the leader's prices (Job.state): from zero prices it
#: spent its first rounds catching up. With them, N 0.9731-1.0133 in seven
#: runs (mean of seeds 0-2 0.9999 against 0.9921), Nx2 1.0105 and 1.0120 at
#: seeds 0 and 1 (0.9730, 0.9850); S 0.9898-0.9928 (README).
LEADER_SWITCH = 0.5

#: Share of the time that large models spend, at the end, polishing the best
#: solution of the Lagrangian loops. Measured at seed 1 with local search
#: alone there: N 0.9813 with 25% here, 1.0016 with 40% (its multiplier loop
#: stalled at 90 s, the local stage still gained 1% in its last 30 s). With
#: priced neighbourhoods in the final stage, 60% there at half the limits
#: (the first stage ending at 48 s on S, 36 s on N) ended worse than 40%
#: in all three seeds tried: S 1.5214-1.5335e9 against 1.5128-1.5249e9, N
#: 1.9940-2.0106e11 against 1.9809-2.0012e11 (the loops' basin matters).
FINAL_POLISH = 0.4

#: Backends of the final stage, one per worker in turn: large neighbourhood
#: search (toulbar2 on a few hundred freed variables, most of them with memory
#: priced and repaired afterwards) on two workers, then local search, all
#: sharing their finds. Measured from the same starts (the best of the first
#: stage at half the limits), three seeds, lns beside lns / beside local: S in
#: 48 s 1.5128-1.5249e9 / 1.5154-1.5865e9 (from 1.5908e9; the lns beside
#: local missed the priced move's big gain at one seed), N in 36 s
#: 1.9809-2.0012e11 / 1.9942-1.9972e11 (from 2.0516e11), U in 60 s (two seeds)
#: 2.2506-2.2557e9 / 2.2530-2.2564e9, M in 36 s 4.99196-4.99199e10 /
#: 4.99200-4.99205e10. Before the priced moves (lns with knapsacks only, beside
#: local, README at c87d699): N 1.0010-1.0086, S 1.0036 and 1.0079 at full limits.
FINAL_BACKENDS = ["lns", "lns", "local"]


def default_stages(model: Model, workers: int = 2) -> list[Stage]:
    """The default plan in stages (see :class:`Stage`). Each stage starts from
    the best solution of the stages before it."""
    plan = default_plan(model, workers)
    if len(model.base) > TOULBAR2_MAX_POINTS and model.nv >= LAGRANGE_ONLY_VARIABLES:
        # (on more cores a local search in the first stage polishes the others'
        # finds and would often lead: the switch is for the measured pair only)
        switch = LEADER_SWITCH if len(plan) == 2 else None
        final = [FINAL_BACKENDS[k % len(FINAL_BACKENDS)] for k in range(len(plan))]
        return [
            Stage(plan, 1 - FINAL_POLISH, switch),
            Stage(final, FINAL_POLISH),
        ]
    return [Stage(plan, 1.0)]


#: A first stage this short (seconds) is one where the Lagrangian loops' toulbar2
#: rounds (3-6 s each, the first longer) come too late: the same threshold as
#: ``Lagrange.dive_all``, below which the multiplier loop only dives.
SHORT_STAGE = 60.0


def proving_stages(model: Model, workers: int = 2, seconds: float = math.inf) -> list[Stage]:
    """The plan of ``--prove``: bounds and exact search first, answers second.

    Small models (toulbar2's knapsacks fit): the default plan, whose toulbar2
    is the exact search and whose Lagrangian loop the bound (on V its proven
    relaxed solves bound higher than the LP dual). Larger ones: one worker runs
    the dual ascent (``dual``, :mod:`maxshard.ascent`) for the whole time,
    going on from its own state from stage to stage; the others search for
    answers as the default plan's workers do (a Lagrangian loop, then large
    neighbourhood search; models with few variables: the loop and local
    search). Once the ascent has converged its worker takes the next backend.
    """
    if len(model.base) <= TOULBAR2_MAX_POINTS:
        return default_stages(model, workers)
    if workers < 2:
        return [Stage(["dual"], 1.0)]
    rest = workers - 1
    if model.nv < LAGRANGE_ONLY_VARIABLES:
        return [Stage(["dual", *default_plan(model, rest), "local"], 1.0)]
    short = (1 - FINAL_POLISH) * seconds <= SHORT_STAGE
    first = (
        ["lagrange", "lagrange-terms", "local"]
        if short
        else ["lagrange-terms", "lagrange", "local"]
    )
    final = [FINAL_BACKENDS[k % len(FINAL_BACKENDS)] for k in range(rest)]
    return [
        Stage(["dual", *[first[k % len(first)] for k in range(rest)], "lns"], 1 - FINAL_POLISH),
        Stage(["dual", *final, "local"], FINAL_POLISH),
    ]


def solve(
    inst: Instance,
    deadline: float,
    log: Log,
    plan: list[str] | None = None,
    seed: int = 0,
    best: Best | None = None,
    presolve: bool = True,
    workers: int | None = None,
    prove: bool = False,
    model: Model | None = None,
) -> Best:
    """Presolve, run the backends until ``deadline``, return the best verified solution.

    Pass ``best`` to keep access to the incumbent if this call is interrupted
    (and its ``target_gap`` to stop once the answer is proven that close);
    ``presolve=False`` skips all presolve passes but time compression;
    ``workers`` backends run at a time (default: the cores available);
    ``prove`` runs the plan that closes the gap (:func:`proving_stages`);
    ``model``: ``inst`` already presolved (skips presolve).
    """
    from .reduce import Infeasible, memory_units, reduce

    best = best or Best(inst, log)
    best.offer(all_min_usage(inst), "min-usage start")
    try:
        model = model if model is not None else reduce(inst, passes=presolve)
    except Infeasible as exc:
        if memory_units(inst)[2]:  # else only the scaled-down memory was infeasible
            best.proved("infeasible")
        log(f"infeasible: {exc}")
        return best
    log("presolve: " + ", ".join(f"{v} {k}" for k, v in model.stats().items()))
    x = model.min_usage_solution()
    if model.fits(x):
        best.offer(model.reconstruct(x), "presolve start", x)
    workers = workers or available_cores()
    if plan:
        stages = [Stage(plan, 1.0)]
    else:
        stages = (
            proving_stages(model, workers, deadline - time.monotonic())
            if prove
            else default_stages(model, workers)
        )
    start, done = time.monotonic(), 0.0
    carry: dict[str, object] = {}  # search states handed from stage to stage
    for names, share, switch in stages:
        done += share
        end = deadline if done >= 1 - 1e-9 else start + done * (deadline - start)
        run_backends(model, best, names, end, seed, workers, switch, carry)
        if best.done():
            break
    return best
